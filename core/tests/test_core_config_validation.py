"""The configuration is validated as a whole at start-up: one line per problem, all at once.

Every malformed file must give a ``ConfigError`` (never a bare traceback) whose lines each name
the file, the table and the key, with a "did you mean" for a misspelling.
"""

from __future__ import annotations

import logging

import pytest

from tooldeck import Config, Deck, RegistrationError
from tooldeck._config_schema import ConfigValidationError, check_schema
from tooldeck.testing import inline_plugin
from tooldeck_hookspecs import ConfigError

#: The plugins whose tables the cases use: the core's, the cache's and the runner's.
PLUGINS = ["schema", "runner", "cache", "fs"]

# (id, file text, [(table, key, words the line must contain)]). Table "" is the top level.
CASES = [
    ("ttl-string", '[approvals]\nttl_s = "ten minutes"\n', [("approvals", "ttl_s", "number > 0")]),
    ("ttl-negative", "[approvals]\nttl_s = -5\n", [("approvals", "ttl_s", "> 0")]),
    (
        "ttl-zero",
        "[approvals]\nconfirm_timeout_s = 0\n",
        [("approvals", "confirm_timeout_s", "> 0")],
    ),
    ("ttl-nan", "[approvals]\nttl_s = nan\n", [("approvals", "ttl_s", "nan")]),
    ("ttl-inf", "[approvals]\nttl_s = inf\n", [("approvals", "ttl_s", "inf")]),
    # Finite, but Redis refused the expiry: every approval read back as damaged.
    ("ttl-huge", "[approvals]\nttl_s = 1e300\n", [("approvals", "ttl_s", "<= 31622400")]),
    ("cache-zero", "[cache]\nmax_entries = 0\n", [("cache", "max_entries", ">= 1")]),
    ("cache-key-typo", "[cache]\nmax_entrys = 5\n", [("cache", "max_entrys", "'max_entries'")]),
    ("cache-not-table", "cache = 5\n", [("", "cache", "must be a table")]),
    ("hand-limit-string", '[hand]\nlimit = "fifteen"\n', [("hand", "limit", "integer >= 1")]),
    ("hand-limit-zero", "[hand]\nlimit = 0\n", [("hand", "limit", ">= 1")]),
    ("hand-limit-bool", "[hand]\nlimit = true\n", [("hand", "limit", "a boolean")]),
    ("hand-limit-float", "[hand]\nrecall = 2.5\n", [("hand", "recall", "integer")]),
    ("hand-key-typo", "[hand]\nlimt = 3\n", [("hand", "limt", "did you mean 'limit'")]),
    ("hand-pinned-string", '[hand]\npinned = "file_read"\n', [("hand", "pinned", "list")]),
    ("session-level", '[session]\nmax_level = "root"\n', [("session", "max_level", "dangerous")]),
    (
        "session-level-typo",
        '[session]\nmax_level = "dangerus"\n',
        [("session", "max_level", "did you mean 'dangerous'")],
    ),
    (
        "session-grants-string",
        '[session]\ngrants = "filesystem"\n',
        [("session", "grants", "a list of strings")],
    ),
    ("session-grants-int", "[session]\ngrants = [1]\n", [("session", "grants[0]", "a string")]),
    (
        "session-unknown-key",
        '[session]\ngrant = ["shell"]\n',
        [("session", "grant", "did you mean 'grants'")],
    ),
    ("table-typo", "[hands]\nlimit = 3\n", [("", "hands", "did you mean 'hand'")]),
    ("unknown-table", "[zzz_nothing]\nx = 1\n", [("", "zzz_nothing", "unknown table")]),
    ("top-key-typo", 'disabled = ["cache"]\n', [("", "disabled", "did you mean 'disable'")]),
    ("disable-string", 'disable = "cache"\n', [("", "disable", "a list of strings")]),
    ("plugins-string", 'plugins = "schema"\n', [("", "plugins", "a list of strings")]),
    ("protected-string", 'protected_paths = "secrets/"\n', [("", "protected_paths", "a list")]),
    ("protected-dotdot", 'protected_paths = ["../x"]\n', [("", "protected_paths[0]", "'..'")]),
    ("protected-empty", 'protected_paths = [""]\n', [("", "protected_paths[0]", "empty")]),
    ("protected-slash", 'protected_paths = [" / "]\n', [("", "protected_paths[0]", "name a path")]),
    ("tools-not-table", 'tools = "file_read"\n', [("", "tools", "a table")]),
    (
        "tool-key-typo",
        '[tools.file_read]\nsecurty = {level = "safe"}\n',
        [("tools.file_read", "securty", "did you mean 'security'")],
    ),
    (
        "tool-level",
        '[tools.file_read.security]\nlevel = "godlike"\n',
        [("tools.file_read.security", "level", "dangerous")],
    ),
    (
        "tool-negative-ttl",
        "[tools.file_read.execution]\ncache_ttl_s = -1\n",
        [("tools.file_read.execution", "cache_ttl_s", "> 0")],
    ),
    (
        "tool-rate-limit",
        "[tools.file_read.security.rate_limit]\nmax_calls = 0\nwindow_s = 1\n",
        [("tools.file_read.security.rate_limit", "max_calls", ">= 1")],
    ),
    (
        # Finite, but past a Redis key's lifetime: every call of the tool failed there.
        "tool-rate-window-huge",
        "[tools.file_read.security.rate_limit]\nmax_calls = 5\nwindow_s = 1e300\n",
        [("tools.file_read.security.rate_limit", "window_s", "<= 31622400")],
    ),
    (
        "runner-key-typo",
        '[runner]\nsandbx = "process"\n',
        [("runner", "sandbx", "did you mean 'sandbox'")],
    ),
    (
        "several-at-once",
        '[hand]\nlimit = 0\nrecal = 3\n[session]\nmax_level = "root"\n[cache]\nmax_bytes = -1\n',
        [
            ("hand", "limit", ">= 1"),
            ("hand", "recal", "did you mean 'recall'"),
            ("session", "max_level", "dangerous"),
            ("cache", "max_bytes", ">= 1"),
        ],
    ),
]


