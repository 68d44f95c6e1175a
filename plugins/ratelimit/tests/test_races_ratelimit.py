"""A burst of parallel calls (a model's many tool calls in one turn, run concurrently) against
the in-memory limiter through a real deck: exactly the limit is admitted, across sessions too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tooldeck_hookspecs import ExecutionConfig, RateLimit, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

LIMIT = 4


@pytest.mark.parametrize("cacheable", [False, True])
async def test_a_burst_over_the_limit_admits_exactly_the_limit(
    tmp_path: Path, cacheable: bool
) -> None:
    """LIMIT + 6 calls at once in one session, and as many in a second session with a
    cross-session limit of LIMIT + 2: each window admits exactly its count; the tool never
    runs more often than admitted, even for a tool whose calls park (so every admission is
    decided while others are in flight)."""
    runs: list[str] = []
    release = trio.Event()

    async def ping(arguments: Any, context: Any) -> str:
        runs.append(arguments["n"])
        await release.wait()
        return "pong"

    tool = ToolDefinition(
        name="ping_service",
        description="Ping the service.",
        category="api",
        parameters={"type": "object", "properties": {"n": {"type": "string"}}},
        security=SecurityConfig(rate_limit=RateLimit(max_calls=LIMIT, window_s=3600)),
        execution=ExecutionConfig(cacheable=cacheable, cache_ttl_s=600),
        execute=ping,
    )
    entry_points = ["schema", "runner", "ratelimit"] + (["cache"] if cacheable else [])
    deck = tooldeck_testing.make_deck(
        load_entry_points=entry_points,
        tools=[tool],
        config={"ratelimit": {"global": {"ping_service": LIMIT + 2}}},
    )
    async with deck:
        one, two = deck.session(workdir=tmp_path), deck.session(workdir=tmp_path)
        results: dict[str, list[Any]] = {"one": [], "two": []}

        async def call(name: str, session: Any, index: int) -> None:
            results[name].append(await session.call("ping_service", {"n": f"{name}{index}"}))

        async with trio.open_nursery() as nursery:
            for index in range(LIMIT + 6):
                nursery.start_soon(call, "one", one, index)
                nursery.start_soon(call, "two", two, index)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
    admitted = {name: sum(r.success for r in rs) for name, rs in results.items()}
    assert all(v <= LIMIT for v in admitted.values())
    assert sum(admitted.values()) == LIMIT + 2 == len(runs)
    refused = [r for rs in results.values() for r in rs if not r.success]
    assert {str(r.error.code) for r in refused} == {"RATE_LIMIT_EXCEEDED"}
