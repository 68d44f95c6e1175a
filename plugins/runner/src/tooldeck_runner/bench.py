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

__all__ = ["bench_sandbox"]

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


if __name__ == "__main__":  # pragma: no cover - manual use: python -m tooldeck_runner.bench
    import json
    import sys

    print(json.dumps(trio.run(bench_sandbox, int(sys.argv[1]) if len(sys.argv) > 1 else 50)))
