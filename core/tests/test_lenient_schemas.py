"""Lenient registration admits real catalogs' broken parameter schemas (stop 41).

Before, a schema :func:`tooldeck._catalog.repair_parameters` could not fix (``"minimum": "0"``,
a JavaScript-only pattern, properties given as a list or as a bare type name, a ``$ref`` into
nothing, an array at the top) was left to the register stage, which refused it: one such tool
aborted ``tooldeck eval retrieval`` on a whole catalog ("N problem(s) in tool definitions",
exit 2) and left the tool out of an MCP bridge. Now lenient registration loosens the schema
step by step (keywords whose values have the wrong shape dropped, then the top-level properties
only) until the register stage takes it, and reports it (``parameters_loosened``). Strict
registration still refuses all of them.
"""

from __future__ import annotations

import json
import random

import pytest

from tooldeck import ErrorCode, RegistrationError, ToolDefinition
from tooldeck._catalog import flatten_parameters, sanitize_parameters
from tooldeck._eval import _eval_file
from tooldeck.testing import make_deck


def echo(arguments, context):
    return {"echo": dict(arguments)}


def tool(name: str, parameters, description: str = "Echo the arguments.") -> ToolDefinition:
    return ToolDefinition(
        name=name, description=description, category="api", execute=echo, parameters=parameters
    )


def new_deck():
    return make_deck(load_entry_points=["schema", "runner"])


#: Schemas seen in real catalogs (OpenAPI conversions, MCP servers written in JavaScript, LLM-
#: generated tool lists) that strict registration refuses and the first repair did not fix.
BROKEN = {
    "numeric_text_bounds": {"type": "object", "properties": {
        "limit": {"type": "integer", "minimum": "1", "maximum": "50"}}},
    "javascript_pattern": {"type": "object", "properties": {
        "name": {"type": "string", "pattern": "^[\\p{L} ]+$"}}},
    "unclosed_pattern": {"type": "object", "properties": {
        "q": {"type": "string", "pattern": "[a-z"}}},
    "properties_as_list": {"type": "object", "properties": [
        {"name": "city", "type": "string", "description": "City"},
        {"name": "days", "type": "integer"}]},
    "bare_type_names": {"type": "object", "properties": {"text": "string", "n": "int"}},
    "draft3_required_flag": {"type": "object", "properties": {
        "path": {"type": "string", "required": True}, "mode": {"type": "string"}}},
    "ref_into_nothing": {"type": "object", "properties": {
        "filter": {"$ref": "#/definitions/Filter"}}},
    "remote_ref": {"type": "object", "properties": {
        "item": {"$ref": "https://example.invalid/schemas/item.json"}}},
    "top_level_array": {"type": "array", "items": {"type": "string"}},
    "enum_not_a_list": {"type": "object", "properties": {
        "unit": {"type": "string", "enum": "celsius"}}},
    "items_not_a_schema": {"type": "object", "properties": {
        "tags": {"type": "array", "items": "string"}}},
    "negative_count": {"type": "object", "properties": {
        "code": {"type": "string", "maxLength": -1, "minLength": "two"}}},
    "description_not_text": {"type": "object", "properties": {
        "x": {"type": "string", "description": ["a", "list"]}}},
    "any_of_empty": {"type": "object", "properties": {"v": {"anyOf": []}}},
    # Python's json reads NaN and Infinity (an MCP server can send them) and writes them back
    # as NaN, which no provider parses: every request carrying the tool failed.
    "non_finite_default": {"type": "object", "properties": {
        "ratio": {"type": "number", "default": float("nan"), "enum": [1.0, float("inf")]}}},
}


async def test_strict_registration_names_nan_and_infinity():
    async with new_deck() as deck:
        with pytest.raises(RegistrationError, match="NaN or an infinity"):
            await deck.add_tools([tool("probe", BROKEN["non_finite_default"])])


