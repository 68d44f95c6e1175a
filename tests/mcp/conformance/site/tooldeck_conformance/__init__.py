"""The reference tools of the official MCP conformance suite, as a tooldeck tool pack.

``@modelcontextprotocol/conformance`` calls tools by fixed names (``test_simple_text``,
``test_image_content``, ...) and checks what comes back; this pack implements them with the
ordinary tooldeck means (content objects, ``ToolContext.emit``, ``ToolContext.logger``) and, for
sampling and elicitation, :func:`tooldeck_mcp.server.current_client`.

It is not packaged: ``tests/mcp/conformance/site`` holds this module and a ``.dist-info`` whose
entry point (group ``tooldeck``, name ``conformance``) makes ``tooldeck serve mcp`` load it when
that directory is on ``PYTHONPATH`` (``importlib.metadata`` finds distributions on ``sys.path``).
"""

from __future__ import annotations

import io
import json
import wave
from collections.abc import Mapping
from typing import Any

import trio
from tooldeck_mcp.server import current_client

from tooldeck_hookspecs import (
    ExecutionConfig,
    RegisterFn,
    SecurityConfig,
    SecurityLevel,
    ToolContext,
    ToolDefinition,
    hookimpl,
)
from tooldeck_hookspecs.content import Audio, Image, Resource

__all__ = ["TOOLS", "tooldeck_register_tools"]

#: A 1x1 red pixel.
RED_PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
)


