"""tooldeck's execute stage: per-category queues, timeouts, cancellation, retries with backoff,
and an OS sandbox (bubblewrap, or a degraded plain process) with warm single-use workers.

The deck gets a :class:`RunnerExecutor` from the ``tooldeck_executor`` hook; the configuration
lives in the ``[tool.tooldeck.runner]`` table (see :class:`RunnerSettings`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._config import RunnerSettings
from ._executor import (
    ISOLATION_IN_PROCESS,
    CategoryStatistics,
    ExecutorStatistics,
    RunnerExecutor,
    never_suspends,
)
from ._isolation import (
    ISOLATION_BWRAP,
    ISOLATION_PROCESS,
    ISOLATION_UNAVAILABLE,
    resolve_isolation,
)

if TYPE_CHECKING:
    from ._sandbox import PoolKey, SandboxPool, SandboxStatistics

# The sandbox's classes load at first use (PEP 562): importing the plugin, as every deck does,
# does not import the sandbox machinery (see ``_isolation``).
_LAZY = frozenset({"PoolKey", "SandboxPool", "SandboxStatistics"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import _sandbox

        return getattr(_sandbox, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
