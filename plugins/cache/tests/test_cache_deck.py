"""tooldeck-cache inside a real deck (core, schema, runner): hits skip execution."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tooldeck_hookspecs import ExecutionConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")


async def test_second_identical_call_is_served_from_the_cache(tmp_path: Path) -> None:
    calls: list[str] = []

    def lookup(arguments: Any, context: Any) -> dict[str, Any]:
        calls.append(arguments["word"])
        return {"word": arguments["word"], "length": len(arguments["word"])}

    tool = ToolDefinition(
        name="word_length",
        description="Length of a word.",
        category="api",
        parameters={
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        },
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=60),
        execute=lookup,
    )
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache"],
        tools=[tool],
        config={"cache": {"max_entries": 10}},
    )
    async with deck:
        session = deck.session(workdir=tmp_path)
        first = await session.call("word_length", {"word": "trio"})
        second = await session.call("word_length", {"word": "trio"})
        other = await session.call("word_length", {"word": "attrs"})
    assert first.success and second.success and other.success
    assert first.metadata["cached"] is False
    assert second.metadata["cached"] is True
    assert second.data == first.data
    assert calls == ["trio", "attrs"]
    stats = deck.cache.statistics()
    assert (stats.hits, stats.misses, stats.entries) == (1, 2, 2)
