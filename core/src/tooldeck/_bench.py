"""``tooldeck bench``: the call path measured side by side with the alternatives, as ratios.

Figures are medians of repeated batches in one process. Nothing here asserts a time: benchmarks
report, tests check behaviour.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from tooldeck_hookspecs import ToolDefinition, tool

from ._config import Config
from ._deck import Deck
from .testing import inline_plugin, tools_plugin

__all__ = ["run_bench", "run_bench_cli"]


@tool(category="bench", execution={"cacheable": True, "cache_ttl_s": 600})
async def bench_add(a: int, b: int) -> int:
    """Add two integers (the trivial tool every figure is measured with)."""
    return a + b


@tool(category="bench")
async def bench_add_awaiting(a: int, b: int) -> int:
    """Add two integers after a trio checkpoint (a tool that suspends, like any I/O tool)."""
    await trio.lowlevel.checkpoint()
    return a + b


@tool(category="bench")
def bench_add_sync(a: int, b: int) -> int:
    """Add two integers in a plain function (the deck runs it in a worker thread)."""
    return a + b


@tool(
    category="bench",
    execution={"cacheable": True, "cache_ttl_s": 600},
    security={"rate_limit": {"max_calls": 1_000_000_000, "window_s": 60}},
)
async def bench_limited(a: int, b: int) -> int:
    """Add two integers (cacheable and rate-limited: every stage has work to do)."""
    return a + b


async def _throughput(config: dict[str, Any], total: int, workers: int = 16) -> float:
    """Calls/s of the full pipeline for a cacheable, rate-limited tool, all cache misses."""
    deck = Deck.load(
        Config.from_mapping(config), plugins=[tools_plugin([bench_limited], name="bench")]
    )
    async with deck:
        session = deck.session()
        await session.call("bench_limited", {"a": -1, "b": 0})
        started = time.perf_counter()

        async def worker(offset: int) -> None:
            for i in range(offset, total, workers):
                result = await session.call("bench_limited", {"a": i, "b": 1})
                assert result.success, result.error

        async with trio.open_nursery() as nursery:
            for w in range(workers):
                nursery.start_soon(worker, w)
        return total / (time.perf_counter() - started)


async def _redis_figures(total: int) -> dict[str, Any]:
    """Pipeline throughput with Redis-backed cache and limits versus in memory, as a ratio."""
    try:
        from tooldeck_redis.testing import RedisServer, redis_server_binary
    except ImportError:
        return {"redis": "tooldeck-redis not installed"}
    if redis_server_binary() is None:
        return {"redis": "redis-server not installed"}
    server = RedisServer.start_new()
    try:
        memory = await _throughput({}, total)
        shared = await _throughput({"redis": {"url": server.url}}, total)
    finally:
        server.close()
    return {
        "calls_per_s_memory": memory,
        "calls_per_s_redis": shared,
        "redis_vs_memory_throughput_ratio": shared / memory,
    }


async def _per_call_us(call: Callable[[int], Awaitable[Any]], n: int, repeats: int) -> float:
    """Median over ``repeats`` batches of the mean time of ``n`` sequential calls, in µs."""
    means = []
    counter = 0
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(n):
            counter += 1
            await call(counter)
        means.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(means)


def _langchain_batch() -> Callable[[int], float] | None:
    """A function timing ``n`` LangChain ``StructuredTool.ainvoke`` calls (mean µs per call),
    each batch in its own asyncio loop; None when langchain-core is not installed."""
    try:
        from langchain_core.tools import StructuredTool
    except ImportError:
        return None

    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    lc_tool = StructuredTool.from_function(coroutine=add, name="bench_add")

    async def batch(n: int) -> float:
        await lc_tool.ainvoke({"a": 0, "b": 1})  # warm up (pydantic model building)
        started = time.perf_counter()
        for i in range(n):
            await lc_tool.ainvoke({"a": i, "b": 1})
        return (time.perf_counter() - started) / n * 1e6

    # asyncio.run from trio's thread is fine: trio does not register an asyncio loop, and the
    # trio loop has nothing else to run while a batch blocks it.
    return lambda n: asyncio.run(batch(n))


def _bench_deck() -> Deck:
    # All installed plugins with default settings (no configuration file), plus the bench tool.
    return Deck.load(
        Config.from_mapping({}),
        plugins=[tools_plugin([bench_add, bench_add_awaiting, bench_add_sync], name="bench")],
    )


async def _pipeline_figures(n: int, repeats: int) -> dict[str, float]:
    deck = _bench_deck()
    figures: dict[str, float] = {}
    langchain = _langchain_batch()
    async with deck:
        session = deck.session()
        definition: ToolDefinition = deck.catalog.get("bench_add")  # type: ignore[assignment]
        execute = definition.execute
        assert execute is not None

        async def direct(i: int) -> Any:
            return await execute(a=i, b=1)

        offset = [0]

        async def miss(i: int) -> Any:
            # Distinct arguments every time: each call probes the cache, misses, runs, stores.
            result = await session.call("bench_add", {"a": offset[0] + i, "b": 1})
            assert result.success, result.error
            return result

        async def hit(i: int) -> Any:
            return await session.call("bench_add", {"a": 1, "b": 1})

        await miss(-1)
        # The pipeline and LangChain batches alternate, so both see the same machine: the
        # ratio is the median of the per-round ratios, robust to a noisy neighbour.
        directs, pipelines, chains, ratios = [], [], [], []
        for round_ in range(repeats):
            offset[0] = (round_ + 1) * 10 * n
            directs.append(await _per_call_us(direct, n, 1))
            pipelines.append(await _per_call_us(miss, n, 1))
            overhead = pipelines[-1] - directs[-1]
            if langchain is not None:
                chains.append(langchain(n))
                ratios.append(overhead / chains[-1])
        figures["direct_call_us"] = statistics.median(directs)
        figures["pipeline_call_us"] = statistics.median(pipelines)
        figures["pipeline_overhead_us"] = statistics.median(
            p - d for p, d in zip(pipelines, directs, strict=True)
        )
        if chains:
            figures["langchain_ainvoke_us"] = statistics.median(chains)
            figures["overhead_vs_langchain_ratio"] = statistics.median(ratios)
            figures["pipeline_vs_langchain_ratio"] = statistics.median(
                p / c for p, c in zip(pipelines, chains, strict=True)
            )
        await hit(0)
        figures["cache_hit_us"] = await _per_call_us(hit, n, repeats)
        # The other tool shapes (not cacheable): what the pipeline adds to a tool that
        # suspends (a cancel scope with its deadline and a queue slot) and to a plain function
        # (a worker thread).
        for shape, name in (("awaiting", "bench_add_awaiting"), ("sync", "bench_add_sync")):
            function = deck.catalog.get(name).execute  # type: ignore[union-attr]
            assert function is not None

            async def alone(i: int, function: Any = function) -> Any:
                value = function(a=i, b=1)
                return await value if inspect.isawaitable(value) else value

            async def piped(i: int, name: str = name) -> Any:
                return await session.call(name, {"a": i, "b": 1})

            base = await _per_call_us(alone, n, repeats)
            figures[f"pipeline_overhead_{shape}_tool_us"] = (
                await _per_call_us(piped, n, repeats) - base
            )
        # Throughput: many concurrent callers, distinct arguments (no cache hits).
        total, workers = n * 2, 50
        started = time.perf_counter()

        async def worker(w: int) -> None:
            for i in range(w, total, workers):
                await session.call("bench_add", {"a": 10_000_000 + i, "b": 2})

        async with trio.open_nursery() as nursery:
            for w in range(workers):
                nursery.start_soon(worker, w)
        figures["calls_per_s"] = total / (time.perf_counter() - started)
    return figures


async def _policy_hook_figures(n: int, repeats: int) -> dict[str, float]:
    """What one extra custom policy hook adds per call: marked ``@nonblocking`` (called on the
    loop) and unmarked (run in a worker thread under the call's deadline)."""
    from tooldeck_hookspecs import nonblocking

    def opinion(call: Any, tool: Any, session: Any) -> None:
        return None

    cheap = nonblocking(lambda call, tool, session: None)
    figures: dict[str, float] = {}
    per_call: dict[str, list[float]] = {}
    for _ in range(repeats):
        for label, hook in (("none", None), ("nonblocking", cheap), ("threaded", opinion)):
            extra = (
                [inline_plugin(tooldeck_authorize_call=hook, name="bench_policy")]
                if hook is not None
                else []
            )
            deck = Deck.load(
                Config.from_mapping({}),
                plugins=[tools_plugin([bench_add], name="bench"), *extra],
            )
            async with deck:
                session = deck.session()
                base = 20_000_000 * (len(per_call.get(label, ())) + 1)

                async def call(i: int, session: Any = session, base: int = base) -> Any:
                    return await session.call("bench_add", {"a": base + i, "b": 1})

                await call(-1)
                per_call.setdefault(label, []).append(await _per_call_us(call, n, 1))
    none = statistics.median(per_call["none"])
    figures["policy_hook_nonblocking_added_us"] = statistics.median(per_call["nonblocking"]) - none
    figures["policy_hook_threaded_added_us"] = statistics.median(per_call["threaded"]) - none
    return figures


def run_bench(*, quick: bool = False) -> dict[str, Any]:
    """Run every benchmark whose plugin is installed; return the figures as one flat dict."""
    n, repeats = (300, 3) if quick else (2000, 7)
    figures: dict[str, Any] = dict(trio.run(_pipeline_figures, n, repeats))
    if "langchain_ainvoke_us" not in figures:
        figures["langchain"] = "langchain-core not installed"
    try:
        from tooldeck_runner.bench import bench_sandbox
    except ImportError:
        figures["sandbox"] = "tooldeck-runner sandbox bench not installed"
    else:
        figures.update(trio.run(bench_sandbox, 20 if quick else 50))
        from tooldeck_runner.bench import bench_sandbox_limits

        # The per-call cgroup and seccomp filter on a warm call, off and on, in one run.
        figures.update(trio.run(bench_sandbox_limits, 10 if quick else 30))
    figures.update(trio.run(_policy_hook_figures, n // 2, repeats))
    figures.update(trio.run(_redis_figures, 500 if quick else 3000))
    try:
        from ._eval import bench_selection
    except ImportError:
        figures["selection"] = "tooldeck-faiss not installed"
    else:
        sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
        try:
            figures.update(trio.run(bench_selection, sizes))
        except Exception as exc:
            figures["selection"] = f"skipped: {type(exc).__name__}: {exc}"
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in figures.items()}


def run_bench_cli(args: argparse.Namespace) -> int:
    """``tooldeck bench [--json] [--quick]``."""
    figures = run_bench(quick=args.quick)
    if args.json:
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="tooldeck bench (medians; lower is better unless noted)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
    console = Console()
    console.print(table)
    if "langchain_ainvoke_us" in figures:
        console.print(
            f"pipeline overhead is {figures['overhead_vs_langchain_ratio']:.3f}x of LangChain "
            f"tool.ainvoke ({figures['pipeline_overhead_us']:.1f} µs vs "
            f"{figures['langchain_ainvoke_us']:.1f} µs); "
            f"direct call {figures['direct_call_us']:.2f} µs"
        )
    return 0
