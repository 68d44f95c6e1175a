"""Lenient registration: real catalogs get in, every change is reported once, aliases resolve.

Real stages (schema rules, runner); no retriever is needed for registration and calls.
"""

from __future__ import annotations

import logging
import re

import pytest

from tooldeck import ErrorCode, RegistrationError, ToolDefinition
from tooldeck._catalog import PROVIDER_NAME_LIMIT, RegistrationWarning
from tooldeck.adapters import FORMATS, export_tools, parse_tool_calls
from tooldeck.testing import inline_plugin, make_deck

# What OpenAI and Anthropic accept as a function name (Gemini also allows '.', ':').
PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

LONG = "websiteConfigurationApi.WebsiteConfigurationApi.renameWebsiteAndKeepTheOldAddress"


def echo(arguments, context):
    return {"echo": dict(arguments)}


def tool(name: str, description: str = "Echo the arguments.", **kw) -> ToolDefinition:
    kw.setdefault(
        "parameters",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    )
    return ToolDefinition(
        name=name, description=description, category="api", execute=echo, **kw
    )


def new_deck():
    return make_deck(load_entry_points=["schema", "runner"])


async def test_strict_stays_the_default_and_names_the_opt_in():
    async with new_deck() as deck:
        with pytest.raises(RegistrationError) as info:
            await deck.add_tools([tool(LONG), tool("empty_description", description="")])
        assert len(info.value.problems) == 2
        assert all("lenient=True" in p for p in info.value.problems)
        assert len(deck.catalog) == 0 and deck.registration_warnings == []


async def test_empty_description_is_derived_and_reported_once(caplog):
    caplog.set_level(logging.WARNING, logger="tooldeck")
    async with new_deck() as deck:
        (added,) = await deck.add_tools(
            [tool("get_weather_forecast", description="  ")], lenient=True
        )
        assert added.description == "Get weather forecast. Parameters: text."
        assert deck.catalog.get("get_weather_forecast").description == added.description
        (warning,) = deck.registration_warnings
        assert isinstance(warning, RegistrationWarning)
        assert warning.kind == "description_derived" and warning.tool == "get_weather_forecast"
        assert warning.plugin == "runtime"
        logged = [r for r in caplog.records if "get_weather_forecast" in r.getMessage()]
        assert len(logged) == 1 and logged[0].levelno == logging.WARNING


async def test_long_name_gets_an_alias_in_every_export_and_calls_resolve():
    async with new_deck() as deck:
        (added,) = await deck.add_tools([tool(LONG)], lenient=True)
        alias = added.name
        assert len(alias) <= PROVIDER_NAME_LIMIT and PROVIDER_NAME.match(alias)
        # The words that say what it does survive (the end), with the start and a hash.
        assert alias.startswith("website_configuration_")
        assert re.search(r"_website_and_keep_the_old_address_[0-9a-f]{8}$", alias)
        kinds = [w.kind for w in deck.registration_warnings]
        assert kinds == ["name_normalised", "name_shortened"]
        assert all(w.original == LONG and w.tool == alias for w in deck.registration_warnings)
        for format in FORMATS:
            (schema,) = export_tools([added], format)
            exported = schema.get("function", schema)["name"]
            assert exported == alias, format
        session = deck.session()
        openai = {"choices": [{"message": {"tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": alias, "arguments": '{"text": "hi"}'},
        }]}}]}
        anthropic = {"content": [{"type": "tool_use", "id": "t1", "name": alias,
                                  "input": {"text": "hi"}}]}
        for format, response in (("openai", openai), ("anthropic", anthropic)):
            (parsed,) = parse_tool_calls(format, response)
            assert parsed.error is None and parsed.call.name == alias
            result = await session.call(parsed.call)
            assert result.success and result.data == {"echo": {"text": "hi"}}, result.error
        messages = await session.run_tool_calls("openai", openai)
        assert '"ok": true' in messages[0]["content"]
        # The catalog's own spelling still reaches the tool (a model may have seen it).
        by_original = await session.call(LONG, {"text": "x"})
        assert by_original.success and by_original.data == {"echo": {"text": "x"}}
        assert deck.catalog.aliases() == {LONG: alias}
        # Bad arguments through the alias are still checked against the tool's schema.
        bad = await session.call(alias, {"text": 3})
        assert bad.error.code is ErrorCode.INVALID_ARGUMENTS


