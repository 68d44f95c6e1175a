"""Provider adapters: tool schemas out, tool calls in, tool-result messages back.

Formats: ``openai`` (chat completions), ``openai-responses``, ``anthropic``, ``mcp``, ``gemini``.
Responses may be the official SDK objects (pydantic models) or plain dicts of the same shape.
A call whose arguments are not valid JSON is returned as a :class:`ParsedCall` with an
``INVALID_ARGUMENTS`` error, never raised.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import cattrs

from tooldeck_hookspecs import (
    ErrorCode,
    SecurityLevel,
    ToolCall,
    ToolDefinition,
    ToolError,
    ToolResult,
)
from tooldeck_hookspecs.content import CONTENT_KEY

from ._content import anthropic_block, gemini_part, mcp_block, openai_part, split_blocks
from ._normalise import MAX_ARGUMENT_DEPTH, shorten, too_deep

__all__ = [
    "FORMATS",
    "ParsedCall",
    "export_tools",
    "export_tool",
    "parse_tool_calls",
    "result_messages",
    "result_payload",
    "gemini_schema",
    "converter",
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
        "parameters": tool.parameters,
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


# Keys the Gemini function-declaration schema (an OpenAPI 3.0 subset) accepts.
_GEMINI_KEYS = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "properties",
    "required",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
    "propertyOrdering",
    "default",
}


def gemini_schema(schema: Any) -> Any:
    """Reduce a JSON Schema to what Gemini's function declarations accept.

    Drops keys it rejects (``$schema``, ``additionalProperties``, ``examples``, ``x-*``), turns
    ``type: [X, "null"]`` into ``nullable``, and ``const`` into a one-value ``enum``.
    """
    if isinstance(schema, list):
        return [gemini_schema(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, Mapping):
            out[key] = {name: gemini_schema(sub) for name, sub in value.items()}
        elif key == "items":
            out[key] = gemini_schema(value)
        elif key == "anyOf":
            out[key] = [gemini_schema(s) for s in value]
        elif key == "type" and isinstance(value, list):
            kinds = [k for k in value if k != "null"]
            out["type"] = kinds[0] if len(kinds) == 1 else "string"
            if "null" in value:
                out["nullable"] = True
        elif key == "const":
            out["enum"] = [str(value)]
            out.setdefault("type", "string")
        elif key == "enum":
            # Gemini enums are strings.
            out[key] = [str(v) for v in value]
            out.setdefault("type", "string")
        elif key in _GEMINI_KEYS:
            out[key] = value
    if out.get("enum") and out.get("type") not in (None, "string"):
        out["type"] = "string"
    return out


def _mcp_annotations(tool: ToolDefinition) -> dict[str, Any]:
    level = tool.security.level
    return {
        "title": tool.name.replace("_", " "),
        "readOnlyHint": level is SecurityLevel.SAFE,
        "destructiveHint": level is SecurityLevel.DANGEROUS,
        "idempotentHint": tool.execution.cacheable,
        "openWorldHint": tool.security.network or bool(tool.security.url_params),
    }


def export_tool(tool: ToolDefinition, format: str) -> dict[str, Any]:
    """One tool's schema in a provider's format."""
    parameters = dict(tool.parameters)
    if format == "openai":
        return {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": parameters,
            },
        }
    if format == "openai-responses":
        return {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": parameters,
            "strict": False,
        }
    if format == "anthropic":
        return {"name": tool.name, "description": tool.description, "input_schema": parameters}
    if format == "mcp":
        return {
            "name": tool.name,
            "title": tool.name.replace("_", " "),
            "description": tool.description,
            "inputSchema": parameters,
            "annotations": _mcp_annotations(tool),
        }
    if format == "gemini":
        declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
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


def parse_tool_calls(format: str, response: Any) -> list[ParsedCall]:
    """The tool calls in a provider response (a ChatCompletion, a Response, a Message, ...).

    Also accepts the assistant message alone (chat completions), the ``output`` list (responses)
    or the ``content`` list (anthropic).
    """
    data = _plain(response)
    calls: list[ParsedCall] = []
    if format == "openai":
        message = data
        if isinstance(data, Mapping) and "choices" in data:
            message = data["choices"][0]["message"] if data["choices"] else {}
        for item in (message or {}).get("tool_calls") or []:
            item = _plain(item)
            function = item.get("function") or {}
            calls.append(
                _parse_arguments(
                    item.get("id", ""), function.get("name", ""), function.get("arguments")
                )
            )
        return calls
    if format == "openai-responses":
        output = data.get("output", []) if isinstance(data, Mapping) else data
        for item in output or []:
            item = _plain(item)
            if item.get("type") == "function_call":
                calls.append(
                    _parse_arguments(
                        item.get("call_id") or item.get("id", ""),
                        item.get("name", ""),
                        item.get("arguments"),
                    )
                )
        return calls
    if format == "anthropic":
        content = data.get("content", []) if isinstance(data, Mapping) else data
        for block in content or []:
            block = _plain(block)
            if block.get("type") == "tool_use":
                calls.append(
                    _parse_arguments(block.get("id", ""), block.get("name", ""), block.get("input"))
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


def _text(result: ToolResult) -> str:
    return json.dumps(result_payload(result), ensure_ascii=False, default=str)


def _dumps(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, default=str)


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
