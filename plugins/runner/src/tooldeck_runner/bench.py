"""Benchmark helpers for ``tooldeck bench``: what a sandboxed call costs, cold and warm, and what
a plain ``def`` tool costs next to LangChain's ``ainvoke`` of the same function.

Figures are reported, never asserted: machines are noisy.
"""

from __future__ import annotations

import asyncio
import queue
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from tooldeck_hookspecs import (
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    nonblocking,
    tool,
)

from ._executor import RunnerExecutor

__all__ = [
    "DESCRIPTIONS",
    "SYNC_BENCH_TOOLS",
    "bench_sandbox",
    "bench_sandbox_limits",
    "bench_sandbox_throughput",
    "bench_sync_tools",
]

# A tool that is already imported by every worker, so the figures measure the sandbox itself:
# process start, mounts, the wire format and the result's way back.
_ECHO = ToolDefinition(
    name="bench_echo",
    description="returns its argument as canonical JSON",
    category="bench",
    entrypoint="tooldeck_hookspecs:canonical_json",
    call_style="kwargs",
    security=SecurityConfig(sandbox=True),
    execution=ExecutionConfig(timeout_s=30),
)


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def _timed_calls(
    executor: RunnerExecutor, workdir: str, n: int, pause_s: float
) -> list[float]:
    context = ToolContext(session_id="bench", workdir=workdir)
    samples = []
    for i in range(n):
        call = ToolCall(name=_ECHO.name, arguments={"value": {"i": i, "text": "hello"}})
        started = time.perf_counter()
        result = await executor.run(_ECHO, call, context)
        samples.append((time.perf_counter() - started) * 1000)
        if not result.success:
            raise RuntimeError(f"benchmark call failed: {result.error}")
        if pause_s:
            await trio.sleep(pause_s)
    return samples


async def bench_sandbox(
    n: int = 50, *, settings: Mapping[str, Any] | None = None, pause_s: float = 0.25
) -> dict[str, Any]:
    """Latency of ``n`` sandboxed calls without a pool (cold) and from the warm pool.

    Warm calls are spaced by ``pause_s`` (an agent's think time between calls), which gives
    the replacement worker time to start, as it would in real use. Returns
    ``sandbox_cold_p50_ms``, ``sandbox_cold_p95_ms``, ``sandbox_warm_p50_ms``,
    ``sandbox_warm_p95_ms``, plus ``isolation`` and ``n``.
    """
    table = dict((settings or {}).get("runner", {}))
    with tempfile.TemporaryDirectory(prefix="tooldeck-bench-") as workdir:
        cold = RunnerExecutor.from_settings({"runner": {**table, "warm_workers": 0}})
        try:
            cold_ms = await _timed_calls(cold, workdir, n, 0.0)
            isolation = cold.sandbox_pool().isolation
        finally:
            await cold.aclose()
        warm = RunnerExecutor.from_settings(
            {"runner": {**table, "warm_workers": max(1, table.get("warm_workers", 2))}}
        )
        try:
            await warm.sandbox_pool().prewarm(workdir)
            await trio.sleep(pause_s)
            warm_ms = await _timed_calls(warm, workdir, n, pause_s)
        finally:
            await warm.aclose()
    return {
        "sandbox_cold_p50_ms": statistics.median(cold_ms),
        "sandbox_cold_p95_ms": _percentile(cold_ms, 0.95),
        "sandbox_warm_p50_ms": statistics.median(warm_ms),
        "sandbox_warm_p95_ms": _percentile(warm_ms, 0.95),
        "isolation": isolation,
        "n": n,
    }