def _line_for(lines: list[str], path: str, table: str, key: str) -> str:
    where = f"[{table}] {key}:" if table else f"(top level) {key}:"
    found = [line for line in lines if line.startswith(f"{path}: {where}")]
    assert found, f"no line names {path} {where!r}: {lines}"
    return found[0]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_file_gives_one_line_per_problem(tmp_path, text, expected):
    path = tmp_path / "tooldeck.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        Deck.load(str(path), entry_points=PLUGINS)
    assert isinstance(info.value, ConfigValidationError)
    lines = info.value.problems
    assert len(lines) == len(expected), lines
    for table, key, words in expected:
        line = _line_for(lines, str(path), table, key)
        assert words in line, line
        assert "\n" not in line


def test_pyproject_tables_are_named_as_in_the_file(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text('[tool.tooldeck.hand]\nlimt = 2\n[tool.tooldeck]\ndisabled = ["x"]\n')
    with pytest.raises(ConfigValidationError) as info:
        Deck.load(str(path), entry_points=PLUGINS)
    lines = info.value.problems
    _line_for(lines, str(path), "tool.tooldeck.hand", "limt")
    _line_for(lines, str(path), "tool.tooldeck", "disabled")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"[hand]\nlimit = 3\n# caf\xe9\n", "not UTF-8 (byte 0xe9 on line 3)"),
        (b"\xff\xfe[\x00h\x00", "not UTF-8"),
        (b"[hand\nlimit = 3\n", "invalid TOML"),
        (b"[hand]\nlimit = 3\nlimit = 4\n", "invalid TOML"),
        (b"limit = \n", "invalid TOML"),
        (b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "invalid TOML"),
    ],
    ids=["latin-1", "utf-16", "unclosed-table", "duplicate-key", "missing-value", "deep"],
)
def test_unreadable_file_is_one_line_naming_it(tmp_path, content, words):
    path = tmp_path / "tooldeck.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        Deck.load(str(path), entry_points=PLUGINS)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and words in message and "\n" not in message


