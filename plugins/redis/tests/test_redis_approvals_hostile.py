"""RedisApprovalStore when Redis answers something other than what its scripts promise."""

from __future__ import annotations

import pytest
from tooldeck_redis import (
    RedisApprovalStore,
    RedisConnection,
    RedisUnavailable,
    redis_settings,
)

CALL = {"session_id": "ses_a", "tool": "shell_run", "arguments_hash": "h1"}


def make_store(url: str) -> RedisApprovalStore:
    parsed = redis_settings({"redis": {"url": url, "retry_interval_s": 0.2}})
    assert parsed is not None
    return RedisApprovalStore(RedisConnection(parsed), parsed)


# What a server that is not quite Redis (a proxy, another program on the port, a script
# replaced under the same SHA after a SCRIPT FLUSH by someone else) might answer instead of 0/1.
GARBAGE = ["return 'OK'", "return {1}", "return 2", "return -1", "return {err='x'}"]


@pytest.mark.parametrize("source", GARBAGE)
async def test_only_a_one_from_the_consume_script_uses_an_approval(
    redis_url: str, source: str
) -> None:
    store = make_store(redis_url)
    approval_id = await store.create(**CALL, ttl_s=60)
    store._consume = store.connection.script(source)
    try:
        used = await store.consume(approval_id=approval_id, **CALL)
    except RedisUnavailable:  # an error reply: a failure, which the core refuses too
        used = False
    assert used is False
    await store.aclose()


@pytest.mark.parametrize("source", GARBAGE)
async def test_only_a_one_from_the_resolve_script_decides_an_approval(
    redis_url: str, source: str
) -> None:
    store = make_store(redis_url)
    approval_id = await store.create(**CALL, ttl_s=60)
    store._resolve = store.connection.script(source)
    try:
        decided = await store.resolve(approval_id, True, session_id="ses_a")
    except RedisUnavailable:  # an error reply: a failure, which the core refuses too
        decided = False
    assert decided is False
    await store.aclose()


async def test_the_answers_are_real_bools(redis_url: str) -> None:
    """The core lets a call run only on ``True`` itself: the store answers bools, not ints."""
    store = make_store(redis_url)
    approval_id = await store.create(**CALL, ttl_s=60)
    assert await store.resolve(approval_id, True, session_id="ses_a") is True
    assert await store.consume(approval_id=approval_id, **CALL) is True
    assert await store.consume(approval_id=approval_id, **CALL) is False
    await store.aclose()