async def test_duplicates_after_normalisation_are_told_apart():
    async with new_deck() as deck:
        added = await deck.add_tools(
            [tool("get_weather"), tool("getWeather"), tool("get-weather"), tool("get_weather")],
            lenient=True,
        )
        names = [t.name for t in added]
        assert names == ["get_weather", "get_weather_2", "get_weather_3", "get_weather_4"]
        kinds = [(w.original, w.kind) for w in deck.registration_warnings]
        assert kinds == [
            ("getWeather", "name_normalised"), ("getWeather", "name_disambiguated"),
            ("get-weather", "name_normalised"), ("get-weather", "name_disambiguated"),
            ("get_weather", "name_disambiguated"),
        ]
        # A taken name is never shadowed by an alias: it stays the first tool's.
        assert deck.catalog.resolve("get_weather").name == "get_weather"
        assert deck.catalog.resolve("getWeather").name == "get_weather_2"
        session = deck.session()
        for name in names:
            assert (await session.call(name, {"text": name})).data == {"echo": {"text": name}}


async def test_duplicate_of_a_pack_tool_at_run_time():
    async with make_deck(load_entry_points=["schema", "runner"], tools=[tool("lookup")]) as deck:
        with pytest.raises(RegistrationError, match="already registered"):
            await deck.add_tools([tool("lookup")])
        (added,) = await deck.add_tools([tool("lookup")], lenient=True)
        assert added.name == "lookup_2" and deck.catalog.get("lookup").plugin == "inline-tools"


async def test_other_languages_are_admitted_as_they_are():
    texts = {
        "wetter_abfragen": "Ruft das Wetter für eine Stadt ab.",
        "tianqi_chaxun": "查询指定城市的天气预报",
        "obtenir_meteo": "Obtient la météo d’une ville.",
    }
    async with new_deck() as deck:
        added = await deck.add_tools([tool(n, d) for n, d in texts.items()], lenient=True)
        assert {t.name: t.description for t in added} == texts
        assert deck.registration_warnings == []
        # A name with no ASCII letter at all still gets a stable, provider-safe name.
        (chinese,) = await deck.add_tools([tool("查询天气", "查询天气")], lenient=True)
        assert re.fullmatch(r"tool_[0-9a-f]{6}", chinese.name)
        assert (await deck.session().call("查询天气", {"text": "北京"})).success


async def test_register_lenient_at_load_time_reports_each_change_once():
    def tooldeck_register_tools(register):
        register(tool("fetchPerson", description=""), lenient=True)
        register(tool("plain_tool"))

    pack = inline_plugin(tooldeck_register_tools, name="catalog")
    async with make_deck(pack, load_entry_points=["schema", "runner"]) as deck:
        assert deck.catalog.names() == ["fetch_person", "plain_tool"]
        kinds = sorted(w.kind for w in deck.registration_warnings)
        assert kinds == ["description_derived", "name_normalised"]
        assert {w.plugin for w in deck.registration_warnings} == {"catalog"}
        # The same change made again (a refresh of the same catalog) is not reported again.
        deck.catalog.remove("fetch_person")
        await deck.add_tools(
            [tool("fetchPerson", description="", plugin="catalog")], lenient=True
        )
        assert len(deck.registration_warnings) == 2
        assert deck.catalog.resolve("fetchPerson").name == "fetch_person"


def test_strict_load_still_names_the_tool_plugin_and_field():
    def tooldeck_register_tools(register):
        register(tool("fetchPerson"))

    with pytest.raises(RegistrationError, match=r"'fetchPerson' \(plugin 'strict'\): name"):
        make_deck(
            inline_plugin(tooldeck_register_tools, name="strict"),
            load_entry_points=["schema", "runner"],
        )


