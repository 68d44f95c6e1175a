"""Configuration, entry-point discovery, enable/disable, registration rules and start-up errors."""

from __future__ import annotations

import pytest

from tooldeck import Deck, RegistrationError, StageMissingError, ToolDefinition, load_config, tool
from tooldeck._config import Config, trust_config
from tooldeck.testing import inline_plugin, make_deck
from tooldeck_hookspecs import ConfigError, PluginLoadError


def test_tooldeck_toml_is_found_from_a_subfolder(tmp_path):
    (tmp_path / "tooldeck.toml").write_text('disable = ["faiss"]\n[hand]\nlimit = 11\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    environ = {"TOOLDECK_TRUST_FILE": str(tmp_path / "trust.json")}
    trust_config(tmp_path / "tooldeck.toml", environ)
    config = load_config(cwd=sub, environ=environ)
    assert config.disabled == {"faiss"} and config.trusted
    assert config.section("hand")["limit"] == 11
    assert config.source == str(tmp_path / "tooldeck.toml")


def test_pyproject_tool_table_and_environment(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname="x"\n[tool.tooldeck]\ndisable = ["cache"]\n'
    )
    store = {"TOOLDECK_TRUST_FILE": str(tmp_path / "trust.json")}
    trust_config(tmp_path / "pyproject.toml", store)
    config = load_config(
        cwd=tmp_path,
        environ={
            **store,
            "TOOLDECK_DISABLE_PLUGINS": "faiss, ratelimit",
            "TOOLDECK_PLUGINS": "fs,runner",
        },
    )
    assert config.disabled == {"cache", "faiss", "ratelimit"}
    assert config.enabled == {"fs", "runner"}
    assert config.allows("fs") and not config.allows("cache") and not config.allows("schema")


def test_explicit_config_file_and_errors(tmp_path):
    explicit = tmp_path / "custom.toml"
    explicit.write_text('[tooldeck]\nplugins = ["fs"]\n')
    assert load_config(environ={"TOOLDECK_CONFIG": str(explicit)}).enabled == {"fs"}
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(environ={"TOOLDECK_CONFIG": str(tmp_path / "missing.toml")})
    broken = tmp_path / "broken.toml"
    broken.write_text("disable = [\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(broken, environ={})
    with pytest.raises(ConfigError, match="unknown key"):
        Config.from_mapping({"tools": {"file_read": {"securty": {}}}})


def test_entry_points_are_discovered_and_disabled_by_name():
    deck = Deck.load(Config.from_mapping({"disable": ["faiss", "cache"]}))
    names = {info.name for info in deck.plugin_infos()}
    assert {"schema", "runner", "fs"} <= names
    assert "faiss" not in names and "cache" not in names
    fs = next(i for i in deck.plugin_infos() if i.name == "fs")
    assert fs.distribution == "tooldeck-tools-fs" and fs.version
    assert "tooldeck_register_tools" in fs.hooks
    assert deck.catalog.get("file_read").plugin == "fs"


def test_allow_list_from_environment(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLDECK_PLUGINS", "schema,runner")
    deck = Deck.load()
    assert {i.name for i in deck.plugin_infos()} == {"schema", "runner"}
    assert len(deck.catalog) == 0


def test_misspelled_hook_fails_at_start_up():
    def tooldeck_register_tool(register):  # missing "s"
        pass

    with pytest.raises(PluginLoadError, match="tooldeck_register_tool"):
        make_deck(inline_plugin(tooldeck_register_tool), load_entry_points=["schema", "runner"])


def test_hook_with_unknown_argument_fails_at_start_up():
    def tooldeck_authorize_call(call, tool, sesion):
        return None

    with pytest.raises(PluginLoadError, match="sesion"):
        make_deck(inline_plugin(tooldeck_authorize_call), load_entry_points=["schema", "runner"])


def test_missing_stages_name_the_package_to_install():
    with pytest.raises(StageMissingError, match="pip install tooldeck-runner"):
        make_deck(load_entry_points=["schema"])
    with pytest.raises(StageMissingError, match="pip install tooldeck-schema"):
        make_deck(load_entry_points=["runner", "fs"])


async def test_select_without_retriever_names_tooldeck_faiss():
    deck = make_deck(load_entry_points=["schema", "runner"])
    with pytest.raises(StageMissingError, match="tooldeck-faiss"):
        await deck.session().select("anything")


def test_requesting_an_uninstalled_plugin_is_an_error():
    with pytest.raises(PluginLoadError, match="not installed"):
        make_deck(load_entry_points=["schema", "runner", "no_such_plugin"])


@tool(category="text")
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


def test_duplicate_names_name_both_plugins():
    first = inline_plugin(
        tooldeck_register_tools=lambda register: register(word_count), name="pack_a"
    )
    second = inline_plugin(
        tooldeck_register_tools=lambda register: register(word_count), name="pack_b"
    )
    with pytest.raises(RegistrationError) as info:
        make_deck(first, second, load_entry_points=["schema", "runner"])
    message = str(info.value)
    assert "word_count" in message and "pack_a" in message and "pack_b" in message


def test_every_problem_is_reported_at_once():
    bad = [
        ToolDefinition(name="BadName", description="x", category="c"),
        ToolDefinition(name="no_description", description="", category="c"),
        ToolDefinition(
            name="bad_required",
            description="x",
            category="c",
            parameters={"type": "object", "properties": {}, "required": ["ghost"]},
        ),
    ]
    with pytest.raises(RegistrationError) as info:
        make_deck(load_entry_points=["schema", "runner"], tools=bad)
    problems = info.value.problems
    assert len(problems) >= 3
    assert all("inline-tools" in p for p in problems)
    assert any("BadName" in p for p in problems)
    assert any("ghost" in p for p in problems)


def test_configuration_overrides_security_and_execution_without_editing_the_pack():
    deck = make_deck(
        load_entry_points=["schema", "runner", "fs"],
        config={
            "tools": {
                "file_write": {
                    "security": {
                        "level": "dangerous",
                        "rate_limit": {"max_calls": 2, "window_s": 10},
                    },
                    "execution": {"timeout_s": 3},
                }
            }
        },
    )
    write = deck.catalog.get("file_write")
    assert write.security.level == "dangerous"
    assert write.security.rate_limit.max_calls == 2
    assert write.execution.timeout_s == 3
    # Untouched fields keep the pack's values.
    assert write.security.path_params == ("path",)


def test_bad_override_is_a_registration_error_naming_the_field():
    with pytest.raises(RegistrationError, match="file_read"):
        make_deck(
            load_entry_points=["schema", "runner", "fs"],
            config={"tools": {"file_read": {"security": {"level": "godlike"}}}},
        )


def test_register_with_explicit_json_schema_and_options():
    def lookup(**kwargs):
        return kwargs

    plugin = inline_plugin(
        tooldeck_register_tools=lambda register: register(
            lookup,
            name="lookup",
            category="api",
            description="Look a key up.",
            parameters={
                "type": "object",
                "properties": {"key": {"type": "string"}},
                "required": ["key"],
            },
            security={"level": "moderate"},
        ),
        name="pack",
    )
    deck = make_deck(plugin, load_entry_points=["schema", "runner"])
    definition = deck.catalog.get("lookup")
    assert definition.parameters["required"] == ["key"]
    assert definition.security.level == "moderate"
    assert definition.entrypoint is None  # a local function cannot be imported by reference
    assert deck.catalog.by_category("api") == [definition]


def test_pack_that_raises_is_reported_with_its_name():
    def tooldeck_register_tools(register):
        raise KeyError("oops")

    with pytest.raises(RegistrationError, match="broken_pack"):
        make_deck(
            inline_plugin(tooldeck_register_tools, name="broken_pack"),
            load_entry_points=["schema", "runner"],
        )


def test_extra_tooldeck_validate_tool_and_catalog_ready_hooks():
    seen = []

    def tooldeck_validate_tool(tool, catalog):
        if not tool.description.endswith("."):
            return [f"tool {tool.name!r} (plugin {tool.plugin!r}): description: end with a period"]
        return None

    def tooldeck_catalog_ready(catalog):
        seen.append(sorted(t.name for t in catalog))

    @tool(category="text")
    def shout(text: str) -> str:
        """Shout it"""
        return text.upper()

    house_rules = inline_plugin(tooldeck_validate_tool, tooldeck_catalog_ready, name="house")
    with pytest.raises(RegistrationError, match="end with a period"):
        make_deck(house_rules, load_entry_points=["schema", "runner"], tools=[shout])
    deck = make_deck(house_rules, load_entry_points=["schema", "runner"], tools=[word_count])
    assert seen[-1] == ["word_count"] and deck.catalog.get("word_count")


async def test_tooldeck_argument_validator_can_be_swapped():
    from tooldeck import ArgumentProblem

    def tooldeck_argument_validator(tool):
        def validate(arguments):
            if len(arguments.get("text", "")) > 5:
                return [ArgumentProblem(path="$.text", message="at most 5 characters")]
            return []

        return validate

    # Inline plugins register after entry points, so they are called first and win.
    deck = make_deck(
        inline_plugin(tooldeck_argument_validator, name="strict"),
        load_entry_points=["schema", "runner"],
        tools=[word_count],
    )
    result = await deck.session().call("word_count", {"text": "far too long"})
    assert result.error.details["errors"] == [
        {"path": "$.text", "message": "at most 5 characters", "expected": None}
    ]
