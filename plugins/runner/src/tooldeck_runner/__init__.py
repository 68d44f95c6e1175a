"""tooldeck's execute stage: per-category queues, timeouts, cancellation, retries with backoff,
and an OS sandbox (bubblewrap, or a degraded plain process) with warm single-use workers.

The deck gets a :class:`RunnerExecutor` from the ``tooldeck_executor`` hook; the configuration
lives in the ``[tool.tooldeck.runner]`` table (see :class:`RunnerSettings`).
"""

from __future__ import annotations

from ._config import RunnerSettings
from ._executor import (
    ISOLATION_IN_PROCESS,
    CategoryStatistics,
    ExecutorStatistics,
    RunnerExecutor,
    never_suspends,
)
from ._sandbox import (
    ISOLATION_BWRAP,
    ISOLATION_PROCESS,
    ISOLATION_UNAVAILABLE,
    PoolKey,
    SandboxPool,
    SandboxStatistics,
    resolve_isolation,
)

__all__ = [
    "RunnerExecutor",
    "RunnerSettings",
    "CategoryStatistics",
    "ExecutorStatistics",
    "SandboxPool",
    "SandboxStatistics",
    "PoolKey",
    "resolve_isolation",
    "ISOLATION_IN_PROCESS",
    "ISOLATION_BWRAP",
    "ISOLATION_PROCESS",
    "ISOLATION_UNAVAILABLE",
    "never_suspends",
]
