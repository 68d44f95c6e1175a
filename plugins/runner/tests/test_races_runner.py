"""A burst of parallel calls against a category's concurrency limit, on trio's autojump clock:
never more than the limit running at once, and a call whose deadline passes while it is queued
never starts (async tools in the loop, sync tools in their own threads)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tooldeck_hookspecs import ExecutionConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

LIMIT = 2
CALLS = 9


def _deck(tool: ToolDefinition) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner"],
        tools=[tool],
        config={"runner": {"concurrency": {"api": LIMIT}}},
    )


def _tool(execute: Any) -> ToolDefinition:
    return ToolDefinition(
        name="slow_api",
        description="A slow API call.",
        category="api",
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
        # Queue time counts toward the timeout: the first LIMIT calls finish at 10 s, the next
        # LIMIT start then and are stopped at 15 s, the rest never leave the queue.
        execution=ExecutionConfig(timeout_s=15),
        execute=execute,
    )


async def _burst(session: Any) -> list[Any]:
    results: list[Any] = [None] * CALLS

    async def call(index: int) -> None:
        results[index] = await session.call("slow_api", {"n": index})

    async with trio.open_nursery() as nursery:
        for index in range(CALLS):
            nursery.start_soon(call, index)
    return results


def _check(results: list[Any], started: list[int], most: int) -> None:
    assert most <= LIMIT
    finished = [i for i, r in enumerate(results) if r.success]
    assert len(finished) == LIMIT
    codes = {str(r.error.code) for r in results if not r.success}
    assert codes == {"TIMEOUT"}
    queued = [i for i, r in enumerate(results) if not r.success and r.error.details["queued"]]
    stopped = [i for i, r in enumerate(results) if not r.success and not r.error.details["queued"]]
    assert len(queued) == CALLS - 2 * LIMIT and len(stopped) == LIMIT
    # A call that timed out in the queue never ran a line of the tool.
    assert not set(queued) & set(started)
    assert sorted(started) == sorted(finished + stopped)


async def test_async_tools_hold_the_limit_and_queued_timeouts_never_start(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    started: list[int] = []
    running = [0, 0]  # now, most

    async def slow(arguments: Any, context: Any) -> str:
        started.append(arguments["n"])
        running[0] += 1
        running[1] = max(running)
        try:
            await trio.sleep(10)
        finally:
            running[0] -= 1
        return "done"

    async with _deck(_tool(slow)) as deck:
        results = await _burst(deck.session(workdir=tmp_path))
    _check(results, started, running[1])


async def test_sync_tools_hold_the_limit_and_queued_timeouts_never_start(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """The same with a sync tool (its own worker threads), the clock moved by hand once the
    first LIMIT calls are inside their threads: those are stopped at their deadline (their
    threads abandoned, still blocked, keeping their slots), and the queued ones never start."""
    started: list[int] = []
    running = [0, 0]  # now, most
    lock = threading.Lock()
    stuck = threading.Event()
    token = trio.lowlevel.current_trio_token()
    inside = trio.Event()

    def slow(arguments: Any, context: Any) -> str:
        with lock:
            started.append(arguments["n"])
            running[0] += 1
            running[1] = max(running)
            if len(started) == LIMIT:
                token.run_sync_soon(inside.set)
        try:
            stuck.wait()  # outlives its deadline
        finally:
            with lock:
                running[0] -= 1
        return "done"

    results: list[Any] = []
    try:
        async with _deck(_tool(slow)) as deck:
            async with trio.open_nursery() as nursery:

                async def burst() -> None:
                    results.extend(await _burst(deck.session(workdir=tmp_path)))

                nursery.start_soon(burst)
                await inside.wait()
                await trio.testing.wait_all_tasks_blocked()
                mock_clock.jump(15)
    finally:
        stuck.set()
    assert running[1] <= LIMIT and len(started) == LIMIT
    assert [str(r.error.code) for r in results] == ["TIMEOUT"] * CALLS
    queued = {i for i, r in enumerate(results) if r.error.details["queued"]}
    assert len(queued) == CALLS - LIMIT and not queued & set(started)
