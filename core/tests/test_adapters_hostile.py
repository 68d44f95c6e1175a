"""Schema exports fed hostile and real-world parameter schemas, checked with the providers' SDKs.

Every tool here is registered strictly by the real register stage (schema rules and the runner),
so each schema is one a tool pack may really ship; the exports are then validated with the
official SDK models (google-genai, openai, anthropic, mcp) and their documented limits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest

from tooldeck import ErrorCode, ToolDefinition
from tooldeck.adapters import FORMATS, export_tools, gemini_schema, parse_tool_calls
from tooldeck.testing import make_deck

# What Gemini's function-declaration schema (an OpenAPI 3.0 subset) does not take.
GEMINI_REFUSED = {
    "$ref", "$defs", "definitions", "oneOf", "allOf", "not", "const", "prefixItems",
    "additionalProperties", "patternProperties", "examples", "$schema",
}
# OpenAI: "schema must have type 'object' and not have 'oneOf'/'anyOf'/'allOf'/'enum'/'const'/
# 'not' at the top level"; Anthropic: "input_schema does not support oneOf, allOf, or anyOf at
# the top level". Either fails the whole request (HTTP 400), not just that tool.
TOP_LEVEL_REFUSED = {"anyOf", "oneOf", "allOf", "enum", "const", "not"}


def echo(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return dict(arguments)


def tool(name: str, parameters: dict[str, Any], description: str = "Echo.") -> ToolDefinition:
    return ToolDefinition(
        name=name, description=description, category="api", parameters=parameters, execute=echo
    )


def walk(schema: Any) -> Iterator[dict[str, Any]]:
    """Every schema node (dict) in ``schema``, iteratively."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def keys_in(schema: Any) -> set[str]:
    """Schema keywords used anywhere, property names excluded."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                found.add(key)
                if key == "properties" and isinstance(value, dict):
                    stack.extend(value.values())
                else:
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def gemini_declaration(definition: ToolDefinition) -> dict[str, Any]:
    from google.genai import types

    (declaration,) = export_tools([definition], "gemini")
    types.FunctionDeclaration.model_validate(declaration)
    return declaration


# A pydantic-made schema of a recursive model (what a rich-typed tool parameter produces), with a
# shared definition used twice and a $ref whose siblings refine it.
TREE = {
    "type": "object",
    "$defs": {
        "Node": {
            "type": "object",
            "description": "A tree node.",
            "properties": {
                "label": {"$ref": "#/$defs/Label"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            },
            "required": ["label"],
        },
        "Label": {"type": "string", "maxLength": 40},
    },
    "properties": {
        "root": {"$ref": "#/$defs/Node"},
        "title": {"$ref": "#/$defs/Label", "description": "the tree's title"},
    },
    "required": ["root"],
}


async def test_gemini_inlines_refs_and_stops_at_recursion():
    async with make_deck(load_entry_points=["schema", "runner"]) as deck:
        (added,) = await deck.add_tools([tool("tree_store", TREE)])
        schema = gemini_declaration(added)["parameters"]
    assert not keys_in(schema) & GEMINI_REFUSED, keys_in(schema) & GEMINI_REFUSED
    root = schema["properties"]["root"]
    # The definition is there, not an empty schema the model could fill with anything.
    assert root["type"] == "object" and root["required"] == ["label"]
    assert root["properties"]["label"] == {"type": "string", "maxLength": 40}
    nested = root["properties"]["children"]["items"]
    assert nested["type"] == "object" and "Node" in nested["description"]
    assert schema["properties"]["title"] == {
        "type": "string", "maxLength": 40, "description": "the tree's title",
    }


async def test_gemini_ref_fan_out_is_bounded():
    # Each level refers to the next twice: inlined naively, 2**40 nodes.
    defs = {f"L{i}": {"type": "object", "properties": {
        "a": {"$ref": f"#/$defs/L{i + 1}"}, "b": {"$ref": f"#/$defs/L{i + 1}"}}}
        for i in range(40)}
    defs["L40"] = {"type": "string"}
    parameters = {"type": "object", "$defs": defs,
                  "properties": {"x": {"$ref": "#/$defs/L0"}}}
    async with make_deck(load_entry_points=["schema", "runner"]) as deck:
        (added,) = await deck.add_tools([tool("fan_out", parameters)])
        schema = gemini_declaration(added)["parameters"]
    assert "$ref" not in keys_in(schema)
    assert sum(1 for _ in walk(schema)) < 20_000


def test_gemini_enum_and_const_are_json_values_of_the_right_type():
    convert = gemini_schema
    # Python's str() would say "True" / "None": the model must see JSON, and booleans stay
    # booleans (Gemini has no boolean enum).
    assert convert({"const": True}) == {"type": "boolean"}
    assert convert({"type": ["string", "null"], "enum": ["utf-8", None]}) == {
        "type": "string", "nullable": True, "enum": ["utf-8"],
    }
    # Numbers keep their type (Gemini's documented {type: INTEGER, format: enum}): a model told
    # "string" sends "2", which the tool's own schema then refuses.
    assert convert({"type": "integer", "enum": [1, 2]}) == {
        "type": "integer", "format": "enum", "enum": ["1", "2"],
    }
    assert convert({"enum": [0.5, 1]}) == {
        "type": "number", "format": "enum", "enum": ["1", "0.5"],
    }
    mixed = convert({"enum": ["auto", 3, None]})
    assert mixed["nullable"] is True
    assert mixed["anyOf"] == [
        {"type": "string", "enum": ["auto"]},
        {"type": "integer", "format": "enum", "enum": ["3"]},
    ]


async def test_gemini_unions_tuples_and_formats_take_its_shapes():
    from google.genai import types

    parameters = {
        "type": "object",
        "properties": {
            "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "either": {"oneOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]},
            "both": {"allOf": [
                {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
                {"properties": {"y": {"type": "integer"}}},
            ]},
            "many": {"type": ["string", "integer", "null"], "minLength": 1, "minimum": 2},
            "point": {"type": "array", "prefixItems": [{"type": "number"}]},
            "bare": {"type": "array"},
            "grid": {"type": "array", "items": {"type": "array", "description": "a row"}},
            "link": {"type": "string", "format": "uri"},
            "when": {"type": "string", "format": "date-time"},
            "tags": {"type": "object", "additionalProperties": {"type": "string"},
                     "patternProperties": {"^x-": {"type": "string"}}},
        },
    }
    # Draft-07 tuples: `items` as a list.
    tuples = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "pair": {"type": "array", "items": [{"type": "string"}, {"type": "number"}]},
        },
    }
    async with make_deck(load_entry_points=["schema", "runner"]) as deck:
        added, pairs = await deck.add_tools(
            [tool("union_shapes", parameters), tool("pair_shapes", tuples)]
        )
        schema = gemini_declaration(added)["parameters"]
        pair = gemini_declaration(pairs)["parameters"]["properties"]["pair"]
    assert pair["items"] == {"anyOf": [{"type": "string"}, {"type": "number"}]}
    for node in walk(schema["properties"]):
        if "type" in node or "anyOf" in node:
            types.Schema.model_validate(node)
    assert not keys_in(schema) & GEMINI_REFUSED
    props = schema["properties"]
    assert props["maybe"] == {"type": "string", "nullable": True}
    assert props["either"]["anyOf"] == [{"type": "string"}, {"type": "integer", "minimum": 0}]
    assert set(props["both"]["properties"]) == {"x", "y"} and props["both"]["required"] == ["x"]
    assert props["many"] == {"nullable": True, "anyOf": [
        {"type": "string", "minLength": 1}, {"type": "integer", "minimum": 2}]}
    assert props["point"]["items"] == {"type": "number"}
    assert "format" not in props["link"] and props["when"]["format"] == "date-time"
    # Gemini refuses an array without a typed `items` ("items: missing field"), nested too.
    assert props["bare"]["items"] == {"type": "string"}
    assert props["grid"]["items"] == {
        "type": "array", "description": "a row", "items": {"type": "string"},
    }


EITHER = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "url": {"type": "string"},
        "mode": {"type": "string", "enum": ["r", "w"]},
    },
    "allOf": [{"properties": {"timeout": {"type": "number"}}, "required": ["mode"]}],
    "anyOf": [{"required": ["path"]}, {"required": ["url"]}],
}


async def test_top_level_unions_are_flattened_in_every_format_and_still_enforced():
    from anthropic.types import ToolParam
    from mcp.types import Tool
    from openai.types.chat import ChatCompletionFunctionToolParam

    async with make_deck(load_entry_points=["schema", "runner"]) as deck:
        (added,) = await deck.add_tools([tool("open_source", EITHER, "Open a source.")])
        for format in FORMATS:
            (item,) = export_tools([added], format)
            body = item.get("function", item)
            schema = (
                body.get("parameters") or body.get("input_schema") or body.get("inputSchema")
            )
            assert schema["type"] == "object", format
            assert not set(schema) & TOP_LEVEL_REFUSED, (format, schema)
            assert set(schema["properties"]) >= {"path", "url", "mode", "timeout"}, format
            assert schema.get("required") == ["mode"], format
            # The alternatives are told to the model instead.
            assert "(path) or (url)" in body["description"], format
        pydantic.TypeAdapter(ChatCompletionFunctionToolParam).validate_python(
            export_tools([added], "openai")[0])
        pydantic.TypeAdapter(ToolParam).validate_python(export_tools([added], "anthropic")[0])
        Tool.model_validate(export_tools([added], "mcp")[0])
        # The deck still holds the call to the tool's own schema.
        session = deck.session()
        refused = await session.call("open_source", {"mode": "r"})
        assert refused.error is not None and refused.error.code is ErrorCode.INVALID_ARGUMENTS
        ran = await session.call("open_source", {"mode": "r", "url": "https://x"})
        assert ran.success and ran.data == {"mode": "r", "url": "https://x"}
        # The catalog's definition is untouched by the export.
        assert deck.catalog.get("open_source").parameters == EITHER


async def test_editing_an_export_does_not_edit_the_catalog():
    async with make_deck(load_entry_points=["schema", "runner"]) as deck:
        (added,) = await deck.add_tools([tool("tree_store", TREE)])
        before = json.dumps(deck.catalog.get("tree_store").parameters, sort_keys=True)
        for format in FORMATS:
            (item,) = export_tools([added], format)
            body = item.get("function", item)
            schema = (body.get("parameters") or body.get("input_schema")
                      or body.get("inputSchema"))
            # What a caller (or a framework's in-place strict rewrite) might do to an export.
            for node in walk(schema):
                node["additionalProperties"] = False
                node.pop("description", None)
        after = json.dumps(deck.catalog.get("tree_store").parameters, sort_keys=True)
        assert after == before
        result = await deck.session().call("tree_store", {"root": {"label": "a", "extra": 1}})
        assert result.success, result.error


async def test_odd_property_names_many_properties_and_huge_descriptions():
    from anthropic.types import ToolParam
    from openai.types.chat import ChatCompletionFunctionToolParam

    names = ["self", "class", "user name", "a.b", "ünï", "$ref", "properties", "type", "0"]
    properties: dict[str, Any] = {n: {"type": "string"} for n in names}
    properties.update({f"p{i}": {"type": "integer"} for i in range(500)})
    description = "Line\x00one\x1b[2J\u2028" + "x" * 1_000_000
    async with make_deck(load_entry_points=["schema", "runner"]) as deck:
        (added,) = await deck.add_tools([tool(
            "odd_names", {"type": "object", "properties": properties, "required": names},
            description=description,
        )])
        declaration = gemini_declaration(added)
        assert list(declaration["parameters"]["properties"]) == list(properties)
        assert declaration["parameters"]["required"] == names
        openai = export_tools([added], "openai")[0]
        pydantic.TypeAdapter(ChatCompletionFunctionToolParam).validate_python(openai)
        pydantic.TypeAdapter(ToolParam).validate_python(export_tools([added], "anthropic")[0])
        assert openai["function"]["description"] == description  # nothing cut silently
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", openai["function"]["name"])
        arguments = {n: n for n in names}
        result = await deck.session().call("odd_names", arguments)
        assert result.success and result.data == arguments


@pytest.mark.parametrize("target", ["#/$defs/Missing", "https://example.com/schema.json"])
def test_gemini_unresolvable_ref_keeps_what_its_siblings_say(target):
    out = gemini_schema({"type": "object", "properties": {
        "a": {"$ref": target, "description": "the thing", "type": "string"}}})
    assert out["properties"]["a"] == {"type": "string", "description": "the thing"}


@pytest.mark.parametrize(
    ("format", "response"),
    [
        ("openai", {"choices": [{"message": {"tool_calls": [None]}}]}),
        ("openai", {"choices": [{"message": {"tool_calls": ["file_read"]}}]}),
        ("openai", {"choices": ["not a choice"]}),
        ("openai", "garbage"),
        ("openai-responses", {"output": {"type": "function_call"}}),
        ("anthropic", {"content": 42}),
    ],
)
def test_a_malformed_response_is_a_clear_value_error(format, response):
    with pytest.raises(ValueError, match=f"{format} response"):
        parse_tool_calls(format, response)


def test_entries_that_are_no_calls_are_skipped_and_ids_are_text():
    responses = {"output": [None, "x", {"type": "function_call", "call_id": 7, "name": None,
                                         "arguments": '{"a": 1}'}]}
    (parsed,) = parse_tool_calls("openai-responses", responses)
    assert (parsed.call.id, parsed.call.name, parsed.call.arguments) == ("7", "", {"a": 1})
    assert parse_tool_calls("anthropic", {"content": "just text"}) == []
    (block,) = parse_tool_calls("anthropic", {"content": [None, {
        "type": "tool_use", "id": None, "name": "x", "input": {"a": 1}}]})
    assert block.call.id == "" and block.call.arguments == {"a": 1}
    openai = {"choices": [{"message": {"tool_calls": [
        {"id": "c1", "function": None},
        {"id": None, "function": {"name": 5, "arguments": "{}"}},
    ]}}]}
    first, second = parse_tool_calls("openai", openai)
    assert first.call.name == "" and (second.call.id, second.call.name) == ("", "5")
