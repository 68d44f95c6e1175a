"""Provider adapters: tool schemas out, tool calls in, tool-result messages back.

Formats: ``openai`` (chat completions), ``openai-responses``, ``anthropic``, ``mcp``, ``gemini``.
Responses may be the official SDK objects (pydantic models) or plain dicts of the same shape.
A call whose arguments are not valid JSON is returned as a :class:`ParsedCall` with an
``INVALID_ARGUMENTS`` error, never raised.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import cattrs
import orjson

from tooldeck_hookspecs import (
    ErrorCode,
    SecurityLevel,
    ToolCall,
    ToolDefinition,
    ToolError,
    ToolResult,
    json_values,
    local_ref_target,
)
from tooldeck_hookspecs.content import CONTENT_KEY

from ._content import anthropic_block, gemini_part, mcp_block, openai_part, split_blocks
from ._normalise import MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_ITEMS, shorten, too_deep

__all__ = [
    "FORMATS",
    "ParsedCall",
    "export_tools",
    "export_tool",
    "provider_schema",
    "parse_tool_calls",
    "result_messages",
    "result_payload",
    "gemini_schema",
    "converter",
    "utf8_json",
]

FORMATS = ("openai", "openai-responses", "anthropic", "mcp", "gemini")

#: The one cattrs converter used at the boundaries (CLI output, provider messages, caches).
converter = cattrs.Converter()
converter.register_unstructure_hook(ToolDefinition, lambda t: _unstructure_tool(t))


def _unstructure_tool(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "name": tool.name,
        "version": tool.version,
        "description": tool.description,
        "category": tool.category,
        # A plain copy: the catalog's schema is read-only and shared by every session.
        "parameters": (
            _copy_schema(tool.parameters)
            if isinstance(tool.parameters, Mapping)
            else tool.parameters
        ),
        "security": converter.unstructure(tool.security),
        "execution": converter.unstructure(tool.execution),
        "tags": list(tool.tags),
        "entrypoint": tool.entrypoint,
        "plugin": tool.plugin,
    }


@attrs.frozen(kw_only=True)
class ParsedCall:
    """A tool call taken out of a provider response; ``error`` is set when it cannot run as is."""

    call: ToolCall
    error: ToolError | None = None


# Keys the Gemini function-declaration schema (an OpenAPI 3.0 subset) takes over as they are.
_GEMINI_PLAIN_KEYS = (
    "title",
    "description",
    "nullable",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "propertyOrdering",
    "default",
)
# The ``format`` values Gemini accepts, per type (it refuses a request with any other).
_GEMINI_FORMATS = {
    "string": {"enum", "date-time"},
    "integer": {"enum", "int32", "int64"},
    "number": {"enum", "float", "double"},
}
# Which keywords belong to which type, for splitting ``type: [a, b]`` into ``anyOf`` variants.
_TYPE_KEYS = {
    "object": ("properties", "required", "propertyOrdering"),
    "array": ("items", "prefixItems", "minItems", "maxItems"),
    "string": ("minLength", "maxLength", "pattern", "format"),
    "integer": ("minimum", "maximum", "format"),
    "number": ("minimum", "maximum", "format"),
}
#: Schema nodes one Gemini export may produce before ``$ref``s stop being inlined: a schema whose
#: definitions refer to each other several times per level doubles with every level.
_GEMINI_NODE_BUDGET = 5000
#: Schema levels a Gemini export goes down (registration allows no deeper parameters).
_GEMINI_MAX_DEPTH = 128


def _json_kind(value: Any) -> str | None:
    """The JSON Schema type of an enum value (None for objects and arrays)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def _resolve_ref(root: Any, ref: Any) -> Mapping[str, Any] | None:
    """The schema a local ``$ref`` (``#``, ``#/$defs/X``, any JSON pointer) names in ``root``."""
    target = local_ref_target(root, ref)  # remote references are never fetched
    return target if isinstance(target, Mapping) else None


