"""Invalidation is one INCR of the tool's generation, compared by every read; the SCAN after it
is bounded cleanup. A probe that met an unreadable entry still judges its put by a generation.
TTLs beyond Redis' range are capped."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import redis
import trio
from tooldeck_redis import RedisCache, RedisConnection, redis_settings

from tooldeck_hookspecs import (
    ExecutionConfig,
    RateLimit,
    SecurityConfig,
    ToolDefinition,
    ToolResult,
    cache_key,
)

tooldeck_testing = pytest.importorskip("tooldeck.testing")

NS = "gens"


def make_cache(url: str, **table: Any) -> RedisCache:
    parsed = redis_settings({"redis": {"url": url, "namespace": NS, **table}})
    assert parsed is not None
    return RedisCache(RedisConnection(parsed), parsed)


async def _invalidate_cut_off_after_one_round_trip(cache: RedisCache, tools: list[str]) -> None:
    """``cache.invalidate(tools)`` as under a deadline that ends once Redis answered its first
    command: a SCAN over a large keyspace is cut off this way."""
    real = cache.connection.execute
    with trio.CancelScope() as scope:

        async def execute(what: str, *commands: Any) -> list[Any]:
            replies = await real(what, *commands)
            scope.cancel()
            return replies

        cache.connection.execute = execute  # type: ignore[method-assign]
        try:
            await cache.invalidate(tools)
        finally:
            del cache.connection.execute
    assert scope.cancelled_caught


async def test_an_invalidation_cut_off_after_its_first_round_trip_serves_nothing_stale(
    redis_url: str,
) -> None:
    """Before, reads did not check the generation: the invalidation was only as good as its
    SCAN of the whole keyspace, and cut off (2M unrelated keys, the writing tool's deadline),
    the old entries it had not reached kept being served, by every process."""
    reader, writer = make_cache(redis_url), make_cache(redis_url)
    try:
        await writer.invalidate(["warm_up"])  # the scripts are loaded: one round trip each
        for i in range(20):
            assert await reader.get(f"lookup@1:{i}") is None
            await reader.put(f"lookup@1:{i}", ToolResult.ok("old"), 60)
        assert (await reader.get("lookup@1:3")).data == "old"
        await _invalidate_cut_off_after_one_round_trip(writer, ["lookup"])
        for cache in (reader, writer):
            assert [await cache.get(f"lookup@1:{i}") for i in range(20)] == [None] * 20
        # What the reads met as stale they deleted (cleanup on the way).
        client = redis.Redis.from_url(redis_url)
        assert not list(client.scan_iter(f"{NS}:cache:lookup@*"))
        client.close()
    finally:
        await reader.aclose()
        await writer.aclose()


async def test_an_invalidation_cut_off_before_redis_answered_is_done_later(
    redis_url: str,
) -> None:
    """Cut off before its INCR reached Redis, an invalidation is remembered and done before
    this cache next reads: its own process never serves what the write made stale."""
    cache = make_cache(redis_url)
    try:
        assert await cache.get("lookup@1:k") is None
        await cache.put("lookup@1:k", ToolResult.ok("old"), 60)
        real = cache.connection.execute
        with trio.CancelScope() as scope:

            async def execute(what: str, *commands: Any) -> list[Any]:
                scope.cancel()
                await trio.lowlevel.checkpoint()  # cancelled here: nothing is sent
                return await real(what, *commands)

            cache.connection.execute = execute  # type: ignore[method-assign]
            try:
                await cache.invalidate(["lookup"])
            finally:
                del cache.connection.execute
        assert scope.cancelled_caught
        assert await cache.get("lookup@1:k") is None
    finally:
        await cache.aclose()


async def test_an_invalidation_costs_a_bounded_number_of_round_trips(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    for batch in range(4):  # 40,000 unrelated keys: 80 SCAN batches of 500 to go through them
        client.eval(
            "for i = 1, 10000 do redis.call('SET', 'other:' .. ARGV[1] .. ':' .. i, 'x') end",
            0, batch,
        )
    cache = make_cache(redis_url)
    try:
        assert await cache.get("lookup@1:k") is None
        await cache.put("lookup@1:k", ToolResult.ok("old"), 60)
        client.config_resetstat()
        await cache.invalidate(["lookup"])
        scans = int(client.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))
        assert scans <= 8, scans
        assert await cache.get("lookup@1:k") is None
        # The next invalidations go on with the cleanup where this one stopped.
        for _ in range(30):
            await cache.invalidate(["lookup"])
        assert int(client.info("commandstats")["cmdstat_scan"]["calls"]) > scans
    finally:
        await cache.aclose()
        client.close()


async def test_a_lost_generation_does_not_revive_older_entries(redis_url: str) -> None:
    """A generation key evicted (allkeys-lru) or lost starts afresh from the server clock, not
    from 0: entries stored under an earlier generation stay stale."""
    cache = make_cache(redis_url)
    client = redis.Redis.from_url(redis_url)
    try:
        await cache.invalidate(["warm_up"])
        assert await cache.get("lookup@1:k") is None
        await cache.put("lookup@1:k", ToolResult.ok("old"), 60)
        await _invalidate_cut_off_after_one_round_trip(cache, ["lookup"])
        client.delete(f"{NS}:cachegen:lookup")
        assert await cache.get("lookup@1:k") is None
    finally:
        await cache.aclose()
        client.close()


async def test_entries_of_an_earlier_version_without_a_generation_are_misses(
    redis_url: str,
) -> None:
    cache = make_cache(redis_url)
    client = redis.Redis.from_url(redis_url)
    try:
        client.set(f"{NS}:cache:lookup@1:k",
                   '{"success":true,"data":"unversioned","error":null,"metadata":{}}')
        assert await cache.get("lookup@1:k") is None
        await cache.put("lookup@1:k", ToolResult.ok("fresh"), 60)
        assert (await cache.get("lookup@1:k")).data == "fresh"
    finally:
        await cache.aclose()
        client.close()


# ---------------------------------------------------------------- unreadable entry, two decks

OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def _tools(disk: dict[str, Any]) -> list[ToolDefinition]:
    async def read(arguments: Any, context: Any) -> Any:
        value = disk["value"]
        if "inside" in disk:
            disk["inside"].set()
            await disk["release"].wait()
        return value

    def write(arguments: Any, context: Any) -> Any:
        disk["value"] = arguments["text"]
        return "ok"

    return [
        ToolDefinition(
            name="limited_lookup", description="Cacheable and rate limited.", category="api",
            parameters=OBJECT, execution=ExecutionConfig(cacheable=True, cache_ttl_s=60),
            security=SecurityConfig(rate_limit=RateLimit(max_calls=50)), execute=read,
        ),
        ToolDefinition(
            name="write_value", description="Invalidates limited_lookup.", category="api",
            parameters=OBJECT, execution=ExecutionConfig(invalidates=("limited_lookup",)),
            execute=write,
        ),
    ]


def _deck(url: str, tools: list[ToolDefinition]) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache", "ratelimit", "redis"],
        tools=tools,
        config={"redis": {"url": url, "namespace": NS}},
    )


async def test_a_probe_that_met_an_unreadable_entry_does_not_store_across_a_write(
    redis_url: str, tmp_path: Path
) -> None:
    """Worker A's probe finds an unreadable entry (garbage, another version's): before, it noted
    no generation and its put stored unconditionally, so worker B's write during A's call was
    followed by B reading A's pre-write value from the cache."""
    disk: dict[str, Any] = {"value": "old"}
    tools = _tools(disk)
    client = redis.Redis.from_url(redis_url)
    async with _deck(redis_url, tools) as a, _deck(redis_url, tools) as b:
        sa, sb = a.session(workdir=tmp_path), b.session(workdir=tmp_path)
        key = f"{NS}:cache:" + cache_key(tools[0], {"text": "q"}, sa.info())
        assert (await sa.call("limited_lookup", {"text": "q"})).success  # stores "old"
        client.set(key, b"\x00 not json")  # another version's entry, or garbage
        disk["inside"], disk["release"] = trio.Event(), trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sa.call, "limited_lookup", {"text": "q"})
            await disk["inside"].wait()
            written = await sb.call("write_value", {"text": "new"})
            disk["release"].set()
        assert written.success
        del disk["inside"], disk["release"]
        for session in (sb, sa):
            later = await session.call("limited_lookup", {"text": "q"})
            assert later.data == "new", later
    client.close()