@pytest.mark.parametrize("case", sorted(BROKEN))
async def test_strict_refuses_and_lenient_admits_with_a_warning(case):
    parameters = BROKEN[case]
    async with new_deck() as deck:
        with pytest.raises(RegistrationError, match="parameters"):
            await deck.add_tools([tool("probe", parameters)])
        assert len(deck.catalog) == 0
        (added,) = await deck.add_tools([tool("probe", parameters)], lenient=True)
        assert added.parameters["type"] == "object"
        loosened = [w for w in deck.registration_warnings if w.kind == "parameters_loosened"]
        assert len(loosened) == 1 and "probe" in loosened[0].message
        assert "admitted with a looser one" in loosened[0].message
        # The tool runs: a call with no arguments (none is required any more, or the required
        # one is given) goes through the admitted schema's validator.
        required = added.parameters.get("required", [])
        arguments = {name: "x" for name in required}
        result = await deck.session().call("probe", arguments)
        assert result.success, result.error


async def test_what_a_loosened_schema_keeps_still_binds():
    parameters = {"type": "object", "properties": {
        "limit": {"type": "integer", "minimum": "1", "maximum": "50"},
        "name": {"type": "string", "pattern": "^[\\p{L} ]+$", "maxLength": 20},
    }, "required": ["limit"]}
    async with new_deck() as deck:
        (added,) = await deck.add_tools([tool("search", parameters)], lenient=True)
        limit = added.parameters["properties"]["limit"]
        assert limit == {"type": "integer", "minimum": 1, "maximum": 50}
        name = added.parameters["properties"]["name"]
        assert "pattern" not in name and name["maxLength"] == 20
        session = deck.session()
        assert (await session.call("search", {"limit": 10, "name": "Ann"})).success
        for bad in ({"limit": 0}, {"limit": 51}, {"limit": "ten"}, {"name": "Ann"},
                    {"limit": 5, "name": "x" * 21}):
            result = await session.call("search", bad)
            assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGUMENTS


async def test_a_list_of_properties_keeps_names_types_and_descriptions():
    async with new_deck() as deck:
        (added,) = await deck.add_tools(
            [tool("forecast", BROKEN["properties_as_list"])], lenient=True
        )
        assert added.parameters["properties"] == {
            "city": {"type": "string", "description": "City"}, "days": {"type": "integer"}
        }
        bad = await deck.session().call("forecast", {"days": "three"})
        assert bad.error is not None and bad.error.code is ErrorCode.INVALID_ARGUMENTS


async def test_one_broken_tool_no_longer_keeps_the_others_out():
    good = tool("good_tool", {"type": "object", "properties": {"a": {"type": "string"}}})
    broken = tool("broken_tool", BROKEN["javascript_pattern"])
    async with new_deck() as deck:
        added = await deck.add_tools([good, broken], lenient=True)
        assert [t.name for t in added] == ["good_tool", "broken_tool"]
        assert set(deck.catalog.names()) == {"good_tool", "broken_tool"}


def test_the_steps_only_ever_loosen():
    # Every keyword the sanitizer keeps is the given one (or its numeric reading): it never
    # adds a constraint. flatten keeps at most type, description and enum per property.
    for case, parameters in BROKEN.items():
        fixed, changes = sanitize_parameters(parameters)
        assert fixed["type"] == "object", case
        flat, _ = flatten_parameters(parameters)
        for spec in flat["properties"].values():
            assert set(spec) <= {"type", "description", "enum"}, case
    fixed, changes = sanitize_parameters(BROKEN["numeric_text_bounds"])
    assert fixed["properties"]["limit"] == {"type": "integer", "minimum": 1, "maximum": 50}
    assert any("'1' -> 1" in c for c in changes)


def _random_schema(rng: random.Random, depth: int = 0):
    """A JSON-ish value built from schema keywords and values of every wrong kind."""
    keywords = ["type", "properties", "items", "required", "enum", "minimum", "maxLength",
                "pattern", "$ref", "anyOf", "oneOf", "allOf", "not", "additionalProperties",
                "description", "format", "multipleOf", "definitions", "patternProperties",
                "dependencies", "const", "default", "exclusiveMinimum", "if", "then"]
    leaves = [None, True, False, 0, -1, 1.5, float("nan"), "string", "STRING", "int", "[a-",
              "\\p{L}", "#/definitions/x", "#", "", [], {}, ["a", 1], "1e3", 10**30]
    if depth > 4 or rng.random() < 0.3:
        return rng.choice(leaves)
    kind = rng.random()
    if kind < 0.7:
        return {rng.choice(keywords + ["x", "y", "name"]): _random_schema(rng, depth + 1)
                for _ in range(rng.randint(0, 5))}
    return [_random_schema(rng, depth + 1) for _ in range(rng.randint(0, 3))]