def test_unknown_plugin_names_are_warnings_naming_the_installed_ones(tmp_path, caplog):
    path = tmp_path / "tooldeck.toml"
    path.write_text('disable = ["cahce"]\nrequired_plugins = ["schema"]\n')
    with caplog.at_level(logging.WARNING, logger="tooldeck"):
        deck = Deck.load(str(path), entry_points=PLUGINS)
    (line,) = deck.config_warnings
    assert line.startswith(f"warning: {path}: (top level) disable[0]: ")
    assert "did you mean 'cache'" in line and "installed:" in line and "runner" in line
    assert line in caplog.text


def test_unknown_plugin_names_from_the_environment_are_warnings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLDECK_DISABLE_PLUGINS", "faiss,no_such_pack")
    monkeypatch.setenv("TOOLDECK_PLUGINS", ",".join(PLUGINS))
    deck = Deck.load()
    assert any(
        "TOOLDECK_DISABLE_PLUGINS" in w and "'no_such_pack'" in w for w in deck.config_warnings
    )


def test_override_of_a_tool_that_does_not_exist_is_reported_after_registration(tmp_path):
    path = tmp_path / "tooldeck.toml"
    path.write_text('[tools.file_wirte.security]\nlevel = "dangerous"\n')
    # Every installed plugin loaded: the tool cannot come from elsewhere, so it is an error.
    with pytest.raises(ConfigValidationError) as info:
        Deck.load(str(path), entry_points=True)
    line = _line_for(info.value.problems, str(path), "tools", "file_wirte")
    assert "does not exist" in line and "did you mean 'file_write'" in line
    # Some plugins not loaded: the tool may be theirs, so only a warning.
    deck = Deck.load(str(path), entry_points=PLUGINS)
    assert any("file_wirte" in w and "may belong" in w for w in deck.config_warnings)


