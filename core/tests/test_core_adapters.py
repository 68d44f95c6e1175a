"""Provider adapters checked against the official SDK types (no network)."""

from __future__ import annotations

import json

import pydantic
import pytest

from tooldeck import (
    ErrorCode,
    RateLimit,
    SecurityConfig,
    ToolCall,
    ToolDefinition,
    ToolResult,
)
from tooldeck.adapters import (
    FORMATS,
    export_tools,
    gemini_schema,
    parse_tool_calls,
    result_messages,
)

TOOLS = [
    ToolDefinition(
        name="file_read",
        description="Read a text file.",
        category="filesystem",
        parameters={
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "relative path"},
                "encoding": {"type": ["string", "null"], "enum": ["utf-8", "latin-1", None]},
                "lines": {"type": "array", "items": {"type": "integer"}, "examples": [[1, 2]]},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    ToolDefinition(
        name="shell_exec",
        description="Run a command.",
        category="shell",
        security=SecurityConfig(level="dangerous", rate_limit=RateLimit(max_calls=5)),
    ),
]


def test_openai_chat_tool_shape_matches_sdk():
    from openai.types.chat import ChatCompletionFunctionTool, ChatCompletionFunctionToolParam

    exported = export_tools(TOOLS, "openai")
    for item in exported:
        model = ChatCompletionFunctionTool.model_validate(item)
        assert model.function.name == item["function"]["name"]
        pydantic.TypeAdapter(ChatCompletionFunctionToolParam).validate_python(item)
        assert set(item) <= set(ChatCompletionFunctionToolParam.__annotations__)


def test_openai_responses_tool_shape_matches_sdk():
    from openai.types.responses import FunctionTool

    for item in export_tools(TOOLS, "openai-responses"):
        model = FunctionTool.model_validate(item)
        assert model.type == "function" and model.parameters == item["parameters"]


def test_anthropic_tool_shape_matches_sdk():
    from anthropic.types import ToolParam

    for item in export_tools(TOOLS, "anthropic"):
        pydantic.TypeAdapter(ToolParam).validate_python(item)
        assert set(item) <= set(ToolParam.__annotations__)
        assert item["input_schema"]["type"] == "object"


def test_mcp_tool_shape_and_annotations():
    from mcp.types import Tool

    exported = {t["name"]: t for t in export_tools(TOOLS, "mcp")}
    read = Tool.model_validate(exported["file_read"])
    shell = Tool.model_validate(exported["shell_exec"])
    assert read.annotations.read_only_hint is True and read.annotations.destructive_hint is False
    assert shell.annotations.destructive_hint is True and shell.annotations.read_only_hint is False


def test_gemini_declaration_accepted_by_sdk_and_sanitized():
    from google.genai import types

    declarations = export_tools(TOOLS, "gemini")
    for item in declarations:
        types.FunctionDeclaration.model_validate(item)
    schema = declarations[0]["parameters"]
    assert "$schema" not in schema and "additionalProperties" not in schema
    assert schema["properties"]["encoding"]["nullable"] is True
    assert "examples" not in schema["properties"]["lines"]
    # A tool without parameters has no parameters key (Gemini rejects an empty object schema).
    assert "parameters" not in declarations[1]


def test_gemini_schema_const_and_numeric_enum():
    # The value keeps its type: typed as a string, the model would send "3", which the deck
    # refuses against the tool's own schema.
    assert gemini_schema({"const": 3}) == {"type": "integer", "format": "enum", "enum": ["3"]}


def test_unknown_format_is_a_clear_error():
    with pytest.raises(ValueError, match="expected one of"):
        export_tools(TOOLS, "cohere")
    assert set(FORMATS) == {"openai", "openai-responses", "anthropic", "mcp", "gemini"}


def _chat_completion(arguments: str):
    from openai.types.chat import ChatCompletion

    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "file_read", "arguments": arguments},
                            },
                            {
                                "id": "call_2",
                                "type": "function",
                                "function": {"name": "shell_exec", "arguments": "{}"},
                            },
                        ],
                    },
                }
            ],
        }
    )


def test_parse_openai_chat_completion():
    parsed = parse_tool_calls("openai", _chat_completion('{"path": "a.txt"}'))
    assert [p.call.id for p in parsed] == ["call_1", "call_2"]
    assert parsed[0].call.arguments == {"path": "a.txt"} and parsed[0].error is None


@pytest.mark.parametrize("bad", ['{"path": ', "[1, 2]", "not json", '"str"'])
def test_parse_invalid_json_arguments_is_invalid_arguments_not_exception(bad):
    parsed = parse_tool_calls("openai", _chat_completion(bad))
    assert parsed[0].error is not None
    assert parsed[0].error.code is ErrorCode.INVALID_ARGUMENTS
    assert parsed[0].error.suggestion
    assert parsed[1].error is None


def test_parse_openai_responses_output():
    from openai.types.responses import Response

    response = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "gpt-test",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_9",
                    "name": "file_read",
                    "arguments": '{"path": "x"}',
                    "status": "completed",
                }
            ],
        }
    )
    parsed = parse_tool_calls("openai-responses", response)
    assert parsed[0].call == ToolCall(id="call_9", name="file_read", arguments={"path": "x"})


def test_parse_anthropic_message():
    from anthropic.types import Message

    message = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "content": [
                {"type": "text", "text": "reading"},
                {"type": "tool_use", "id": "toolu_1", "name": "file_read", "input": {"path": "y"}},
            ],
        }
    )
    parsed = parse_tool_calls("anthropic", message)
    assert len(parsed) == 1 and parsed[0].call.arguments == {"path": "y"}


def _results():
    return [
        (ToolCall(id="call_1", name="file_read"), ToolResult.ok({"content": "hi"})),
        (
            ToolCall(id="call_2", name="shell_exec"),
            ToolResult.fail(ErrorCode.PERMISSION_DENIED, "no"),
        ),
    ]


def test_openai_result_messages_match_sdk():
    from openai.types.chat import ChatCompletionToolMessageParam

    messages = result_messages("openai", _results())
    for message in messages:
        pydantic.TypeAdapter(ChatCompletionToolMessageParam).validate_python(message)
    assert json.loads(messages[1]["content"])["error"]["code"] == "PERMISSION_DENIED"


def test_openai_responses_result_items_match_sdk():
    from openai.types.responses.response_input_item_param import FunctionCallOutput

    for item in result_messages("openai-responses", _results()):
        pydantic.TypeAdapter(FunctionCallOutput).validate_python(item)


def test_anthropic_result_message_matches_sdk():
    from anthropic.types import MessageParam

    (message,) = result_messages("anthropic", _results())
    pydantic.TypeAdapter(MessageParam).validate_python(message)
    assert message["content"][1]["is_error"] is True
    assert "is_error" not in message["content"][0]


def test_mcp_and_gemini_result_messages_match_sdk():
    from google.genai import types
    from mcp.types import CallToolResult

    for item in result_messages("mcp", _results()):
        CallToolResult.model_validate(item)
    (content,) = result_messages("gemini", _results())
    types.Content.model_validate(content)
