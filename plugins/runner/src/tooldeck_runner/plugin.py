"""The runner's hook implementations (entry point ``runner``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import hookimpl

# `tooldeck bench`'s figures of this plugin live in their own module.
from ._bench_figures import tooldeck_bench_descriptions, tooldeck_bench_figures  # noqa: F401
from ._executor import RunnerExecutor

__all__ = ["tooldeck_config_schema", "tooldeck_executor"]


@hookimpl
def tooldeck_executor(settings: Mapping[str, Any]) -> RunnerExecutor:
    """Provide the default executor, configured by the ``runner`` table of ``settings``."""
    return RunnerExecutor.from_settings(settings)


@hookimpl
def tooldeck_config_schema() -> dict[str, Any]:
    """The ``[runner]`` table's key names (from :class:`RunnerSettings`), for the core's check.

    Values are checked by ``RunnerSettings.from_settings``; naming the keys here lets the core
    report a misspelled one with the rest of the configuration's problems.
    """
    import attrs

    from ._config import RunnerSettings

    return {
        "runner": {
            "type": "object",
            "properties": {field.name: {} for field in attrs.fields(RunnerSettings)},
            "additionalProperties": False,
        }
    }
