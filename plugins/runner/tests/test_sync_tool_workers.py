"""Sync tools' worker threads: the pipe each one sleeps on, and the pool's own slots (a counter
and a FIFO parking lot) that abandoned threads hold until they really end."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
import trio
import trio.testing
from tooldeck_runner import RunnerExecutor

from tooldeck_hookspecs import (
    ConfigError,
    ErrorCode,
    ExecutionConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
)

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

    # Earlier tests' executors closed, but their idle threads end (and close their pipes) on
    # their own schedule: on a busy machine one could close its pipe in the middle of this test.
    with trio.fail_after(10):  # a hang guard
        while any(t.name.startswith("tooldeck-tool-") for t in threading.enumerate()):
            await trio.sleep(0.01)
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


# ---------------------------------------------------------------- CPU placement

_AFFINITY = hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2
needs_two_cpus = pytest.mark.skipif(not _AFFINITY, reason="needs per-thread affinity, 2+ CPUs")


def _own_cpus(arguments: Any, context: Any) -> list[int]:
    if arguments.get("sleep"):
        time.sleep(arguments["sleep"])  # outlasts the loop's direct wait (100 µs)
    return sorted(os.sched_getaffinity(0))


async def _calls(executor: RunnerExecutor, tool: ToolDefinition, n: int, **arguments: Any
                 ) -> list[list[int]]:
    seen = []
    for _ in range(n):
        result = await executor.run(tool, ToolCall(name=tool.name, arguments=arguments), CONTEXT)
        assert result.success, result.error
        seen.append(result.data)
    return seen


@needs_two_cpus
async def test_a_quick_sync_tool_runs_on_the_waiting_loops_cpu() -> None:
    everything = sorted(os.sched_getaffinity(0))
    executor = RunnerExecutor.from_settings({})
    seen = await _calls(executor, _tool("quick_cpus", _own_cpus), 100)
    # Its first call starts the thread (not pinned); once the thread runs again while the loop
    # waits on it, it runs on one CPU, the loop's (the loop may move between calls). On a busy
    # machine a wait may run out now and then (the next 32 calls then run unpinned), so not
    # every call is pinned.
    assert seen[0] == everything
    pinned = [cpus for cpus in seen if len(cpus) == 1]
    assert len(pinned) >= 10 and all(cpus[0] in everything for cpus in pinned), seen
    assert all(cpus == everything for cpus in seen if len(cpus) != 1)
    # The process's own CPUs are untouched: only the worker thread was pinned.
    assert sorted(os.sched_getaffinity(0)) == everything
    await executor.aclose()


@needs_two_cpus
async def test_a_slow_sync_tool_keeps_every_cpu() -> None:
    everything = sorted(os.sched_getaffinity(0))
    executor = RunnerExecutor.from_settings({})
    tool = _tool("slow_cpus", _own_cpus)
    for _ in range(100):  # quick so far: until its thread runs on the loop's CPU
        if len((await _calls(executor, tool, 1, sleep=0))[0]) == 1:
            break
    else:
        raise AssertionError("a quick tool's thread was never pinned")
    # Now slow: the thread starts pinned, the loop's wait runs out after 100 µs and unpins it
    # before the tool (asleep for 20 ms) looks; the next calls are not waited for directly.
    assert await _calls(executor, tool, 4, sleep=0.02) == [everything] * 4
    # A quick call again right after a slow one keeps every CPU too (no direct wait).
    assert await _calls(executor, tool, 1, sleep=0) == [everything]
    await executor.aclose()


@needs_two_cpus
async def test_pinning_can_be_turned_off() -> None:
    everything = sorted(os.sched_getaffinity(0))
    executor = RunnerExecutor.from_settings({"runner": {"pin_sync_threads": False}})
    assert await _calls(executor, _tool("free_cpus", _own_cpus), 10) == [everything] * 10
    await executor.aclose()
    with pytest.raises(ConfigError, match="pin_sync_threads"):
        RunnerExecutor.from_settings({"runner": {"pin_sync_threads": "yes"}})


@needs_two_cpus
async def test_a_refused_affinity_turns_pinning_off_and_calls_go_on(monkeypatch: Any) -> None:
    # A cpuset changed under the process makes sched_setaffinity fail with EINVAL.
    from tooldeck_runner import _executor

    def refuse(tid: int, cpus: Any) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(_executor, "_getcpu", None)
    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    executor = RunnerExecutor.from_settings({})
    everything = sorted(os.sched_getaffinity(0))
    tool = _tool("refused_cpus", _own_cpus)
    # Until a direct wait tried to pin (on a busy machine a wait may run out first, and the
    # next 32 calls are then not waited for directly): every call runs, on every CPU.
    for _ in range(200):
        assert await _calls(executor, tool, 1) == [everything]
        if _executor._getcpu is False:
            break
    else:
        raise AssertionError("no call tried to pin its thread")
    assert await _calls(executor, tool, 10) == [everything] * 10
    await executor.aclose()


def _loop_cpus(arguments: Any, context: Any) -> list[int]:
    """The event loop's thread's CPUs, seen from the tool's worker while the loop waits."""
    return sorted(os.sched_getaffinity(threading.main_thread().native_id))