async def test_parameter_schemas_from_other_type_systems_are_repaired():
    params = {
        "type": "dict",
        "properties": {
            "city": {"type": "str", "description": "City"},
            "days": {"type": "INTEGER"},
            "extra": {"type": "any"},
            "tags": {"type": "list", "items": {"type": "String"}},
        },
        "required": ["city", "country"],
    }
    async with new_deck() as deck:
        with pytest.raises(RegistrationError):
            await deck.add_tools([tool("forecast", parameters=params)])
        (added,) = await deck.add_tools([tool("forecast", parameters=params)], lenient=True)
        assert added.parameters["type"] == "object"
        assert added.parameters["required"] == ["city"]
        props = added.parameters["properties"]
        assert props["city"]["type"] == "string" and props["days"]["type"] == "integer"
        assert "type" not in props["extra"] and props["tags"]["items"]["type"] == "string"
        (warning,) = deck.registration_warnings
        assert warning.kind == "parameters_repaired" and "'country'" in warning.message
        session = deck.session()
        assert (await session.call("forecast", {"city": "Oslo", "days": 2})).success
        wrong = await session.call("forecast", {"city": "Oslo", "days": "two"})
        assert wrong.error.code is ErrorCode.INVALID_ARGUMENTS


async def test_what_cannot_be_repaired_is_still_refused_and_nothing_is_added():
    from tooldeck import ExecutionConfig

    async with new_deck() as deck:
        broken = tool("slow_tool", execution=ExecutionConfig(timeout_s=-1))
        with pytest.raises(RegistrationError, match="execution.timeout_s"):
            await deck.add_tools([tool("getThing", description=""), broken], lenient=True)
        assert len(deck.catalog) == 0 and deck.registration_warnings == []


@pytest.mark.parametrize("key", ["properties", "items", "anyOf"])
async def test_a_hostile_deep_schema_is_a_problem_not_a_recursion_error(key):
    # The repair recursed once per level: 5,000 levels raised RecursionError out of add_tools.
    inner: dict = {"type": "STRING"}
    for _ in range(5_000):
        if key == "properties":
            inner = {"type": "object", "properties": {"x": inner}}
        elif key == "items":
            inner = {"type": "array", "items": inner}
        else:
            inner = {"anyOf": [inner, {"type": "null"}]}
    params = {"type": "object", "properties": {"deep": inner, "n": {"type": "INT"}}}
    async with new_deck() as deck:
        # Strict registration refuses it with a problem naming the depth.
        with pytest.raises(RegistrationError, match="nested deeper than"):
            await deck.add_tools([tool("deep", parameters=params)])
        assert len(deck.catalog) == 0
        # Lenient registration admits the tool with its top-level properties only, and says so.
        (deep,) = await deck.add_tools([tool("deep", parameters=params)], lenient=True)
        assert set(deep.parameters["properties"]) == {"deep", "n"}
        assert deep.parameters["properties"]["n"] == {"type": "integer"}
        (warning,) = [w for w in deck.registration_warnings if w.kind == "parameters_loosened"]
        assert "nested deeper than" in warning.message and "top-level" in warning.message
        # A schema of reasonable depth is still repaired all the way down.
        shallow: dict = {"type": "STRING"}
        for _ in range(20):
            shallow = {"type": "object", "properties": {"x": shallow}}
        (added,) = await deck.add_tools(
            [tool("shallow", parameters={"type": "object", "properties": {"s": shallow}})],
            lenient=True,
        )
        node = added.parameters["properties"]["s"]
        for _ in range(20):
            node = node["properties"]["x"]
        assert node == {"type": "string"}


async def test_removing_a_renamed_tool_drops_its_alias():
    async with new_deck() as deck:
        (added,) = await deck.add_tools([tool(LONG)], lenient=True)
        assert await deck.remove_tools([added.name]) == [added.name]
        assert deck.catalog.resolve(LONG) is None
        missing = await deck.session().call(LONG, {"text": "x"})
        assert missing.error.code is ErrorCode.TOOL_NOT_FOUND