def _silence_wav() -> bytes:
    """A tenth of a second of silence, 8 kHz mono 16-bit."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00" * 800)
    return buffer.getvalue()


SILENCE_WAV = _silence_wav()

_NO_ARGS: Mapping[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def simple_text(arguments: Mapping[str, Any], context: ToolContext) -> str:
    return "This is a simple text response for testing."


def image_content(arguments: Mapping[str, Any], context: ToolContext) -> list[Any]:
    return [Image(RED_PIXEL_PNG, "image/png")]


def audio_content(arguments: Mapping[str, Any], context: ToolContext) -> list[Any]:
    return [Audio(SILENCE_WAV, "audio/wav")]


def embedded_resource(arguments: Mapping[str, Any], context: ToolContext) -> list[Any]:
    return [Resource("test://embedded-resource", text="This is an embedded resource content.",
                     mime_type="text/plain")]


def multiple_content_types(arguments: Mapping[str, Any], context: ToolContext) -> list[Any]:
    return [
        "Multiple content types test:",
        Image(RED_PIXEL_PNG, "image/png"),
        Resource("test://mixed-content-resource", text=json.dumps({"test": "data", "value": 123}),
                 mime_type="application/json"),
    ]


async def tool_with_logging(arguments: Mapping[str, Any], context: ToolContext) -> str:
    logger = context.logger
    assert logger is not None  # the deck always gives one
    logger.info("Tool execution started")
    await trio.sleep(0.05)
    logger.info("Tool processing data")
    await trio.sleep(0.05)
    logger.info("Tool execution completed")
    return "Tool with logging executed successfully"


async def tool_with_progress(arguments: Mapping[str, Any], context: ToolContext) -> str:
    for step, value in enumerate((0, 50, 100)):
        if step:
            await trio.sleep(0.05)
        context.emit({"progress": value, "total": 100, "message": f"{value}% done"})
    return "Tool with progress executed successfully"


def error_handling(arguments: Mapping[str, Any], context: ToolContext) -> str:
    raise RuntimeError("This tool intentionally returns an error for testing")


async def sampling(arguments: Mapping[str, Any], context: ToolContext) -> str:
    client = current_client()
    if client is None or not client.can_sample:
        raise RuntimeError("this tool needs an MCP client that supports sampling")
    reply = await client.sample(str(arguments["prompt"]), max_tokens=100)
    return f"LLM response: {reply}"


async def _elicit(message: str, schema: Mapping[str, Any], label: str) -> str:
    client = current_client()
    if client is None or not client.can_elicit:
        raise RuntimeError("this tool needs an MCP client that supports elicitation")
    action, content = await client.elicit(message, schema)
    return f"{label}: action={action}, content={json.dumps(content)}"


async def elicitation(arguments: Mapping[str, Any], context: ToolContext) -> str:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    return await _elicit(str(arguments["message"]), schema, "User response")


async def elicitation_sep1034_defaults(arguments: Mapping[str, Any], context: ToolContext) -> str:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"],
                       "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    }
    return await _elicit("Please review your details", schema, "Elicitation completed")


async def elicitation_sep1330_enums(arguments: Mapping[str, Any], context: ToolContext) -> str:
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ]},
            "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                           "enumNames": ["Option One", "Option Two", "Option Three"]},
            "untitledMulti": {"type": "array", "items": {
                "type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "items": {"anyOf": [
                {"const": "value1", "title": "First Choice"},
                {"const": "value2", "title": "Second Choice"},
                {"const": "value3", "title": "Third Choice"},
            ]}},
        },
    }
    return await _elicit("Please choose", schema, "Elicitation completed")


def json_schema_2020_12(arguments: Mapping[str, Any], context: ToolContext) -> str:
    return f"Received: {json.dumps(dict(arguments), sort_keys=True)}"


def reconnection(arguments: Mapping[str, Any], context: ToolContext) -> str:
    # SEP-1699 wants the server to close the SSE stream mid-call and resume after the client
    # reconnects (needs an event store); tooldeck answers on the open stream.
    return "Reconnection test completed"


def _tool(name: str, description: str, execute: Any,
          parameters: Mapping[str, Any] = _NO_ARGS) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        version="1.0.0",
        category="conformance",
        description=description,
        parameters=parameters,
        security=SecurityConfig(level=SecurityLevel.SAFE),
        # Every call must run: a cached answer would send no logs, progress or requests.
        execution=ExecutionConfig(timeout_s=30.0, cacheable=False),
        execute=execute,
        call_style="mapping",
        tags=("conformance", "test"),
    )


def _string_arg(name: str, description: str) -> Mapping[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": description}},
        "required": [name],
    }


TOOLS: tuple[ToolDefinition, ...] = (
    _tool("test_simple_text", "Returns a simple text response.", simple_text),
    _tool("test_image_content", "Returns a 1x1 red PNG image.", image_content),
    _tool("test_audio_content", "Returns a short WAV clip of silence.", audio_content),
    _tool("test_embedded_resource", "Returns an embedded text resource.", embedded_resource),
    _tool("test_multiple_content_types", "Returns text, an image and a resource.",
          multiple_content_types),
    _tool("test_tool_with_logging", "Logs three info messages while it runs.", tool_with_logging),
    _tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100.",
          tool_with_progress),
    _tool("test_error_handling", "Always fails, to test error reporting.", error_handling),
    _tool("test_sampling", "Asks the client's model to answer a prompt (sampling).", sampling,
          _string_arg("prompt", "The prompt to send to the LLM")),
    _tool("test_elicitation", "Asks the client's user for a username and email.", elicitation,
          _string_arg("message", "The message to show the user")),
    _tool("test_elicitation_sep1034_defaults", "Asks the user with defaults for every type.",
          elicitation_sep1034_defaults),
    _tool("test_elicitation_sep1330_enums", "Asks the user with every enum schema variant.",
          elicitation_sep1330_enums),
    _tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features",
          json_schema_2020_12, {
              "$schema": "https://json-schema.org/draft/2020-12/schema",
              "type": "object",
              "$defs": {"address": {"type": "object", "properties": {
                  "street": {"type": "string"}, "city": {"type": "string"}}}},
              "properties": {"name": {"type": "string"},
                             "address": {"$ref": "#/$defs/address"}},
              "additionalProperties": False,
          }),
    _tool("test_reconnection", "Answers at once (SSE polling test tool).", reconnection),
)


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register the conformance suite's reference tools."""
    for definition in TOOLS:
        register(definition)
