"""Benchmark for ``tooldeck bench``: the per-call stage work against Redis versus in memory.

Figures are reported, never asserted: machines are noisy.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from tooldeck_hookspecs import (
    RateLimit,
    SecurityConfig,
    SessionInfo,
    ToolDefinition,
    ToolResult,
    cache_key,
)

from ._cache import RedisCache
from ._client import RedisConnection
from ._limiter import RedisRateLimiter
from ._settings import redis_settings
from .testing import RedisServer, redis_server_binary

__all__ = ["DESCRIPTIONS", "bench_redis"]

#: What each figure of :func:`bench_redis` measures, in words (for ``tooldeck bench``'s table).
DESCRIPTIONS = {
    "redis_vs_memory_miss_calls_per_s_concurrent": "cache miss + rate limit + cache put, "
    "16 callers: Redis-backed throughput as a fraction of in-memory (higher is better)",
    "redis_vs_memory_hit_calls_per_s_concurrent": "cache hit, 16 callers: Redis-backed "
    "throughput as a fraction of in-memory (higher is better)",
    "calls_per_s_redis": "full pipeline, cacheable and rate-limited tool, 16 callers, Redis",
    "calls_per_s_memory": "the same in memory",
    "redis_vs_memory_throughput_ratio": "full pipeline with Redis-backed cache and limits, "
    "16 callers: throughput as a fraction of in-memory (goal >= 0.5)",
}

_TOOL = ToolDefinition(
    name="bench_lookup",
    description="benchmark tool",
    category="bench",
    # A limit never reached: the figures measure the bookkeeping, not refusals.
    security=SecurityConfig(rate_limit=RateLimit(max_calls=10**9, window_s=60)),
)
_RESULT = ToolResult.ok({"answer": 42, "text": "x" * 200}, duration_s=0.001)


async def _throughput(one: Callable[[int], Awaitable[None]], n: int, concurrency: int) -> float:
    """Calls per second of ``n`` calls run by ``concurrency`` tasks."""
    counter = iter(range(n))

    async def runner() -> None:
        for i in counter:
            await one(i)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(runner)
    return n / (time.perf_counter() - started)


async def _figures(
    cache: Any, limiter: Any, n: int, concurrency: int, tag: str
) -> dict[str, float]:
    sessions = [SessionInfo(session_id=f"ses_{tag}_{i}", workdir="/tmp") for i in range(8)]

    async def miss_path(i: int) -> None:
        # What the deck does for a cacheable, rate-limited call that misses the cache.
        info = sessions[i % len(sessions)]
        key = cache_key(_TOOL, {"i": i, "tag": tag}, info)
        if await cache.get(key) is None:
            outcome = await limiter.hit(_TOOL, info)
            assert outcome.allowed
            await cache.put(key, _RESULT, 60)

    hot_key = cache_key(_TOOL, {"hot": tag}, sessions[0])
    await cache.put(hot_key, _RESULT, 600)

    async def hit_path(_i: int) -> None:
        assert await cache.get(hot_key) is not None

    await miss_path(-1)  # warm up connections and scripts
    return {
        "miss_calls_per_s": await _throughput(miss_path, n, 1),
        "miss_calls_per_s_concurrent": await _throughput(miss_path, n, concurrency),
        "hit_calls_per_s": await _throughput(hit_path, n, 1),
        "hit_calls_per_s_concurrent": await _throughput(hit_path, n, concurrency),
    }


async def bench_redis(
    n: int = 2000, *, url: str | None = None, concurrency: int = 16
) -> dict[str, Any]:
    """Throughput of the cache and rate-limit work per call, Redis-backed versus in memory.

    The *miss* path is a cache probe that misses, a rate-limit hit and a cache put (a cacheable,
    rate-limited call's bookkeeping around the tool); the *hit* path is one cache probe. Each is
    run sequentially and by ``concurrency`` trio tasks. Without ``url`` a private redis-server is
    started on a free loopback port (and ``{"skipped": reason}`` returned if there is none).

    Returns ``redis_*`` and ``memory_*`` calls/s figures, ``ratio_*`` (memory / Redis) and
    ``redis_vs_memory_*`` (Redis / memory, see :data:`DESCRIPTIONS`), ``n``,
    ``concurrency`` and the masked Redis URL.
    """
    from tooldeck_cache import ResultCache
    from tooldeck_ratelimit import ToolRateLimiter

    server = None
    if url is None:
        if redis_server_binary() is None:
            return {"skipped": "redis-server not installed and no url given"}
        server = RedisServer.start_new()
        url = server.url
    try:
        parsed = redis_settings({"redis": {"url": url, "namespace": "tooldeck-bench"}})
        assert parsed is not None
        cache = RedisCache(RedisConnection(parsed), parsed)
        limiter = RedisRateLimiter(RedisConnection(parsed), parsed)
        try:
            redis_figures = await _figures(cache, limiter, n, concurrency, "r")
            await cache.clear()
            await limiter.reset()
        finally:
            await cache.aclose()
            await limiter.aclose()
        memory_limiter = ToolRateLimiter()
        try:
            memory_figures = await _figures(
                ResultCache(max_entries=n + 16), memory_limiter, n, concurrency, "m"
            )
        finally:
            await memory_limiter.aclose()
    finally:
        if server is not None:
            server.close()
    figures: dict[str, Any] = {"n": n, "concurrency": concurrency, "url": parsed.masked_url}
    for name, value in redis_figures.items():
        figures[f"redis_{name}"] = round(value, 1)
        figures[f"memory_{name}"] = round(memory_figures[name], 1)
        figures[f"ratio_{name}"] = round(memory_figures[name] / value, 1)
        figures[f"redis_vs_memory_{name}"] = round(value / memory_figures[name], 3)
    return figures
