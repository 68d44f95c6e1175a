"""What one caller does with a cached result never changes what another caller is served."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from tooldeck_cache import ResultCache

from tooldeck_hookspecs import ExecutionConfig, ToolDefinition, ToolResult

tooldeck_testing = pytest.importorskip("tooldeck.testing")


async def test_a_caller_changing_its_result_does_not_change_another_sessions_hit(
    tmp_path: Path,
) -> None:
    runs: list[str] = []

    def listing(arguments: Any, context: Any) -> dict[str, Any]:
        runs.append(arguments["folder"])
        return {"files": ["a.txt", "b.txt"], "stats": {"count": 2}}

    tool = ToolDefinition(
        name="list_folder",
        description="List a folder.",
        category="api",
        parameters={"type": "object", "properties": {"folder": {"type": "string"}}},
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=60),
        execute=listing,
    )
    deck = tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "cache"], tools=[tool])
    async with deck:
        first = await deck.session(workdir=tmp_path).call("list_folder", {"folder": "x"})
        # An application post-processes the first session's result in place...
        first.data["files"].append("injected.txt")
        first.data["stats"]["count"] = 99
        second = await deck.session(workdir=tmp_path).call("list_folder", {"folder": "x"})
        # ...and the second session's hit, too.
        second.data["files"].clear()
        third = await deck.session(workdir=tmp_path).call("list_folder", {"folder": "x"})
    assert runs == ["x"]
    assert second.metadata["cached"] is True and third.metadata["cached"] is True
    assert third.data == {"files": ["a.txt", "b.txt"], "stats": {"count": 2}}
    assert second.data == {"files": [], "stats": {"count": 2}}


async def test_data_that_is_not_plain_json_keeps_its_types_and_is_copied() -> None:
    cache = ResultCache()
    inner = [1, 2]
    result = ToolResult.ok(("tuple", inner, {3, 4}, 2**70), duration_s=0.1)
    await cache.put("k", result, ttl_s=60)
    inner.append("later")  # the tool's own object, changed after the put
    hit = await cache.get("k")
    assert hit is not None
    assert hit.data == ("tuple", [1, 2], {3, 4}, 2**70)
    hit.data[1].append("by the caller")
    again = await cache.get("k")
    assert again is not None and again.data[1] == [1, 2]


async def test_metadata_with_containers_is_not_shared_between_hits() -> None:
    cache = ResultCache()
    await cache.put("k", ToolResult.ok("text", limits={"memory_mb": 256}), ttl_s=60)
    hit = await cache.get("k")
    assert hit is not None
    hit.metadata["limits"]["memory_mb"] = 0
    again = await cache.get("k")
    assert again is not None and again.metadata == {"limits": {"memory_mb": 256}}


async def test_a_big_entry_comes_back_equal() -> None:
    # Over a megabyte: decoded in a worker thread, not on the event loop.
    data = [{"line": i, "text": "x" * 40} for i in range(30_000)]
    cache = ResultCache()
    await cache.put("big", ToolResult.ok(data), ttl_s=60)
    hit = await cache.get("big")
    assert hit is not None and hit.data == data and hit.data is not data


async def test_a_nan_ttl_is_not_stored_as_an_entry_that_never_expires() -> None:
    cache = ResultCache()
    await cache.put("k", ToolResult.ok([1]), ttl_s=math.nan)
    assert await cache.get("k") is None
    assert cache.statistics().entries == 0
