"""Every failure is a ToolResult; cancellation means cancelled; nothing grows without bound.

Real tools on the real runner; misbehaving policy hooks and tools written the way they happen.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import json
import math
import uuid
from typing import Any

import pytest
import trio
import trio.testing

from tooldeck import Decision, ErrorCode, SecurityConfig, ToolCall, ToolDefinition, tool
from tooldeck.adapters import result_messages
from tooldeck.testing import inline_plugin, make_deck

STAGES = ["schema", "runner", "cache"]


@tool(category="demo", execution={"cacheable": True})
def echo(value: Any = None) -> Any:
    """Return the value.

    Args:
        value: anything
    """
    return value


def _wipe(target: str) -> str:
    return target


WIPE = ToolDefinition(
    name="wipe",
    description="Wipe a target.",
    category="shell",
    parameters={"type": "object", "properties": {"target": {"type": "string"}}},
    security=SecurityConfig(level="dangerous"),
    execute=_wipe,
    call_style="kwargs",
)


def _deck(*plugins, tools=(), **kw):
    return make_deck(*plugins, load_entry_points=STAGES, tools=[echo, WIPE, *tools], **kw)


# -- 7: garbage from a policy hook fails closed ---------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    ["allow", {"action": "allow"}, False, True, 0, ["deny"],
     Decision(action="DENY"), Decision(action="permit")],  # type: ignore[arg-type]
    ids=["str", "dict", "False", "True", "zero", "list", "DENY", "unknown-action"],
)
async def test_a_malformed_decision_is_a_plugin_error_naming_the_plugin(garbage):
    ran = []

    def tooldeck_authorize_call(call, tool, session):
        return garbage

    @tool(category="demo")
    def marker() -> str:
        """Leave a mark."""
        ran.append(1)
        return "ran"

    async with _deck(inline_plugin(tooldeck_authorize_call, name="sloppy"), tools=[marker]) as d:
        result = await d.session().call("marker", {})
    assert result.error is not None and result.error.code is ErrorCode.PLUGIN_ERROR
    assert "sloppy" in result.error.message
    assert ran == []


# -- 8: arguments nested deeper than anything needs ----------------------------------------


def _nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = {"a": [value]}
    return value


@pytest.mark.parametrize("name", ["echo", "wipe"])  # cacheable (cache key) and dangerous (hash)
async def test_deep_arguments_are_invalid_arguments_not_recursion_errors(name):
    async with _deck() as deck:
        key = "value" if name == "echo" else "target"
        result = await deck.session().call(name, {key: _nested(1_000)})
    assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGUMENTS
    assert "deeper" in result.error.message


async def test_moderately_nested_arguments_still_work():
    async with _deck() as deck:
        result = await deck.session().call("echo", {"value": _nested(10)})
    assert result.success and result.data == _nested(10)


# -- 9: BaseExceptions from a tool ------------------------------------------------------------


class Custom(BaseException):
    pass


@pytest.mark.parametrize(
    "exc", [asyncio.CancelledError(), SystemExit(3), Custom("odd"), GeneratorExit()],
    ids=["asyncio-cancelled", "system-exit", "custom", "generator-exit"],
)
@pytest.mark.parametrize("shape", ["sync", "async"])
async def test_a_tool_raising_a_base_exception_gives_an_execution_error(exc, shape):
    if shape == "sync":
        def boom() -> None:
            """Raise."""
            raise exc
    else:
        async def boom() -> None:  # type: ignore[misc]
            """Raise."""
            await trio.sleep(0)
            raise exc

    async with _deck(tools=[tool(category="demo")(boom)]) as deck:
        result = await deck.session().call("boom", {})
    assert result.error is not None and result.error.code is ErrorCode.EXECUTION_ERROR
    assert type(exc).__name__ in result.error.message


# -- 10: results that are not JSON ------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")

    __repr__ = __str__


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"\x00\xffbytes", {"$bytes_base64": "AP9ieXRlcw=="}),
        ({3, 1, 2}, [1, 2, 3]),
        ({(1, 2): "tuple key"}, {"(1, 2)": "tuple key"}),
        ({1: "int key"}, {"1": "int key"}),
        (math.nan, None),
        ([1.0, math.inf], [1.0, None]),
        ((1, "a"), [1, "a"]),
        (Unprintable(), "<unprintable Unprintable>"),
        (
            {"nested": {frozenset({"a"}): b"x"}},
            {"nested": {"frozenset({'a'})": {"$bytes_base64": "eA=="}}},
        ),
        # Nested values orjson can write but json.dumps cannot (or writes as NaN): converted
        # even inside an otherwise plain list or dict.
        (
            [datetime.datetime(2026, 1, 2, 3, 4, 5), uuid.UUID(int=1), Colour.RED, Point(1, 2)],
            ["2026-01-02T03:04:05", "00000000-0000-0000-0000-000000000001", "red",
             {"x": 1, "y": 2}],
        ),
        ({"when": datetime.date(2026, 1, 2), "pair": (1, 2)}, {"when": "2026-01-02",
                                                                "pair": [1, 2]}),
        ({"rows": [[1.5, math.nan], [2.5, -math.inf]]}, {"rows": [[1.5, None], [2.5, None]]}),
        ([{"k": [1, {"deep": math.nan}]}], [{"k": [1, {"deep": None}]}]),
    ],
    ids=["bytes", "set", "tuple-key", "int-key", "nan", "inf", "tuple", "bad-str", "nested",
         "nested-objects", "nested-date-tuple", "nested-nan", "deep-nan"],
)
async def test_results_are_plain_json_at_the_boundary(value, expected):
    @tool(category="demo")
    def odd() -> object:
        """Return something odd."""
        return value

    async with _deck(tools=[odd]) as deck:
        result = await deck.session().call("odd", {})
    assert result.success, result.error
    assert result.data == expected
    # Strict JSON all the way to the provider messages.
    json.dumps(result.data, allow_nan=False)
    call = ToolCall(name="odd", arguments={}, id="c1")
    for fmt in ("openai", "anthropic"):
        assert result_messages(fmt, [(call, result)])


# -- 11: error messages do not echo unbounded input -------------------------------------------


async def test_a_huge_unknown_tool_name_is_shortened():
    async with _deck() as deck:
        result = await deck.session().call("x" * 1_000_000, {})
    assert result.error.code is ErrorCode.TOOL_NOT_FOUND
    assert len(result.error.message) < 500 and "chars]" in result.error.message


# -- 12: cancellation means cancelled ---------------------------------------------------------


async def test_cancel_stops_calls_that_already_entered_call():
    """Calls inside call() but before their tool (here: stalled in a slow cache provider, the
    way a hung Redis stalls them) never start once cancel() has returned."""
    ran = []
    release = trio.Event()

    class StallingCache:
        async def get(self, key):
            await release.wait()
            return None

        async def put(self, key, result, ttl_s):
            return None

        async def invalidate(self, names):
            return None

    @tool(category="demo", execution={"cacheable": True})
    async def mark(i: int) -> int:
        """Record a run."""
        ran.append(i)
        await trio.sleep(0)
        return i

    deck = make_deck(
        inline_plugin(tooldeck_cache=lambda settings: StallingCache(), name="stall"),
        load_entry_points=["schema", "runner"],
        tools=[mark],
    )
    async with deck:
        session = deck.session()
        results: list = []

        async def one(i: int) -> None:
            results.append(await session.call("mark", {"i": i}))

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for i in range(100):
                    nursery.start_soon(one, i)
                await trio.testing.wait_all_tasks_blocked()
                session.cancel()
                release.set()
        # A new call after the cancel runs normally: cancel() is not a close.
        after = await session.call("mark", {"i": 999})
    assert len(results) == 100
    assert ran == [999] and after.success
    assert {r.error.code for r in results} == {ErrorCode.CANCELLED}
    assert all("did not run" in r.error.message for r in results)


async def test_a_call_waiting_for_confirmation_does_not_run_after_cancel_or_close():
    ran = []
    waiting = trio.Event()

    def _run(target: str) -> str:
        ran.append(target)
        return target

    tool_def = ToolDefinition(
        name="wipe2", description="Wipe.", category="shell",
        parameters={"type": "object", "properties": {"target": {"type": "string"}}},
        security=SecurityConfig(level="dangerous"), execute=_run, call_style="kwargs",
    )

    async def confirm(request):
        waiting.set()
        await trio.sleep(3600)
        return True

    for how in ("cancel", "aclose"):
        waiting = trio.Event()
        async with _deck(tools=[tool_def]) as deck:
            session = deck.session(confirm=confirm)
            outcome = []

            async def caller(session=session, outcome=outcome) -> None:
                outcome.append(await session.call("wipe2", {"target": "a"}))

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(caller)
                    await waiting.wait()
                    if how == "cancel":
                        session.cancel()
                    else:
                        await session.aclose()
        assert ran == [], how
        assert outcome[0].error.code is ErrorCode.CANCELLED, how


async def test_a_closed_session_runs_nothing():
    async with _deck() as deck:
        session = deck.session()
        await session.aclose()
        result = await session.call("echo", {"value": 1})
    assert result.error.code is ErrorCode.CANCELLED and "closed" in result.error.message


# -- 15: pending approvals expire -----------------------------------------------------------


async def test_pending_approvals_expire_from_the_session():
    async with _deck(config={"approvals": {"ttl_s": 0.05}}) as deck:
        session = deck.session()
        for i in range(300):
            await session.call("wipe", {"target": str(i)})
        await trio.sleep(0.1)
        await session.call("wipe", {"target": "last"})
        assert len(session._pending) <= 2
        assert len(session.pending_approvals()) <= 1


# -- 4: a slow or hung policy hook costs only its own calls -----------------------------------


@tool(category="demo", execution={"timeout_s": 0.5})
def quick() -> str:
    """Answer at once."""
    return "ok"


async def test_a_hung_policy_hook_fails_its_call_closed_and_stalls_nobody():
    import threading

    release = threading.Event()
    loop_thread = threading.get_ident()
    seen_threads: list[int] = []

    def tooldeck_authorize_call(call, tool, session):
        seen_threads.append(threading.get_ident())
        if session.attributes.get("slow"):
            release.wait(60)  # blocks its thread, as a hook waiting on a dead service does
        return None

    deck = _deck(inline_plugin(tooldeck_authorize_call, name="slowpolicy"), tools=[quick])
    try:
        async with deck:
            slow = deck.session(attributes={"slow": True})
            fast = deck.session()
            outcome: dict = {}

            async def slow_call() -> None:
                outcome["slow"] = await slow.call("quick", {})

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(slow_call)
                    await trio.sleep(0.05)
                    # The loop is free: another session's calls go through meanwhile.
                    for _ in range(20):
                        assert (await fast.call("quick", {})).success
                    assert "slow" not in outcome
    finally:
        release.set()
    error = outcome["slow"].error
    assert error.code is ErrorCode.PLUGIN_ERROR and "slowpolicy" in error.message
    assert loop_thread not in seen_threads  # unmarked hooks never run on the loop


async def test_a_nonblocking_hook_runs_on_the_loop_and_cancel_interrupts_a_threaded_one():
    import threading

    from tooldeck_hookspecs import nonblocking

    loop_thread = threading.get_ident()
    seen: list[int] = []

    @nonblocking
    def tooldeck_authorize_call(call, tool, session):
        seen.append(threading.get_ident())
        return None

    release = threading.Event()

    def blocking_hook(call, tool, session):
        release.wait(60)
        return None

    async with _deck(inline_plugin(tooldeck_authorize_call, name="cheap"), tools=[quick]) as d:
        assert (await d.session().call("quick", {})).success
    assert seen == [loop_thread]

    deck = _deck(inline_plugin(tooldeck_authorize_call=blocking_hook, name="stuck"))
    try:
        async with deck:
            session = deck.session()
            outcome: list = []

            async def caller() -> None:
                outcome.append(await session.call("echo", {"value": 1}))

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(caller)
                    await trio.sleep(0.05)
                    session.cancel()
    finally:
        release.set()
    assert outcome[0].error.code is ErrorCode.CANCELLED


# -- 6: provider calls under the call's deadline ----------------------------------------------


async def test_a_hung_cache_is_a_miss_and_a_hung_limiter_a_timeout():
    class HungCache:
        async def get(self, key):
            await trio.sleep_forever()

        async def put(self, key, result, ttl_s):
            await trio.sleep_forever()

        async def invalidate(self, names):
            await trio.sleep_forever()

    class HungLimiter:
        async def hit(self, tool, session):
            await trio.sleep_forever()

    @tool(category="demo", execution={"cacheable": True, "timeout_s": 0.3})
    def cached() -> str:
        """A cacheable tool."""
        return "fresh"

    @tool(category="demo", security={"rate_limit": {"max_calls": 5, "window_s": 60}},
          execution={"timeout_s": 0.3})
    def limited() -> str:
        """A rate-limited tool."""
        return "ran"

    deck = make_deck(
        inline_plugin(tooldeck_cache=lambda settings: HungCache(), name="hungcache"),
        inline_plugin(tooldeck_rate_limiter=lambda settings: HungLimiter(), name="hunglimit"),
        load_entry_points=["schema", "runner"],
        tools=[cached, limited],
    )
    async with deck:
        session = deck.session()
        with trio.fail_after(20):
            first = await session.call("cached", {})
            second = await session.call("limited", {})
    assert first.success and first.data == "fresh"
    assert second.error.code is ErrorCode.TIMEOUT and "rate limiter" in second.error.message


# -- 5: in-process results have the same size cap as sandboxed ones ---------------------------


@pytest.mark.parametrize("shape", ["text", "list", "bytes"])
async def test_an_oversized_in_process_result_is_output_truncated(shape):
    @tool(category="demo", execution={"max_output_bytes": 10_000})
    def big() -> object:
        """Return too much."""
        if shape == "text":
            return "é" * 6_000  # 6,000 characters, 12,000 bytes
        if shape == "list":
            return list(range(5_000))
        return b"x" * 20_000

    @tool(category="demo", execution={"max_output_bytes": 10_000})
    def fits() -> str:
        """Return enough."""
        return "a" * 9_000

    async with _deck(tools=[big, fits]) as deck:
        session = deck.session()
        result = await session.call("big", {})
        ok = await session.call("fits", {})
    assert result.error.code is ErrorCode.OUTPUT_TRUNCATED
    assert result.error.details["max_output_bytes"] == 10_000
    assert result.data is None
    assert ok.success and len(ok.data) == 9_000


def _deep_json(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("depth", [100, 10_000, 100_000])
def test_parse_tool_calls_answers_deep_argument_strings(depth):
    from tooldeck import parse_tool_calls

    response = {
        "choices": [{"message": {"tool_calls": [
            {"id": "c1", "function": {"name": "echo", "arguments": _deep_json(depth)}},
            {"id": "c2", "function": {"name": "echo", "arguments": '{"value": 1}'}},
        ]}}]
    }
    parsed = parse_tool_calls("openai", response)
    assert parsed[0].error is not None and parsed[0].error.code is ErrorCode.INVALID_ARGUMENTS
    assert parsed[1].error is None and parsed[1].call.arguments == {"value": 1}


async def test_run_tool_calls_answers_deep_argument_strings():
    async with _deck() as deck:
        messages = await deck.session().run_tool_calls("anthropic", {"content": [
            {"type": "tool_use", "id": "t1", "name": "echo", "input": json.loads(_deep_json(500))},
            {"type": "tool_use", "id": "t2", "name": "echo", "input": {"value": 2}},
        ]})
    first, second = (json.loads(block["content"]) for block in messages[0]["content"])
    assert first["error"]["code"] == "INVALID_ARGUMENTS" and "deeper" in first["error"]["message"]
    assert second == {"ok": True, "data": 2}


@pytest.mark.parametrize(
    "arguments",
    [
        {"x" * 10_000_000: 1},
        {"value": {"y" * 5_000_000: 1}, "z" * 3_000_000: 2},
    ],
    ids=["unknown-name", "nested-and-unknown"],
)
async def test_huge_unknown_argument_names_are_shortened_in_every_part_of_the_error(arguments):
    @tool(category="demo")
    def strict(value: int = 0) -> int:
        """Take a number.

        Args:
            value: a number
        """
        return value

    async with _deck(tools=[strict]) as deck:
        result = await deck.session().call("strict", arguments)
    assert result.error.code is ErrorCode.INVALID_ARGUMENTS
    echoed = len(result.error.message) + len(result.error.suggestion or "") + len(
        json.dumps(result.error.details)
    )
    assert echoed < 20_000 and "chars]" in result.error.message
