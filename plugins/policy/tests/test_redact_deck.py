"""Redaction end to end: a tool's output passes through tooldeck_process_result in a real deck."""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import Any

import pytest

from tooldeck_hookspecs import ExecutionConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")


async def test_tool_output_is_redacted_before_the_model_and_the_cache_see_it(
    tmp_path: Path,
) -> None:
    rng = random.Random(11)
    token = "ghp_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))

    def show_config(arguments: Any, context: Any) -> dict[str, Any]:
        return {"text": f"GITHUB_TOKEN={token}\nDB_PASSWORD=8ae31cacf141669ddfb5da\nDEBUG=1\n"}

    tool = ToolDefinition(
        name="show_config",
        description="Show the service configuration.",
        category="api",
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=60),
        execute=show_config,
    )
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "cache"], tools=[tool]
    )
    async with deck:
        session = deck.session(workdir=tmp_path)
        first = await session.call("show_config", {})
        second = await session.call("show_config", {})
    assert first.success, first.error
    text = first.data["text"]
    assert token not in text and "8ae31cacf141669ddfb5da" not in text
    assert "GITHUB_TOKEN=[REDACTED:github-pat]" in text
    assert "DEBUG=1" in text
    assert second.metadata["cached"] is True
    assert second.data == first.data
