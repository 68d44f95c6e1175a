"""Tests of tooldeck-cache: hits, misses, eviction by count and bytes, TTL, statistics."""

from __future__ import annotations

import pytest
from tooldeck_cache import CacheStatistics, ResultCache, result_size
from tooldeck_cache.plugin import tooldeck_cache

from tooldeck_hookspecs import ToolResult


class FakeTimer:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ok(data: object) -> ToolResult:
    return ToolResult.ok(data, duration_s=0.01)


async def test_hit_returns_an_equal_result_and_miss_returns_none() -> None:
    cache = ResultCache()
    result = ok({"lines": ["a", "b"]})
    assert await cache.get("k") is None
    await cache.put("k", result, ttl_s=60)
    assert await cache.get("k") == result
    # Immutable data and metadata are handed out as the stored object itself (no copy).
    text = ok("plain text")
    await cache.put("text", text, ttl_s=60)
    assert await cache.get("text") is text
    assert await cache.get("other") is None
    stats = cache.statistics()
    assert (stats.hits, stats.misses, stats.entries) == (2, 2, 2)


async def test_only_successful_results_are_stored() -> None:
    cache = ResultCache()
    await cache.put("fail", ToolResult.fail("EXECUTION_ERROR", "boom"), ttl_s=60)
    await cache.put("zero-ttl", ok(1), ttl_s=0)
    assert await cache.get("fail") is None
    assert await cache.get("zero-ttl") is None
    assert cache.statistics().entries == 0


async def test_ttl_expiry_counts_as_a_miss() -> None:
    timer = FakeTimer()
    cache = ResultCache(timer=timer)
    await cache.put("short", ok("s"), ttl_s=5)
    await cache.put("long", ok("l"), ttl_s=50)
    timer.now += 4.9
    assert await cache.get("short") is not None
    timer.now += 0.2  # 5.1 s after the put
    assert await cache.get("short") is None
    assert await cache.get("long") is not None
    stats = cache.statistics()
    assert (stats.hits, stats.misses, stats.entries, stats.evictions) == (2, 1, 1, 0)


async def test_expired_entries_are_purged_and_never_counted_as_evictions() -> None:
    timer = FakeTimer()
    cache = ResultCache(max_entries=2, timer=timer)
    await cache.put("old", ok("o"), ttl_s=1)
    await cache.put("live", ok("l"), ttl_s=100)
    timer.now += 2
    # "old" is the least recently used and already expired: making room for "new" drops it,
    # which is expiry, not eviction.
    await cache.put("new", ok("n"), ttl_s=100)
    assert cache.statistics().evictions == 0
    assert await cache.get("live") is not None
    await cache.put("newer", ok("x"), ttl_s=100)  # now a live entry ("new") must go
    assert cache.statistics().evictions == 1
    assert await cache.get("new") is None
    # An expired entry nobody reads is purged by purge_expired() (and by statistics()).
    cache.clear()
    await cache.put("brief", ok("b"), ttl_s=1)
    await cache.put("lasting", ok("l"), ttl_s=100)
    timer.now += 5
    assert cache.purge_expired() == 1
    stats = cache.statistics()
    assert stats.entries == 1 and stats.bytes == result_size(ok("l"))
    assert stats.evictions == 1


async def test_evicts_least_recently_used_by_count() -> None:
    cache = ResultCache(max_entries=3)
    for key in "abc":
        await cache.put(key, ok(key), ttl_s=60)
    assert await cache.get("a") is not None  # "a" is now the most recently used
    await cache.put("d", ok("d"), ttl_s=60)
    assert await cache.get("b") is None
    for key in "acd":
        assert await cache.get(key) is not None, key
    stats = cache.statistics()
    assert stats.entries == 3
    assert stats.evictions == 1