def _the_loops_own(tid: int) -> bool:
    """Is this ``sched_setaffinity(tid, ...)`` the event loop's thread setting its own CPUs
    (a hold or its undoing), not a worker pinning itself?"""
    return tid == 0 and threading.current_thread() is threading.main_thread()


def _moving_loop(monkeypatch: Any, cpus: list[int]) -> None:
    """Make the loop look as if it moved to another CPU at every call (the kernel does that when
    it wakes the loop on the idle CPU while the worker still runs on theirs)."""
    from tooldeck_runner import _executor

    seen = iter(range(1_000_000))
    monkeypatch.setattr(_executor, "_loop_cpu", lambda: cpus[next(seen) % 2])
    monkeypatch.setattr(_executor, "_hold_loop", True)


@needs_two_cpus
@pytest.mark.exclusive
async def test_a_moving_loop_is_held_on_its_workers_cpu_while_it_waits(monkeypatch: Any) -> None:
    from tooldeck_runner import _executor

    everything = sorted(os.sched_getaffinity(0))
    _moving_loop(monkeypatch, everything[:2])
    executor = RunnerExecutor.from_settings({})
    tool = _tool("held_loop", _loop_cpus)
    # Once the loop was seen moving, it waits for the worker on the worker's CPU, one CPU
    # (a wait that ran out on a busy machine lets the next 32 calls go unwaited, on every CPU,
    # so a busy machine gets more calls to show ten held waits).
    seen: list[list[int]] = []
    for _ in range(10):
        seen += await _calls(executor, tool, 100)
        held = [cpus for cpus in seen if len(cpus) == 1]
        if len(held) >= 10:
            break
    assert len(held) >= 10 and all(cpus[0] in everything for cpus in held), seen
    assert all(cpus == everything for cpus in seen if len(cpus) != 1)
    # ... and gets all of its CPUs back after each wait.
    assert sorted(os.sched_getaffinity(0)) == everything
    assert _executor._hold_loop is True
    await executor.aclose()


@needs_two_cpus
async def test_a_loop_that_stays_put_is_never_held(monkeypatch: Any) -> None:
    from tooldeck_runner import _executor

    everything = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(_executor, "_loop_cpu", lambda: everything[0])
    executor = RunnerExecutor.from_settings({})
    assert await _calls(executor, _tool("free_loop", _loop_cpus), 50) == [everything] * 50
    await executor.aclose()


@needs_two_cpus
async def test_a_refused_hold_leaves_the_loop_free_and_calls_go_on(monkeypatch: Any) -> None:
    from tooldeck_runner import _executor

    everything = sorted(os.sched_getaffinity(0))
    real = os.sched_setaffinity
    refusals = []

    def refuse_the_loop(tid: int, cpus: Any) -> None:
        if _the_loops_own(tid):
            refusals.append(sorted(cpus))
            raise OSError(22, "Invalid argument")
        real(tid, cpus)  # the workers' own pinning still works

    _moving_loop(monkeypatch, everything[:2])
    monkeypatch.setattr(os, "sched_setaffinity", refuse_the_loop)
    executor = RunnerExecutor.from_settings({})
    seen = await _calls(executor, _tool("refused_loop", _loop_cpus), 100)
    assert seen == [everything] * 100
    assert len(refusals) == 1 and _executor._hold_loop is False  # tried once, then never
    await executor.aclose()


@needs_two_cpus
async def test_a_loop_whose_cpus_cannot_be_restored_gets_every_allowed_cpu(
    monkeypatch: Any,
) -> None:
    from tooldeck_runner import _executor

    everything = sorted(os.sched_getaffinity(0))
    real = os.sched_setaffinity
    loop_calls: list[list[int]] = []

    def refuse_the_restore(tid: int, cpus: Any) -> None:
        if _the_loops_own(tid):
            loop_calls.append(sorted(cpus))
            if len(loop_calls) == 2:  # the hold worked; putting the saved CPUs back does not
                raise OSError(22, "Invalid argument")
        real(tid, cpus)

    _moving_loop(monkeypatch, everything[:2])
    monkeypatch.setattr(os, "sched_setaffinity", refuse_the_restore)
    executor = RunnerExecutor.from_settings({})
    await _calls(executor, _tool("restored_loop", _loop_cpus), 50)
    assert len(loop_calls) == 3 and len(loop_calls[0]) == 1  # held, refused, every CPU
    assert sorted(os.sched_getaffinity(0)) == everything
    assert _executor._hold_loop is False
    await executor.aclose()


