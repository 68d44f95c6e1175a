"""tooldeck-redis inside a real deck (core, schema, runner, and the in-memory providers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_redis.testing import RedisServer

from tooldeck_hookspecs import ExecutionConfig, RateLimit, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

ENTRY_POINTS = ["schema", "runner", "cache", "ratelimit", "redis"]


def echo(arguments: Any, context: Any) -> Any:
    return arguments.get("text", "")


OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}
TOOLS = [
    ToolDefinition(
        name="lookup",
        description="Cached echo.",
        category="api",
        parameters=OBJECT,
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=60),
        execute=echo,
    ),
    ToolDefinition(
        name="write_note",
        description="A write that invalidates lookup.",
        category="api",
        parameters=OBJECT,
        execution=ExecutionConfig(invalidates=("lookup",)),
        execute=echo,
    ),
    ToolDefinition(
        name="limited",
        description="Two calls per minute.",
        category="api",
        parameters=OBJECT,
        security=SecurityConfig(rate_limit=RateLimit(max_calls=2, window_s=60)),
        execute=echo,
    ),
    ToolDefinition(
        name="risky",
        description="Needs approval.",
        category="api",
        parameters=OBJECT,
        security=SecurityConfig(level="dangerous"),
        execute=echo,
    ),
]


def make(url: str | None) -> Any:
    config = {"redis": {"url": url, "retry_interval_s": 0.2}} if url else {}
    return tooldeck_testing.make_deck(load_entry_points=ENTRY_POINTS, tools=TOOLS, config=config)


async def test_without_a_url_the_in_memory_providers_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOOLDECK_REDIS_URL", raising=False)
    async with make(None) as deck:
        assert deck.providers["cache"] == "cache"
        assert deck.providers["rate_limit"] == "ratelimit"
        assert deck.providers["approvals"] == "tooldeck"


async def test_with_a_url_redis_wins_every_shared_stage(redis_url: str, tmp_path: Path) -> None:
    async with make(redis_url) as deck:
        assert (
            deck.providers["cache"],
            deck.providers["rate_limit"],
            deck.providers["approvals"],
        ) == ("redis", "redis", "redis")
        session = deck.session(workdir=tmp_path)
        first = await session.call("lookup", {"text": "a"})
        second = await session.call("lookup", {"text": "a"})
        assert (first.metadata["cached"], second.metadata["cached"]) == (False, True)
        assert (await session.call("write_note", {"text": "b"})).success
        third = await session.call("lookup", {"text": "a"})
        assert third.metadata["cached"] is False  # the write invalidated it in Redis
        outcomes = [await session.call("limited", {}) for _ in range(3)]
        assert [r.success for r in outcomes] == [True, True, False]
        refused = outcomes[-1].error
        assert refused is not None and refused.code == "RATE_LIMIT_EXCEEDED"
        assert refused.retry_after_s is not None and 0 < refused.retry_after_s <= 60


async def test_an_approval_resumes_through_redis(redis_url: str, tmp_path: Path) -> None:
    async with make(redis_url) as deck, make(redis_url) as other_deck:
        session = deck.session(workdir=tmp_path, session_id="ses_shared")
        asked = await session.call("risky", {"text": "x"})
        assert asked.error is not None and asked.error.code == "CONFIRMATION_REQUIRED"
        approval_id = asked.error.details["approval_id"]
        # Approved by the user through another deck (another worker), resumed here once.
        other = other_deck.session(workdir=tmp_path, session_id="ses_shared")
        assert await other.approve(approval_id)
        assert (await session.resume(approval_id)).success
        replay = await session.call("risky", {"text": "x"}, approval_id=approval_id)
        assert replay.error is not None and replay.error.code == "PERMISSION_DENIED"


async def test_redis_down_gives_a_plugin_error_then_recovers(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    async with make(own_redis.url) as deck:
        session = deck.session(workdir=tmp_path)
        own_redis.stop()
        down = await session.call("limited", {})
        assert down.error is not None and down.error.code == "PLUGIN_ERROR"
        assert f"Redis at {own_redis.url}" in down.error.message
        assert (await session.call("lookup", {"text": "z"})).success
        own_redis.restart()
        await trio.sleep(0.3)
        assert (await session.call("limited", {})).success


async def test_deployments_keep_apart_by_namespace_and_the_shared_default_is_told(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    import logging

    from tooldeck_redis import _settings

    def deck_of(namespace: str | None) -> Any:
        table: dict[str, Any] = {"url": redis_url}
        if namespace is not None:
            table["namespace"] = namespace
        return tooldeck_testing.make_deck(
            load_entry_points=ENTRY_POINTS, tools=TOOLS, config={"redis": table}
        )

    async def cached(deck: Any) -> bool:
        result = await deck.session(workdir=tmp_path).call("lookup", {"text": "tenant"})
        assert result.success
        return bool(result.metadata["cached"])

    monkeypatch.setattr(_settings, "_warned", set())
    caplog.set_level(logging.WARNING, logger="tooldeck.redis")
    async with deck_of(None) as first, deck_of(None) as second:
        assert (await cached(first), await cached(second)) == (False, True)  # shared, as said
    (warning,) = [r for r in caplog.records if "namespace is not set" in r.getMessage()]
    assert "TOOLDECK_REDIS_NAMESPACE" in warning.getMessage()
    caplog.clear()
    async with deck_of("tenant-a") as a, deck_of("tenant-b") as b:
        assert (await cached(a), await cached(b)) == (False, False)
    monkeypatch.setenv("TOOLDECK_REDIS_NAMESPACE", "tenant-c")
    async with deck_of(None) as c:
        assert await cached(c) is False
        assert await cached(c) is True
    assert not [r for r in caplog.records if "namespace is not set" in r.getMessage()]
