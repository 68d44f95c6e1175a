"""A model's argument JSON is bounded before it is parsed, and parsed off the deck's loop.

``Session.run_tool_calls`` parsed each call's argument text with ``json.loads`` on the loop
before any size check: a million keys in 9 MB held it (and every other session) ~0.8-4 s, in
one C call. Now a text with more JSON values than the deck's item cap is refused unread, with
INVALID_ARGUMENTS for that call only, and a response is parsed in a worker thread. Every parser
of model output shares the bound: ``parse_tool_calls`` for each provider format and the OpenAI
Agents integration.
"""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import pytest
import trio

import tooldeck.adapters as adapters
from tooldeck import tool
from tooldeck._normalise import MAX_ARGUMENT_ITEMS
from tooldeck.adapters import parse_tool_calls
from tooldeck.testing import make_deck
from tooldeck_hookspecs import json_values


@tool(category="work")
def echo(value: int) -> int:
    """Echo a number.

    Args:
        value: the number
    """
    return value


def _many_keys(n: int) -> str:
    return "{" + ",".join(f'"k{i}":{i}' for i in range(n)) + "}"


def _response(format: str, arguments: Any) -> Any:
    calls = [("c1", "echo", arguments), ("c2", "echo", '{"value": 5}')]
    if format == "openai":
        return {"choices": [{"message": {"tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]}}]}
    if format == "openai-responses":
        return {"output": [
            {"type": "function_call", "call_id": i, "name": n, "arguments": a} for i, n, a in calls
        ]}
    return {"content": [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]}


@pytest.fixture
def loads_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the texts json.loads parsed in the adapters."""
    seen: list[int] = []
    real = json.loads

    def spying(text: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(adapters.json, "loads", spying)
    return seen


@pytest.mark.parametrize("format", ["openai", "openai-responses", "anthropic"])
@pytest.mark.parametrize("text", [
    _many_keys(MAX_ARGUMENT_ITEMS + 1),
    "[" + "[]," * MAX_ARGUMENT_ITEMS + "[]]",
    '{"a": [' + ",".join(["{}"] * (MAX_ARGUMENT_ITEMS + 5)) + "]}",
], ids=["keys", "empty-arrays", "empty-objects"])
def test_too_many_values_are_refused_unread(
    format: str, text: str, loads_calls: list[int]
) -> None:
    first, second = parse_tool_calls(format, _response(format, text))
    assert first.error is not None and first.error.code == "INVALID_ARGUMENTS"
    assert f"more than {MAX_ARGUMENT_ITEMS:,} JSON values" in first.error.message
    assert first.error.details["errors"] == [{"path": "$", "message": "too many values"}]
    assert first.call.arguments == {} and first.call.id == "c1"
    assert second.error is None and second.call.arguments == {"value": 5}
    assert len(text) not in loads_calls  # never parsed


def test_bytes_arguments_are_bounded_too(loads_calls: list[int]) -> None:
    raw = _many_keys(MAX_ARGUMENT_ITEMS + 1).encode()
    (parsed,) = parse_tool_calls("openai-responses", {"output": [
        {"type": "function_call", "call_id": "c", "name": "echo", "arguments": raw}
    ]})
    assert parsed.error is not None and "JSON values" in parsed.error.message
    assert not loads_calls


def test_values_within_the_cap_parse_as_before() -> None:
    """Commas, braces and brackets inside strings are not values: a text of a few values with
    long strings full of them parses as json.loads does."""
    arguments = {"text": "{[,]}" * (MAX_ARGUMENT_ITEMS * 2), "n": [1, 2, {"a": []}]}
    (parsed,) = parse_tool_calls("openai", {"tool_calls": [
        {"id": "c", "function": {"name": "echo", "arguments": json.dumps(arguments)}}
    ]})
    assert parsed.error is None and parsed.call.arguments == arguments
    (at_cap,) = parse_tool_calls("openai", {"tool_calls": [
        {"id": "c", "function": {"name": "echo", "arguments": _many_keys(MAX_ARGUMENT_ITEMS)}}
    ]})
    assert at_cap.error is None and len(at_cap.call.arguments) == MAX_ARGUMENT_ITEMS


def test_the_count_is_never_below_the_items_json_holds() -> None:
    """What makes the refusal safe: json_values counts at least the items that the deck's own
    cap counts after parsing (each object or array adds one per item, one when empty)."""
    rng = random.Random(47)

    def value(depth: int) -> Any:
        roll = rng.random()
        if depth > 4 or roll < 0.4:
            return rng.choice([1, "a,[{", "", None, 2.5, '"\\', "\u00e9"])
        if roll < 0.7:
            return [value(depth + 1) for _ in range(rng.randrange(0, 5))]
        return {f"k{i},{{": value(depth + 1) for i in range(rng.randrange(0, 5))}

    def items(v: Any) -> int:
        if isinstance(v, dict):
            return len(v) + sum(items(x) for x in v.values())
        if isinstance(v, list):
            return len(v) + sum(items(x) for x in v)
        return 0

    checked = 0
    for _ in range(3000):
        v = value(0)
        text = json.dumps(v, ensure_ascii=rng.random() < 0.5)
        limit = items(v) - 1
        if limit < 0:
            continue
        # Under a limit of one less than its items, the text is always found over it (so a
        # text that passes holds at most `limit` items), whether read as text or as bytes.
        count = json_values(text, limit)
        assert count > limit
        assert json_values(text.encode(), limit) == count
        assert json_values(bytearray(text.encode()), limit) == count
        checked += 1
    assert checked > 1000


def test_the_openai_agents_integration_shares_the_bound(loads_calls: list[int]) -> None:
    from tooldeck.integrations.openai_agents import _arguments

    answer = _arguments("echo", _many_keys(MAX_ARGUMENT_ITEMS + 1))
    assert not isinstance(answer, dict)
    assert answer.error is not None and "JSON values" in answer.error.message
    assert not loads_calls


def _threads_running(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str
) -> list[threading.Thread]:
    """The threads ``module.name`` runs in from now on (one entry a call)."""
    threads: list[threading.Thread] = []
    real = getattr(module, name)

    def recording(*args: Any) -> Any:
        threads.append(threading.current_thread())
        return real(*args)

    monkeypatch.setattr(module, name, recording)
    return threads


async def test_run_tool_calls_refuses_one_call_runs_the_others_and_parses_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads = _threads_running(monkeypatch, adapters, "parse_tool_calls")
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[echo])
    async with deck:
        session = deck.session()
        messages = await session.run_tool_calls(
            "openai", _response("openai", _many_keys(MAX_ARGUMENT_ITEMS + 1))
        )
        loop_thread = threading.current_thread()
        await trio.lowlevel.checkpoint()
    first, second = (json.loads(m["content"]) for m in messages)
    assert first["error"]["code"] == "INVALID_ARGUMENTS"
    assert "JSON values" in first["error"]["message"]
    assert second == {"ok": True, "data": 5}
    assert threads and all(t is not loop_thread for t in threads)


@tool(category="work", security={"level": "dangerous"})
def launch(text: str) -> int:
    """Launch (dangerous: asks).

    Args:
        text: the text
    """
    return len(text)


@pytest.mark.parametrize("text", ["short \ud800", "\ud800" * 200_000])
async def test_an_integration_finds_a_pending_approval_comparing_big_arguments_off_the_loop(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """The framework bridges match a re-run call to its pending approval by canonical JSON
    (linear in the arguments): on the loop for small arguments, in a worker thread for big."""
    from tooldeck.integrations import _bridge
    from tooldeck_hookspecs import ToolCall

    threads = _threads_running(monkeypatch, _bridge, "_same_call")
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[launch])
    async with deck:
        session = deck.session()
        asked = await session.call("launch", {"text": text}, call_id="c1")
        assert asked.error is not None and asked.error.code == "CONFIRMATION_REQUIRED"
        call = ToolCall(name="launch", arguments={"text": text}, id="c1")
        found = await _bridge.pending_flow(session, _bridge.ApprovalBook(), call)
        other = ToolCall(name="launch", arguments={"text": text + "!"}, id="c1")
        missed = await _bridge.pending_flow(session, _bridge.ApprovalBook(), other)
        loop_thread = threading.current_thread()
    assert found == asked.error.details["approval_id"] and missed is None
    on_loop = [t is loop_thread for t in threads]
    assert on_loop and all(on_loop) == (len(text) < 1000) and any(on_loop) == (len(text) < 1000)
