"""Malformed cross-session limits fail at start-up naming the entry, never at every call."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tooldeck_hookspecs import ConfigError, RateLimit, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")


def _ping(arguments: Any, context: Any) -> str:
    return "pong"


PING = ToolDefinition(
    name="ping",
    description="Ping.",
    category="api",
    execute=_ping,
    security=SecurityConfig(rate_limit=RateLimit(max_calls=2, window_s=10)),
)


@pytest.mark.parametrize(("entry", "where"), [
    # A negative count blocked the tool for every session, silently.
    (-3, "ratelimit.global.ping"),
    ({"max_calls": -5}, "ratelimit.global.ping.max_calls"),
    # A raw ValueError from int("x"), not naming the setting.
    ({"max_calls": "x"}, "ratelimit.global.ping.max_calls"),
    ({"max_calls": 2.5}, "ratelimit.global.ping.max_calls"),
    # Accepted, then every call of the tool failed with PLUGIN_ERROR (ValueError/OverflowError).
    ({"max_calls": 5, "window_s": math.nan}, "ratelimit.global.ping.window_s"),
    ({"max_calls": 5, "window_s": math.inf}, "ratelimit.global.ping.window_s"),
    # Finite but past what a Redis key lifetime holds: every call failed there.
    ({"max_calls": 5, "window_s": 1e300}, "ratelimit.global.ping.window_s"),
    # Accepted and silently read as one second.
    ({"max_calls": 5, "window_s": -1}, "ratelimit.global.ping.window_s"),
    ({"max_calls": 5, "window": 60}, "ratelimit.global.ping"),
])
def test_a_malformed_global_entry_fails_at_start_up(entry: Any, where: str) -> None:
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        tooldeck_testing.make_deck(
            load_entry_points=["schema", "runner", "ratelimit"],
            tools=[PING],
            config={"ratelimit": {"global": {"ping": entry}}},
        )


async def test_global_factor_zero_turns_the_cross_session_window_off(tmp_path: Path) -> None:
    # Documented ("global_factor = 0 disables the cross-session window"), but the config schema
    # refused 0.
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "ratelimit"],
        tools=[PING],
        config={"ratelimit": {"global_factor": 0}},
    )
    async with deck:
        admitted = 0
        for _ in range(30):
            session = deck.session(workdir=tmp_path)
            for _call in range(2):
                admitted += (await session.call("ping", {})).success
    assert admitted == 60


@pytest.mark.parametrize("factor", [math.inf, math.nan, -1.0])
def test_a_non_finite_or_negative_global_factor_is_refused(factor: float) -> None:
    from tooldeck_ratelimit import ToolRateLimiter

    with pytest.raises(ConfigError, match="global_factor"):
        ToolRateLimiter(global_factor=factor)
