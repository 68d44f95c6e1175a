"""Hostile arguments and malformed schemas: structured answers, never a crash or a bypass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tooldeck_schema import SchemaArgumentValidator, validate_definition

from tooldeck_hookspecs import ExecutionConfig, RegistrationError, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")


def _echo(arguments: Any, context: Any) -> dict[str, Any]:
    return dict(arguments)


BOUNDED = ToolDefinition(
    name="set_volume",
    description="Set the volume.",
    category="test",
    execute=_echo,
    parameters={
        "type": "object",
        "properties": {
            "level": {"type": "number", "minimum": 0, "maximum": 10},
            "points": {"type": "array", "items": {"type": ["number", "null"]}},
        },
    },
    execution=ExecutionConfig(cacheable=True, cache_ttl_s=60),
)


async def test_nan_and_infinity_from_the_model_are_refused_with_their_path(
    tmp_path: Path,
) -> None:
    # Python's json.loads (how tool-call arguments are parsed) reads NaN and Infinity, and NaN
    # passes "minimum" and "maximum" (every comparison with it is false).
    deck = tooldeck_testing.make_deck(
        tools=[BOUNDED], load_entry_points=["schema", "runner", "cache"]
    )
    async with deck:
        session = deck.session(workdir=tmp_path)
        for text, path, word in [
            ('{"level": NaN}', "$.level", "NaN"),
            ('{"points": [1, Infinity]}', "$.points[1]", "Infinity"),
            ('{"points": [-Infinity]}', "$.points[0]", "-Infinity"),
        ]:
            result = await session.call("set_volume", json.loads(text))
            assert not result.success, text
            assert result.error.code == "INVALID_ARGUMENTS"
            errors = result.error.details["errors"]
            assert errors[0]["path"] == path and word in errors[0]["message"], errors
        # A null that was cached is not served for a NaN (they would share a cache key).
        assert (await session.call("set_volume", {"points": [None]})).success
        refused = await session.call("set_volume", json.loads('{"points": [NaN]}'))
        assert not refused.success and refused.error.code == "INVALID_ARGUMENTS"
        assert (await session.call("set_volume", {"level": 3.5})).success


def test_the_later_dialect_refuses_nan_too() -> None:
    validate = SchemaArgumentValidator({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"level": {"type": "number", "minimum": 0, "maximum": 10}},
    })
    problems = validate({"level": float("nan")})
    assert [p.path for p in problems] == ["$.level"]
    assert validate({"level": 2.0}) == []


def _tool(parameters: dict[str, Any]) -> ToolDefinition:
    return ToolDefinition(name="looped", description="d", category="test", execute=_echo,
                          parameters=parameters)


@pytest.mark.parametrize("definitions", [
    {"a": {"$ref": "#/definitions/a"}},
    {"a": {"$ref": "#/definitions/b"}, "b": {"allOf": [{"$ref": "#/definitions/a"}]}},
    {"a": {"anyOf": [{"type": "string"}, {"not": {"$ref": "#/definitions/a"}}]}},
])
def test_a_ref_loop_that_never_descends_is_refused_at_start_up(
    definitions: dict[str, Any],
) -> None:
    # Before: accepted, then every call failed with a RecursionError blamed on the arguments.
    schema = {"type": "object", "properties": {"x": {"$ref": "#/definitions/a"}},
              "definitions": definitions}
    with pytest.raises(RegistrationError) as info:
        tooldeck_testing.make_deck(tooldeck_testing.tools_plugin([_tool(schema)], name="pack"),
                                   load_entry_points=["schema", "runner"])
    text = "\n".join(info.value.problems)
    assert "tool 'looped' (plugin 'pack'): parameters: $ref loop #/definitions/a -> " in text, text


def test_recursive_schemas_that_descend_are_accepted() -> None:
    tree = {
        "type": "object",
        "properties": {"root": {"$ref": "#/definitions/node"}},
        "definitions": {"node": {
            "type": "object",
            "properties": {"name": {"type": "string"},
                           "children": {"type": "array", "items": {"$ref": "#/definitions/node"}},
                           "parent": {"$ref": "#"}},
        }},
    }
    assert validate_definition(_tool(tree)) == []
    validate = SchemaArgumentValidator(tree)
    assert validate({"root": {"name": "a", "children": [{"name": "b", "children": []}]}}) == []


@pytest.mark.parametrize("levels", [200, 10_000])
def test_a_schema_nested_thousands_of_levels_is_a_problem_not_a_recursion_error(
    levels: int,
) -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    problems = validate_definition(_tool(schema))
    assert problems == ["tool 'looped' (plugin 'unknown'): parameters: is nested deeper than "
                        "128 levels"]


def _combinators(kind: str, levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string", "maxLength": 3}
    for level in range(levels):
        if kind == "not":
            node = {"not": {"not": node}}
        else:  # a distinct constant per level: a value matches one branch at most (oneOf)
            node = {kind: [node, {"const": level}]}
    return {"type": "object", "properties": {"v": node}, "required": ["v"]}


@pytest.mark.parametrize("kind", ["anyOf", "oneOf", "not"])
@pytest.mark.parametrize("levels", [12, 30])
def test_combinators_nested_past_pythons_block_limit_still_validate(
    kind: str, levels: int
) -> None:
    # Before: ~19 levels of anyOf/oneOf/not made fastjsonschema generate Python with more than
    # 20 nested blocks, and registration failed with "SyntaxError: too many statically nested
    # blocks". Such schemas are now validated by the interpreted validator, with the same answers.
    schema = _combinators(kind, levels)
    assert validate_definition(_tool(schema)) == []
    validate = SchemaArgumentValidator(schema)
    assert validate({"v": "abc"}) == []
    if kind != "not":
        assert validate({"v": 0}) == validate({"v": 7}) == []
    for bad in ({"v": "abcd"}, {"v": -1}, {}, {"v": None}):
        problems = validate(bad)
        assert problems, bad
        assert all(len(p.message) <= 600 for p in problems)
    assert validate({"v": float("nan")})  # non-finite numbers are still refused


def test_a_deep_schema_that_is_invalid_is_still_refused() -> None:
    schema = _combinators("anyOf", 30)
    schema["properties"]["w"] = {"type": "strong"}
    (problem,) = validate_definition(_tool(schema))
    assert "parameters" in problem and "strong" in problem


def test_const_is_accepted_and_checked() -> None:
    # Before: compiling any schema with "const" (Pydantic's one-value Literal) raised
    # KeyError: 'definition_rule' inside fastjsonschema, and the tool was refused at registration.
    schema = {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "const": "cat"},
            "n": {"const": 1, "enum": [1, 2, True]},
            # A property *named* const is a name, not the keyword.
            "const": {"type": "object", "properties": {"const": {"const": [5]}}},
            "shape": {"oneOf": [
                {"type": "object", "properties": {"kind": {"const": k}}, "required": ["kind"]}
                for k in ("circle", "square")
            ]},
        },
    }
    assert validate_definition(_tool(schema)) == []
    validate = SchemaArgumentValidator(schema)
    assert validate({"kind": "cat", "n": 1, "const": {"const": [5]},
                     "shape": {"kind": "square"}}) == []
    assert [p.path for p in validate({"kind": "dog"})] == ["$.kind"]
    assert [p.path for p in validate({"n": 2})] == ["$.n"]
    assert [p.path for p in validate({"n": True})] == ["$.n"]
    assert [p.path for p in validate({"const": {"const": [6]}})] == ["$.const.const"]
    assert validate({"shape": {"kind": "triangle"}})
