"""A hung Redis (SIGSTOP) holds no call past its deadline: cache, limiter and approvals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_redis.testing import RedisServer

from tooldeck_hookspecs import ExecutionConfig, RateLimit, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")


def echo(arguments: Any, context: Any) -> Any:
    return arguments.get("text", "")


OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}
FAST = ExecutionConfig(timeout_s=0.5)
TOOLS = [
    ToolDefinition(
        name="lookup", description="Cached echo.", category="api", parameters=OBJECT,
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=60, timeout_s=0.5), execute=echo,
    ),
    ToolDefinition(
        name="limited", description="Rate limited.", category="api", parameters=OBJECT,
        security=SecurityConfig(rate_limit=RateLimit(max_calls=1000, window_s=60)),
        execution=FAST, execute=echo,
    ),
    ToolDefinition(
        name="risky", description="Needs approval.", category="api", parameters=OBJECT,
        security=SecurityConfig(level="dangerous"), execution=FAST, execute=echo,
    ),
]


async def test_a_stopped_redis_holds_no_call_past_its_deadline(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    # The socket timeout is far longer than the tools' deadline: only the deadline can answer.
    config = {"redis": {"url": own_redis.url, "socket_timeout_s": 20, "retry_interval_s": 0.1}}
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache", "ratelimit", "redis"],
        tools=TOOLS,
        config=config,
    )
    async with deck:
        session = deck.session(workdir=tmp_path)
        assert (await session.call("limited", {"text": "warm"})).success
        own_redis.pause()
        results: dict[str, list[Any]] = {"lookup": [], "limited": [], "risky": []}
        try:
            with trio.fail_after(15):  # a hang guard, not a timing assertion
                async with trio.open_nursery() as nursery:
                    for i in range(30):
                        for name in results:
                            nursery.start_soon(
                                lambda n=name, i=i: _call(session, n, str(i), results[n])
                            )
        finally:
            own_redis.resume()
    # A hung cache is a miss: the tool runs. A hung limiter or approval store fails closed with
    # TIMEOUT, the deadline's answer (the socket timeout would have said PLUGIN_ERROR).
    assert all(r.success for r in results["lookup"])
    assert {r.error.code for r in results["limited"]} == {"TIMEOUT"}
    assert {r.error.code for r in results["risky"]} == {"TIMEOUT"}


async def _call(session: Any, name: str, text: str, into: list[Any]) -> None:
    into.append(await session.call(name, {"text": text}))
