"""Sync tools: persistent worker threads per tool, inline @nonblocking tools, and the timeouts,
cancellation and abandoned-thread accounting that must keep working on both paths."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

import trio
from tooldeck_runner import RunnerExecutor

from tooldeck_hookspecs import (
    ErrorCode,
    ExecutionConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    nonblocking,
)

CONTEXT = ToolContext(session_id="s", workdir="/tmp")
REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


def _tool(
    name: str, execute: Any, timeout_s: float = 5, category: str = "default"
) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=name,
        category=category,
        execute=execute,
        execution=ExecutionConfig(timeout_s=timeout_s),
    )


async def _run(executor: RunnerExecutor, tool: ToolDefinition, call_id: str = "") -> Any:
    return await executor.run(
        tool, ToolCall(name=tool.name, arguments={}, id=call_id or "c"), CONTEXT
    )


def _threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"tooldeck-tool-{name}"]


async def test_sequential_calls_reuse_one_persistent_thread_in_the_callers_context() -> None:
    seen: list[tuple[int, str]] = []

    def where(arguments: Any, context: Any) -> str:
        seen.append((threading.get_ident(), REQUEST.get()))
        return "ok"

    executor = RunnerExecutor()
    tool = _tool("where", where)
    REQUEST.set("req-1")
    for _ in range(5):
        result = await _run(executor, tool)
        assert result.success and result.data == "ok", result.error
    idents = {ident for ident, _ in seen}
    assert len(idents) == 1 and threading.get_ident() not in idents
    # The caller's context travels with the call (as trio.to_thread does it).
    assert {value for _, value in seen} == {"req-1"}
    assert len(_threads_named("where")) == 1
    await executor.aclose()
    with trio.fail_after(10):  # a hang guard: idle threads end once the executor closes
        while _threads_named("where"):
            await trio.sleep(0.01)


async def test_concurrent_calls_get_threads_of_their_own_up_to_the_category_limit() -> None:
    inside = threading.Barrier(3, timeout=10)

    def meet(arguments: Any, context: Any) -> int:
        inside.wait()  # only passes when three calls run at once, in three threads
        return threading.get_ident()

    executor = RunnerExecutor.from_settings({"runner": {"concurrency": {"default": 3}}})
    tool = _tool("meet", meet, timeout_s=20)
    results = []

    async def one(i: int) -> None:
        results.append(await _run(executor, tool, f"c{i}"))

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(one, i)
    assert all(r.success for r in results), [r.error for r in results]
    assert len({r.data for r in results}) == 3
    assert executor.statistics()["default"].max_in_flight == 3
    await executor.aclose()


async def test_a_nonblocking_sync_tool_runs_inline_on_the_event_loop() -> None:
    loop_thread = threading.get_ident()

    @nonblocking
    def add(arguments: Any, context: Any) -> int:
        assert threading.get_ident() == loop_thread
        return 1 + 2

    def failing(arguments: Any, context: Any) -> None:
        raise ValueError("bad input")

    executor = RunnerExecutor()
    result = await _run(executor, _tool("add", add))
    assert result.success and result.data == 3
    assert result.metadata["attempts"] == 1 and result.metadata["isolation"] == "in-process"
    assert executor.statistics()["default"].completed == 1
    # A failure is still a structured result, inline or not.
    broken = await _run(executor, _tool("failing", nonblocking(failing)))
    assert broken.error is not None and broken.error.code is ErrorCode.EXECUTION_ERROR
    assert "bad input" in broken.error.message
    await executor.aclose()


async def test_a_timed_out_sync_tool_is_abandoned_counted_and_released_when_it_ends() -> None:
    release = threading.Event()

    def stuck(arguments: Any, context: Any) -> str:
        release.wait(30)
        return "late"

    executor = RunnerExecutor.from_settings({"runner": {"concurrency": {"default": 2}}})
    tool = _tool("stuck_tool", stuck, timeout_s=0.1)
    try:
        result = await _run(executor, tool)
        assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
        assert "did not finish" in result.error.message
        assert executor.statistics()["default"].abandoned_threads == 1
        # The category slot came back at once: another tool of the category runs now.
        quick = await _run(executor, _tool("quick", lambda a, c: "ok"))
        assert quick.success and quick.data == "ok"
    finally:
        release.set()
    with trio.fail_after(10):  # a hang guard: the abandoned thread ends after release
        while executor.statistics()["default"].abandoned_threads:
            await trio.sleep(0.01)
    # Its thread went back to the pool and serves the next call.
    again = await _run(executor, tool)
    assert again.success and again.data == "late"
    assert len(_threads_named("stuck_tool")) == 1
    await executor.aclose()


async def test_cancel_session_stops_waiting_for_a_running_sync_tool() -> None:
    started, release = threading.Event(), threading.Event()

    def slow(arguments: Any, context: Any) -> str:
        started.set()
        release.wait(30)
        return "done"

    executor = RunnerExecutor()
    tool = _tool("slow", slow, timeout_s=30)
    results = []
    try:
        with trio.fail_after(10):  # a hang guard
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    results.append(await _run(executor, tool, "c1"))

                nursery.start_soon(call)
                while not started.is_set():
                    await trio.sleep(0.005)
                assert executor.cancel_session("s") == 1
        assert results[0].error is not None and results[0].error.code is ErrorCode.CANCELLED
        assert executor.statistics()["default"].abandoned_threads == 1
    finally:
        release.set()
    with trio.fail_after(10):
        while executor.statistics()["default"].abandoned_threads:
            await trio.sleep(0.01)
    await executor.aclose()


async def test_the_callers_cancel_scope_propagates_through_a_sync_tool() -> None:
    release = threading.Event()

    def wait(arguments: Any, context: Any) -> str:
        release.wait(30)
        return "x"

    executor = RunnerExecutor()
    try:
        with trio.move_on_after(0.05) as scope:
            await _run(executor, _tool("wait", wait, timeout_s=30))
        assert scope.cancelled_caught  # trio.Cancelled reached the caller's scope
        assert executor.statistics()["default"].abandoned_threads == 1
    finally:
        release.set()
    await executor.aclose()


async def test_the_sync_tool_bench_reports_its_figures_and_the_comparison() -> None:
    from tooldeck_runner.bench import DESCRIPTIONS, bench_sync_tools

    figures = await bench_sync_tools(None, n=20, repeats=1)
    assert figures["sync_tool_overhead_us"] > 0
    assert "sync_tool_nonblocking_overhead_us" in figures
    assert figures["thread_round_trip_us"] > 0  # the bare thread hop beside it
    try:
        import langchain_core.tools  # noqa: F401
    except ImportError:
        assert "not importable" in figures["langchain"]
    else:
        assert figures["sync_tool_overhead_vs_langchain_ainvoke_ratio"] > 0
    assert set(figures) - {"langchain"} <= set(DESCRIPTIONS)


async def test_a_slow_sync_tool_outlasts_the_direct_wait_and_still_answers() -> None:
    import time

    def slow(arguments: Any, context: Any) -> str:
        time.sleep(0.02)  # far longer than the loop ever waits for a thread directly
        return "slow"

    def quick(arguments: Any, context: Any) -> str:
        return "quick"

    executor = RunnerExecutor()
    slow_tool, quick_tool = _tool("slow_one", slow), _tool("quick_one", quick)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.001)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        for _ in range(3):
            result = await _run(executor, slow_tool)
            assert result.success and result.data == "slow"
        nursery.cancel_scope.cancel()
    # The loop kept running other tasks while the slow tool ran in its thread.
    assert ticks > 0
    # A quick tool is answered the same way, whichever path its result took.
    for _ in range(50):
        result = await _run(executor, quick_tool)
        assert result.success and result.data == "quick"
    assert executor.statistics()["default"].completed == 53
    await executor.aclose()
