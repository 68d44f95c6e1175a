"""The runner's part of ``tooldeck bench`` (hookimpls, re-exported by
:mod:`tooldeck_runner.plugin`): sandbox latency, per-call limits, zygote throughput and plain
``def`` tools. The measurements themselves are :mod:`tooldeck_runner.bench`, imported only when
``tooldeck bench`` runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tooldeck_hookspecs import hookimpl
from tooldeck_hookspecs.specs.bench import BenchComparison, BenchDescriptions

#: Words for the figures ``tooldeck bench`` reports under the runner's names (besides
#: :data:`tooldeck_runner.bench.DESCRIPTIONS`).
_WORDS = {
    "sandbox": "sandbox latency",
    "sandbox_cold_p50_ms": "sandboxed call, a new sandbox each time: median (ms)",
    "sandbox_cold_p95_ms": "sandboxed call, a new sandbox each time: 95th percentile (ms)",
    "sandbox_warm_p50_ms": "sandboxed call from the warm pool, calls spaced out: median (ms)",
    "sandbox_warm_p95_ms": "sandboxed call from the warm pool: 95th percentile (ms)",
    "sandbox_isolation": "how calls are isolated on this machine",
    "sandbox_n": "sandboxed calls timed per figure",
    "sandbox_warm_p50_ms_limits_off": "warm sandboxed call without cgroup and seccomp (ms)",
    "sandbox_warm_p50_ms_limits_on": "warm sandboxed call with cgroup and seccomp (ms)",
    "sandbox_limits_overhead_ratio": "warm sandboxed call: with per-call limits / without",
    "sandbox_cold_p50_ms_limits_off": "new sandbox per call, no cgroup or seccomp: median (ms)",
    "sandbox_cold_p50_ms_limits_on": "new sandbox per call, cgroup and seccomp: median (ms)",
    "sync_tools": "plain def tools through the pipeline",
}


@hookimpl
def tooldeck_bench_descriptions() -> BenchDescriptions:
    """The runner's figures in words, and the plain ``def`` tool line of the side table."""
    from .bench import DESCRIPTIONS

    return BenchDescriptions(
        figures={**DESCRIPTIONS, **_WORDS},
        comparisons=(
            BenchComparison(
                what="a plain def tool: pipeline overhead vs LangChain ainvoke of the same "
                "function (µs)",
                ours="sync_tool_overhead_us",
                theirs="langchain_ainvoke_sync_us",
                ratio="sync_tool_overhead_vs_langchain_ainvoke_ratio",
                goal="<= 0.15x",
                position=10,
            ),
        ),
    )


@hookimpl
def tooldeck_bench_figures(quick: bool, make_deck: Callable[..., Any]) -> dict[str, Any]:
    """Sandbox latency (cold, warm, with and without per-call limits), plain ``def`` tools
    through a deck next to LangChain, and single-use workers vs the zygote: one run."""
    import trio

    from . import bench

    n, repeats = (300, 3) if quick else (2000, 7)
    figures: dict[str, Any] = {}
    sandbox = dict(trio.run(bench.bench_sandbox, 20 if quick else 50))
    # Figures with generic names get the runner's prefix (one flat table).
    for generic in ("n", "isolation"):
        if generic in sandbox:
            sandbox[f"sandbox_{generic}"] = sandbox.pop(generic)
    figures.update(sandbox)
    # The per-call cgroup and seccomp filter on a warm call, off and on, in one run.
    figures.update(trio.run(bench.bench_sandbox_limits, 10 if quick else 30))

    async def sync_tools() -> Mapping[str, Any]:
        deck = make_deck(list(bench.SYNC_BENCH_TOOLS))
        async with deck:
            return await bench.bench_sync_tools(deck.session().call, n, repeats)

    figures.update(trio.run(sync_tools))
    try:
        # Single-use workers vs the zygote (`[runner] zygote = true`), in one run.
        throughput = dict(trio.run(bench.bench_sandbox_throughput, 20 if quick else 60))
        throughput.pop("n", None)
        figures.update(throughput)
    except Exception as exc:
        figures["sandbox_throughput"] = f"skipped: {type(exc).__name__}: {exc}"
    return figures