async def test_evicts_by_bytes() -> None:
    payload = "x" * 1000
    size = result_size(ok(payload))
    cache = ResultCache(max_entries=100, max_bytes=size * 3 + size // 2)
    for key in "abcd":
        await cache.put(key, ok(payload), ttl_s=60)
    stats = cache.statistics()
    assert stats.entries == 3
    assert stats.evictions == 1
    assert stats.bytes == 3 * size
    assert await cache.get("a") is None
    assert await cache.get("d") is not None


async def test_result_bigger_than_max_bytes_is_not_stored_and_evicts_nothing() -> None:
    cache = ResultCache(max_bytes=500)
    await cache.put("small", ok("s"), ttl_s=60)
    await cache.put("big", ok("y" * 1000), ttl_s=60)
    assert await cache.get("big") is None
    assert await cache.get("small") is not None
    assert cache.statistics().evictions == 0


async def test_size_is_the_utf8_json_length() -> None:
    result = ToolResult.ok({"é": 1})
    assert result_size(result) == len(
        '{"data":{"é":1},"error":null,"metadata":{},"success":true}'.encode()
    )


async def test_size_of_values_orjson_refuses() -> None:
    # A lone surrogate and a 70-bit integer: measured by json.dumps with ASCII escapes.
    surrogate = ToolResult.ok("\ud800")
    assert result_size(surrogate) == len(
        '{"success":true,"data":"\\ud800","error":null,"metadata":{}}'
    )
    big = ToolResult.ok(2**70)
    assert result_size(big) == len(
        f'{{"success":true,"data":{2**70},"error":null,"metadata":{{}}}}'
    )
    # A value JSON cannot hold counts as its str().
    odd = ToolResult.ok({1: {3, 4}})
    assert result_size(odd) == len(
        f'{{"success":true,"data":{{"1":"{ {3, 4} }"}},"error":null,"metadata":{{}}}}'
    )


async def test_replacing_a_key_keeps_one_entry_and_byte_count_right() -> None:
    cache = ResultCache()
    await cache.put("k", ok("a" * 10), ttl_s=60)
    await cache.put("k", ok("b" * 100), ttl_s=60)
    stats = cache.statistics()
    assert stats.entries == 1
    assert stats.bytes == result_size(ok("b" * 100))
    got = await cache.get("k")
    assert got is not None and got.data == "b" * 100


async def test_clear_and_statistics_shape() -> None:
    cache = ResultCache(max_entries=7, max_bytes=10_000)
    await cache.put("k", ok(1), ttl_s=60)
    cache.clear()
    assert await cache.get("k") is None
    stats = cache.statistics()
    assert isinstance(stats, CacheStatistics)
    assert (stats.entries, stats.bytes, stats.max_entries, stats.max_bytes) == (0, 0, 7, 10_000)
    with pytest.raises(AttributeError):
        stats.hits = 3  # type: ignore[misc]


def test_provider_hook_reads_settings() -> None:
    cache = tooldeck_cache(settings={"cache": {"max_entries": 5, "max_bytes": 4096}})
    assert cache is not None
    assert (cache.max_entries, cache.max_bytes) == (5, 4096)
    assert tooldeck_cache(settings={"cache": {"enabled": False}}) is None
    default = tooldeck_cache(settings={})
    assert default is not None and default.max_entries == 1024


async def test_invalidate_drops_every_entry_of_the_named_tools():
    from tooldeck_cache import ResultCache

    from tooldeck_hookspecs import ToolResult

    cache = ResultCache()
    await cache.put("file_read@1.0.0:aa", ToolResult.ok("a"), 60)
    await cache.put("file_read@1.0.0:bb", ToolResult.ok("b"), 60)
    await cache.put("file_reader@1.0.0:cc", ToolResult.ok("c"), 60)
    await cache.put("list_dir@1.0.0:dd", ToolResult.ok("d"), 60)
    assert await cache.invalidate(["file_read", "list_dir"]) == 3
    assert await cache.get("file_read@1.0.0:aa") is None
    assert (await cache.get("file_reader@1.0.0:cc")).data == "c"
