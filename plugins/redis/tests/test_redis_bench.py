"""The benchmark runs and reports every figure (values are reported, never judged)."""

from __future__ import annotations

from tooldeck_redis.bench import bench_redis


async def test_bench_reports_redis_and_memory_figures(redis_url: str) -> None:
    figures = await bench_redis(50, url=redis_url, concurrency=4)
    for path in ("miss_calls_per_s", "hit_calls_per_s", "miss_calls_per_s_concurrent"):
        assert figures[f"redis_{path}"] > 0 and figures[f"memory_{path}"] > 0
        assert figures[f"ratio_{path}"] > 0
    assert figures["url"] == redis_url and figures["n"] == 50
