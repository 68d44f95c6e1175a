"""Revoking and retrying approvals shared through a real redis-server: a deny reaches an approval
given through another worker, and a resume Redis failed can be retried once it is back."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import redis
import trio
from tooldeck_redis import RedisApprovalStore, RedisConnection, RedisUnavailable, redis_settings
from tooldeck_redis.testing import RedisServer

from tooldeck_hookspecs import SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

ENTRY_POINTS = ["schema", "runner", "redis"]
CALL = {"session_id": "ses_a", "tool": "risky", "arguments_hash": "h1"}


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


def make_deck(url: str, runs: list[str], *plugins: object) -> Any:
    config = {"redis": {"url": url, "retry_interval_s": 0.1}}
    return tooldeck_testing.make_deck(
        *plugins, load_entry_points=ENTRY_POINTS, tools=[_tool(runs)], config=config
    )


def make_store(url: str) -> RedisApprovalStore:
    parsed = redis_settings({"redis": {"url": url, "retry_interval_s": 0.1}})
    assert parsed is not None
    return RedisApprovalStore(RedisConnection(parsed), parsed)


def _code(result: Any) -> Any:
    return result.error.code if result.error is not None else None


async def _ask(session: Any) -> str:
    asked = await session.call("risky", {"text": "x"})
    assert _code(asked) == "CONFIRMATION_REQUIRED", asked
    return str(asked.error.details["approval_id"])


# ---------------------------------------------------------------- deny revokes


async def test_a_deny_through_one_worker_revokes_an_approval_given_through_another(
    redis_url: str, tmp_path: Path
) -> None:
    runs: list[str] = []
    async with make_deck(redis_url, runs) as deck, make_deck(redis_url, runs) as other_deck:
        session = deck.session(workdir=tmp_path, session_id="ses_shared")
        approval_id = await _ask(session)
        assert await session.approve(approval_id)
        # The user changes their mind in a process that never saw the call.
        other = other_deck.session(workdir=tmp_path, session_id="ses_shared")
        assert await other.deny(approval_id)
        direct = await session.call("risky", {"text": "x"}, approval_id=approval_id)
        resumed = await session.resume(approval_id)
    assert _code(direct) == "PERMISSION_DENIED"
    assert _code(resumed) == "PERMISSION_DENIED"
    assert runs == []


async def test_another_session_cannot_revoke_through_redis(redis_url: str, tmp_path: Path) -> None:
    runs: list[str] = []
    async with make_deck(redis_url, runs) as deck, make_deck(redis_url, runs) as other_deck:
        session = deck.session(workdir=tmp_path, session_id="ses_owner")
        approval_id = await _ask(session)
        assert await session.approve(approval_id)
        intruder = other_deck.session(workdir=tmp_path, session_id="ses_intruder")
        assert not await intruder.deny(approval_id)
        assert (await session.resume(approval_id)).success
        assert not await session.deny(approval_id)  # used: too late to take back
    assert runs == ["x"]


async def test_the_store_revokes_only_approvals_not_yet_used(redis_url: str) -> None:
    store = make_store(redis_url)
    approval_id = await store.create(**CALL, ttl_s=60)
    assert await store.resolve(approval_id, True, session_id="ses_a")
    assert not await store.resolve(approval_id, False, session_id="ses_b")
    assert await store.resolve(approval_id, False, session_id="ses_a")
    assert (await store.get(approval_id) or {})["state"] == "denied"
    assert not await store.resolve(approval_id, True, session_id="ses_a")  # final
    assert not await store.consume(approval_id=approval_id, **CALL)
    used = await store.create(**CALL, ttl_s=60)
    assert await store.resolve(used, True)
    assert await store.consume(approval_id=used, **CALL)
    assert not await store.resolve(used, False)
    await store.aclose()


async def test_a_deny_racing_with_workers_that_consume_never_lets_both_win(
    redis_url: str,
) -> None:
    """Either the deny came first and nobody runs the call, or one worker used the approval
    and the deny answers False: never a call that ran after the user was told it was denied."""
    stores = [make_store(redis_url) for _ in range(4)]
    for _ in range(20):
        approval_id = await stores[0].create(**CALL, ttl_s=60)
        assert await stores[1].resolve(approval_id, True, session_id="ses_a")
        wins: list[bool] = []
        denied: list[bool] = []

        async def consume(
            store: RedisApprovalStore, approval_id: str = approval_id, wins: list[bool] = wins
        ) -> None:
            wins.append(await store.consume(approval_id=approval_id, **CALL))

        async def deny(approval_id: str = approval_id, denied: list[bool] = denied) -> None:
            denied.append(await stores[3].resolve(approval_id, False, session_id="ses_a"))

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(consume, stores[i % 3])
                if i == 2:
                    nursery.start_soon(deny)
        assert denied[0] != (wins.count(True) == 1)
        assert wins.count(True) <= 1
    for store in stores:
        await store.aclose()


# ---------------------------------------------------------------- a failed resume is retried


def _save_and_stop(server: RedisServer) -> None:
    """An outage that loses nothing: the server's data comes back with it on restart."""
    client = redis.Redis.from_url(server.url)
    client.save()
    client.close()
    server.stop()


