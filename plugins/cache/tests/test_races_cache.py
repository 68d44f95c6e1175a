"""Concurrent calls of cacheable tools through a real deck (core, schema, runner, cache): a read
that overlaps a write must not store what it read before the write, identical calls that miss
together all run (there is no single flight) and store one good answer, and failures are never
stored. Interleavings are forced with events, not sleeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tooldeck_hookspecs import ExecutionConfig, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

_PARAMETERS = {"type": "object", "properties": {"value": {"type": "string"}}}


def _file_tools(
    disk: dict[str, str], inside: trio.Event, release: trio.Event
) -> list[ToolDefinition]:
    """``file_read`` (cacheable; it parks after reading until ``release``) and ``file_write``
    (it invalidates ``file_read``), sharing ``disk``."""

    async def file_read(arguments: Any, context: Any) -> str:
        value = disk["file"]
        inside.set()
        await release.wait()  # the read is in flight: the write lands now
        return value

    def file_write(arguments: Any, context: Any) -> str:
        disk["file"] = arguments["value"]
        return "written"

    return [
        ToolDefinition(
            name="file_read",
            description="Read the file.",
            category="filesystem",
            parameters=_PARAMETERS,
            execution=ExecutionConfig(cacheable=True, cache_ttl_s=600),
            execute=file_read,
        ),
        ToolDefinition(
            name="file_write",
            description="Write the file.",
            category="filesystem",
            parameters=_PARAMETERS,
            execution=ExecutionConfig(invalidates=("file_read",)),
            execute=file_write,
        ),
    ]


async def test_a_read_overlapping_a_write_does_not_cache_the_old_content(tmp_path: Path) -> None:
    """read starts (miss) and reads "old"; write runs and invalidates file_read; read returns
    and used to store "old": every later read got the content from before the write until the
    TTL ran out."""
    disk = {"file": "old"}
    inside, release = trio.Event(), trio.Event()
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache"], tools=_file_tools(disk, inside, release)
    )
    async with deck:
        session = deck.session(workdir=tmp_path)
        overlapping: list[Any] = []

        async def read() -> None:
            overlapping.append(await session.call("file_read", {}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await inside.wait()
            written = await session.call("file_write", {"value": "new"})
            release.set()
        later = await session.call("file_read", {})
        again = await session.call("file_read", {})
    assert written.success, written
    assert overlapping[0].data == "old"  # it read before the write: that answer is fair
    assert later.data == "new" and later.metadata["cached"] is False
    # Reads that do not overlap a write are cached as before.
    assert again.data == "new" and again.metadata["cached"] is True


async def test_identical_calls_that_miss_together_all_run_and_store_one_answer(
    tmp_path: Path,
) -> None:
    """No single flight: N identical calls that probe before any of them stored run the tool
    N times (accepted: the cache saves repeated calls, it does not coalesce concurrent ones).
    They agree, one entry is stored, and the next call is a hit."""
    runs: list[str] = []
    all_inside = trio.Event()
    release = trio.Event()
    n = 8

    async def lookup(arguments: Any, context: Any) -> str:
        runs.append(arguments["value"])
        if len(runs) == n:
            all_inside.set()
        await release.wait()
        return arguments["value"].upper()

    tool = ToolDefinition(
        name="lookup",
        description="Look a word up.",
        category="api",
        parameters=_PARAMETERS,
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=600),
        execute=lookup,
    )
    deck = tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "cache"], tools=[tool])
    async with deck:
        session = deck.session(workdir=tmp_path)
        results: list[Any] = []

        async def call() -> None:
            results.append(await session.call("lookup", {"value": "w"}))

        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(call)
            await all_inside.wait()
            release.set()
        after = await session.call("lookup", {"value": "w"})
        stats = deck.cache.statistics()
    assert len(runs) == n
    assert [r.data for r in results] == ["W"] * n
    assert after.metadata["cached"] is True and after.data == "W"
    assert stats.entries == 1


async def test_failures_racing_with_a_success_are_never_stored(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Of concurrent identical calls, those that fail (the tool raised, or it timed out) store
    nothing, whatever order they finish in; the one that succeeded is what is served."""
    attempts: list[int] = []
    gates = [trio.Event(), trio.Event(), trio.Event()]
    inside = trio.Event()

    async def flaky(arguments: Any, context: Any) -> str:
        index = len(attempts)
        attempts.append(index)
        if len(attempts) == 3:
            inside.set()
        await gates[index].wait()
        if index == 0:
            raise RuntimeError("upstream broke")
        if index == 1:
            await trio.sleep_forever()  # times out
        return "good"

    tool = ToolDefinition(
        name="flaky",
        description="Sometimes breaks.",
        category="api",
        parameters=_PARAMETERS,
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=600, timeout_s=5),
        execute=flaky,
    )
    deck = tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "cache"], tools=[tool])
    async with deck:
        session = deck.session(workdir=tmp_path)
        results: list[Any] = []

        async def call() -> None:
            results.append(await session.call("flaky", {"value": "x"}))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(call)
            await inside.wait()
            gates[2].set()  # the success finishes (and stores) first
            await trio.testing.wait_all_tasks_blocked()
            gates[0].set()  # then the failure; the second call times out whenever the
            gates[1].set()  # autojump clock passes its deadline (all tasks waiting)
        after = await session.call("flaky", {"value": "x"})
    codes = sorted(str(r.error.code) if r.error else "ok" for r in results)
    assert codes == ["EXECUTION_ERROR", "TIMEOUT", "ok"]
    assert after.success and after.data == "good" and after.metadata["cached"] is True
    assert len(attempts) == 3


async def test_a_cached_result_never_serves_a_session_that_may_not_call_the_tool(
    tmp_path: Path,
) -> None:
    """Authorization comes before the cache probe: a result cached by a session holding the
    grant is not served to a session without it (nor to the first one once it revoked it)."""
    runs: list[str] = []

    def secret(arguments: Any, context: Any) -> str:
        runs.append(arguments["value"])
        return "the secret"

    tool = ToolDefinition(
        name="read_secret",
        description="Read a secret.",
        category="secrets",
        parameters=_PARAMETERS,
        security=SecurityConfig(level="moderate"),
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=600),
        execute=secret,
    )
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache", "policy"], tools=[tool]
    )
    async with deck:
        granted = deck.session(workdir=tmp_path, grants={"secrets"})
        other = deck.session(workdir=tmp_path)
        first = await granted.call("read_secret", {"value": "k"})
        again = await granted.call("read_secret", {"value": "k"})
        refused = await other.call("read_secret", {"value": "k"})
        granted.revoke("secrets")
        after_revoke = await granted.call("read_secret", {"value": "k"})
    assert first.success and again.metadata["cached"] is True
    for result in (refused, after_revoke):
        assert result.error is not None and str(result.error.code) == "PERMISSION_DENIED"
        assert "the secret" not in repr(result)
    assert runs == ["k"]