class _GeminiSchema:
    """One conversion of a JSON Schema into Gemini's subset (see :func:`gemini_schema`)."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.nodes = 0
        self.expanding: list[str] = []

    def resolve(self, ref: Any) -> Mapping[str, Any] | None:
        """The local definition ``ref`` points to (``#/$defs/X``, ``#``), or None."""
        return _resolve_ref(self.root, ref)

    def stub(self, target: Mapping[str, Any], ref: str) -> dict[str, Any]:
        """What stands for a definition that is not inlined again (recursion, or the budget)."""
        out: dict[str, Any] = {}
        kind = target.get("type")
        if isinstance(kind, str) and kind != "null":
            out["type"] = kind
        if kind == "array":
            out["items"] = {"type": "string"}  # Gemini refuses an array without `items`
        name = ref.rsplit("/", 1)[-1].lstrip("#") or "parameters"
        text = target.get("description")
        note = f"(nested {name}: the same structure as its enclosing {name})"
        out["description"] = f"{text} {note}" if isinstance(text, str) and text else note
        return out

    def convert(self, schema: Any, depth: int = 0) -> dict[str, Any]:
        """``schema`` in Gemini's subset: refs inlined, unions and enums in the shapes it takes."""
        self.nodes += 1
        if not isinstance(schema, Mapping) or depth > _GEMINI_MAX_DEPTH:
            return {}  # `true`, or deeper than any real schema: any value
        node = dict(schema)
        ref = node.pop("$ref", None)
        if ref is not None:
            target = self.resolve(ref)
            if target is None:
                return self.convert(node, depth)  # unresolvable: what its siblings say
            if ref in self.expanding or self.nodes > _GEMINI_NODE_BUDGET:
                return self.stub(target, str(ref))
            self.expanding.append(ref)
            try:
                # Keywords next to a $ref (2019-09 and later) refine the definition.
                return self.convert({**target, **node}, depth)
            finally:
                self.expanding.pop()
        if isinstance(node.get("allOf"), list):
            return self.all_of(node, depth)
        out: dict[str, Any] = {}
        kinds = node.get("type")
        if isinstance(kinds, list) and kinds:
            kinds = list(dict.fromkeys(k for k in kinds if isinstance(k, str)))
            if "null" in kinds:
                out["nullable"] = True
                kinds.remove("null")
            if len(kinds) > 1:
                return self.type_union(node, kinds, out, depth)
            kinds = kinds[0] if kinds else None
        if kinds == "null":
            out["nullable"] = True
        elif isinstance(kinds, str):
            out["type"] = kinds
        for key in _GEMINI_PLAIN_KEYS:
            if key in node:
                out[key] = node[key]
        properties = node.get("properties")
        # Gemini takes `properties` on an OBJECT only ("only allowed for OBJECT type"), and
        # not empty ("should be non-empty for OBJECT type"): on a node of another type they
        # never applied to its values anyway (JSON Schema reads them for objects only); on
        # an untyped node they say it is an object; an empty set is left out.
        if isinstance(properties, Mapping) and properties and out.get("type") in (None, "object"):
            if "type" not in out and "enum" not in node and "const" not in node:
                out["type"] = "object"
            out["properties"] = {
                str(name): self.convert(sub, depth + 1) for name, sub in properties.items()
            }
            required = node.get("required")
            if isinstance(required, list):
                names = (r for r in required if isinstance(r, str))
                kept = [r for r in dict.fromkeys(names) if r in out["properties"]]
                if kept:
                    out["required"] = kept
        items = self.items(node, depth)
        if items is not None:
            out["items"] = items
        if out.get("type") == "array" and not {"type", "anyOf"} & set(out.get("items") or {}):
            # Gemini refuses a whole request for one array without a typed `items` ("items:
            # missing field"); the tool's own schema still takes any element.
            out["items"] = {**(out.get("items") or {}), "type": "string"}
        if "enum" in node or "const" in node:
            self.enum(node, out)
        variants = [
            v for key in ("anyOf", "oneOf") if isinstance(node.get(key), list) for v in node[key]
        ]
        if variants:
            self.union([self.convert(v, depth + 1) for v in variants], out)
        kind = out.get("type")
        fmt = node.get("format") if "format" not in out else out["format"]
        out.pop("format", None)
        if isinstance(kind, str) and isinstance(fmt, str) and fmt in _GEMINI_FORMATS.get(kind, ()):
            out["format"] = fmt
        return out

    def all_of(self, node: dict[str, Any], depth: int) -> dict[str, Any]:
        """``allOf`` merged into one schema: properties and required united, first keyword wins."""
        merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
        pushed = 0
        try:
            for sub in node["allOf"]:
                while isinstance(sub, Mapping) and "$ref" in sub:
                    ref = sub["$ref"]
                    target = self.resolve(ref)
                    if target is None or ref in self.expanding:
                        sub = {k: v for k, v in sub.items() if k != "$ref"}
                        break
                    self.expanding.append(ref)
                    pushed += 1
                    sub = {**target, **{k: v for k, v in sub.items() if k != "$ref"}}
                if not isinstance(sub, Mapping):
                    continue
                for key, value in sub.items():
                    if key == "properties" and isinstance(value, Mapping):
                        mine = merged.get("properties")
                        mine = mine if isinstance(mine, Mapping) else {}
                        # The schema's own properties first, and they win over a part's.
                        merged["properties"] = {
                            **mine, **{k: v for k, v in value.items() if k not in mine}
                        }
                    elif key == "required" and isinstance(value, list):
                        mine = merged.get("required")
                        merged["required"] = [*(mine if isinstance(mine, list) else []), *value]
                    elif key == "allOf" and isinstance(value, list):
                        merged["allOf"] = [*merged.get("allOf", []), *value]
                    else:
                        merged.setdefault(key, value)
            return self.convert(merged, depth)
        finally:
            del self.expanding[len(self.expanding) - pushed:]

    def type_union(
        self, node: dict[str, Any], kinds: list[str], out: dict[str, Any], depth: int
    ) -> dict[str, Any]:
        """``type: [a, b]`` as ``anyOf``, each variant with its type's own keywords."""
        shared = {k: v for k, v in node.items() if k in ("title", "description", "default")}
        out.update(shared)
        variants = []
        for kind in kinds:
            own = {k: node[k] for k in _TYPE_KEYS.get(kind, ()) if k in node}
            if "enum" in node or "const" in node:
                values = [node["const"]] if "const" in node else _as_list(node.get("enum"))
                fits = [v for v in values if _json_kind(v) == kind
                        or (kind == "number" and _json_kind(v) == "integer")]
                if not fits:
                    continue  # the enum leaves nothing of this type
                own["enum"] = fits
            variants.append(self.convert({"type": kind, **own}, depth + 1))
        self.union(variants, out)
        return out

    def enum(self, node: Mapping[str, Any], out: dict[str, Any]) -> None:
        """``enum`` / ``const`` as Gemini takes them: strings, typed by ``type`` + ``format``.

        A value is written as JSON (``true``, ``3``), never as Python's ``str()``; ``null``
        becomes ``nullable``; values of several types become ``anyOf`` variants.
        """
        values = [node["const"]] if "const" in node else node.get("enum")
        if not isinstance(values, list):
            return
        declared = out.get("type")
        groups: dict[str, list[Any]] = {}
        for value in values:
            if value is None:
                out["nullable"] = True
                continue
            kind = _json_kind(value)
            if kind == "integer" and declared == "number":
                kind = "number"
            if kind is not None:
                groups.setdefault(kind, []).append(value)
        if "integer" in groups and "number" in groups:  # 1 and 0.5: numbers, one variant
            groups["number"] = [*groups.pop("integer"), *groups["number"]]
        variants: list[dict[str, Any]] = []
        for kind, group in groups.items():
            if kind == "string":
                variants.append({"type": "string", "enum": list(dict.fromkeys(group))})
            elif kind == "boolean":
                variants.append({"type": "boolean"})  # Gemini has no boolean enum
            else:
                texts = [json.dumps(v) for v in group]
                variants.append({"type": kind, "format": "enum", "enum": texts})
        if len(variants) == 1:
            out.update(variants[0])
        elif variants:
            out.pop("type", None)
            out["anyOf"] = variants

    def union(self, variants: list[dict[str, Any]], out: dict[str, Any]) -> None:
        """``anyOf`` / ``oneOf`` variants into ``out``: ``null`` ones as ``nullable``, one left
        merged in, several as ``anyOf`` (Gemini's only union)."""
        kept = []
        for variant in variants:
            if variant.get("nullable") and "type" not in variant and "anyOf" not in variant:
                out["nullable"] = True
            else:
                kept.append(variant)
        if len(kept) == 1:
            for key, value in kept[0].items():
                out.setdefault(key, value)
        elif kept:
            existing = out.get("anyOf")
            out["anyOf"] = [*(existing if isinstance(existing, list) else []), *kept]

    def items(self, node: Mapping[str, Any], depth: int) -> dict[str, Any] | None:
        """``items`` as one schema: a tuple (``items: [...]``, ``prefixItems``) as ``anyOf``."""
        items = node.get("items")
        tuple_items = items if isinstance(items, list) else node.get("prefixItems")
        schemas: list[Any] = list(tuple_items) if isinstance(tuple_items, list) else []
        if isinstance(items, Mapping):
            schemas.append(items)
        elif isinstance(node.get("additionalItems"), Mapping):
            schemas.append(node["additionalItems"])
        if not schemas:
            return None
        converted: list[dict[str, Any]] = []
        for schema in schemas:
            item = self.convert(schema, depth + 1)
            if item not in converted:
                converted.append(item)
        return converted[0] if len(converted) == 1 else {"anyOf": converted}


def gemini_schema(schema: Any) -> Any:
    """Reduce a JSON Schema to what Gemini's function declarations accept.

    Inlines local ``$ref``s (a recursive definition once, then a described stand-in; inlining
    stops at a node budget), merges ``allOf``, turns ``oneOf`` into ``anyOf``, ``null`` (in
    ``type``, ``anyOf``, ``enum``) into ``nullable``, ``type: [a, b]`` into ``anyOf``, ``const``
    and ``enum`` into string enums typed by ``type`` and ``format: enum`` (values written as
    JSON), tuples into one ``items`` schema; drops what Gemini refuses (``$schema``, ``$defs``,
    ``additionalProperties``, ``examples``, ``x-*``, formats it does not know).
    """
    if isinstance(schema, list):
        return [gemini_schema(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    return _GeminiSchema(schema).convert(schema)


def _mcp_annotations(tool: ToolDefinition) -> dict[str, Any]:
    level = tool.security.level
    return {
        "title": tool.name.replace("_", " "),
        "readOnlyHint": level is SecurityLevel.SAFE,
        "destructiveHint": level is SecurityLevel.DANGEROUS,
        "idempotentHint": tool.execution.cacheable,
        "openWorldHint": tool.security.network or bool(tool.security.url_params),
    }


#: Keywords OpenAI refuses at the top of a function's parameters ("schema must have type 'object'
#: and not have 'oneOf'/'anyOf'/'allOf'/'enum'/'const'/'not' at the top level"); Anthropic refuses
#: the first three. One such tool in a request fails the whole request with HTTP 400.
_TOP_LEVEL_REFUSED = ("anyOf", "oneOf", "allOf", "enum", "const", "not")


def _local_definition(schema: Any, root: Mapping[str, Any]) -> Any:
    """``schema``, or the top-level definition its local ``$ref`` names (one level)."""
    if isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
        target = _resolve_ref(root, schema["$ref"])
        if target is not None:
            return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _as_list(value: Any) -> list[Any]:
    """``value`` if it is a list, else nothing (a malformed keyword is ignored, not iterated)."""
    return value if isinstance(value, list) else []


def _flat_top_level(parameters: dict[str, Any]) -> str | None:
    """Make ``parameters`` a plain object schema at the top (in place); a note for the model.

    ``allOf`` parts are merged in; the properties of ``anyOf`` / ``oneOf`` alternatives are all
    offered, required only where every alternative requires them, and the alternatives' own
    required sets are told in the returned note. ``enum``, ``const`` and ``not`` are dropped. The
    deck still validates every call against the tool's own schema, so no constraint is lost: a
    call that breaks one is answered with ``INVALID_ARGUMENTS`` naming it.
    """
    if not any(key in parameters for key in _TOP_LEVEL_REFUSED):
        return None
    own = parameters.get("properties")
    properties: dict[str, Any] = dict(own) if isinstance(own, Mapping) else {}
    own_required = parameters.get("required")
    required: list[Any] = list(own_required) if isinstance(own_required, list) else []

    def offer(part: Any) -> Mapping[str, Any] | None:
        part = _local_definition(part, parameters)
        if not isinstance(part, Mapping):
            return None
        extra = part.get("properties")
        if isinstance(extra, Mapping):
            for name, sub in extra.items():
                properties.setdefault(str(name), sub)
        return part

    for part in _as_list(parameters.pop("allOf", None)):
        merged = offer(part)
        if merged is not None and isinstance(merged.get("required"), list):
            required += merged["required"]
    notes = []
    for key in ("anyOf", "oneOf"):
        alternatives = [offer(part) for part in _as_list(parameters.pop(key, None))]
        sets = [
            [r for r in _as_list(a.get("required")) if isinstance(r, str)]
            for a in alternatives
            if a is not None
        ]
        if not sets:
            continue
        required += [r for r in sets[0] if all(r in other for other in sets[1:])]
        if all(sets):
            shown = " or ".join("(" + ", ".join(s) + ")" for s in sets)
            which = "exactly one" if key == "oneOf" else "at least one"
            notes.append(f"Give {which} of these sets of arguments: {shown}.")
    for key in ("enum", "const", "not"):
        parameters.pop(key, None)
    parameters["type"] = "object"
    parameters["properties"] = properties
    kept = [r for r in dict.fromkeys(r for r in required if isinstance(r, str)) if r in properties]
    if kept:
        parameters["required"] = kept
    else:
        parameters.pop("required", None)
    return " ".join(notes) or None


def _copy_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a parameter schema (through JSON: several times faster than deepcopy)."""
    try:
        copied = orjson.loads(orjson.dumps(schema))
    except TypeError:  # not plain JSON (a definition that was never registered)
        return copy.deepcopy(dict(schema))
    return copied if isinstance(copied, dict) else copy.deepcopy(dict(schema))


def provider_schema(tool: ToolDefinition) -> tuple[str, dict[str, Any]]:
    """The description and parameter schema every provider accepts for ``tool``.

    The schema is a deep copy (whoever edits an export, or a framework that rewrites schemas in
    place, does not edit the catalog's tool) and a plain object at the top: OpenAI and Anthropic
    refuse a whole request when one tool's parameters have ``anyOf`` / ``oneOf`` / ``allOf`` at
    the top (see ``_flat_top_level``); the alternatives are told in the description instead.
    Framework integrations hand this to their framework, the provider adapters export it.
    """
    parameters = _copy_schema(tool.parameters)
    note = _flat_top_level(parameters)
    return (f"{tool.description} {note}" if note else tool.description), parameters


def export_tool(tool: ToolDefinition, format: str) -> dict[str, Any]:
    """One tool's schema in a provider's format (see :func:`provider_schema`)."""
    description, parameters = provider_schema(tool)
    if format == "openai":
        return {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": description,
                "parameters": parameters,
            },
        }
    if format == "openai-responses":
        return {
            "type": "function",
            "name": tool.name,
            "description": description,
            "parameters": parameters,
            "strict": False,
        }
    if format == "anthropic":
        return {"name": tool.name, "description": description, "input_schema": parameters}
    if format == "mcp":
        return {
            "name": tool.name,
            "title": tool.name.replace("_", " "),
            "description": description,
            "inputSchema": parameters,
            "annotations": _mcp_annotations(tool),
        }
    if format == "gemini":
        declaration: dict[str, Any] = {"name": tool.name, "description": description}
        if parameters.get("properties"):
            declaration["parameters"] = gemini_schema(parameters)
        return declaration
    raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")


def export_tools(tools: Iterable[ToolDefinition], format: str) -> list[dict[str, Any]]:
    """Tools' schemas in a provider's format, as a list (Gemini: function declarations)."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    return [export_tool(t, format) for t in tools]


# ---------------------------------------------------------------------- parsing


def _plain(obj: Any) -> Any:
    """SDK objects (pydantic) to plain dicts; dicts pass through."""
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=False)
    return obj


def _parse_arguments(call_id: str, name: str, raw: Any) -> ParsedCall:
    if raw is None or raw == "":
        return ParsedCall(call=ToolCall(id=call_id, name=name, arguments={}))
    if isinstance(raw, Mapping):
        if too_deep(raw):
            return _too_deep_call(call_id, name)
        return ParsedCall(call=ToolCall(id=call_id, name=name, arguments=dict(raw)))
    if isinstance(raw, str | bytes | bytearray) and (
        json_values(raw, MAX_ARGUMENT_ITEMS) > MAX_ARGUMENT_ITEMS
    ):
        # Refused unparsed: json.loads of a million tiny values is one C call of ~1 s (it
        # holds the GIL, and with it every session on the deck's loop) and ~100x the text's
        # size in memory; no argument the deck accepts holds that many items.
        return ParsedCall(
            call=ToolCall(id=call_id, name=name, arguments={}),
            error=ToolError.of(
                ErrorCode.INVALID_ARGUMENTS,
                f"the arguments of {shorten(name, 80)!r} hold more than "
                f"{MAX_ARGUMENT_ITEMS:,} JSON values (objects, arrays and their items); "
                "they were not read",
                suggestion="Send smaller arguments matching the tool's schema.",
                details={"errors": [{"path": "$", "message": "too many values"}]},
            ),
        )
    try:
        arguments = json.loads(raw)
    except RecursionError:
        return _too_deep_call(call_id, name)
    except (TypeError, ValueError) as exc:
        return ParsedCall(
            call=ToolCall(id=call_id, name=name, arguments={}),
            error=ToolError.of(
                ErrorCode.INVALID_ARGUMENTS,
                f"the arguments of {name!r} are not valid JSON: {exc}",
                suggestion="Send the arguments as one JSON object matching the tool's schema.",
                details={"errors": [{"path": "$", "message": "not valid JSON"}]},
            ),
        )
    if not isinstance(arguments, dict):
        return ParsedCall(
            call=ToolCall(id=call_id, name=name, arguments={}),
            error=ToolError.of(
                ErrorCode.INVALID_ARGUMENTS,
                f"the arguments of {name!r} must be a JSON object, not {type(arguments).__name__}",
                details={"errors": [{"path": "$", "message": "must be an object"}]},
            ),
        )
    if too_deep(arguments):
        return _too_deep_call(call_id, name)
    return ParsedCall(call=ToolCall(id=call_id, name=name, arguments=arguments))


def _too_deep_call(call_id: str, name: str) -> ParsedCall:
    return ParsedCall(
        call=ToolCall(id=call_id, name=name, arguments={}),
        error=ToolError.of(
            ErrorCode.INVALID_ARGUMENTS,
            f"the arguments of {shorten(name, 80)!r} are nested deeper than "
            f"{MAX_ARGUMENT_DEPTH} levels",
            suggestion="Send flatter arguments matching the tool's schema.",
            details={"errors": [{"path": "$", "message": "nested too deeply"}]},
        ),
    )


def _entries(value: Any, what: str) -> list[Any]:
    """The entries of a response list (plain dicts); text or nothing has none."""
    if value is None or isinstance(value, str):  # a text-only content, or no calls at all
        return []
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    raise ValueError(f"{what} must be a list, not {type(value).__name__}")


def _ident(value: Any) -> str:
    """A call id or tool name as text (a malformed response may send null or a number)."""
    return "" if value is None else str(value)


def parse_tool_calls(format: str, response: Any) -> list[ParsedCall]:
    """The tool calls in a provider response (a ChatCompletion, a Response, a Message, ...).

    Also accepts the assistant message alone (chat completions), the ``output`` list (responses)
    or the ``content`` list (anthropic). A response of another shape (a tool call that is not an
    object, say) raises :class:`ValueError` saying what is wrong, never ``AttributeError``.
    """
    data = _plain(response)
    calls: list[ParsedCall] = []
    if format == "openai":
        message = data
        if isinstance(data, Mapping) and "choices" in data:
            choices = _entries(data["choices"], "openai response: choices")
            first = choices[0] if choices else {}
            if not isinstance(first, Mapping):
                raise ValueError(
                    f"openai response: choice 0 is a {type(first).__name__}, not an object"
                )
            message = _plain(first.get("message"))
        if message is None:
            return calls
        if not isinstance(message, Mapping):
            raise ValueError(
                "openai response: expected a ChatCompletion, its message or a dict of the same "
                f"shape, not {type(message).__name__}"
            )
        for n, item in enumerate(_entries(message.get("tool_calls"), "openai: tool_calls")):
            if not isinstance(item, Mapping):
                raise ValueError(
                    f"openai response: tool call {n} is a {type(item).__name__}, not an object"
                )
            function = _plain(item.get("function"))
            function = function if isinstance(function, Mapping) else {}
            calls.append(
                _parse_arguments(
                    _ident(item.get("id")), _ident(function.get("name")),
                    function.get("arguments"),
                )
            )
        return calls
    if format == "openai-responses":
        output = data.get("output") if isinstance(data, Mapping) else data
        for item in _entries(output, "openai-responses response: output"):
            # Entries that are not objects are no function calls (nothing to answer).
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                calls.append(
                    _parse_arguments(
                        _ident(item.get("call_id") or item.get("id")),
                        _ident(item.get("name")),
                        item.get("arguments"),
                    )
                )
        return calls
    if format == "anthropic":
        content = data.get("content") if isinstance(data, Mapping) else data
        for block in _entries(content, "anthropic response: content"):
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                calls.append(
                    _parse_arguments(
                        _ident(block.get("id")), _ident(block.get("name")), block.get("input")
                    )
                )
        return calls
    raise ValueError(
        f"parsing tool calls is supported for openai, openai-responses, anthropic; not {format!r}"
    )


# ---------------------------------------------------------------------- results


def result_payload(result: ToolResult) -> dict[str, Any]:
    """The JSON a model reads for a result: data on success, the structured error otherwise."""
    if result.success:
        payload: dict[str, Any] = {"ok": True, "data": result.data}
    else:
        assert result.error is not None
        error = {
            k: v
            for k, v in converter.unstructure(result.error).items()
            if v not in (None, {}, []) and k != "plugin"
        }
        payload = {"ok": False, "error": error}
    if result.metadata.get("cached"):
        payload["cached"] = True
    return payload


#: A lone UTF-16 surrogate: a Python ``str`` may hold one (a file name read with
#: ``surrogateescape``, a ``"\\ud800"`` escape in the model's own JSON), UTF-8 cannot.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def utf8_json(text: str) -> str:
    """JSON text (written with ``ensure_ascii=False``) that encodes as UTF-8.

    A lone surrogate in a result made the text every provider SDK sends (httpx and pydantic
    encode the request body as strict UTF-8) raise ``UnicodeEncodeError``, ending the agent's
    run. Outside JSON's string literals every character is ASCII, so each surrogate is written
    as its ``\\uXXXX`` escape: the same JSON value, now encodable.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def _text(result: ToolResult) -> str:
    return _dumps(result_payload(result))


def _dumps(payload: Any) -> str:
    return utf8_json(json.dumps(payload, ensure_ascii=False, default=str))


def _split(result: ToolResult) -> tuple[dict[str, Any], list[Mapping[str, Any]], str]:
    """The payload the model reads (content blocks as placeholders), the blocks, its text."""
    payload = result_payload(result)
    text = _dumps(payload)
    if f'"{CONTENT_KEY}"' not in text:  # no block anywhere: no walk over the data
        return payload, [], text
    placeheld, blocks = split_blocks(payload)
    return placeheld, blocks, (_dumps(placeheld) if blocks else text)


def result_messages(
    format: str, results: Sequence[tuple[ToolCall, ToolResult]]
) -> list[dict[str, Any]]:
    """The messages that hand results back to a provider, in call order.

    openai: one ``role: tool`` message per call; openai-responses: ``function_call_output``
    items; anthropic: one ``user`` message with a ``tool_result`` block per call; gemini: one
    ``user`` content with ``functionResponse`` parts; mcp: one ``CallToolResult`` per call.

    Content blocks in a result (images, audio, resources: :mod:`tooldeck_hookspecs.content`)
    go in each API's native shape: MCP content blocks; Anthropic ``image`` / ``document``
    blocks inside the ``tool_result``; Responses ``input_image`` / ``input_file`` parts of the
    output; Gemini ``inlineData`` parts; for Chat Completions, whose tool messages hold text
    only, one ``user`` message after the tool messages carries the images as ``image_url``
    parts. The JSON text keeps a placeholder (kind, type, size, block number) for each.
    """
    if format == "openai":
        messages: list[dict[str, Any]] = []
        attached: list[dict[str, Any]] = []
        for call, result in results:
            payload, blocks, text = _split(result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
            if blocks:
                attached.append(
                    {"type": "text", "text": f"Content returned by tool call {call.id} "
                     f"({call.name}), blocks 1-{len(blocks)}:"}
                )
                attached += [openai_part(b, n, responses=False) for n, b in enumerate(blocks, 1)]
        if attached:
            messages.append({"role": "user", "content": attached})
        return messages
    if format == "openai-responses":
        items = []
        for call, result in results:
            payload, blocks, text = _split(result)
            output: Any = text
            if blocks:
                output = [{"type": "input_text", "text": output}] + [
                    openai_part(b, n, responses=True) for n, b in enumerate(blocks, 1)
                ]
            items.append({"type": "function_call_output", "call_id": call.id, "output": output})
        return items
    if format == "anthropic":
        out_blocks = []
        for call, result in results:
            payload, blocks, text = _split(result)
            content: Any = text
            if blocks:
                content = [{"type": "text", "text": content}] + [
                    anthropic_block(b, n) for n, b in enumerate(blocks, 1)
                ]
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": call.id,
                "content": content,
            }
            if not result.success:
                block["is_error"] = True
            out_blocks.append(block)
        return [{"role": "user", "content": out_blocks}] if out_blocks else []
    if format == "gemini":
        parts: list[dict[str, Any]] = []
        extra: list[dict[str, Any]] = []
        for call, result in results:
            payload, blocks, text = _split(result)
            parts.append({"functionResponse": {"name": call.name, "response": payload}})
            extra += [gemini_part(b, n) for n, b in enumerate(blocks, 1)]
        parts += extra
        return [{"role": "user", "parts": parts}] if parts else []
    if format == "mcp":
        out = []
        for _call, result in results:
            payload, blocks, text = _split(result)
            out.append(
                {
                    "content": [{"type": "text", "text": text}]
                    + [mcp_block(b) for b in blocks],
                    "structuredContent": payload,
                    "isError": not result.success,
                }
            )
        return out
    raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
