"""tooldeck-ratelimit: moving-window rate limits per (session, tool) and per tool across sessions.

Configuration (``[tool.tooldeck.ratelimit]``): ``storage_uri`` (default ``memory://``),
``global_factor`` (default 10), ``global`` (per-tool cross-session overrides), ``fail_open``
(default true), ``enabled`` (default true).
"""

from __future__ import annotations

from ._limiter import (
    DEFAULT_GLOBAL_FACTOR,
    ToolRateLimiter,
    limiter_from_settings,
    parse_global_override,
)

__all__ = [
    "DEFAULT_GLOBAL_FACTOR",
    "ToolRateLimiter",
    "limiter_from_settings",
    "parse_global_override",
]
