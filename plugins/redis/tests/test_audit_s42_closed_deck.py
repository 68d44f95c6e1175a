"""A closed deck asks no provider (operator audit: plugins misbehave, Redis stalls).

Before, a session kept running the pipeline after ``deck.aclose()``: a call with an approval id
used the approval up in the shared Redis store (and a rate-limited call a slot) and only then
failed at the closed executor with ``EXECUTION_ERROR "the executor is closed"``; the user's
approval was lost for the deck that took over, and the closed deck reopened its connection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from tooldeck_redis.testing import RedisServer

from tooldeck_hookspecs import ExecutionConfig, RateLimit, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}


def _tools(ran: list[Any]) -> list[ToolDefinition]:
    def run(arguments: Any, context: Any) -> Any:
        ran.append((context.session_id, dict(arguments)))
        return "done"

    return [
        ToolDefinition(
            name="risky", description="Needs approval.", category="api", parameters=OBJECT,
            security=SecurityConfig(level="dangerous"), execution=ExecutionConfig(timeout_s=2),
            execute=run,
        ),
        ToolDefinition(
            name="limited", description="Rate limited.", category="api", parameters=OBJECT,
            security=SecurityConfig(rate_limit=RateLimit(max_calls=100, window_s=60)),
            execution=ExecutionConfig(timeout_s=2), execute=run,
        ),
    ]


def _deck(url: str, ran: list[Any]) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "ratelimit", "redis"],
        tools=_tools(ran),
        config={"redis": {"url": url, "namespace": "s42"}},
    )


async def test_a_closed_deck_leaves_the_approval_in_the_store_for_the_next_deck(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    ran: list[Any] = []
    client = redis.Redis.from_url(own_redis.url)
    deck = _deck(own_redis.url, ran)
    session = deck.session(session_id="conv-1", workdir=tmp_path)
    asked = await session.call("risky", {"text": "approved"})
    approved_id = asked.error.details["approval_id"]
    assert await session.approve(approved_id)
    asked = await session.call("risky", {"text": "pending"})
    pending_id = asked.error.details["approval_id"]
    assert (await session.call("limited", {"text": "one"})).success
    slots = client.zcard("s42:rl:s:limited:conv-1")
    await deck.aclose()

    # The closed deck runs nothing and asks no provider, and says why.
    late = await session.call("risky", {"text": "approved"}, approval_id=approved_id)
    assert late.error.code == "CANCELLED"
    assert "deck" in late.error.message and "closed" in late.error.message
    assert (await session.resume(pending_id)).error.code == "CANCELLED"
    assert await session.approve(pending_id) is False
    assert (await session.call("limited", {"text": "two"})).error.code == "CANCELLED"
    assert client.zcard("s42:rl:s:limited:conv-1") == slots
    states = {
        key: client.hget(f"s42:approval:{key}", "state")
        for key in (approved_id, pending_id)
    }
    assert states == {approved_id: b"approved", pending_id: b"pending"}
    assert ran == [("conv-1", {"text": "one"})]

    # The deck that takes over (same store, same session id) runs the approved call once.
    async with _deck(own_redis.url, ran) as again:
        same = again.session(session_id="conv-1", workdir=tmp_path)
        first = await same.call("risky", {"text": "approved"}, approval_id=approved_id)
        assert first.success, first.error
        second = await same.call("risky", {"text": "approved"}, approval_id=approved_id)
        assert second.error.code == "PERMISSION_DENIED"
        # The pending one was never approved by the closed deck: still only a question.
        refused = await same.call("risky", {"text": "pending"}, approval_id=pending_id)
        assert refused.error.code == "PERMISSION_DENIED"
    assert ran[1:] == [("conv-1", {"text": "approved"})]
    client.close()
