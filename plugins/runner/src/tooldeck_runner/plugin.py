"""The runner's hook implementations (entry point ``runner``)."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import Event, hookimpl, nonblocking, observes

# `tooldeck bench`'s figures of this plugin live in their own module.
from ._bench_figures import tooldeck_bench_descriptions, tooldeck_bench_figures  # noqa: F401
from ._executor import RunnerExecutor

__all__ = ["tooldeck_config_schema", "tooldeck_event", "tooldeck_executor"]

# The executors this plugin made (one per deck), told when a session closes. The event does not
# say which deck closed it: an executor that kept nothing for that session id ignores it.
_EXECUTORS: weakref.WeakSet[RunnerExecutor] = weakref.WeakSet()


@hookimpl
def tooldeck_executor(settings: Mapping[str, Any]) -> RunnerExecutor:
    """Provide the default executor, configured by the ``runner`` table of ``settings``."""
    executor = RunnerExecutor.from_settings(settings)
    _EXECUTORS.add(executor)
    return executor


@hookimpl
@nonblocking  # hands the work to the executor's loop; returns at once
@observes("session.closed")
def tooldeck_event(event: Event) -> None:
    """Release what the sandbox pool keeps for a closed session (its zygotes)."""
    if event.session_id:
        for executor in list(_EXECUTORS):
            executor.session_closed(event.session_id)


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
