"""Plugins contribute ``tooldeck bench`` figures (``tooldeck_bench_figures``), their words and
their side-by-side lines (``tooldeck_bench_descriptions``); the core imports none (issue 15)."""

from __future__ import annotations

import io

from rich.console import Console

from tooldeck._bench import _plugin_tables, describe, plugin_figures, render_tables
from tooldeck._plugins import TooldeckPluginManager
from tooldeck.testing import inline_plugin
from tooldeck_hookspecs import tool
from tooldeck_hookspecs.specs.bench import BenchComparison, BenchDescriptions


@tool(category="bench")
async def bench_echo(text: str) -> str:
    """Echo the text (the inline plugin's benchmark tool)."""
    return text


def _manager() -> TooldeckPluginManager:
    def tooldeck_bench_figures(quick, make_deck, pipeline_throughput):
        import trio

        async def measure():
            deck = make_deck([bench_echo])
            async with deck:
                result = await deck.session().call("bench_echo", {"text": "hi"})
            memory = await pipeline_throughput({}, 40)
            return {"echo_ok": result.data, "echo_calls_per_s": memory, "echo_ratio": 0.5,
                    "echo_quick": quick}

        return trio.run(measure)

    def tooldeck_bench_descriptions():
        return BenchDescriptions(
            figures={"echo_calls_per_s": "echo pipeline throughput (calls/s)",
                     "echo_ratio": "echo: ours / theirs", "echo_ok": "the echo answered",
                     "echo_quick": "--quick"},
            comparisons=(
                BenchComparison(what="echo through the deck vs nothing", ours="echo_calls_per_s",
                                ratio="echo_ratio", goal=">= 1x", position=1),
            ),
        )

    def broken(quick):
        raise RuntimeError("no such machine")

    manager = TooldeckPluginManager()
    manager.register(
        inline_plugin(tooldeck_bench_figures, tooldeck_bench_descriptions), name="echo"
    )
    manager.register(inline_plugin(tooldeck_bench_figures=broken), name="broken")
    return manager


def test_plugin_figures_are_measured_with_the_cores_helpers_and_a_broken_one_is_a_line():
    figures = plugin_figures(True, _manager())
    assert figures["echo_ok"] == "hi" and figures["echo_quick"] is True
    assert figures["echo_calls_per_s"] > 0
    assert figures["broken"] == "skipped: RuntimeError: no such machine"


def test_plugin_lines_and_words_reach_the_tables_in_position_order():
    manager = _manager()
    words, lines = _plugin_tables(manager)
    assert describe("echo_ratio", words) == "echo: ours / theirs"
    figures = {"echo_calls_per_s": 10.0, "echo_ratio": 0.5, "startup_call_s": 0.9}
    out = io.StringIO()
    console = Console(file=out, width=250, color_system=None)
    for table in render_tables(figures, manager):
        console.print(table)
    text = out.getvalue()
    assert "echo pipeline throughput (calls/s)" in text
    # position 1 comes before the core's start-up line (40)
    assert text.index("echo through the deck vs nothing") < text.index("tooldeck call file_read")


def test_every_installed_plugins_side_line_is_described():
    words, lines = _plugin_tables()
    assert lines, "the installed runner, redis and faiss plugins add side-by-side lines"
    for line in lines:
        for key in filter(None, (line.ours, line.theirs, line.ratio)):
            assert "(undescribed figure)" not in describe(key, words), key
