"""tooldeck-redis's part of ``tooldeck bench`` (hookimpls, re-exported by
:mod:`tooldeck_redis.plugin`): the whole pipeline with Redis-backed cache and limits next to
the same in memory, in one run, on a private redis-server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tooldeck_hookspecs import hookimpl
from tooldeck_hookspecs.specs.bench import BenchComparison, BenchDescriptions

_WORDS = {
    "calls_per_s_memory": "full pipeline, 16 callers, cache and limits in memory (calls/s, "
    "median of 3 runs alternated with Redis)",
    "calls_per_s_redis": "full pipeline, 16 callers, cache and limits in Redis (calls/s, "
    "median of 3 runs alternated with memory)",
    "redis_vs_memory_throughput_ratio": "full pipeline throughput: Redis-backed / in memory",
    "redis": "Redis comparison",
}


@hookimpl
def tooldeck_bench_descriptions() -> BenchDescriptions:
    """The Redis figures in words, and the Redis line of the side table."""
    from .bench import DESCRIPTIONS

    return BenchDescriptions(
        figures={**DESCRIPTIONS, **_WORDS},
        comparisons=(
            BenchComparison(
                what="full pipeline, 16 callers: Redis-backed cache and limits vs in memory "
                "(calls/s)",
                ours="calls_per_s_redis",
                theirs="calls_per_s_memory",
                ratio="redis_vs_memory_throughput_ratio",
                goal=">= 0.5x",
                position=30,
            ),
        ),
    )


@hookimpl
def tooldeck_bench_figures(
    quick: bool,
    pipeline_throughput: Callable[[Mapping[str, Any], int], Awaitable[float]],
) -> dict[str, Any]:
    """Pipeline throughput with Redis-backed cache and limits versus in memory, as a ratio."""
    import statistics

    import trio

    from .testing import RedisServer, redis_server_binary

    if redis_server_binary() is None:
        return {"redis": "redis-server not installed"}
    total = 500 if quick else 3000
    # One timed run of each swung the ratio from 0.44 to 0.80 on the same machine (the first
    # run against a new server is the slow one): alternate the two and take each one's median.
    rounds = 1 if quick else 3

    async def both() -> dict[str, Any]:
        server = RedisServer.start_new()
        memory_runs: list[float] = []
        shared_runs: list[float] = []
        try:
            for _ in range(rounds):
                memory_runs.append(await pipeline_throughput({}, total))
                shared_runs.append(await pipeline_throughput({"redis": {"url": server.url}}, total))
        finally:
            server.close()
        memory = statistics.median(memory_runs)
        shared = statistics.median(shared_runs)
        return {
            "calls_per_s_memory": memory,
            "calls_per_s_redis": shared,
            "redis_vs_memory_throughput_ratio": shared / memory,
        }

    return trio.run(both)
