"""State in Redis that a deck reads back, damaged or foreign: a key of another type, text where a
counter belongs, calls timed in the future, a hash without its expiry, fields far too large.

Every test uses a real redis-server and the real path (a deck from ``make_deck``, or the history
store as tooldeck-faiss's ``SelectionHistory`` drives it), plants the damage with redis-py as an
operator or another version would, and checks that the call gets a correct answer, that one
warning says what happened, and that the key is repaired.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from tooldeck_hookspecs import ExecutionConfig, RateLimit, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

NS = "dmg"
OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
CACHED = ExecutionConfig(cacheable=True, cache_ttl_s=60)
state: dict[str, str] = {}
runs: list[str] = []


def _read(arguments: Any, context: Any) -> str:
    return state["value"]


def _write(arguments: Any, context: Any) -> str:
    state["value"] = arguments["text"]
    return "ok"


def _risky(arguments: Any, context: Any) -> str:
    runs.append(arguments["text"])
    return "ran"


LOOKUP = ToolDefinition(name="lookup", description="Cached read.", category="api",
                        parameters=OBJECT, execution=CACHED, execute=_read)
# Cacheable and rate limited: probed by the cache-and-window script, not the plain get.
LIMITED_LOOKUP = ToolDefinition(name="limited_lookup", description="Cached, limited read.",
                                category="api", parameters=OBJECT, execution=CACHED,
                                execute=_read,
                                security=SecurityConfig(rate_limit=RateLimit(max_calls=50)))
WRITE = ToolDefinition(name="write_value", description="Changes what the lookups read.",
                       category="api", parameters=OBJECT,
                       execution=ExecutionConfig(invalidates=("lookup", "limited_lookup")),
                       execute=_write)
LIMITED = ToolDefinition(name="limited", description="Two calls a minute.", category="api",
                         parameters=OBJECT, execute=_read,
                         security=SecurityConfig(rate_limit=RateLimit(max_calls=2, window_s=60)))
RISKY = ToolDefinition(name="risky", description="Needs approval.", category="api",
                       parameters=OBJECT, security=SecurityConfig(level="dangerous"),
                       execute=_risky)


def _deck(url: str, *tools: ToolDefinition) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache", "ratelimit", "redis"],
        tools=list(tools),
        config={"redis": {"url": url, "namespace": NS}},
    )


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and text in r.getMessage()]


# ---------------------------------------------------------------- cache generations

GENERATIONS = {
    "hash": lambda c, k: c.hset(k, "gen", "1"),
    "text": lambda c, k: c.set(k, "v2-generation"),
    # A number, but one INCR cannot raise ("increment or decrement would overflow").
    "overflowing": lambda c, k: c.set(k, str(2**63 - 1)),
}


@pytest.mark.parametrize("tool", [LOOKUP, LIMITED_LOOKUP], ids=["get", "get_and_hit"])
@pytest.mark.parametrize("damage", list(GENERATIONS))
async def test_a_damaged_cache_generation_is_repaired_and_invalidation_works_again(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, tool: ToolDefinition,
    damage: str,
) -> None:
    """Before, every probe and invalidation of the tool failed (WRONGTYPE, "not an integer"):
    an invalidation then deleted nothing, and the old result was served after the write."""
    client = redis.Redis.from_url(redis_url)
    gen_key = f"{NS}:cachegen:{tool.name}"
    GENERATIONS[damage](client, gen_key)
    state["value"] = "old"
    async with _deck(redis_url, tool, WRITE) as deck:
        session = deck.session(workdir=tmp_path)
        first = await session.call(tool.name, {"text": "q"})
        assert first.success and first.data == "old" and first.metadata["cached"] is False
        assert (await session.call(tool.name, {"text": "q"})).metadata["cached"] is True
        assert (await session.call("write_value", {"text": "new"})).success
        after = await session.call(tool.name, {"text": "q"})
        assert after.success and after.data == "new", "a stale result served after the write"
        assert after.metadata["cached"] is False
        again = await session.call(tool.name, {"text": "q"})
        assert again.data == "new" and again.metadata["cached"] is True
    # Repaired: a plain counter again, which the write raised.
    assert client.type(gen_key) == b"string" and client.get(gen_key).isdigit()
    assert len(_warnings(caplog, "cache generation")) == 1
    client.close()


# ---------------------------------------------------------------- rate-limit windows

WINDOWS = {
    "string": lambda c, k: c.set(k, "x"),
    "hash": lambda c, k: c.hset(k, "a", "1"),
    # Calls timed at +inf or far ahead of the server clock (this deck only writes "now"), with
    # no expiry: before, they filled the window for ever.
    "infinite_times": lambda c, k: c.zadd(k, {"a": "+inf", "b": "+inf", "c": "+inf"}),
    "future_times": lambda c, k: c.zadd(k, {"a": 1e18, "b": 1e18, "c": 1e18}),
}


@pytest.mark.parametrize("damage", list(WINDOWS))
async def test_a_foreign_rate_limit_window_starts_afresh(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    key = f"{NS}:rl:s:limited:ses_w"
    WINDOWS[damage](client, key)
    state["value"] = "v"
    async with _deck(redis_url, LIMITED) as deck:
        session = deck.session(workdir=tmp_path, session_id="ses_w")
        results = [await session.call("limited", {"text": str(i)}) for i in range(3)]
    # A fresh window: the tool's own limit (2 a minute) holds, not the foreign data.
    assert [r.success for r in results] == [True, True, False], [r.error for r in results]
    refused = results[2].error
    assert refused is not None and refused.code == "RATE_LIMIT_EXCEEDED"
    assert refused.retry_after_s is not None and 0 < refused.retry_after_s <= 60
    assert client.type(key) == b"zset" and client.zcard(key) == 2 and client.pttl(key) > 0
    assert len(_warnings(caplog, "rate-limit window")) == 1
    client.close()


async def test_a_foreign_window_is_repaired_by_the_cache_and_limit_script(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same repair in the script that probes the cache and counts the call at once."""
    client = redis.Redis.from_url(redis_url)
    key = f"{NS}:rl:s:limited_lookup:ses_c"
    client.set(key, "x")
    state["value"] = "v"
    async with _deck(redis_url, LIMITED_LOOKUP) as deck:
        session = deck.session(workdir=tmp_path, session_id="ses_c")
        result = await session.call("limited_lookup", {"text": "a"})
    assert result.success, result.error
    assert client.type(key) == b"zset" and client.zcard(key) == 1
    assert len(_warnings(caplog, "rate-limit window")) == 1
    client.close()