async def bench_sandbox_limits(
    n: int = 30, *, settings: Mapping[str, Any] | None = None, rounds: int = 2
) -> dict[str, Any]:
    """What the per-call limits (cgroup, seccomp) cost a warm sandboxed call.

    Runs :func:`bench_sandbox` with ``cgroups = false, seccomp = false`` and with the defaults,
    alternating ``rounds`` times in one run (noise hits both alike), and returns the median warm
    p50 of each and their ratio: ``sandbox_warm_p50_ms_limits_off``,
    ``sandbox_warm_p50_ms_limits_on``, ``sandbox_limits_overhead_ratio``, plus the cold p50s.
    """
    table = dict((settings or {}).get("runner", {}))
    figures: dict[str, list[float]] = {}
    for _ in range(rounds):
        for label, extra in (("off", {"cgroups": False, "seccomp": False}), ("on", {})):
            got = await bench_sandbox(n, settings={"runner": {**table, **extra}})
            figures.setdefault(f"warm_{label}", []).append(got["sandbox_warm_p50_ms"])
            figures.setdefault(f"cold_{label}", []).append(got["sandbox_cold_p50_ms"])
    off = statistics.median(figures["warm_off"])
    on = statistics.median(figures["warm_on"])
    return {
        "sandbox_warm_p50_ms_limits_off": off,
        "sandbox_warm_p50_ms_limits_on": on,
        "sandbox_limits_overhead_ratio": on / off if off else float("nan"),
        "sandbox_cold_p50_ms_limits_off": statistics.median(figures["cold_off"]),
        "sandbox_cold_p50_ms_limits_on": statistics.median(figures["cold_on"]),
    }


async def _calls_per_s(
    executor: RunnerExecutor, workdir: str, n: int, concurrent: bool, session: str
) -> float:
    context = ToolContext(session_id=session, workdir=workdir)
    failures: list[Any] = []

    async def one(i: int) -> None:
        call = ToolCall(name=_ECHO.name, arguments={"value": {"i": i, "text": "hello"}})
        result = await executor.run(_ECHO, call, context)
        if not result.success:
            failures.append(result.error)

    started = time.perf_counter()
    if concurrent:
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
    else:
        for i in range(n):
            await one(i)
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"benchmark call failed: {failures[0]}")
    return n / elapsed


