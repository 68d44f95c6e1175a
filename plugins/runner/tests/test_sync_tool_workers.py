"""Sync tools' worker threads: the pipe each one sleeps on, and the pool's own slots (a counter
and a FIFO parking lot) that abandoned threads hold until they really end."""

from __future__ import annotations

import os
import threading
from typing import Any

import trio
import trio.testing
from tooldeck_runner import RunnerExecutor

from tooldeck_hookspecs import ErrorCode, ExecutionConfig, ToolCall, ToolContext, ToolDefinition

CONTEXT = ToolContext(session_id="s", workdir="/tmp")


def _tool(name: str, execute: Any, timeout_s: float = 5) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=name,
        category="default",
        execute=execute,
        execution=ExecutionConfig(timeout_s=timeout_s),
    )


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"tooldeck-tool-{name}"]


async def test_worker_threads_close_their_wake_up_pipes_when_they_end() -> None:
    inside = threading.Barrier(3, timeout=10)

    def meet(arguments: Any, context: Any) -> str:
        if arguments.get("together"):
            inside.wait()  # three calls at once: three threads, three pipes
        return "ok"

    before = _open_fds()
    executor = RunnerExecutor.from_settings({"runner": {"concurrency": {"default": 3}}})
    tool = _tool("piped", meet, timeout_s=20)
    results: list[Any] = []

    async def one(together: bool) -> None:
        call = ToolCall(name=tool.name, arguments={"together": together}, id="c")
        results.append(await executor.run(tool, call, CONTEXT))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(one, True)
    for _ in range(20):  # sequential calls reuse those threads: no new pipe per call
        await one(False)
    assert all(r.success and r.data == "ok" for r in results), [r.error for r in results]
    assert len(_threads_named("piped")) == 3
    assert _open_fds() == before + 6
    await executor.aclose()
    with trio.fail_after(10):  # a hang guard: idle threads end once the executor closes
        while _threads_named("piped"):
            await trio.sleep(0.01)
    assert _open_fds() == before


async def test_slots_freed_by_abandoned_threads_go_to_the_waiting_calls_in_arrival_order() -> None:
    releases = {"a1": threading.Event(), "a2": threading.Event()}
    order: list[str] = []

    def work(arguments: Any, context: Any) -> str:
        key = arguments["id"]
        if key in releases:
            releases[key].wait(30)
        order.append(key)
        return key

    # Two threads for this tool; both get stuck and time out, so the pool is full of
    # abandoned threads while the category (its calls gave their slots back) is free.
    executor = RunnerExecutor.from_settings({"runner": {"concurrency": {"default": 2}}})
    tool = _tool("fifo", work, timeout_s=3)
    stuck = _tool("fifo", work, timeout_s=0.1)  # the same tool (same pool), a short timeout
    results: dict[str, Any] = {}

    async def run(definition: ToolDefinition, key: str) -> None:
        call = ToolCall(name=definition.name, arguments={"id": key}, id=key)
        results[key] = await executor.run(definition, call, CONTEXT)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, stuck, "a1")
            nursery.start_soon(run, stuck, "a2")
        assert all(results[k].error.code is ErrorCode.TIMEOUT for k in ("a1", "a2"))
        assert executor.statistics()["default"].abandoned_threads == 2
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, tool, "b")
            await trio.testing.wait_all_tasks_blocked()  # b waits for a thread of the pool
            nursery.start_soon(run, tool, "c")
            await trio.testing.wait_all_tasks_blocked()  # c waits behind it
            assert order == []
            # One thread frees up: it serves b first, then c (the other one is still stuck).
            releases["a1"].set()
        assert order == ["a1", "b", "c"]
        assert results["b"].data == "b" and results["c"].data == "c"
        assert executor.statistics()["default"].abandoned_threads == 1
        releases["a2"].set()
        with trio.fail_after(10):  # a hang guard: the last abandoned thread ends
            while executor.statistics()["default"].abandoned_threads:
                await trio.sleep(0.01)
        assert order == ["a1", "b", "c", "a2"]
    finally:
        for event in releases.values():
            event.set()
    await executor.aclose()


async def test_a_call_cancelled_while_waiting_for_a_thread_gives_no_slot_away() -> None:
    release = threading.Event()

    def work(arguments: Any, context: Any) -> str:
        if arguments["id"] == "stuck":
            release.wait(30)
        return arguments["id"]

    executor = RunnerExecutor.from_settings({"runner": {"concurrency": {"default": 1}}})
    tool = _tool("cancelled_waiter", work, timeout_s=0.1)
    try:
        stuck = await executor.run(
            tool, ToolCall(name=tool.name, arguments={"id": "stuck"}, id="x"), CONTEXT
        )
        assert stuck.error is not None and stuck.error.code is ErrorCode.TIMEOUT
        # The pool's only thread is abandoned: the next call waits for it and times out
        # before it started (it never runs).
        waiter = await executor.run(
            tool, ToolCall(name=tool.name, arguments={"id": "waiter"}, id="y"), CONTEXT
        )
        assert waiter.error is not None and waiter.error.code is ErrorCode.TIMEOUT
        assert waiter.error.details["queued"] is True
        assert waiter.error.details["abandoned_threads"] == 1
    finally:
        release.set()
    with trio.fail_after(10):
        while executor.statistics()["default"].abandoned_threads:
            await trio.sleep(0.01)
    # The timed-out waiter took no slot with it: the freed thread serves the next call.
    again = await executor.run(
        tool, ToolCall(name=tool.name, arguments={"id": "next"}, id="z"), CONTEXT
    )
    assert again.success and again.data == "next", again.error
    assert len(_threads_named("cancelled_waiter")) == 1
    await executor.aclose()