async def test_an_unreadable_entry_under_the_current_generation_is_judged_too(
    redis_url: str, tmp_path: Path
) -> None:
    # The entry passes the script's checks (current generation) but does not decode: the
    # script answers it as a hit, the client finds it unreadable; its generation still counts.
    disk: dict[str, Any] = {"value": "old"}
    tools = _tools(disk)
    client = redis.Redis.from_url(redis_url)
    async with _deck(redis_url, tools) as a, _deck(redis_url, tools) as b:
        sa, sb = a.session(workdir=tmp_path), b.session(workdir=tmp_path)
        key = f"{NS}:cache:" + cache_key(tools[0], {"text": "q"}, sa.info())
        assert (await sa.call("limited_lookup", {"text": "q"})).success
        generation = client.get(f"{NS}:cachegen:limited_lookup")
        assert generation is not None
        client.set(key, generation + b"|\x00 not json")
        disk["inside"], disk["release"] = trio.Event(), trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sa.call, "limited_lookup", {"text": "q"})
            await disk["inside"].wait()
            written = await sb.call("write_value", {"text": "new"})
            disk["release"].set()
        assert written.success
        del disk["inside"], disk["release"]
        for session in (sb, sa):
            later = await session.call("limited_lookup", {"text": "q"})
            assert later.data == "new", later
    client.close()


