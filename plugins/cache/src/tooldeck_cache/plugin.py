"""Hook implementations of tooldeck-cache (entry point ``cache``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import hookimpl

from ._cache import ResultCache, cache_from_settings


@hookimpl
def tooldeck_cache(settings: Mapping[str, Any]) -> ResultCache | None:
    """Provide the LRU + TTL result cache configured by ``[tool.tooldeck.cache]``.

    ``enabled = false`` in that table turns caching off (returns None).
    """
    table = settings.get("cache", {}) or {}
    if not table.get("enabled", True):
        return None
    return cache_from_settings(settings)


@hookimpl
def tooldeck_config_schema() -> dict[str, Any]:
    """The ``[cache]`` table, checked by the core at start-up (sizes >= 1, no unknown keys)."""
    return {
        "cache": {
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean"},
                "max_entries": {"type": "integer", "minimum": 1},
                "max_bytes": {"type": "integer", "minimum": 1},
            },
            "additionalProperties": False,
        }
    }
