"""The in-memory limiter forgets windows whose calls all expired: memory is bounded by traffic."""

from __future__ import annotations

import time

from tooldeck_ratelimit import ToolRateLimiter

from tooldeck_hookspecs import RateLimit, SecurityConfig, SessionInfo, ToolDefinition


def _tool() -> ToolDefinition:
    return ToolDefinition(
        name="limited",
        description="A limited tool.",
        category="demo",
        security=SecurityConfig(rate_limit=RateLimit(max_calls=5, window_s=1)),
        execute=print,
    )


async def test_windows_of_idle_sessions_are_dropped() -> None:
    limiter = ToolRateLimiter(global_factor=0)
    tool = _tool()
    for i in range(2_000):
        outcome = await limiter.hit(tool, SessionInfo(session_id=f"s{i}", workdir="/"))
        assert outcome.allowed
    events = limiter._storage.events  # type: ignore[attr-defined]
    assert len(events) >= 2_000
    assert limiter.sweep() == 0  # nothing has expired yet: every window stays
    assert len(events) >= 2_000
    time.sleep(1.1)  # the 1 s windows expire
    assert limiter.sweep() >= 2_000
    assert len(events) == 0
    # The limiter still limits after a sweep.
    session = SessionInfo(session_id="again", workdir="/")
    results = [(await limiter.hit(tool, session)).allowed for _ in range(6)]
    assert results == [True] * 5 + [False]
    await limiter.aclose()
