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
