"""The runner's hook implementations (entry point ``runner``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import hookimpl

from ._executor import RunnerExecutor

__all__ = ["tooldeck_executor"]


@hookimpl
def tooldeck_executor(settings: Mapping[str, Any]) -> RunnerExecutor:
    """Provide the default executor, configured by the ``runner`` table of ``settings``."""
    return RunnerExecutor.from_settings(settings)
