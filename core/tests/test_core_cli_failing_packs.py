"""A broken installed pack never stops the deck: it is left out, loudly, and shown as failed.

The packs are real entry points of a real (tiny) distribution put on ``PYTHONPATH``, loaded by a
fresh ``tooldeck`` process, as a user's broken install would be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tooldeck import Deck, RegistrationError
from tooldeck_hookspecs import PluginLoadError

TOOLDECK = str(Path(sys.executable).with_name("tooldeck"))

PACKS = {
    # entry-point name: (module source, stage the failure is reported at)
    "td_raiser": (
        """
        from tooldeck_hookspecs import hookimpl

        @hookimpl
        def tooldeck_register_tools(register):
            register(lambda text: text, name="raiser_echo", category="text",
                     description="Echo.")
            raise RuntimeError("pack exploded\\non two lines")
        """,
        "register",
    ),
    "td_unimportable": ('raise ImportError("No module named lxml_missing")\n', "import"),
    "td_syntax": ("def broken(:\n", "import"),
    "td_badtool": (
        """
        from tooldeck_hookspecs import ToolDefinition, hookimpl

        def shout(text: str) -> str:
            \"\"\"Shout a text back.\"\"\"
            return text.upper()

        @hookimpl
        def tooldeck_register_tools(register):
            register(shout, category="text", name="badtool_shout")
            register(ToolDefinition(name="BadName", description="", category="text"))
        """,
        "tools",
    ),
    "td_badoption": (
        """
        from tooldeck_hookspecs import hookimpl

        def first(text: str) -> str:
            \"\"\"Return the text.\"\"\"
            return text

        @hookimpl
        def tooldeck_register_tools(register):
            register(first, category="text", name="badoption_first", colour="red")
            register(first, category="text", name="badoption_second")
        """,
        "tools",
    ),
    "td_misspelt": (
        """
        from tooldeck_hookspecs import hookimpl

        @hookimpl
        def tooldeck_register_tool(register):
            pass
        """,
        "hooks",
    ),
    "td_badargs": (
        """
        from tooldeck_hookspecs import hookimpl

        @hookimpl
        def tooldeck_authorize_call(call, tool, sesion):
            return None
        """,
        "hooks",
    ),
}


@pytest.fixture
def broken_dist(tmp_path: Path) -> Path:
    """A directory holding a distribution ``td-broken`` whose entry points are the PACKS."""
    site = tmp_path / "site"
    info = site / "td_broken-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: td-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[tooldeck]\n" + "".join(f"{name} = {name}\n" for name in PACKS)
    )
    for name, (source, _stage) in PACKS.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source))
    return site


def _dist(site: Path, dist: str, modules: dict[str, str]) -> Path:
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[tooldeck]\n" + "".join(f"{name} = {name}\n" for name in modules)
    )
    for name, source in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source))
    return site


def run(*args: str, cwd: Path, site: Path, env: dict[str, str] | None = None):
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss"}
    environ.pop("TOOLDECK_CONFIG", None)
    environ.pop("TOOLDECK_PLUGINS", None)
    environ["TOOLDECK_TRUST_FILE"] = str(cwd.parent / f"{cwd.name}-trust.json")
    environ["PYTHONPATH"] = str(site)
    environ.update(env or {})
    return subprocess.run(
        [TOOLDECK, *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=120
    )


def test_plugins_json_shows_each_failed_pack_and_the_deck_still_starts(tmp_path, broken_dist):
    work = tmp_path / "work"
    work.mkdir()
    proc = run("plugins", "--json", cwd=work, site=broken_dist)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    failed = {f["name"]: f for f in data["failed"]}
    assert set(failed) == set(PACKS)
    for name, (_source, stage) in PACKS.items():
        assert failed[name]["stage"] == stage, failed[name]
        assert failed[name]["distribution"] == "td-broken" and failed[name]["version"] == "0.1"
        assert "\n" not in failed[name]["error"]
        # Loud: a warning naming the plugin on stderr.
        assert f"plugin {name!r} left out ({stage})" in proc.stderr
    assert "RuntimeError: pack exploded on two lines" in failed["td_raiser"]["error"]
    assert "ImportError: No module named lxml_missing" in failed["td_unimportable"]["error"]
    assert "SyntaxError" in failed["td_syntax"]["error"]
    assert "tooldeck_register_tool" in failed["td_misspelt"]["error"]
    assert "sesion" in failed["td_badargs"]["error"]
    assert any("BadName" in p for p in failed["td_badtool"]["problems"])
    by_name = {p["name"]: p for p in data["plugins"]}
    assert by_name["td_unimportable"]["error"] and by_name["td_unimportable"]["hooks"] == []
    assert by_name["fs"]["error"] is None
    assert data["providers"]["execute"] == "runner"

    tools = run("tools", "--json", cwd=work, site=broken_dist)
    assert tools.returncode == 0, tools.stderr
    names = {t["name"] for t in json.loads(tools.stdout)}
    # The bad pack's valid tool stays; a pack that raised midway keeps none; others are intact.
    assert "badtool_shout" in names and "BadName" not in names
    # register() refusing one definition (an unknown option) leaves out that tool only.
    assert "badoption_second" in names and "badoption_first" not in names
    assert any("colour" in p for p in failed["td_badoption"]["problems"])
    assert "raiser_echo" not in names and "file_read" in names

    text = run("plugins", cwd=work, site=broken_dist, env={"COLUMNS": "200"})
    assert text.returncode == 0 and "FAILED (import)" in text.stdout


def test_strict_makes_a_broken_pack_fatal_in_one_line(tmp_path, broken_dist):
    work = tmp_path / "work"
    work.mkdir()
    proc = run("--strict", "plugins", "--json", cwd=work, site=broken_dist)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "td_unimportable" in proc.stderr and proc.stdout == ""


def test_in_process_load_records_failures_and_strict_raises(broken_dist, monkeypatch):
    monkeypatch.syspath_prepend(str(broken_dist))
    wanted = ["schema", "runner", "fs", *PACKS]
    deck = Deck.load({}, entry_points=wanted)
    assert set(deck.failed_plugins) == set(PACKS)
    assert "badtool_shout" in deck.catalog.names() and "file_read" in deck.catalog.names()
    with pytest.raises(PluginLoadError, match="td_unimportable"):
        Deck.load({}, entry_points=wanted, strict=True)
    # Only the register-stage packs: strict keeps their errors as RegistrationError.
    with pytest.raises(RegistrationError, match="td_raiser"):
        Deck.load({}, entry_points=["schema", "runner", "td_raiser"], strict=True)


def test_a_required_plugin_that_fails_stops_the_deck(broken_dist, monkeypatch):
    monkeypatch.syspath_prepend(str(broken_dist))
    with pytest.raises(PluginLoadError, match="required plugin.*td_unimportable"):
        Deck.load(
            {"required_plugins": ["td_unimportable"]},
            entry_points=["schema", "runner", "td_unimportable"],
        )
    with pytest.raises(PluginLoadError, match="required plugin.*td_raiser"):
        Deck.load(
            {"required_plugins": ["td_raiser"]}, entry_points=["schema", "runner", "td_raiser"]
        )


def test_config_check_lists_every_problem_and_the_trust_state(tmp_path, broken_dist):
    work = tmp_path / "work"
    work.mkdir()
    (work / "tooldeck.toml").write_text(
        'disabled = ["cache"]\n[hands]\nlimit = 3\n[hand]\nlimt = 2\n'
        '[session]\ngrants = "filesystem"\n[cache]\nmax_entries = 0\n'
    )
    proc = run("config", "check", cwd=work, site=broken_dist)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    path = str(work / "tooldeck.toml")
    assert lines[0].startswith(f"{path}: NOT trusted")
    # The untrusted file's ignored [session] is validated too: config check reads it all.
    for where in (
        "(top level) disabled: unknown key; did you mean 'disable'?",
        "(top level) hands: unknown table; did you mean 'hand'?",
        "[hand] limt: unknown key; did you mean 'limit'?",
        "[session] grants: must be a list of strings",
        "[cache] max_entries: must be an integer >= 1",
    ):
        assert any(line.startswith(f"{path}: {where}") for line in lines), (where, lines)
    assert "5 error(s)" in proc.stdout
    # Failed packs do not stop the check; they are notes.
    assert "note: plugin 'td_unimportable' did not load" in proc.stdout

    as_json = run("config", "check", "--json", cwd=work, site=broken_dist)
    assert as_json.returncode == 2
    report = json.loads(as_json.stdout)
    assert report["trusted"] is False and report["errors"] == 5 and not report["ok"]
    assert {(p["table"], p["key"]) for p in report["problems"]} >= {("hand", "limt")}

    (work / "tooldeck.toml").write_text('disable = ["cahce"]\n[hand]\nlimit = 3\n')
    assert run("config", "trust", cwd=work, site=broken_dist).returncode == 0
    clean = run("config", "check", cwd=work, site=broken_dist)
    assert clean.returncode == 0, clean.stdout
    assert "trusted (trust store)" in clean.stdout
    assert "warning:" in clean.stdout and "did you mean 'cache'" in clean.stdout
    assert run("config", "check", "--strict", cwd=work, site=broken_dist).returncode == 2


def test_start_up_with_a_bad_config_is_one_line_per_problem(tmp_path, broken_dist):
    work = tmp_path / "work"
    work.mkdir()
    config = work / "conf.toml"
    config.write_text('[approvals]\nttl_s = "ten minutes"\n[hand]\nlimit = "fifteen"\n')
    proc = run("tools", cwd=work, site=broken_dist, env={"TOOLDECK_CONFIG": str(config)})
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"tooldeck: {config}: [approvals] ttl_s: must be a number > 0" in proc.stderr
    assert f"tooldeck: {config}: [hand] limit: must be an integer >= 1" in proc.stderr


def test_a_pack_that_raises_registration_error_itself_stops_the_deck(tmp_path, monkeypatch):
    # The pack asks for start-up to stop (as tooldeck-mcp does when a server the configuration
    # marks required cannot start): honoured even without strict, and named.
    site = _dist(
        tmp_path / "site",
        "td-stop",
        {
            "td_stopper": """
                from tooldeck_hookspecs import RegistrationError, hookimpl

                @hookimpl
                def tooldeck_register_tools(register):
                    raise RegistrationError(["plugin 'td_stopper': server 'x' is required"])
                """
        },
    )
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(RegistrationError, match="server 'x' is required"):
        Deck.load({}, entry_points=["schema", "runner", "td_stopper"])
    work = tmp_path / "work"
    work.mkdir()
    proc = run("plugins", "--json", cwd=work, site=site)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "tooldeck: plugin 'td_stopper': server 'x' is required" in proc.stderr


HANGING_PACK = """
    import threading
    from tooldeck_hookspecs import hookimpl

    #: Set by the test once the deck has loaded: the abandoned hook then tries to register.
    RELEASE = threading.Event()

    @hookimpl
    def tooldeck_register_tools(register):
        register(lambda text: text, name="hanger_early", category="text", description="Echo.")
        RELEASE.wait()  # a server that never answers
        register(lambda text: text, name="hanger_late", category="text", description="Echo.")
    """


def test_a_pack_whose_register_hook_hangs_is_left_out_at_the_deadline(tmp_path, monkeypatch):
    site = _dist(tmp_path / "site", "td-hang", {"td_hanger": HANGING_PACK})
    monkeypatch.syspath_prepend(str(site))
    deck = Deck.load(
        {"register_timeout_s": 0.5}, entry_points=["schema", "runner", "fs", "td_hanger"]
    )
    failure = deck.failed_plugins["td_hanger"]
    assert failure.stage == "register"
    assert "did not return within 0.5 s (register_timeout_s)" in failure.error
    # Its tools are not kept, not even the one registered before it hung, and what the
    # abandoned thread registers once it wakes lands nowhere.
    import td_hanger

    td_hanger.RELEASE.set()
    names = deck.catalog.names()
    assert "file_read" in names
    assert not {"hanger_early", "hanger_late"} & set(names)
    # A required pack that hangs stops the deck, naming the deadline.
    td_hanger.RELEASE.clear()
    with pytest.raises(PluginLoadError, match="td_hanger.*register_timeout_s"):
        Deck.load(
            {"register_timeout_s": 0.5, "required_plugins": ["td_hanger"]},
            entry_points=["schema", "runner", "td_hanger"],
        )
    td_hanger.RELEASE.set()


def test_a_hanging_pack_does_not_keep_the_command_from_finishing(tmp_path):
    # A fresh process: the abandoned hook's thread must not keep the interpreter alive.
    site = _dist(tmp_path / "site", "td-hang", {"td_hanger": HANGING_PACK})
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "tooldeck.toml"
    config.write_text("register_timeout_s = 1\n")
    proc = run("plugins", "--json", cwd=work, site=site, env={"TOOLDECK_CONFIG": str(config)})
    assert proc.returncode == 0, proc.stderr
    failed = {entry["name"]: entry for entry in json.loads(proc.stdout)["failed"]}
    assert "did not return within 1 s" in failed["td_hanger"]["error"]


def test_register_timeout_must_be_a_positive_number():
    from tooldeck_hookspecs import ConfigError

    for bad in (0, -1, "soon"):
        with pytest.raises(ConfigError, match="register_timeout_s"):
            Deck.load({"register_timeout_s": bad}, entry_points=["schema", "runner"])