async def test_any_schema_value_is_admitted_leniently():
    # The family, not the examples: 400 random schemas of keywords with values of every kind.
    rng = random.Random(41)
    tools = []
    for i in range(400):
        parameters = _random_schema(rng)
        if isinstance(parameters, dict) and rng.random() < 0.8:
            parameters.setdefault("type", "object")
        tools.append(tool(f"random_{i}", parameters))
    async with new_deck() as deck:
        added = await deck.add_tools(tools, lenient=True)
        assert len(added) == 400
        for definition in added:
            assert definition.parameters["type"] == "object"
            json.dumps(definition.parameters, allow_nan=False)  # plain, finite JSON


async def test_eval_retrieval_runs_a_catalog_of_broken_schemas(tmp_path):
    tools = [
        {"name": name, "description": f"Tool {name.replace('_', ' ')}.", "parameters": schema}
        for name, schema in BROKEN.items()
    ]
    queries = [{"query": "numeric text bounds", "relevant": ["numeric_text_bounds"]},
               {"query": "properties as list", "relevant": ["properties_as_list"]}]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"tools": tools, "queries": queries}), encoding="utf-8")
    config = {"faiss": {"cache_dir": str(tmp_path / "embeddings")}}
    figures = await _eval_file(str(path), limit=15, n_queries=None, config=config)
    assert figures["tools"] == len(BROKEN)
    assert figures["registration_warnings"]["parameters_loosened"] == len(BROKEN)
    assert figures["R@15"] == 100.0


@pytest.mark.parametrize(
    "parameters",
    [
        # An OpenAPI operation's parameter list.
        [{"name": "city", "in": "query", "type": "STRING", "description": "City name",
          "required": True},
         {"name": "days", "in": "query", "type": "NUMBER", "description": "Days ahead"}],
        # RapidAPI's (ToolBench's) two lists.
        {"required_parameters": [{"name": "city", "type": "STRING", "description": "City name"}],
         "optional_parameters": [{"name": "days", "type": "NUMBER", "description": "Days ahead",
                                  "default": "3"}]},
    ],
    ids=["openapi_list", "rapidapi_lists"],
)
async def test_lists_of_named_parameters_become_properties(parameters):
    async with new_deck() as deck:
        (added,) = await deck.add_tools([tool("forecast", parameters)], lenient=True)
        properties = added.parameters["properties"]
        assert properties["city"]["type"] == "string"
        assert properties["city"]["description"] == "City name"
        assert properties["days"]["type"] == "number"
        assert added.parameters["required"] == ["city"]
        session = deck.session()
        assert (await session.call("forecast", {"city": "Oslo", "days": 2})).success
        missing = await session.call("forecast", {"days": 2})
        assert missing.error is not None and missing.error.code is ErrorCode.INVALID_ARGUMENTS


def test_a_dataset_tool_with_list_parameters_loads(tmp_path):
    from tooldeck._eval import load_dataset

    path = tmp_path / "d.json"
    path.write_text(json.dumps({
        "tools": [{"name": "f", "description": "d",
                   "parameters": [{"name": "city", "type": "string"}]}],
        "queries": [{"query": "q", "relevant": ["f"]}],
    }), encoding="utf-8")
    (loaded,), _ = load_dataset(path, keep_names=True)
    assert loaded.parameters == [{"name": "city", "type": "string"}]  # left to registration


def test_a_schema_whose_examples_have_names_is_not_read_as_a_parameter_list():
    from tooldeck._catalog import repair_parameters

    schema = {"type": "object", "additionalProperties": {"type": "string"},
              "examples": [{"name": "Bob"}, {"name": "Ann"}]}
    fixed, changes = repair_parameters(schema)
    assert fixed["examples"] == schema["examples"] and fixed["properties"] == {}
    assert not any("named parameter" in c for c in changes)