def test_untrusted_file_validates_only_what_it_applies(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLDECK_TRUST_FILE", str(tmp_path / "trust.json"))
    work = tmp_path / "work"
    work.mkdir()
    # [session] is ignored (untrusted), so its nonsense does not stop the deck; [hand] applies.
    (work / "tooldeck.toml").write_text('[session]\ngrants = "everything"\n[hand]\nlimit = 4\n')
    monkeypatch.chdir(work)
    deck = Deck.load(entry_points=PLUGINS)
    assert deck.config.trusted is False and deck.session().limit == 4
    (work / "tooldeck.toml").write_text("[hand]\nlimit = -4\n")
    with pytest.raises(ConfigValidationError, match=r"\[hand\] limit"):
        Deck.load(entry_points=PLUGINS)


def test_from_mapping_reports_every_core_problem_at_once():
    with pytest.raises(ConfigValidationError) as info:
        Config.from_mapping(
            {"disable": "cache", "hand": {"limit": 0}, "tools": {"x": 3}, "my_pack": {"a": 1}}
        )
    lines = info.value.problems
    assert len(lines) == 3, lines  # my_pack belongs to a plugin: not judged before loading
    assert all(line.startswith("config: ") for line in lines)


def test_a_bad_tool_override_is_still_a_registration_error():
    # Compatibility: bad [tools.NAME] overrides always raised RegistrationError.
    with pytest.raises(RegistrationError) as info:
        Deck.load(
            {"tools": {"file_read": {"execution": {"timeout_s": "soon"}}}}, entry_points=PLUGINS
        )
    assert isinstance(info.value, ConfigError)
    assert any("[tools.file_read.execution] timeout_s" in p for p in info.value.problems)


def test_plugins_contribute_the_schema_of_their_table():
    def tooldeck_config_schema():
        return {
            "acme": {
                "type": "object",
                "properties": {"pages": {"type": "integer", "minimum": 1}},
                "additionalProperties": False,
            }
        }

    acme = inline_plugin(tooldeck_config_schema, name="acme")
    deck = Deck.load({"acme": {"pages": 3}}, plugins=[acme], entry_points=PLUGINS)
    assert deck.plugin_settings("acme") == {"pages": 3}
    with pytest.raises(ConfigValidationError) as info:
        Deck.load({"acme": {"pages": 0, "pagse": 1}}, plugins=[acme], entry_points=PLUGINS)
    assert sorted(info.value.problems) == [
        "config: [acme] pages: must be an integer >= 1, not 0",
        "config: [acme] pagse: unknown key; did you mean 'pages'? (known: pages)",
    ]


def test_plugin_without_schema_has_its_table_checked_only_for_being_a_table():
    def tooldeck_event(event):
        return None

    quiet = inline_plugin(tooldeck_event, name="quiet")
    deck = Deck.load({"quiet": {"anything": [1, "x"]}}, plugins=[quiet], entry_points=PLUGINS)
    assert deck.plugin_settings("quiet") == {"anything": [1, "x"]}
    with pytest.raises(ConfigValidationError, match=r"\(top level\) quiet: must be a table"):
        Deck.load({"quiet": [1]}, plugins=[quiet], entry_points=PLUGINS)


def test_a_schema_hook_that_raises_leaves_its_table_unchecked(caplog):
    def tooldeck_config_schema():
        raise RuntimeError("schema bug")

    odd = inline_plugin(tooldeck_config_schema, name="odd")
    with caplog.at_level(logging.WARNING, logger="tooldeck"):
        deck = Deck.load({"odd": {"x": 1}}, plugins=[odd], entry_points=PLUGINS)
    assert deck.plugin_settings("odd") == {"x": 1}
    assert "tooldeck_config_schema raised RuntimeError: schema bug" in caplog.text


@pytest.mark.parametrize(
    ("value", "schema", "expected"),
    [
        (True, {"type": "integer"}, "must be an integer, not a boolean (True)"),
        (1, {"enum": ["safe"]}, "must be one of 'safe', not 1"),
        ("", {"type": "string", "minLength": 1}, "must not be empty"),
        ([], {"type": "array", "minItems": 1}, "needs at least 1 item(s)"),
        ({}, {"type": "object", "required": ["url"]}, "is required"),
        ("x", {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, "an integer or true or"),
        ("ab", {"type": "string", "pattern": "^a+$"}, "must match"),
    ],
)
def test_schema_keywords(value, schema, expected):
    problems = check_schema(value, schema, ("t", "k"))
    assert len(problems) == 1 and expected in problems[0][1]
    assert check_schema(value, {}, ("t", "k")) == []


def test_a_tooldeck_toml_takes_the_readmes_pyproject_spelling_of_tables(tmp_path):
    """``[tool.tooldeck.X]`` copied from a README into a tooldeck.toml is table X, merged with a
    top-level ``[X]`` (the pyproject spelling wins per key); other ``[tool.*]`` tables are
    still reported."""
    from tooldeck._config import load_config

    path = tmp_path / "tooldeck.toml"
    path.write_text(
        "[hand]\nlimit = 12\nrecall = 30\n"
        "[tool.tooldeck.hand]\nlimit = 11\n"
        "[tool.tooldeck.faiss]\nsecond_encoder = \"use\"\n"
    )
    config = load_config(str(path))
    assert config.settings["faiss"] == {"second_encoder": "use"}
    assert config.settings["hand"] == {"limit": 11, "recall": 30}
    assert "tool" not in config.settings

    path.write_text("[tool.tooldeck.hand]\nlimit = 11\n[tool.other]\nx = 1\n")
    with pytest.raises(ConfigValidationError) as info:
        Deck.load(str(path), entry_points=PLUGINS)
    assert any("tool" in line and "unknown table" in line for line in info.value.problems)