async def _restart(server: RedisServer) -> None:
    server.restart()
    await trio.sleep(0.2)  # past retry_interval_s: the connection tries Redis again


async def test_a_resume_while_redis_is_down_can_be_retried_when_it_is_back(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    runs: list[str] = []
    async with make_deck(own_redis.url, runs) as deck:
        session = deck.session(workdir=tmp_path)
        approval_id = await _ask(session)
        assert await session.approve(approval_id)
        _save_and_stop(own_redis)
        down = await session.resume(approval_id)
        assert _code(down) == "PLUGIN_ERROR"
        assert f"Redis at {own_redis.url}" in down.error.message
        assert approval_id in session.pending_approvals()
        await _restart(own_redis)
        retried = await session.resume(approval_id)
        replay = await session.resume(approval_id)
    assert retried.success, retried
    assert _code(replay) == "PERMISSION_DENIED"
    assert runs == ["x"]


async def test_redis_lost_between_the_approval_and_its_use_keeps_the_call_pending(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    """Redis goes away after resume() recorded the approval and before the call uses it: the
    call does not run, and stays pending until Redis is back."""
    runs: list[str] = []
    outage = threading.Event()

    def policy(call: Any, tool: Any, session: Any) -> None:
        # Runs after resume() approved and before the approval is used.
        if outage.is_set():
            outage.clear()
            _save_and_stop(own_redis)

    plugin = tooldeck_testing.inline_plugin(tooldeck_authorize_call=policy, name="outage")
    async with make_deck(own_redis.url, runs, plugin) as deck:
        session = deck.session(workdir=tmp_path)
        approval_id = await _ask(session)
        outage.set()
        down = await session.resume(approval_id)
        assert _code(down) == "PLUGIN_ERROR"
        assert approval_id in session.pending_approvals() and runs == []
        await _restart(own_redis)
        retried = await session.resume(approval_id)
    assert retried.success, retried
    assert runs == ["x"]


async def test_the_store_raises_when_redis_is_down(own_redis: RedisServer) -> None:
    """A Redis failure is not an answer: the core can tell it from a refusal (and keeps the
    pending call), and still fails closed."""
    store = make_store(own_redis.url)
    approval_id = await store.create(**CALL, ttl_s=60)
    own_redis.stop()
    with pytest.raises(RedisUnavailable, match="approvals cannot be decided"):
        await store.resolve(approval_id, True)
    with pytest.raises(RedisUnavailable, match="approvals cannot be checked"):
        await store.consume(approval_id=approval_id, **CALL)
    assert store.errors == 2
    await store.aclose()
