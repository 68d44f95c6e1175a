"""RedisRateLimiter against a real redis-server: exact windows, atomicity, outages."""

from __future__ import annotations

import pytest
import redis
import trio
from tooldeck_redis import RedisConnection, RedisRateLimiter, RedisUnavailable, redis_settings
from tooldeck_redis.testing import RedisServer

from tooldeck_hookspecs import RateLimit, SecurityConfig, SessionInfo, ToolDefinition


def limited(name: str = "web_search", max_calls: int = 3, window_s: float = 60) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description="a rate-limited tool",
        category="search",
        security=SecurityConfig(rate_limit=RateLimit(max_calls=max_calls, window_s=window_s)),
    )


def session(session_id: str = "ses_a") -> SessionInfo:
    return SessionInfo(session_id=session_id, workdir="/tmp")


def make_limiter(
    url: str, settings: dict[str, object] | None = None, **table: object
) -> RedisRateLimiter:
    parsed = redis_settings(
        {"redis": {"url": url, "retry_interval_s": 0.2, **table}, **(settings or {})}
    )
    assert parsed is not None
    return RedisRateLimiter(RedisConnection(parsed), parsed)


async def test_exactly_the_limit_passes_and_the_refusal_says_when_to_retry(redis_url: str) -> None:
    limiter = make_limiter(redis_url)
    tool = limited(max_calls=3, window_s=60)
    outcomes = [await limiter.hit(tool, session()) for _ in range(5)]
    assert [o.allowed for o in outcomes] == [True, True, True, False, False]
    refused = outcomes[-1]
    assert 0 < refused.retry_after_s <= 60
    assert refused.limit == "3 per 60 s for web_search in this session"
    # Another session has its own window; tools without a limit are never counted.
    assert (await limiter.hit(tool, session("ses_b"))).allowed
    free = ToolDefinition(name="free", description="no limit", category="api")
    assert (await limiter.hit(free, session())).allowed
    await limiter.aclose()


async def test_the_window_moves(redis_url: str) -> None:
    limiter = make_limiter(redis_url)
    tool = limited(max_calls=2, window_s=0.2)
    assert (await limiter.hit(tool, session())).allowed
    assert (await limiter.hit(tool, session())).allowed
    refused = await limiter.hit(tool, session())
    assert not refused.allowed and refused.retry_after_s <= 0.2
    await trio.sleep(0.3)
    assert (await limiter.hit(tool, session())).allowed
    await limiter.aclose()


async def test_the_cross_session_window_and_a_refusal_uses_no_slot(redis_url: str) -> None:
    limiter = make_limiter(redis_url, {"ratelimit": {"global": {"web_search": 4}}})
    tool = limited(max_calls=3)
    allowed = [(await limiter.hit(tool, session(f"ses_{i}"))).allowed for i in range(6)]
    assert allowed == [True] * 4 + [False] * 2
    refused = await limiter.hit(tool, session("ses_0"))
    assert refused.limit == "4 per 60 s for web_search across sessions"
    # The refused calls of ses_0 took no slot of its own window: 2 remain there.
    raw = redis.Redis.from_url(redis_url)
    assert raw.zcard("tooldeck:rl:s:web_search:ses_0") == 1
    assert 0 < raw.pttl("tooldeck:rl:t:web_search") <= 60_000
    assert await limiter.reset() == 5
    await limiter.aclose()


async def test_concurrent_hits_admit_exactly_the_limit(redis_url: str) -> None:
    limiter = make_limiter(redis_url, max_connections=4)
    tool = limited(max_calls=10)
    results: list[bool] = []

    async def one() -> None:
        results.append((await limiter.hit(tool, session())).allowed)

    async with trio.open_nursery() as nursery:
        for _ in range(40):
            nursery.start_soon(one)
    assert results.count(True) == 10 and len(results) == 40
    await limiter.aclose()


async def test_redis_down_fails_closed_with_its_url_then_recovers(own_redis: RedisServer) -> None:
    limiter = make_limiter(own_redis.url)
    tool = limited()
    assert (await limiter.hit(tool, session())).allowed
    own_redis.stop()
    with pytest.raises(RedisUnavailable, match=f"Redis at {own_redis.url} is unavailable"):
        await limiter.hit(tool, session())
    # Within retry_interval_s the breaker answers at once, still naming Redis.
    with pytest.raises(RedisUnavailable, match="not retried after ConnectionError"):
        await limiter.hit(tool, session())
    own_redis.restart()
    await trio.sleep(0.3)
    assert (await limiter.hit(tool, session())).allowed
    assert limiter.connection.recoveries == 1
    await limiter.aclose()


async def test_a_hung_redis_times_out_instead_of_blocking(own_redis: RedisServer) -> None:
    limiter = make_limiter(own_redis.url, socket_timeout_s=0.2)
    tool = limited()
    assert (await limiter.hit(tool, session())).allowed
    own_redis.pause()
    try:
        with pytest.raises(RedisUnavailable, match="Timeout"):
            await limiter.hit(tool, session())
    finally:
        own_redis.resume()
    await trio.sleep(0.3)
    assert (await limiter.hit(tool, session())).allowed
    await limiter.aclose()


async def test_local_fallback_counts_in_memory_while_redis_is_down(own_redis: RedisServer) -> None:
    limiter = make_limiter(own_redis.url, ratelimit={"on_error": "local"})
    tool = limited(max_calls=2)
    own_redis.stop()
    allowed = [(await limiter.hit(tool, session())).allowed for _ in range(3)]
    assert allowed == [True, True, False]
    assert limiter.local_decisions == 3
    await limiter.aclose()
