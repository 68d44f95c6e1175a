"""Async tools that block the event loop, seen by the runner's watchdog (audit s39).

An ``async def`` tool that blocks (``time.sleep``, a synchronous client, a CPU loop) holds the
deck's only event loop: every session stalls and no timeout can fire. The runner's watchdog
thread notices such a step and logs one actionable warning per tool, naming it and its plugin.

The tools here block until that warning was logged (a ``threading.Event`` the log handler
sets), never for a fixed time, so the tests assert on behaviour only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from tooldeck_hookspecs import ConfigError, ExecutionConfig, ToolDefinition, nonblocking

tooldeck_testing = pytest.importorskip("tooldeck.testing")

#: The watchdog's threshold in these tests: polls every 0.05 s.
THRESHOLD = 0.05
#: The longest a tool blocks waiting for the warning (a failing test, not a passing one).
GUARD_S = 3.0


class _Warnings(logging.Handler):
    """Collects the runner's blocking warnings and tells a blocked tool that one came."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "held the event loop" in record.getMessage():
            self.records.append(record)
            self.seen.set()


@pytest.fixture
def warnings() -> Iterator[_Warnings]:
    handler = _Warnings()
    log = logging.getLogger("tooldeck.runner")
    log.addHandler(handler)
    try:
        yield handler
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


def _block_until(event: threading.Event) -> bool:
    """Hold the calling thread (the loop, for a tool on it) until ``event`` or the guard."""
    return event.wait(GUARD_S)


async def test_a_blocking_async_tool_is_reported_once_naming_tool_and_plugin(
    warnings: _Warnings,
) -> None:
    calls: list[bool] = []

    async def sleepy(arguments: Any, context: Any) -> str:
        # No await at all: the runner calls it inline, the whole call on the loop.
        if not calls:
            calls.append(_block_until(warnings.seen))
        else:
            calls.append(True)
        return "done"

    deck = _deck(_tool("sleepy_inline", sleepy), contain_loop_blockers=False)
    async with deck:
        session = deck.session()
        first = await session.call("sleepy_inline", {})
        assert first.success and calls == [True], "the watchdog never reported the block"
        for _ in range(2):
            again = await session.call("sleepy_inline", {})
            assert again.success
            assert "off_loop" not in again.metadata  # report only: still on the loop
        assert deck.executor.statistics().loop_blockers.keys() == {"sleepy_inline"}
    assert len(warnings.records) == 1  # once per tool
    message = warnings.records[0].getMessage()
    assert "'sleepy_inline'" in message and "'inline-tools'" in message
    assert "trio.to_thread.run_sync" in message  # what to do about it
    assert "_block_until" in message  # the loop's stack: where it blocks


async def test_a_tool_that_blocks_after_an_await_is_reported(warnings: _Warnings) -> None:
    async def awaits_then_blocks(arguments: Any, context: Any) -> bool:
        await trio.sleep(0)
        return _block_until(warnings.seen)

    deck = _deck(_tool("awaits_then_blocks", awaits_then_blocks), contain_loop_blockers=False)
    async with deck:
        result = await deck.session().call("awaits_then_blocks", {})
    assert result.success and result.data is True
    assert len(warnings.records) == 1
    assert "'awaits_then_blocks'" in warnings.records[0].getMessage()


async def test_quick_async_tools_are_not_reported(warnings: _Warnings) -> None:
    async def quick(arguments: Any, context: Any) -> int:
        await trio.sleep(0)
        return 1

    async def quick_inline(arguments: Any, context: Any) -> int:
        return 2

    deck = _deck(_tool("quick", quick), _tool("quick_inline", quick_inline))
    async with deck:
        session = deck.session()
        # Longer than the threshold in all, in many short steps: the loop keeps running.
        until = time.monotonic() + 3 * THRESHOLD
        while time.monotonic() < until:
            assert (await session.call("quick", {})).success
            assert (await session.call("quick_inline", {})).success
            await trio.sleep(0.005)
        assert not deck.executor.statistics().loop_blockers
    assert not warnings.records


async def test_a_blocking_nonblocking_function_loses_its_place_on_the_loop(
    warnings: _Warnings,
) -> None:
    threads: list[str] = []

    @nonblocking
    def marked(arguments: Any, context: Any) -> str:
        threads.append(threading.current_thread().name)
        if len(threads) == 1:
            _block_until(warnings.seen)  # run inline, on the loop's own thread
        return "ok"

    deck = _deck(_tool("marked_nonblocking", marked))
    async with deck:
        session = deck.session()
        for n in range(3):
            assert (await session.call("marked_nonblocking", {"n": n})).success
    loop = threading.current_thread().name
    assert threads[0] == loop
    # Seen blocking: from then on a plain sync tool, in a worker thread of its own.
    assert threads[1:] == ["tooldeck-tool-marked_nonblocking"] * 2
    assert "remove the marker" in warnings.records[0].getMessage()


@pytest.mark.parametrize(
    ("key", "value"), [("contain_loop_blockers", "yes"), ("loop_block_warn_s", -1)]
)
def test_the_settings_are_checked(key: str, value: Any) -> None:
    from tooldeck_runner import RunnerExecutor

    with pytest.raises(ConfigError, match=key):
        RunnerExecutor.from_settings({"runner": {key: value}})
