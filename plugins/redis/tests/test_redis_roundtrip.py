"""Round trips: the commands a call costs (counted by the server), one connection shared by
concurrent callers, and a connection that stays in step when callers give up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
import trio
from tooldeck_redis import RedisCache, RedisConnection, RedisRateLimiter, redis_settings
from tooldeck_redis.testing import RedisServer

from tooldeck_hookspecs import (
    ExecutionConfig,
    RateLimit,
    SecurityConfig,
    SessionInfo,
    ToolDefinition,
    ToolResult,
)

tooldeck_testing = pytest.importorskip("tooldeck.testing")

OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}


def echo(arguments: Any, context: Any) -> Any:
    return arguments.get("text", "")


LOOKUP = ToolDefinition(
    name="lookup",
    description="A cached, rate-limited echo.",
    category="api",
    parameters=OBJECT,
    execution=ExecutionConfig(cacheable=True, cache_ttl_s=60),
    security=SecurityConfig(rate_limit=RateLimit(max_calls=1000, window_s=60)),
    execute=echo,
)


def _commands(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (commands run by scripts included)."""
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if not name.startswith("cmdstat_config")
    }


def _deck(url: str) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache", "ratelimit", "redis"],
        tools=[LOOKUP],
        config={"redis": {"url": url}},
    )


async def test_a_cacheable_limited_call_costs_one_round_trip_for_cache_and_limit(
    redis_url: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url)
    async with _deck(redis_url) as deck:
        session = deck.session(workdir=tmp_path)
        assert (await session.call("lookup", {"text": "warm"})).success
        client.config_resetstat()
        for i in range(5):
            result = await session.call("lookup", {"text": f"miss {i}"})
            assert result.success and result.metadata["cached"] is False
        sent = _commands(client)
        # Per miss: one script (cache probe + both windows) and one storing the result if the
        # tool's cache generation is still the one the probe saw. The GETs, the SET and the
        # window commands run inside the scripts, on the server.
        assert sent["evalsha"] == 10 and sent["set"] == 5, sent
        assert sent["get"] == 15 and sent["zadd"] == 10, sent  # (inside the scripts)
        assert "eval" not in sent and "multi" not in sent
        client.config_resetstat()
        for i in range(5):
            result = await session.call("lookup", {"text": f"miss {i}"})
            assert result.success and result.metadata["cached"] is True, result
        # A hit: the same script answers with the entry and counts nothing. It reads the tool's
        # generation too: an entry stored under an older one (before an invalidation) is stale.
        assert _commands(client) == {"evalsha": 5, "get": 10}
    client.close()


async def test_a_hit_does_not_use_up_the_rate_limit(redis_url: str, tmp_path: Path) -> None:
    tight = ToolDefinition(
        name="tight",
        description="Two calls a minute.",
        category="api",
        parameters=OBJECT,
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=60),
        security=SecurityConfig(rate_limit=RateLimit(max_calls=2, window_s=60)),
        execute=echo,
    )
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache", "ratelimit", "redis"],
        tools=[tight],
        config={"redis": {"url": redis_url}},
    )
    async with deck:
        session = deck.session(workdir=tmp_path)
        for _ in range(5):  # one miss, then hits: only the miss counts
            assert (await session.call("tight", {"text": "same"})).success
        assert (await session.call("tight", {"text": "other"})).success
        refused = await session.call("tight", {"text": "third"})
        assert refused.error is not None and refused.error.code == "RATE_LIMIT_EXCEEDED"
        assert refused.error.retry_after_s and refused.error.retry_after_s > 0


