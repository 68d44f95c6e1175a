"""tooldeck-ratelimit inside a real deck: the third call in a window gets RATE_LIMIT_EXCEEDED."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tooldeck_hookspecs import ErrorCode, RateLimit, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")


async def test_deck_refuses_calls_over_the_limit_with_retry_after(tmp_path: Path) -> None:
    ran: list[int] = []

    def ping(arguments: Any, context: Any) -> str:
        ran.append(1)
        return "pong"

    tool = ToolDefinition(
        name="ping_service",
        description="Ping the service.",
        category="api",
        security=SecurityConfig(rate_limit=RateLimit(max_calls=2, window_s=60)),
        execute=ping,
    )
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "ratelimit"],
        tools=[tool],
        config={"ratelimit": {"global_factor": 1.5}},  # 3 across sessions
    )
    async with deck:
        one = deck.session(workdir=tmp_path)
        two = deck.session(workdir=tmp_path)
        results = [await one.call("ping_service", {}) for _ in range(3)]
        other = [await two.call("ping_service", {}) for _ in range(2)]
    assert [r.success for r in results] == [True, True, False]
    refused = results[2]
    assert refused.error is not None
    assert refused.error.code == ErrorCode.RATE_LIMIT_EXCEEDED
    assert refused.error.retry_after_s is not None and refused.error.retry_after_s > 0
    # the second session has its own window, but the cross-session one holds 3 in all
    assert [r.success for r in other] == [True, False]
    assert "across sessions" in (other[1].error.message if other[1].error else "")
    assert len(ran) == 3
