"""Benchmark helpers for ``tooldeck bench``: what a sandboxed call costs, cold and warm.

Figures are reported, never asserted: machines are noisy.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import trio

from tooldeck_hookspecs import (
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
)

from ._executor import RunnerExecutor

__all__ = ["bench_sandbox", "bench_sandbox_limits"]

# A tool that is already imported by every worker, so the figures measure the sandbox itself:
# process start, mounts, the wire format and the result's way back.
_ECHO = ToolDefinition(
    name="bench_echo",
    description="returns its argument as canonical JSON",
    category="bench",
    entrypoint="tooldeck_hookspecs:canonical_json",
    call_style="kwargs",
    security=SecurityConfig(sandbox=True),
    execution=ExecutionConfig(timeout_s=30),
)


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def _timed_calls(
    executor: RunnerExecutor, workdir: str, n: int, pause_s: float
) -> list[float]:
    context = ToolContext(session_id="bench", workdir=workdir)
    samples = []
    for i in range(n):
        call = ToolCall(name=_ECHO.name, arguments={"value": {"i": i, "text": "hello"}})
        started = time.perf_counter()
        result = await executor.run(_ECHO, call, context)
        samples.append((time.perf_counter() - started) * 1000)
        if not result.success:
            raise RuntimeError(f"benchmark call failed: {result.error}")
        if pause_s:
            await trio.sleep(pause_s)
    return samples


async def bench_sandbox(
    n: int = 50, *, settings: Mapping[str, Any] | None = None, pause_s: float = 0.25
) -> dict[str, Any]:
    """Latency of ``n`` sandboxed calls without a pool (cold) and from the warm pool.

    Warm calls are spaced by ``pause_s`` (an agent's think time between calls), which gives
    the replacement worker time to start, as it would in real use. Returns
    ``sandbox_cold_p50_ms``, ``sandbox_cold_p95_ms``, ``sandbox_warm_p50_ms``,
    ``sandbox_warm_p95_ms``, plus ``isolation`` and ``n``.
    """
    table = dict((settings or {}).get("runner", {}))
    with tempfile.TemporaryDirectory(prefix="tooldeck-bench-") as workdir:
        cold = RunnerExecutor.from_settings({"runner": {**table, "warm_workers": 0}})
        try:
            cold_ms = await _timed_calls(cold, workdir, n, 0.0)
            isolation = cold.sandbox_pool().isolation
        finally:
            await cold.aclose()
        warm = RunnerExecutor.from_settings(
            {"runner": {**table, "warm_workers": max(1, table.get("warm_workers", 2))}}
        )
        try:
            await warm.sandbox_pool().prewarm(workdir)
            await trio.sleep(pause_s)
            warm_ms = await _timed_calls(warm, workdir, n, pause_s)
        finally:
            await warm.aclose()
    return {
        "sandbox_cold_p50_ms": statistics.median(cold_ms),
        "sandbox_cold_p95_ms": _percentile(cold_ms, 0.95),
        "sandbox_warm_p50_ms": statistics.median(warm_ms),
        "sandbox_warm_p95_ms": _percentile(warm_ms, 0.95),
        "isolation": isolation,
        "n": n,
    }


async def bench_sandbox_limits(
    n: int = 30, *, settings: Mapping[str, Any] | None = None, rounds: int = 2
) -> dict[str, Any]:
    """What the per-call limits (cgroup, seccomp) cost a warm sandboxed call.

    Runs :func:`bench_sandbox` with ``cgroups = false, seccomp = false`` and with the defaults,
    alternating ``rounds`` times in one run (noise hits both alike), and returns the median warm
    p50 of each and their ratio: ``sandbox_warm_p50_ms_limits_off``,
    ``sandbox_warm_p50_ms_limits_on``, ``sandbox_limits_overhead_ratio``, plus the cold p50s.
    """
    table = dict((settings or {}).get("runner", {}))
    figures: dict[str, list[float]] = {}
    for _ in range(rounds):
        for label, extra in (("off", {"cgroups": False, "seccomp": False}), ("on", {})):
            got = await bench_sandbox(n, settings={"runner": {**table, **extra}})
            figures.setdefault(f"warm_{label}", []).append(got["sandbox_warm_p50_ms"])
            figures.setdefault(f"cold_{label}", []).append(got["sandbox_cold_p50_ms"])
    off = statistics.median(figures["warm_off"])
    on = statistics.median(figures["warm_on"])
    return {
        "sandbox_warm_p50_ms_limits_off": off,
        "sandbox_warm_p50_ms_limits_on": on,
        "sandbox_limits_overhead_ratio": on / off if off else float("nan"),
        "sandbox_cold_p50_ms_limits_off": statistics.median(figures["cold_off"]),
        "sandbox_cold_p50_ms_limits_on": statistics.median(figures["cold_on"]),
    }


if __name__ == "__main__":  # pragma: no cover - manual use: python -m tooldeck_runner.bench
    import json
    import sys

    print(json.dumps(trio.run(bench_sandbox, int(sys.argv[1]) if len(sys.argv) > 1 else 50)))