async def test_a_put_whose_probe_noted_no_generation_stores_nothing(redis_url: str) -> None:
    cache = make_cache(redis_url)
    try:
        cache._saw("lookup@1:k", None)
        await cache.put("lookup@1:k", ToolResult.ok("unsure"), 60)
        assert await cache.get("lookup@1:k") is None
        assert cache.statistics().skipped == 1
    finally:
        await cache.aclose()


# ---------------------------------------------------------------- TTL

@pytest.mark.parametrize("ttl_s", [1e9, 1e16, 1e300, math.inf])
async def test_a_ttl_beyond_what_redis_accepts_is_capped(redis_url: str, ttl_s: float) -> None:
    """Before, Redis refused ``PX`` past its clock's range ("invalid expire time"): every put
    of a tool with ``cache_ttl_s`` of 1e16 or more was a Redis error and nothing was shared."""
    cache = make_cache(redis_url)
    client = redis.Redis.from_url(redis_url)
    try:
        assert await cache.get("lookup@1:k") is None
        await cache.put("lookup@1:k", ToolResult.ok("kept"), ttl_s)
        assert (await cache.get("lookup@1:k")).data == "kept"
        stats = cache.statistics()
        assert stats.errors == 0 and stats.stored == 1 and not stats.redis_down
        assert client.pttl(f"{NS}:cache:lookup@1:k") > 0
    finally:
        await cache.aclose()
        client.close()


@pytest.mark.parametrize("ttl_s", [0, -1, math.nan])
async def test_a_ttl_that_is_not_positive_stores_nothing(redis_url: str, ttl_s: float) -> None:
    cache = make_cache(redis_url)
    try:
        await cache.put("lookup@1:k", ToolResult.ok("never"), ttl_s)
        assert await cache.get("lookup@1:k") is None
        assert cache.statistics().errors == 0
    finally:
        await cache.aclose()
