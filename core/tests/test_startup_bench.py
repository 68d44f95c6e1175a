"""``tooldeck bench`` says in words what each line measures, and its start-up, MCP and
sustained-sandbox measurements run (figures are reported, never judged on time)."""

from __future__ import annotations

import io
import os
import sys

from rich.console import Console

from tooldeck._bench import (
    COMPARISONS,
    DESCRIPTIONS,
    _pipeline_figures,
    _plugin_descriptions,
    _policy_hook_figures,
    describe,
    mcp_stdio_timings,
    render_tables,
    sandbox_sustained_figures,
)

UNDESCRIBED = "(undescribed figure)"


async def test_every_figure_of_the_pipeline_benches_is_described() -> None:
    figures = {**await _pipeline_figures(20, 1), **await _policy_hook_figures(10, 1)}
    plugin = _plugin_descriptions()
    for key in figures:
        assert UNDESCRIBED not in describe(key, plugin), key
    for line in COMPARISONS:
        for key in filter(None, (line.ours, line.theirs, line.ratio)):
            assert UNDESCRIBED not in describe(key, plugin), key
    assert all(text.strip() for text in DESCRIPTIONS.values())
    # A figure nobody described still reads as words, and says so.
    assert describe("some_new_figure_ms") == "some new figure ms (undescribed figure)"


def test_tables_show_words_side_by_side_and_no_bare_keys() -> None:
    figures = {
        "startup_call_s": 0.9,
        "startup_import_baseline_s": 0.3,
        "startup_call_vs_import_ratio": 3.0,
        "mcp_stdio_tools_list_s": 0.8,
        "select_p50_ms_10k": 12.0,
        "query_embedding_ms": 6.0,
        "st_float_query_embedding_ms": 10.0,
        "select_vs_query_embedding_ratio_10k": 2.0,
        "select_vs_st_float_query_ratio_10k": 1.2,
        "langchain": "langchain-core not importable",
    }
    out = io.StringIO()
    console = Console(file=out, width=250, color_system=None)
    for table in render_tables(figures):
        console.print(table)
    text = out.getvalue()
    assert "tooldeck call file_read in a new process" in text
    assert (
        "selection p50 inside a deck, 10k tools, new queries, vs one MiniLM query embedding by "
        "sentence-transformers" in text
    )
    assert "until tools/list answers" in text
    for key in figures:
        if "_" in key:  # a bare identifier would show its underscores
            assert key not in text, key


def test_mcp_stdio_timing_sees_initialize_then_tools_list() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss"}
    env.pop("TOOLDECK_CONFIG", None)
    figures = mcp_stdio_timings([sys.executable, "-m", "tooldeck", "serve", "mcp"], env=env)
    assert 0 < figures["initialize_s"] <= figures["tools_list_s"]
    assert figures["tools_listed"] >= 3


async def test_sustained_sandbox_figures_compare_with_outside_the_sandbox() -> None:
    figures = await sandbox_sustained_figures(3)
    if "sandbox_sustained" in figures:  # no shell pack or no usable sandbox here: said so
        assert isinstance(figures["sandbox_sustained"], str)
        return
    assert figures["sandboxed_calls_per_s"] > 0 and figures["unsandboxed_calls_per_s"] > 0
    assert figures["sandboxed_vs_unsandboxed_ratio"] > 0
