"""RedisCache against a real redis-server: round trip, TTL, size cap, invalidation, fallback."""

from __future__ import annotations

import redis
import trio
from tooldeck_redis import RedisCache, RedisConnection, redis_settings
from tooldeck_redis.testing import RedisServer

from tooldeck_hookspecs import ErrorCode, ToolError, ToolResult


def make_cache(url: str, **table: object) -> RedisCache:
    parsed = redis_settings({"redis": {"url": url, "retry_interval_s": 0.2, **table}})
    assert parsed is not None
    return RedisCache(RedisConnection(parsed), parsed)


async def test_a_stored_result_comes_back_equal(redis_url: str) -> None:
    cache = make_cache(redis_url)
    result = ToolResult(
        success=True,
        data={"lines": ["a", "b"], "n": 2, "nested": {"x": None}},
        error=ToolError.of(ErrorCode.OUTPUT_TRUNCATED, "cut at 10 lines"),
        metadata={"duration_s": 0.25, "attempts": 1},
    )
    assert await cache.get("file_read@1.0.0:abc") is None
    await cache.put("file_read@1.0.0:abc", result, ttl_s=60)
    assert await cache.get("file_read@1.0.0:abc") == result
    raw = redis.Redis.from_url(redis_url)
    assert raw.exists("tooldeck:cache:file_read@1.0.0:abc")
    assert 0 < raw.pttl("tooldeck:cache:file_read@1.0.0:abc") <= 60_000
    stats = cache.statistics()
    assert (stats.hits, stats.misses, stats.stored, stats.errors) == (1, 1, 1, 0)
    await cache.aclose()


async def test_entries_expire_in_redis_and_failures_are_not_stored(redis_url: str) -> None:
    cache = make_cache(redis_url)
    await cache.put("t@1:short", ToolResult.ok("soon gone"), ttl_s=0.05)
    await cache.put("t@1:failed", ToolResult.fail(ErrorCode.TIMEOUT, "slow"), ttl_s=60)
    await trio.sleep(0.2)
    assert await cache.get("t@1:short") is None
    assert await cache.get("t@1:failed") is None
    await cache.aclose()


async def test_an_entry_above_the_cap_is_not_stored_and_drops_the_older_value(
    redis_url: str,
) -> None:
    cache = make_cache(redis_url, cache={"max_entry_bytes": 200})
    await cache.put("t@1:k", ToolResult.ok("small"), ttl_s=60)
    assert await cache.get("t@1:k") is not None
    await cache.put("t@1:k", ToolResult.ok("x" * 500), ttl_s=60)
    assert await cache.get("t@1:k") is None
    await cache.put("t@1:bytes", ToolResult.ok(b"not json"), ttl_s=60)
    assert await cache.get("t@1:bytes") is None
    assert cache.statistics().skipped == 2
    await cache.aclose()


async def test_invalidate_drops_exactly_the_named_tools(redis_url: str) -> None:
    cache = make_cache(redis_url)
    for i in range(700):  # more than one SCAN/UNLINK batch
        await cache.put(f"file_read@1.0.0:{i}", ToolResult.ok(i), ttl_s=60)
    await cache.put("file_read_all@1.0.0:x", ToolResult.ok("other tool"), ttl_s=60)
    await cache.put("dir_*list@1.0.0:x", ToolResult.ok("glob in the name"), ttl_s=60)
    assert await cache.invalidate(["file_read", "dir_*"]) == 700
    assert await cache.get("file_read@1.0.0:3") is None
    assert await cache.get("file_read_all@1.0.0:x") is not None
    assert await cache.get("dir_*list@1.0.0:x") is not None
    assert await cache.invalidate(["dir_*list"]) == 1
    await cache.aclose()


async def test_evictions_follow_the_servers_evicted_keys() -> None:
    with RedisServer.start_new(
        extra_args=("--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
    ) as server:
        cache = make_cache(server.url)
        for i in range(400):
            await cache.put(f"t@1:{i}", ToolResult.ok("x" * 20_000), ttl_s=600)
        stats = await cache.refresh_statistics()
        assert stats.evictions > 0
        assert stats.stored == 400
        await cache.aclose()


async def test_while_redis_is_down_the_local_cache_serves_then_redis_again(
    own_redis: RedisServer,
) -> None:
    cache = make_cache(own_redis.url)
    await cache.put("t@1:before", ToolResult.ok("in redis"), ttl_s=60)
    own_redis.stop()
    # A miss (Redis is down, nothing local yet), then the local cache serves what it stored.
    assert await cache.get("t@1:k") is None
    await cache.put("t@1:k", ToolResult.ok("local"), ttl_s=60)
    hit = await cache.get("t@1:k")
    assert hit is not None and hit.data == "local"
    # A write invalidates a tool while Redis is down: remembered for when it is back.
    assert await cache.invalidate(["t"]) == 1
    stats = cache.statistics()
    assert stats.redis_down and stats.errors >= 3 and stats.local_hits == 1
    own_redis.restart()
    raw = redis.Redis.from_url(own_redis.url)
    raw.set("tooldeck:cache:t@1:stale", b"{}")  # as if written by another worker meanwhile
    await trio.sleep(0.3)  # past retry_interval_s
    assert await cache.get("t@1:k") is None  # the local entry is gone, Redis has none
    assert not raw.exists("tooldeck:cache:t@1:stale")  # the invalidation was replayed
    await cache.put("t@1:k", ToolResult.ok("redis again"), ttl_s=60)
    assert raw.exists("tooldeck:cache:t@1:k")
    assert not cache.statistics().redis_down
    await cache.aclose()


async def test_fail_closed_cache_only_misses_while_redis_is_down(own_redis: RedisServer) -> None:
    cache = make_cache(own_redis.url, cache={"on_error": "fail_closed"})
    own_redis.stop()
    await cache.put("t@1:k", ToolResult.ok(1), ttl_s=60)
    assert await cache.get("t@1:k") is None
    assert cache.statistics().local_hits == 0
    await cache.aclose()
