"""Async tools that block the event loop, contained (audit s39): once the watchdog saw a tool
hold the loop, its later calls run in a worker thread under a ``trio.run`` of their own, so
other sessions go on and its timeout and cancellation work as a sync tool's do.

Every wait is on an event, never a fixed time (a guard of a few seconds only turns a hang of a
broken build into a failure).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import trio
import trio.testing

from tooldeck_hookspecs import ErrorCode, ExecutionConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

THRESHOLD = 0.05
GUARD_S = 3.0

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("s39_mark", default="unset")


class _Seen(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "held the event loop" in record.getMessage():
            self.event.set()


@pytest.fixture
def seen() -> Iterator[threading.Event]:
    handler = _Seen()
    log = logging.getLogger("tooldeck.runner")
    log.addHandler(handler)
    try:
        yield handler.event
    finally:
        log.removeHandler(handler)


def _tool(name: str, execute: Any, timeout_s: float = 5.0) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=f"{name}: a tool of the blocking-loop tests.",
        category="api",
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
        execution=ExecutionConfig(timeout_s=timeout_s),
        execute=execute,
    )


def _deck(*tools: ToolDefinition, **runner: Any) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner"],
        tools=list(tools),
        config={"runner": {"loop_block_warn_s": THRESHOLD, **runner}},
    )


async def _quick(arguments: Any, context: Any) -> str:
    await trio.sleep(0)
    return "quick"


async def test_a_contained_tool_blocks_only_itself_while_other_sessions_go_on(
    seen: threading.Event,
) -> None:
    started = threading.Event()
    release = threading.Event()
    calls = [0]

    async def blocker(arguments: Any, context: Any) -> str:
        calls[0] += 1
        if calls[0] == 1:
            # The first call holds the loop until the watchdog reported it.
            return "reported" if seen.wait(GUARD_S) else "not reported"
        started.set()
        # The second call blocks its thread until the other session's call has come back:
        # on the loop, that call could never run (and this wait would end by its guard).
        return "released" if release.wait(GUARD_S) else "still blocking the loop"

    deck = _deck(_tool("blocker", blocker), _tool("quick", _quick))
    async with deck:
        first = await deck.session().call("blocker", {})
        assert first.data == "reported"
        assert "off_loop" not in first.metadata
        other = deck.session()
        results: dict[str, Any] = {}

        async def second() -> None:
            results["blocker"] = await deck.session().call("blocker", {"n": 2})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second)
            await trio.to_thread.run_sync(started.wait, GUARD_S)
            results["quick"] = await other.call("quick", {})
            assert not release.is_set()
            release.set()
    assert results["quick"].success and results["quick"].data == "quick"
    assert results["blocker"].data == "released"
    assert results["blocker"].metadata["off_loop"] is True
    assert results["blocker"].metadata["isolation"] == "in-process"


async def test_a_contained_tool_times_out_and_its_own_run_is_cancelled(
    seen: threading.Event,
) -> None:
    release = threading.Event()
    cancelled = threading.Event()
    calls = [0]

    async def stuck(arguments: Any, context: Any) -> str:
        calls[0] += 1
        if calls[0] == 1:
            seen.wait(GUARD_S)
            return "first"
        release.wait(GUARD_S)  # blocks its thread past the call's timeout
        try:
            await trio.sleep(30)  # the runner cancels the tool's own run here
        except trio.Cancelled:
            cancelled.set()
            raise
        return "ran on"

    deck = _deck(_tool("stuck", stuck, timeout_s=0.2), _tool("quick", _quick))
    async with deck:
        session = deck.session()
        assert (await session.call("stuck", {})).data == "first"
        result = await session.call("stuck", {"n": 2})
        assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
        assert result.metadata["off_loop"] is True
        assert (await deck.session().call("quick", {})).success
        release.set()
        assert await trio.to_thread.run_sync(cancelled.wait, GUARD_S)


async def test_a_contained_tool_keeps_context_progress_and_cancellation_state(
    seen: threading.Event,
) -> None:
    calls = [0]

    async def reporter(arguments: Any, context: Any) -> Mapping[str, Any]:
        calls[0] += 1
        if calls[0] == 1:
            seen.wait(GUARD_S)
            return {}
        context.emit({"message": "half way"})
        await trio.sleep(0)
        return {
            "mark": MARK.get(),
            "cancelled": context.cancelled(),
            "deadline": context.seconds_left() is not None,
            "thread": threading.current_thread().name,
        }

    deck = _deck(_tool("reporter", reporter))
    events: list[Mapping[str, Any]] = []
    async with deck:
        session = deck.session()
        await session.call("reporter", {})
        MARK.set("caller's")
        result = await session.call("reporter", {"n": 2}, on_progress=events.append)
        # Emitted from the tool's thread, the event is queued to the loop (as a sync tool's
        # is): it may reach the listener just after the call returned.
        await trio.testing.wait_all_tasks_blocked()
    assert result.success and result.metadata["off_loop"] is True
    assert result.data == {
        "mark": "caller's",  # a copy of the caller's context, as for sync tools
        "cancelled": False,
        "deadline": True,
        "thread": "tooldeck-tool-reporter",
    }
    assert [event.get("message") for event in events] == ["half way"]


async def test_a_cancelled_contained_call_returns_cancelled_and_ends_its_run(
    seen: threading.Event,
) -> None:
    started = threading.Event()
    ended = threading.Event()
    calls = [0]

    async def waits(arguments: Any, context: Any) -> str:
        calls[0] += 1
        if calls[0] == 1:
            seen.wait(GUARD_S)
            return "first"
        started.set()
        try:
            await trio.sleep(30)  # until the cancellation reaches its own run
        finally:
            ended.set()
        return "not cancelled"

    deck = _deck(_tool("waits", waits))
    async with deck:
        session = deck.session()
        await session.call("waits", {})
        results: dict[str, Any] = {}

        async def second() -> None:
            results["waits"] = await session.call("waits", {"n": 2})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second)
            await trio.to_thread.run_sync(started.wait, GUARD_S)
            assert deck.executor.cancel_session(session.id) == 1
    assert results["waits"].error.code == ErrorCode.CANCELLED
    assert results["waits"].metadata["off_loop"] is True
    assert await trio.to_thread.run_sync(ended.wait, GUARD_S)
