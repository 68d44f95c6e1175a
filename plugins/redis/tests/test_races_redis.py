"""Races through real decks sharing a real redis-server: parallel tool calls of a prompt-injected
model (many per turn, run concurrently), several workers answering the same approval at once,
and a write overlapping a cached read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tooldeck_hookspecs import ExecutionConfig, RateLimit, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

ENTRY_POINTS = ["schema", "runner", "cache", "ratelimit", "redis"]
OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}
LIMIT = 5


def _tools(runs: list[str], disk: dict[str, Any] | None = None) -> list[ToolDefinition]:
    def record(arguments: Any, context: Any) -> Any:
        runs.append(arguments.get("text", ""))
        return arguments.get("text", "")

    async def read(arguments: Any, context: Any) -> Any:
        assert disk is not None
        value = disk["file"]
        disk["inside"].set()
        await disk["release"].wait()
        return value

    def write(arguments: Any, context: Any) -> Any:
        assert disk is not None
        disk["file"] = arguments["text"]
        return "written"

    limited = SecurityConfig(rate_limit=RateLimit(max_calls=LIMIT, window_s=3600))
    return [
        ToolDefinition(
            name="limited",
            description="LIMIT calls an hour.",
            category="api",
            parameters=OBJECT,
            security=limited,
            execute=record,
        ),
        ToolDefinition(
            name="limited_cached",
            description="Cacheable and limited: probe and limit in one round trip.",
            category="api",
            parameters=OBJECT,
            security=limited,
            execution=ExecutionConfig(cacheable=True, cache_ttl_s=600),
            execute=record,
        ),
        ToolDefinition(
            name="risky",
            description="Needs approval.",
            category="api",
            parameters=OBJECT,
            security=SecurityConfig(level="dangerous"),
            execute=record,
        ),
        ToolDefinition(
            name="file_read",
            description="A cacheable read that parks until released.",
            category="api",
            parameters=OBJECT,
            execution=ExecutionConfig(cacheable=True, cache_ttl_s=600),
            execute=read,
        ),
        ToolDefinition(
            name="file_write",
            description="A write that invalidates file_read.",
            category="api",
            parameters=OBJECT,
            execution=ExecutionConfig(invalidates=("file_read",)),
            execute=write,
        ),
    ]


def _make(url: str, runs: list[str], disk: dict[str, Any] | None = None) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=ENTRY_POINTS,
        tools=_tools(runs, disk),
        config={"redis": {"url": url, "retry_interval_s": 0.1}},
    )


def _code(result: Any) -> str:
    return str(result.error.code) if result.error is not None else "ok"


@pytest.mark.parametrize("tool", ["limited", "limited_cached"])
async def test_a_burst_over_the_limit_from_two_workers_admits_exactly_the_limit(
    redis_url: str, tmp_path: Path, tool: str
) -> None:
    """LIMIT + 7 calls at once, split over two decks (two worker processes) and one session
    id: exactly LIMIT run, each other one is refused with a retry-after."""
    runs: list[str] = []
    async with _make(redis_url, runs) as one, _make(redis_url, runs) as two:
        sessions = [
            deck.session(workdir=tmp_path, session_id="ses_burst") for deck in (one, two)
        ]
        results: list[Any] = []

        async def call(index: int) -> None:
            # Distinct arguments: a cache hit would not be a call.
            results.append(await sessions[index % 2].call(tool, {"text": f"t{index}"}))

        async with trio.open_nursery() as nursery:
            for index in range(LIMIT + 7):
                nursery.start_soon(call, index)
    codes = sorted(_code(r) for r in results)
    assert codes == ["RATE_LIMIT_EXCEEDED"] * 7 + ["ok"] * LIMIT
    assert len(runs) == LIMIT
    assert all(r.error.retry_after_s > 0 for r in results if r.error is not None)


async def test_one_approval_used_by_two_workers_at_once_runs_once(
    redis_url: str, tmp_path: Path
) -> None:
    """Approved once, the approval id is sent to two workers at the same time (a retried
    request): the consume script lets exactly one of them run the call."""
    runs: list[str] = []
    async with _make(redis_url, runs) as one, _make(redis_url, runs) as two:
        sessions = [deck.session(workdir=tmp_path, session_id="ses_ap") for deck in (one, two)]
        asked = await sessions[0].call("risky", {"text": "x"})
        approval = asked.error.details["approval_id"]
        assert await sessions[0].approve(approval)
        results: list[Any] = []

        async def use(session: Any) -> None:
            results.append(await session.call("risky", {"text": "x"}, approval_id=approval))

        async with trio.open_nursery() as nursery:
            for session in sessions * 3:
                nursery.start_soon(use, session)
    assert runs == ["x"]
    assert sorted(_code(r) for r in results) == ["PERMISSION_DENIED"] * 5 + ["ok"]


class _ParkedConsume:
    """The deck's Redis approval store, its ``consume`` parked before the round trip until
    ``gate`` is set: the other answer is forced to come while the first is in flight."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.reached = trio.Event()
        self.gate = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def consume(self, **kwargs: Any) -> bool:
        self.reached.set()
        await self.gate.wait()
        return bool(await self.store.consume(**kwargs))


