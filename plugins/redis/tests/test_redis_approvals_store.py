"""RedisApprovalStore against a real redis-server: the in-memory store's semantics, shared."""

from __future__ import annotations

import pytest
import redis
import trio
from tooldeck_redis import (
    RedisApprovalStore,
    RedisConnection,
    RedisUnavailable,
    redis_settings,
)
from tooldeck_redis.testing import RedisServer


def make_store(url: str) -> RedisApprovalStore:
    parsed = redis_settings({"redis": {"url": url, "retry_interval_s": 0.2}})
    assert parsed is not None
    return RedisApprovalStore(RedisConnection(parsed), parsed)


CALL = {"session_id": "ses_a", "tool": "shell_run", "arguments_hash": "h1"}


async def test_an_approval_is_used_once_for_exactly_its_call(redis_url: str) -> None:
    store = make_store(redis_url)
    approval_id = await store.create(**CALL, ttl_s=60)
    assert approval_id.startswith("apr_")
    assert await store.get(approval_id) == {
        "session": "ses_a", "tool": "shell_run", "args": "h1", "state": "pending"
    }  # fmt: skip
    # Not approved yet.
    assert not await store.consume(approval_id=approval_id, **CALL)
    assert await store.resolve(approval_id, True)
    assert not await store.resolve(approval_id, True)  # decided once
    # Another session, tool or arguments: refused, and the approval stays usable.
    for field, other in (("session_id", "ses_b"), ("tool", "file_write"), ("arguments_hash", "h2")):
        assert not await store.consume(approval_id=approval_id, **{**CALL, field: other})
    assert await store.consume(approval_id=approval_id, **CALL)
    assert not await store.consume(approval_id=approval_id, **CALL)
    assert await store.get(approval_id) is None
    await store.aclose()


async def test_denied_unknown_and_expired_approvals_are_refused(redis_url: str) -> None:
    store = make_store(redis_url)
    denied = await store.create(**CALL, ttl_s=60)
    assert await store.resolve(denied, False)
    assert not await store.consume(approval_id=denied, **CALL)
    assert not await store.resolve("apr_unknown", True)
    short = await store.create(**CALL, ttl_s=0.05)
    assert 0 < redis.Redis.from_url(redis_url).pttl(f"tooldeck:approval:{short}") <= 50
    await trio.sleep(0.2)
    assert not await store.resolve(short, True)
    await store.aclose()


async def test_of_many_racing_consumers_exactly_one_wins(redis_url: str) -> None:
    stores = [make_store(redis_url) for _ in range(4)]
    approval_id = await stores[0].create(**CALL, ttl_s=60)
    assert await stores[1].resolve(approval_id, True)
    wins: list[bool] = []

    async def consume(store: RedisApprovalStore) -> None:
        wins.append(await store.consume(approval_id=approval_id, **CALL))

    async with trio.open_nursery() as nursery:
        for i in range(24):
            nursery.start_soon(consume, stores[i % 4])
    assert wins.count(True) == 1 and len(wins) == 24
    for store in stores:
        await store.aclose()


async def test_redis_down_fails_closed(own_redis: RedisServer) -> None:
    store = make_store(own_redis.url)
    approval_id = await store.create(**CALL, ttl_s=60)
    own_redis.stop()
    # A failure is no answer: raised, so that the core refuses the call (PLUGIN_ERROR) without
    # taking it for a refusal of the approval.
    with pytest.raises(RedisUnavailable, match="approvals cannot be decided"):
        await store.resolve(approval_id, True)
    with pytest.raises(RedisUnavailable, match="approvals cannot be checked"):
        await store.consume(approval_id=approval_id, **CALL)
    with pytest.raises(RedisUnavailable, match="approvals cannot be recorded"):
        await store.create(**CALL, ttl_s=60)
    assert store.errors == 2
    await store.aclose()
