"""The pipeline benchmark runs and reports its figures (reported, never judged on time)."""

from __future__ import annotations

import importlib.util

from tooldeck._bench import _pipeline_figures


async def test_pipeline_figures_are_reported_and_consistent() -> None:
    figures = await _pipeline_figures(50, 2)
    for key in (
        "direct_call_us",
        "pipeline_call_us",
        "pipeline_overhead_us",
        "cache_hit_us",
        "pipeline_overhead_awaiting_tool_us",
        "pipeline_overhead_sync_tool_us",
    ):
        assert figures[key] > 0, key
    assert figures["calls_per_s"] > 0
    assert figures["pipeline_call_us"] > figures["direct_call_us"]
    if importlib.util.find_spec("langchain_core") is not None:
        # Paired rounds: each ratio is a round's pipeline overhead over that round's LangChain.
        assert figures["langchain_ainvoke_us"] > 0
        assert 0 < figures["overhead_vs_langchain_ratio"]
    else:
        assert "langchain_ainvoke_us" not in figures