@pytest.mark.parametrize("other", ["resume", "deny"])
async def test_a_resume_racing_with_a_resume_or_a_deny_runs_at_most_once(
    redis_url: str, tmp_path: Path, other: str
) -> None:
    """A second answer to one approval comes while the first resume is using it in Redis:
    a second resume finds it taken (the call runs once); a deny wins over the use not yet
    made (the call does not run)."""
    runs: list[str] = []
    async with _make(redis_url, runs) as deck:
        assert type(deck._approvals).__name__ == "RedisApprovalStore"
        parked = deck._approvals = _ParkedConsume(deck._approvals)
        session = deck.session(workdir=tmp_path)
        asked = await session.call("risky", {"text": "x"})
        approval = asked.error.details["approval_id"]
        results: list[Any] = []
        denied: list[bool] = []

        async def resume() -> None:
            results.append(await session.resume(approval))

        async def answer_again() -> None:
            await parked.reached.wait()
            if other == "resume":
                await resume()
            else:
                denied.append(await session.deny(approval))
            parked.gate.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resume)
            nursery.start_soon(answer_again)
    if other == "resume":
        assert runs == ["x"]
        assert sorted(_code(r) for r in results) == ["PERMISSION_DENIED", "ok"]
    else:
        assert denied == [True] and runs == []
        assert _code(results[0]) == "PERMISSION_DENIED"


async def test_a_read_overlapping_a_write_does_not_cache_the_old_content_in_redis(
    redis_url: str, tmp_path: Path
) -> None:
    runs: list[str] = []
    disk: dict[str, Any] = {"file": "old", "inside": trio.Event(), "release": trio.Event()}
    async with _make(redis_url, runs, disk) as deck:
        session = deck.session(workdir=tmp_path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.call, "file_read", {})
            await disk["inside"].wait()
            written = await session.call("file_write", {"text": "new"})
            disk["release"].set()
        later = await session.call("file_read", {})
    assert written.success
    assert later.data == "new", later


async def test_a_read_overlapping_another_processs_write_does_not_cache_the_old_content(
    redis_url: str, tmp_path: Path
) -> None:
    # Two decks on one Redis stand for two worker processes: the invalidation comes from the
    # other one, so this deck's own count of invalidations cannot see it. The tool's cache
    # generation in Redis does: the put of a result read before it moved stores nothing.
    runs: list[str] = []
    disk: dict[str, Any] = {"file": "old", "inside": trio.Event(), "release": trio.Event()}
    async with _make(redis_url, runs, disk) as reader, _make(redis_url, runs, disk) as writer:
        reading = reader.session(workdir=tmp_path)
        writing = writer.session(workdir=tmp_path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reading.call, "file_read", {})
            await disk["inside"].wait()
            written = await writing.call("file_write", {"text": "new"})
            disk["release"].set()
        assert written.success
        disk["inside"], disk["release"] = trio.Event(), trio.Event()
        disk["release"].set()
        for deck_session in (reading, writing):
            later = await deck_session.call("file_read", {})
            assert later.data == "new", later


def _direct_cache(url: str) -> Any:
    from tooldeck_redis._cache import RedisCache
    from tooldeck_redis._client import RedisConnection
    from tooldeck_redis._settings import redis_settings

    parsed = redis_settings({"redis": {"url": url, "namespace": "races-direct"}})
    assert parsed is not None
    return RedisCache(RedisConnection(parsed), parsed)


async def test_puts_of_concurrent_misses_are_judged_by_the_oldest_generation(
    redis_url: str,
) -> None:
    from tooldeck_hookspecs import ToolResult

    cache = _direct_cache(redis_url)
    key = "file_read@1:abc"
    try:
        # Two calls miss; an invalidation lands; whichever puts first, the one that read before
        # it must not store (nor may its twin's put let it through).
        assert await cache.get(key) is None
        assert await cache.get(key) is None
        await cache.invalidate(["file_read"])
        await cache.put(key, ToolResult.ok("old"), 60)
        await cache.put(key, ToolResult.ok("old"), 60)
        assert await cache.get(key) is None
        # A miss whose call failed (it never puts) does not stop caching for good: one put is
        # judged by its older generation, the next stores.
        await cache.invalidate(["file_read"])
        assert await cache.get(key) is None
        await cache.put(key, ToolResult.ok("new"), 60)
        assert await cache.get(key) is None
        await cache.put(key, ToolResult.ok("new"), 60)
        hit = await cache.get(key)
        assert hit is not None and hit.data == "new"
        # A put no miss preceded (direct use of the cache) stores as before.
        await cache.put("other@1:x", ToolResult.ok(1), 60)
        assert (await cache.get("other@1:x")).data == 1
    finally:
        await cache.clear()
        await cache.aclose()
