"""Audit of approvals shared through a real redis-server.

- ``resolve(session_id="")`` skipped the session check (the script read "" as "no session
  given"): a session whose id is empty decided any other session's approval, where the
  in-memory store refuses it.
- A resume that ran its call without using the approval (always-allowed meanwhile) left the
  approval given in Redis: another worker's session of the same id could run the call again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tooldeck_redis import RedisApprovalStore, RedisConnection, redis_settings

from tooldeck_hookspecs import SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

CALL = {"session_id": "ses_a", "tool": "risky", "arguments_hash": "h1"}


def make_store(url: str) -> RedisApprovalStore:
    parsed = redis_settings({"redis": {"url": url, "retry_interval_s": 0.1}})
    assert parsed is not None
    return RedisApprovalStore(RedisConnection(parsed), parsed)


def _tool(runs: list[str]) -> ToolDefinition:
    def risky(arguments: Any, context: Any) -> Any:
        runs.append(arguments["text"])
        return arguments["text"]

    return ToolDefinition(
        name="risky",
        description="Needs approval.",
        category="api",
        parameters={"type": "object", "properties": {"text": {"type": "string"}}},
        security=SecurityConfig(level="dangerous"),
        execute=risky,
    )


def make_deck(url: str, runs: list[str]) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "redis"],
        tools=[_tool(runs)],
        config={"redis": {"url": url, "retry_interval_s": 0.1}},
    )


async def test_an_empty_session_id_is_checked_like_any_other(redis_url: str) -> None:
    store = make_store(redis_url)
    try:
        approval_id = await store.create(**CALL, ttl_s=60)
        assert not await store.resolve(approval_id, True, session_id="")
        assert await store.resolve(approval_id, True, session_id="ses_a")
        assert not await store.resolve(approval_id, False, session_id="")
        assert await store.consume(approval_id=approval_id, **CALL)
        # An approval of the empty session id itself is still that session's to decide.
        own = await store.create(**{**CALL, "session_id": ""}, ttl_s=60)
        assert not await store.resolve(own, True, session_id="ses_a")
        assert await store.resolve(own, True, session_id="")
        # Without session_id (third-party callers), no session check, as before.
        other = await store.create(**CALL, ttl_s=60)
        assert await store.resolve(other, True)
    finally:
        await store.aclose()


async def test_an_approval_a_resume_did_not_use_is_taken_back_for_every_worker(
    redis_url: str, tmp_path: Path
) -> None:
    runs: list[str] = []
    async with make_deck(redis_url, runs) as deck, make_deck(redis_url, runs) as other_deck:
        session = deck.session(workdir=tmp_path, session_id="ses_shared")
        asked = await session.call("risky", {"text": "x"})
        approval_id = str(asked.error.details["approval_id"])
        session.always_allow("risky")  # the resume runs without the approval
        assert (await session.resume(approval_id)).success
        other = other_deck.session(workdir=tmp_path, session_id="ses_shared")
        again = await other.call("risky", {"text": "x"}, approval_id=approval_id)
    assert again.error is not None and again.error.code == "PERMISSION_DENIED"
    assert runs == ["x"]
