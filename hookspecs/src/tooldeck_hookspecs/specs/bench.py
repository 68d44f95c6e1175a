"""Benchmarks: plugins contribute their figures to ``tooldeck bench``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

from .._markers import hookspec

__all__ = ["BenchComparison", "BenchDescriptions"]


@attrs.frozen(kw_only=True)
class BenchComparison:
    """One line of ``tooldeck bench``'s side-by-side table.

    :param what: what is measured, in words (the line's first column).
    :param ours: the key of tooldeck's figure; the line is shown only when it was measured.
    :param theirs: the key of the figure it is compared with (measured in the same run), if any.
    :param ratio: the key of ``ours / theirs``, if any.
    :param goal: the goal, in words (``"<= 0.5x"``, ``">= 100 calls/s"``).
    :param position: where the line goes (lines are sorted by it; the core's own lines use
        20 (sandbox), 40-60 (start-up): a plugin picks a free number near its subject).
    """

    what: str
    ours: str
    theirs: str | None = None
    ratio: str | None = None
    goal: str = "-"
    position: int = 100


@attrs.frozen(kw_only=True)
class BenchDescriptions:
    """What a plugin's figures mean: the words of ``tooldeck bench``'s tables.

    :param figures: figure key -> what it measures, in words (every key the plugin reports).
    :param comparisons: the plugin's lines of the side-by-side table.
    """

    figures: Mapping[str, str] = attrs.field(factory=dict)
    comparisons: Sequence[BenchComparison] = ()


# -------------------------------------------------------------------------
# Benchmarks
# -------------------------------------------------------------------------


@hookspec
def tooldeck_bench_descriptions() -> BenchDescriptions | None:
    """Describe the figures this plugin adds to ``tooldeck bench``, and its side-by-side lines.

    Called when ``tooldeck bench`` renders its tables (and by tests that check every figure is
    described); all results are collected. Cheap and pure: no measurement here.
    """


@hookspec
def tooldeck_bench_figures(
    quick: bool,
    make_deck: Callable[..., Any],
    pipeline_throughput: Callable[[Mapping[str, Any], int], Awaitable[float]],
) -> Mapping[str, Any] | None:
    """Measure this plugin's figures for ``tooldeck bench``.

    Called once per ``tooldeck bench`` run, after the core's in-process figures and before the
    start-up ones, for every loaded plugin; all results are collected into one flat table (a
    later plugin's key replaces an earlier one's). Synchronous: run your own ``trio.run``. A
    figure that cannot be measured here is a string saying why (``"redis-server not
    installed"``); an implementation that raises is reported as ``"<plugin>": "skipped: ..."``.
    Report ratios measured in the same run, never judge a time.

    :param quick: fewer repetitions (``tooldeck bench --quick``).
    :param make_deck: ``make_deck(tools, config=None)``: an isolated deck of every installed
        stage plus ``tools`` (tool definitions or ``@tool`` functions), configured by ``config``.
    :param pipeline_throughput: ``await pipeline_throughput(config, total)``: calls/s of the
        whole pipeline for a cacheable, rate-limited trivial tool under ``config`` (16 callers,
        all cache misses); compare two configurations in one run.
    :return: figure key -> value (numbers; strings for what was skipped), or None.
    """