@needs_two_cpus
@pytest.mark.parametrize("finished", [False, True], ids=["running", "finished"])
async def test_a_ctrl_c_during_a_direct_wait_gives_no_slot_away(
    monkeypatch: Any, finished: bool
) -> None:
    # An application may catch the KeyboardInterrupt and go on: the tool must still have its
    # one thread afterwards (a slot left taken would make every later call wait forever).
    from tooldeck_runner import _executor

    release = threading.Event()

    def blocking(arguments: Any, context: Any) -> str:
        if arguments.get("block"):
            release.wait(30)
        return "done"

    def interrupted(lock: threading.Lock, cpu: int) -> bool:
        if finished:
            lock.acquire()  # the tool returned; the Ctrl-C lands just after
        raise KeyboardInterrupt

    _moving_loop(monkeypatch, sorted(os.sched_getaffinity(0))[:2])  # the waits go through
    executor = RunnerExecutor.from_settings({"runner": {"concurrency": {"default": 1}}})
    tool = _tool("interrupted", blocking, timeout_s=5)
    pool = None
    for _ in range(200):  # until the loop is held during its waits (see _moving_loop)
        await _calls(executor, tool, 1)
        pool = executor._threads["interrupted"]
        if pool.hold_loop > 0 and pool.skip_direct == 0:
            break
    assert pool is not None and pool.hold_loop > 0
    monkeypatch.setattr(_executor, "_acquire_on_cpu", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            await executor.run(
                tool, ToolCall(name=tool.name, arguments={"block": not finished}), CONTEXT
            )
        assert executor.statistics()["default"].abandoned_threads == (0 if finished else 1)
    finally:
        release.set()
    with trio.fail_after(10):  # a hang guard: the abandoned job ends and frees its slot
        while executor.statistics()["default"].abandoned_threads or pool.busy:
            await trio.sleep(0.01)
    monkeypatch.undo()
    # The tool's only thread serves the next calls.
    assert await _calls(executor, _tool("interrupted", _own_cpus), 3)
    assert pool.threads == 1
    await executor.aclose()


async def test_a_thread_busy_when_the_executor_closes_ends_when_its_function_returns() -> None:
    # An idle thread lives on for 30 s; one still running at aclose() has nothing to wait for.
    started, release = threading.Event(), threading.Event()

    def stuck(arguments: Any, context: Any) -> str:
        started.set()
        release.wait(30)
        return "late"

    executor = RunnerExecutor.from_settings({})
    tool = _tool("closing_busy", stuck, timeout_s=30)
    try:
        with trio.move_on_after(5):  # a hang guard; the call is given up once it runs
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_calls, executor, tool, 1)
                while not started.is_set():
                    await trio.sleep(0.005)
                nursery.cancel_scope.cancel()
        assert started.is_set() and len(_threads_named("closing_busy")) == 1
        await executor.aclose()
    finally:
        release.set()
    with trio.fail_after(5):  # well under the 30 s an idle thread would wait
        while _threads_named("closing_busy"):
            await trio.sleep(0.01)


@needs_two_cpus
async def test_a_ctrl_c_as_the_loop_is_held_still_gives_it_its_cpus_back(
    monkeypatch: Any,
) -> None:
    everything = sorted(os.sched_getaffinity(0))
    real = os.sched_setaffinity
    interrupted: list[list[int]] = []

    def interrupt_after_holding(tid: int, cpus: Any) -> None:
        real(tid, cpus)
        if _the_loops_own(tid) and len(list(cpus)) == 1 and not interrupted:
            # The loop is on one CPU now; Ctrl-C lands as the call returns.
            interrupted.append(sorted(os.sched_getaffinity(0)))
            raise KeyboardInterrupt

    _moving_loop(monkeypatch, everything[:2])
    executor = RunnerExecutor.from_settings({})
    tool = _tool("interrupted_hold", _own_cpus)
    monkeypatch.setattr(os, "sched_setaffinity", interrupt_after_holding)
    with pytest.raises(KeyboardInterrupt):
        for _ in range(200):  # until a wait holds the loop (see _moving_loop)
            await _calls(executor, tool, 1)
    assert interrupted and len(interrupted[0]) == 1
    assert sorted(os.sched_getaffinity(0)) == everything  # back, though interrupted
    await executor.aclose()