async def bench_sandbox_throughput(
    n: int = 60, *, settings: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Sustained sandboxed calls per second, ``n`` back to back and ``n`` at once (the
    category's concurrency limit queues them), with single-use workers (``zygote = false``)
    and forked in a zygote (``zygote = true``), in one run.

    Returns ``sandbox_calls_per_s_{sequential,concurrent}_{single_use,zygote}`` and the ratios
    ``sandbox_throughput_{sequential,concurrent}_ratio`` (zygote / single-use).
    """
    table = dict((settings or {}).get("runner", {}))
    figures: dict[str, Any] = {"n": n}
    with tempfile.TemporaryDirectory(prefix="tooldeck-bench-") as workdir:
        for label, zygote in (("single_use", False), ("zygote", True)):
            executor = RunnerExecutor.from_settings({"runner": {**table, "zygote": zygote}})
            try:
                # One call first: the pool's one-time set-up (id maps, first sandbox) is not
                # what "sustained" measures.
                await _calls_per_s(executor, workdir, 1, False, "bench")
                for mode in ("sequential", "concurrent"):
                    figures[f"sandbox_calls_per_s_{mode}_{label}"] = await _calls_per_s(
                        executor, workdir, n, mode == "concurrent", "bench"
                    )
                if zygote:
                    stats = executor.sandbox_pool().statistics()
                    figures["sandbox_zygote_fallback"] = stats.zygote_fallback
            finally:
                await executor.aclose()
    for mode in ("sequential", "concurrent"):
        before = figures[f"sandbox_calls_per_s_{mode}_single_use"]
        figures[f"sandbox_throughput_{mode}_ratio"] = (
            figures[f"sandbox_calls_per_s_{mode}_zygote"] / before if before else float("nan")
        )
    return figures


@tool(category="bench")
def bench_sync_add(a: int, b: int) -> int:
    """Add two integers in a plain function (run in a worker thread)."""
    return a + b


@tool(category="bench")
@nonblocking
def bench_sync_add_nonblocking(a: int, b: int) -> int:
    """Add two integers in a plain function marked @nonblocking (run on the event loop)."""
    return a + b


#: The tools :func:`bench_sync_tools` calls; register them in the deck whose ``call`` it gets.
SYNC_BENCH_TOOLS = (bench_sync_add, bench_sync_add_nonblocking)

#: What each figure of :func:`bench_sync_tools` measures, in words (for ``tooldeck bench``).
DESCRIPTIONS = {
    "sandbox_calls_per_s_sequential_single_use": "sandboxed calls per second back to back, "
    "single-use bubblewrap workers (the default)",
    "sandbox_calls_per_s_concurrent_single_use": "sandboxed calls per second, all at once, "
    "single-use bubblewrap workers (the default)",
    "sandbox_calls_per_s_sequential_zygote": "sandboxed calls per second back to back, each "
    "forked in the session's zygote ([runner] zygote = true)",
    "sandbox_calls_per_s_concurrent_zygote": "sandboxed calls per second, all at once, forked "
    "in the session's zygote ([runner] zygote = true)",
    "sandbox_throughput_sequential_ratio": "zygote / single-use workers, back to back (same run)",
    "sandbox_throughput_concurrent_ratio": "zygote / single-use workers, all at once (same run)",
    "sandbox_zygote_fallback": "why the zygote fell back to single-use workers (None: it did not)",
    "sandbox_throughput": "the zygote throughput bench (skipped, with the reason)",
    "sync_tool_overhead_us": "a plain def tool: what the pipeline adds to calling the function "
    "(worker thread), µs",
    "sync_tool_nonblocking_overhead_us": "the same tool marked @nonblocking (run on the event "
    "loop), µs",
    "langchain_ainvoke_sync_us": "LangChain StructuredTool.ainvoke of the same plain function, µs",
    "sync_tool_overhead_vs_langchain_ainvoke_ratio": "sync tool overhead vs LangChain ainvoke "
    "(ratio, same run; goal <= 0.15)",
    "sync_tool_nonblocking_overhead_vs_langchain_ainvoke_ratio": "@nonblocking sync tool "
    "overhead vs LangChain ainvoke (ratio, same run)",
    "thread_round_trip_us": "a bare round trip to a parked Python thread and back, both "
    "threads placed by the OS, no tooldeck (µs)",
    "thread_round_trip_vs_langchain_ainvoke_ratio": "that bare thread round trip vs LangChain "
    "ainvoke of the plain function (ratio, same run)",
}

#: How each figure is called: ``sync_tool_overhead_us`` and so on.
_SHAPES = (("sync_tool", bench_sync_add), ("sync_tool_nonblocking", bench_sync_add_nonblocking))


def _langchain_sync_batch() -> Callable[[int], float] | None:
    """A function timing ``n`` LangChain ``StructuredTool.ainvoke`` calls of the same plain
    function (LangChain runs it in asyncio's default executor), mean µs per call, each batch in
    its own asyncio loop; None when langchain-core is not importable."""
    try:
        from langchain_core.tools import StructuredTool
    except ImportError:
        return None
    lc_tool = StructuredTool.from_function(func=bench_sync_add, name="bench_sync_add")

    async def batch(n: int) -> float:
        await lc_tool.ainvoke({"a": 0, "b": 1})  # warm up (pydantic model, executor thread)
        started = time.perf_counter()
        for i in range(n):
            await lc_tool.ainvoke({"a": i, "b": 1})
        return (time.perf_counter() - started) / n * 1e6

    # asyncio.run from trio's thread is fine: trio registers no asyncio loop, and the trio loop
    # has nothing else to run while a batch blocks it.
    return lambda n: asyncio.run(batch(n))


def thread_round_trip_us(n: int) -> float:
    """Mean µs of a bare round trip to a parked Python thread and back: a ``SimpleQueue`` put
    wakes it, it releases a lock the caller waits on. No trio, no tooldeck, nothing run, and
    the OS places both threads freely.

    What a hop to another thread costs on the machine at hand (two OS wake-ups and two GIL
    hand-overs): on a virtual machine with an idle second CPU, mostly the wake-up of that CPU,
    which the runner's pinning of quick sync tools (``pin_sync_threads``) avoids."""
    jobs: queue.SimpleQueue[threading.Lock | None] = queue.SimpleQueue()

    def serve() -> None:
        while (done := jobs.get()) is not None:
            done.release()

    worker = threading.Thread(target=serve, name="tooldeck-bench-round-trip", daemon=True)
    worker.start()

    def rounds(count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            done = threading.Lock()
            done.acquire()
            jobs.put(done)
            done.acquire()  # until the worker releases it
        return (time.perf_counter() - started) / count * 1e6

    try:
        rounds(min(n, 200))  # warm up: the thread has run and parked once
        return rounds(n)
    finally:
        jobs.put(None)
        worker.join()


async def _mean_us(call: Callable[[int], Awaitable[Any]], n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        await call(i)
    return (time.perf_counter() - started) / n * 1e6


async def bench_sync_tools(
    call: Callable[[str, Mapping[str, Any]], Awaitable[Any]] | None = None,
    n: int = 2000,
    repeats: int = 5,
) -> dict[str, Any]:
    """What a plain ``def`` tool costs on top of calling the function, next to LangChain.

    ``call(name, arguments)`` runs one of :data:`SYNC_BENCH_TOOLS` through a pipeline (the deck's
    ``session.call``); without it the :class:`RunnerExecutor` alone is measured. Rounds of the
    pipeline and of LangChain's ``ainvoke`` of the same function alternate, so both see the same
    machine, and each ratio is the median of the per-round ratios. Returns
    ``sync_tool_overhead_us`` (worker thread), ``sync_tool_nonblocking_overhead_us`` (marked
    ``@nonblocking``, run inline), ``langchain_ainvoke_sync_us`` and
    ``sync_tool_overhead_vs_langchain_ainvoke_ratio`` (and the nonblocking one), or
    ``langchain`` saying why there is no comparison; and beside them a bare hop between two
    threads the OS places, :func:`thread_round_trip_us` (with its ratio to LangChain), measured
    in the same rounds (blocking the loop for its few milliseconds, as LangChain's batch does).
    """
    executor = None
    if call is None:
        executor = RunnerExecutor()
        context = ToolContext(session_id="bench", workdir=tempfile.gettempdir())
        definitions = {
            f.__name__: ToolDefinition(
                name=f.__name__,
                description="bench",
                category="bench",
                execute=f,
                call_style="kwargs",
            )
            for _, f in _SHAPES
        }

        async def direct_call(name: str, arguments: Mapping[str, Any]) -> Any:
            assert executor is not None
            return await executor.run(
                definitions[name], ToolCall(name=name, arguments=dict(arguments)), context
            )

        call = direct_call
    run_call = call
    langchain = _langchain_sync_batch()
    overheads: dict[str, list[float]] = {}
    chains: list[float] = []
    ratios: dict[str, list[float]] = {}
    hops: list[float] = []
    hop_ratios: list[float] = []
    try:
        for _, function in _SHAPES:
            await run_call(function.__name__, {"a": 0, "b": 1})  # warm up: threads, caches
        for _ in range(repeats):

            async def alone(i: int) -> Any:
                return bench_sync_add(a=i, b=1)

            base = await _mean_us(alone, n)
            chain = langchain(n) if langchain is not None else None
            hops.append(thread_round_trip_us(n))
            if chain is not None:
                chains.append(chain)
                hop_ratios.append(hops[-1] / chain)
            for shape, function in _SHAPES:

                async def piped(i: int, name: str = function.__name__) -> Any:
                    result = await run_call(name, {"a": i, "b": 1})
                    if not result.success:
                        raise RuntimeError(f"benchmark call failed: {result.error}")
                    return result

                overhead = await _mean_us(piped, n) - base
                overheads.setdefault(shape, []).append(overhead)
                if chain is not None:
                    ratios.setdefault(shape, []).append(overhead / chain)
    finally:
        if executor is not None:
            await executor.aclose()
    figures: dict[str, Any] = {
        f"{shape}_overhead_us": statistics.median(values) for shape, values in overheads.items()
    }
    if hops:
        figures["thread_round_trip_us"] = statistics.median(hops)
    if chains:
        figures["langchain_ainvoke_sync_us"] = statistics.median(chains)
        figures["thread_round_trip_vs_langchain_ainvoke_ratio"] = statistics.median(hop_ratios)
        for shape, values in ratios.items():
            figures[f"{shape}_overhead_vs_langchain_ainvoke_ratio"] = statistics.median(values)
    else:
        figures["langchain"] = "langchain-core not importable: no LangChain comparison"
    return figures


if __name__ == "__main__":  # pragma: no cover - manual use: python -m tooldeck_runner.bench
    import json
    import sys

    print(json.dumps(trio.run(bench_sandbox, int(sys.argv[1]) if len(sys.argv) > 1 else 50)))
