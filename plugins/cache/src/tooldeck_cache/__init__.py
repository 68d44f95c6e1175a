"""tooldeck-cache: an in-process LRU result cache with per-entry TTL, bounded by entries and bytes.

Configuration (``[tool.tooldeck.cache]``): ``max_entries`` (default 1024), ``max_bytes``
(default 64 MiB), ``enabled`` (default true).
"""

from __future__ import annotations

from ._cache import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ENTRIES,
    CacheStatistics,
    ResultCache,
    cache_from_settings,
    result_size,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "CacheStatistics",
    "ResultCache",
    "cache_from_settings",
    "result_size",
]
