"""Agent round trips: a provider response in, executed calls, the provider's result messages out."""

from __future__ import annotations

import json

import pydantic
import trio

from tooldeck import tool
from tooldeck.testing import make_deck

arrived = {"count": 0}
both_here = trio.Event()


@tool(category="demo")
async def rendezvous(label: str) -> str:
    """Wait until two calls are in flight at once (proves parallel calls run concurrently)."""
    arrived["count"] += 1
    if arrived["count"] >= 2:
        both_here.set()
    await both_here.wait()
    return f"met:{label}"


@tool(category="demo")
def echo(text: str) -> str:
    """Echo the text."""
    return text


def _deck():
    return make_deck(load_entry_points=["schema", "runner"], tools=[rendezvous, echo])


async def test_openai_chat_round_trip_runs_parallel_calls_concurrently():
    from openai.types.chat import ChatCompletion, ChatCompletionToolMessageParam

    arrived["count"] = 0
    response = ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "a",
                                "type": "function",
                                "function": {"name": "rendezvous", "arguments": '{"label": "a"}'},
                            },
                            {
                                "id": "b",
                                "type": "function",
                                "function": {"name": "rendezvous", "arguments": '{"label": "b"}'},
                            },
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "echo", "arguments": '{"text": '},
                            },
                        ],
                    },
                }
            ],
        }
    )
    async with _deck() as deck:
        with trio.fail_after(10):  # sequential execution would wait forever
            messages = await deck.session().run_tool_calls("openai", response)
    assert [m["tool_call_id"] for m in messages] == ["a", "b", "c"]
    for message in messages:
        pydantic.TypeAdapter(ChatCompletionToolMessageParam).validate_python(message)
    assert json.loads(messages[0]["content"])["data"] == "met:a"
    assert json.loads(messages[2]["content"])["error"]["code"] == "INVALID_ARGUMENTS"


async def test_anthropic_round_trip():
    from anthropic.types import Message, MessageParam

    message = Message.model_validate(
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "content": [
                {"type": "tool_use", "id": "t1", "name": "echo", "input": {"text": "hi"}},
                {"type": "tool_use", "id": "t2", "name": "nope", "input": {}},
            ],
        }
    )
    async with _deck() as deck:
        (reply,) = await deck.session().run_tool_calls("anthropic", message)
    pydantic.TypeAdapter(MessageParam).validate_python(reply)
    first, second = reply["content"]
    assert json.loads(first["content"])["data"] == "hi" and "is_error" not in first
    assert second["is_error"] is True
    assert json.loads(second["content"])["error"]["code"] == "TOOL_NOT_FOUND"


async def test_openai_responses_round_trip():
    from openai.types.responses import Response
    from openai.types.responses.response_input_item_param import FunctionCallOutput

    response = Response.model_validate(
        {
            "id": "r",
            "object": "response",
            "created_at": 0,
            "model": "m",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "function_call",
                    "id": "fc",
                    "call_id": "k1",
                    "name": "echo",
                    "arguments": '{"text": "yo"}',
                    "status": "completed",
                }
            ],
        }
    )
    async with _deck() as deck:
        (item,) = await deck.session().run_tool_calls("openai-responses", response)
    pydantic.TypeAdapter(FunctionCallOutput).validate_python(item)
    assert item["call_id"] == "k1" and json.loads(item["output"])["data"] == "yo"