# ---------------------------------------------------------------- approvals

APPROVALS = {
    # PERSIST by hand: the approval would never expire.
    "no_expiry": lambda c, k: c.persist(k),
    "string": lambda c, k: (c.delete(k), c.set(k, "approved")),
    "list": lambda c, k: (c.delete(k), c.rpush(k, "approved")),
}


@pytest.mark.parametrize("damage", list(APPROVALS))
async def test_damaged_approval_state_never_approves_a_call(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    runs.clear()
    async with _deck(redis_url, RISKY) as deck:
        session = deck.session(workdir=tmp_path)
        asked = await session.call("risky", {"text": "x"})
        assert asked.error is not None and asked.error.code == "CONFIRMATION_REQUIRED"
        approval_id = asked.error.details["approval_id"]
        assert await session.approve(approval_id)
        key = f"{NS}:approval:{approval_id}"
        APPROVALS[damage](client, key)
        resumed = await session.resume(approval_id)
        direct = await session.call("risky", {"text": "x"}, approval_id=approval_id)
    # Refused as an approval that is not there (not "Redis unavailable" for ever), nothing ran.
    assert resumed.error is not None and resumed.error.code == "PERMISSION_DENIED", resumed
    assert direct.error is not None and direct.error.code == "PERMISSION_DENIED", direct
    assert runs == []
    assert not client.exists(key)  # the damaged key is gone
    assert len(_warnings(caplog, "damaged")) == 1
    client.close()


# ---------------------------------------------------------------- selection history

PREFIX = f"{NS}:history:default:"


def _history(url: str, max_records: int = 50) -> Any:
    faiss = pytest.importorskip("tooldeck_faiss")
    from tooldeck_redis.history import RedisHistoryStore

    store = RedisHistoryStore(url, prefix=PREFIX, model_id="m", max_records=max_records,
                              timeout_s=10)
    return faiss.SelectionHistory(model_id="m", max_records=max_records, store=store,
                                  sync_interval_s=0, retry_interval_s=0)


VECTOR = np.ones(4, np.float32) / 2

HISTORY_KEYS = {
    "rec": lambda c, k: c.set(k, "x"),
    "n": lambda c, k: c.set(k, "x"),
    "lru": lambda c, k: c.hset(k, "a", "1"),
    "vec": lambda c, k: c.rpush(k, "a"),
    "models": lambda c, k: c.set(k, "m"),
}


@pytest.mark.parametrize("name", list(HISTORY_KEYS))
def test_a_history_key_of_another_type_is_rebuilt(
    redis_url: str, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    """Before, every exchange failed with WRONGTYPE: the shared history was down for good."""
    client = redis.Redis.from_url(redis_url)
    history = _history(redis_url)
    history.record("task one", "tool_a", VECTOR)
    assert history.sync(force=True)
    client.delete(PREFIX + name)
    HISTORY_KEYS[name](client, PREFIX + name)
    history.record("task two", "tool_b", VECTOR)
    assert history.sync(force=True)
    assert not history.statistics().store_down
    other = _history(redis_url)  # another process of the deployment sees the new use
    assert other.sync(force=True)
    assert ("task two", "tool_b") in other._records
    assert len(_warnings(caplog, "damaged key")) == 1
    history.close()
    other.close()
    client.close()


@pytest.mark.parametrize("count", ["nan", "1.5", "9" * 30])
def test_a_history_count_that_is_not_an_integer_is_reset(redis_url: str, count: str) -> None:
    """Before: HINCRBY failed on the next use of the record, or int() on the read."""
    client = redis.Redis.from_url(redis_url)
    history = _history(redis_url)
    history.record("task one", "tool_a", VECTOR)
    assert history.sync(force=True)
    (record_id,) = client.hkeys(PREFIX + "n")
    client.hset(PREFIX + "n", record_id, count)
    other = _history(redis_url)
    assert other.sync(force=True)
    assert other._records[("task one", "tool_a")].count == 1
    history.record("task one", "tool_a", VECTOR)
    assert history.sync(force=True)
    assert client.hget(PREFIX + "n", record_id) == b"1"
    history.close()
    other.close()
    client.close()


@pytest.mark.parametrize("field", ["rec", "vec"])
def test_a_huge_history_field_never_reaches_the_client(
    redis_url: str, caplog: pytest.LogCaptureFixture, field: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    history = _history(redis_url)
    history.record("task one", "tool_a", VECTOR)
    assert history.sync(force=True)
    (name,) = client.hkeys(PREFIX + field)
    client.hset(PREFIX + field, name, b"\0" * 20_000_000)
    sent_before = int(client.info("stats")["total_net_output_bytes"])
    other = _history(redis_url)
    assert other.sync(force=True)
    sent = int(client.info("stats")["total_net_output_bytes"]) - sent_before
    assert sent < 1_000_000, f"{sent} bytes sent to read the history"
    assert not client.hexists(PREFIX + field, name)  # dropped on the server
    assert len(_warnings(caplog, "damaged key")) == 1
    history.close()
    other.close()
    client.close()


def test_an_oversized_history_is_trimmed_a_bounded_amount_per_exchange(redis_url: str) -> None:
    """A foreign LRU of millions of members: before, one exchange evicted them all in one
    script, blocking the server (every deck's cache, limits and approvals) for its duration."""
    client = redis.Redis.from_url(redis_url)
    client.eval(
        "for i = 1, 200000 do redis.call('ZADD', KEYS[1], i, 'foreign' .. i) end",
        1, PREFIX + "lru",
    )
    history = _history(redis_url, max_records=50)
    history.record("task one", "tool_a", VECTOR)
    assert history.sync(force=True)
    # One use added: at most that one plus 1000 evicted by this exchange.
    left = client.zcard(PREFIX + "lru")
    assert 200_001 - 1_001 <= left < 200_001
    # The new record was kept (the oldest go first), and later exchanges keep trimming.
    assert client.zscore(PREFIX + "lru", client.hkeys(PREFIX + "rec")[0]) is not None
    assert history.sync(force=True)
    assert left - 1_000 <= client.zcard(PREFIX + "lru") < left
    history.close()
    client.close()


def test_an_infinite_history_time_counts_as_long_ago(redis_url: str) -> None:
    from tooldeck_redis.history import RedisHistoryStore

    client = redis.Redis.from_url(redis_url)
    history = _history(redis_url)
    history.record("task one", "tool_a", VECTOR)
    assert history.sync(force=True)
    (record_id,) = client.zrange(PREFIX + "lru", 0, -1)
    client.zadd(PREFIX + "lru", {record_id: "+inf"})
    store = RedisHistoryStore(redis_url, prefix=PREFIX, model_id="m", max_records=50)
    rows, now = store.exchange([], 0)
    assert [(r.tool, r.last) for r in rows] == [("tool_a", 0.0)]
    store.close()
    history.close()
    client.close()
