"""Hook implementations of tooldeck-ratelimit (entry point ``ratelimit``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import hookimpl

from ._limiter import ToolRateLimiter, limiter_from_settings


@hookimpl
def tooldeck_rate_limiter(settings: Mapping[str, Any]) -> ToolRateLimiter | None:
    """Provide the moving-window rate limiter configured by ``[tool.tooldeck.ratelimit]``.

    ``enabled = false`` in that table turns rate limiting off (returns None).
    """
    table = settings.get("ratelimit", {}) or {}
    if not table.get("enabled", True):
        return None
    return limiter_from_settings(settings)


@hookimpl
def tooldeck_config_schema() -> dict[str, Any]:
    """The ``[ratelimit]`` table, checked by the core at start-up."""
    return {
        "ratelimit": {
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean"},
                "storage_uri": {"type": "string", "minLength": 1},
                "global_factor": {"type": "number", "minimum": 0},  # 0: no cross-session window
                "global": {"type": "object"},
                "fail_open": {"type": "boolean"},
            },
            "additionalProperties": False,
        }
    }