async def test_concurrent_callers_share_one_connection(redis_url: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    before = len(client.client_list())
    async with _deck(redis_url) as deck:
        session = deck.session(workdir=tmp_path)
        results: list[ToolResult] = []

        async def caller(w: int) -> None:
            for i in range(20):
                results.append(await session.call("lookup", {"text": f"{w}-{i}"}))

        async with trio.open_nursery() as nursery:
            for w in range(16):
                nursery.start_soon(caller, w)
        assert len(results) == 320 and all(r.success for r in results)
        # 16 callers, one connection: the cache's, which carries the combined probe-and-limit
        # script and the puts (no pool, no growth with callers).
        assert len(client.client_list()) - before == 1
        assert {r.data for r in results} == {f"{w}-{i}" for w in range(16) for i in range(20)}
    client.close()


def _settings(url: str, **extra: Any) -> Any:
    parsed = redis_settings({"redis": {"url": url, **extra}})
    assert parsed is not None
    return parsed


async def test_callers_who_gave_up_leave_the_connection_in_step(own_redis: RedisServer) -> None:
    # retry_interval_s = 0: the breaker opens (see below) but lets the next call through.
    settings = _settings(own_redis.url, socket_timeout_s=30, retry_interval_s=0)
    connection = RedisConnection(settings)
    for i in range(20):
        assert await connection.call("seed", "SET", f"k{i}", f"v{i}") == b"OK"
    pipe = connection._pipe
    own_redis.pause()
    try:
        # Callers whose deadline passes while the server is frozen stop waiting at once.
        with trio.move_on_after(0.2) as scope:
            async with trio.open_nursery() as nursery:
                for i in range(10):
                    nursery.start_soon(connection.call, "abandoned", "GET", f"k{i}")
        assert scope.cancelled_caught
    finally:
        own_redis.resume()
    # A deadline that expired waiting for Redis is a failure for the breaker...
    assert connection.failures >= 1
    # ... but the connection stays: their replies arrive later and are dropped, and everyone
    # after them gets their own.
    got = await connection.execute("read", *(["GET", f"k{i}"] for i in range(10, 20)))
    assert got == [f"v{i}".encode() for i in range(10, 20)]
    assert connection._pipe is pipe and connection.recoveries == 1
    await connection.aclose()


async def test_scripts_survive_a_script_flush_and_a_restart(own_redis: RedisServer) -> None:
    settings = _settings(own_redis.url, retry_interval_s=0.05)
    limiter = RedisRateLimiter(RedisConnection(settings), settings)
    cache = RedisCache(RedisConnection(settings), settings)
    session = SessionInfo(session_id="s", workdir="/tmp")
    assert (await limiter.hit(LOOKUP, session)).allowed
    client = redis.Redis.from_url(own_redis.url)
    client.script_flush()
    # NOSCRIPT means nothing ran: sent again in full, counted once.
    assert (await limiter.hit(LOOKUP, session)).allowed
    hit, outcome = await cache.get_and_hit("k", limiter, LOOKUP, session)
    assert hit is None and outcome is not None and outcome.allowed
    windows = [k for k in client.scan_iter(match="tooldeck:rl:s:*")]
    assert client.zcard(windows[0]) == 3
    client.close()
    own_redis.stop()
    own_redis.restart()
    await trio.sleep(0.1)  # past retry_interval_s
    assert (await limiter.hit(LOOKUP, session)).allowed  # a new connection, scripts loaded again
    # (Not "k": its miss saw a generation the restart lost, so its put stores nothing.)
    await cache.put("k2", ToolResult.ok("v"), 60)
    hit, outcome = await cache.get_and_hit("k2", limiter, LOOKUP, session)
    assert hit is not None and hit.data == "v" and outcome is None
    await limiter.aclose()
    await cache.aclose()


def test_one_connection_serves_successive_trio_runs(redis_url: str) -> None:
    connection = RedisConnection(_settings(redis_url))

    async def once(value: str) -> Any:
        await connection.call("set", "SET", "key", value)
        return await connection.call("get", "GET", "key")

    # Each run gets its own socket and reader task; the old run's are gone.
    assert trio.run(once, "a") == b"a"
    assert trio.run(once, "b") == b"b"


async def test_password_and_database_from_the_url() -> None:
    from tooldeck_redis import RedisUnavailable
    from tooldeck_redis.testing import redis_server_binary

    if redis_server_binary() is None:
        pytest.skip("redis-server not installed")
    with RedisServer.start_new(extra_args=("--requirepass", "s3cret")) as server:
        base = f"127.0.0.1:{server.port}"
        connection = RedisConnection(_settings(f"redis://:s3cret@{base}/2"))
        assert await connection.call("write", "SET", "k", "v") == b"OK"
        raw = redis.Redis.from_url(f"redis://:s3cret@{base}/2")
        assert raw.get("k") == b"v"  # in database 2, as the URL says
        raw.close()
        await connection.aclose()
        wrong = RedisConnection(_settings(f"redis://:nope@{base}/0"))
        with pytest.raises(RedisUnavailable) as refused:
            await wrong.call("write", "SET", "k", "v")
        assert "nope" not in str(refused.value) and "***" in str(refused.value)
