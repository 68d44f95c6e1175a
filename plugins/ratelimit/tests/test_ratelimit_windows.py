"""tooldeck-ratelimit: admission counts, retry_after_s, sessions, global bound, moving window."""

from __future__ import annotations

import pytest
import trio
from tooldeck_ratelimit import ToolRateLimiter, limiter_from_settings
from tooldeck_ratelimit.plugin import tooldeck_rate_limiter

from tooldeck_hookspecs import (
    ConfigError,
    RateLimit,
    SecurityConfig,
    SessionInfo,
    ToolDefinition,
)


def tool(
    name: str = "web_search", max_calls: int | None = 3, window_s: float = 60.0
) -> ToolDefinition:
    limit = None if max_calls is None else RateLimit(max_calls=max_calls, window_s=window_s)
    return ToolDefinition(
        name=name,
        description="a tool",
        category="search",
        security=SecurityConfig(rate_limit=limit),
    )


def session(sid: str) -> SessionInfo:
    return SessionInfo(session_id=sid, workdir="/tmp")


async def admitted(limiter: ToolRateLimiter, t: ToolDefinition, s: SessionInfo, n: int) -> int:
    count = 0
    for _ in range(n):
        if (await limiter.hit(t, s)).allowed:
            count += 1
    return count


async def test_tool_without_rate_limit_is_always_allowed() -> None:
    limiter = ToolRateLimiter()
    assert await admitted(limiter, tool(max_calls=None), session("s"), 500) == 500


async def test_exact_admission_count_and_retry_after() -> None:
    limiter = ToolRateLimiter()
    t, s = tool(max_calls=3, window_s=60), session("s1")
    outcomes = [await limiter.hit(t, s) for _ in range(5)]
    assert [o.allowed for o in outcomes] == [True, True, True, False, False]
    refused = outcomes[3]
    assert 0 < refused.retry_after_s <= 60
    assert refused.retry_after_s > 50  # the window opened moments ago
    assert "this session" in refused.limit and "web_search" in refused.limit


async def test_sessions_are_independent_but_bounded_globally() -> None:
    limiter = ToolRateLimiter(global_factor=2)  # 3 per session, 6 across sessions
    t = tool(max_calls=3)
    assert await admitted(limiter, t, session("a"), 10) == 3
    assert await admitted(limiter, t, session("b"), 10) == 3
    outcome = await limiter.hit(t, session("c"))
    assert not outcome.allowed
    assert "across sessions" in outcome.limit
    assert outcome.retry_after_s > 0


async def test_other_tools_do_not_share_windows() -> None:
    limiter = ToolRateLimiter()
    s = session("s")
    assert await admitted(limiter, tool("tool_a", 2), s, 5) == 2
    assert await admitted(limiter, tool("tool_b", 2), s, 5) == 2


async def test_refused_call_consumes_no_slot_of_the_other_window() -> None:
    # Global 4: "a" uses 2 of its 2, then keeps being refused by its session window; those
    # refusals must not eat the global window, so "b" still gets 2.
    limiter = ToolRateLimiter(global_overrides={"web_search": 4})
    t = tool(max_calls=2)
    assert await admitted(limiter, t, session("a"), 20) == 2
    assert await admitted(limiter, t, session("b"), 20) == 2
    assert await admitted(limiter, t, session("c"), 20) == 0


async def test_global_override_table_and_disable() -> None:
    limiter = limiter_from_settings(
        {
            "ratelimit": {
                "global_factor": 1,
                "global": {"web_search": {"max_calls": 5, "window_s": 60}, "file_read": 0},
            }
        }
    )
    searched = [await admitted(limiter, tool(max_calls=2), session(f"s{i}"), 3) for i in range(4)]
    assert searched == [2, 2, 1, 0]
    # file_read has no cross-session window: every session gets its full per-session quota.
    read = [await admitted(limiter, tool("file_read", 2), session(f"s{i}"), 3) for i in range(5)]
    assert read == [2, 2, 2, 2, 2]


async def test_window_moves_on() -> None:
    limiter = ToolRateLimiter()
    t, s = tool(max_calls=2, window_s=1), session("w")
    assert await admitted(limiter, t, s, 3) == 2
    refused = await limiter.hit(t, s)
    assert not refused.allowed
    assert 0 < refused.retry_after_s <= 1.0
    await trio.sleep(refused.retry_after_s + 0.05)
    assert (await limiter.hit(t, s)).allowed


async def test_zero_limit_refuses_with_positive_retry_after() -> None:
    limiter = ToolRateLimiter()
    outcome = await limiter.hit(tool(max_calls=0, window_s=5), session("z"))
    assert not outcome.allowed
    assert outcome.retry_after_s > 0


def test_configuration_errors_raise_at_start_up() -> None:
    with pytest.raises(ConfigError, match="storage_uri"):
        ToolRateLimiter(storage_uri="nosuchscheme://x")
    with pytest.raises(ConfigError, match="asyncio"):
        ToolRateLimiter(storage_uri="async+memory://")
    with pytest.raises(ConfigError, match="ratelimit.global.web_search"):
        ToolRateLimiter(global_overrides={"web_search": "lots"})


def test_provider_hook() -> None:
    limiter = tooldeck_rate_limiter(settings={})
    assert isinstance(limiter, ToolRateLimiter)
    assert limiter.storage_uri == "memory://"
    assert tooldeck_rate_limiter(settings={"ratelimit": {"enabled": False}}) is None
