"""The LRU + TTL result cache behind ``tooldeck_cache``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import cachetools
import cattrs

from tooldeck_hookspecs import ToolResult

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "CacheStatistics",
    "ResultCache",
    "result_size",
]

DEFAULT_MAX_ENTRIES = 1024
DEFAULT_MAX_BYTES = 64 * 1024 * 1024

# One converter for the module: results only cross this boundary to be measured.
_converter = cattrs.Converter()


def result_size(result: ToolResult) -> int:
    """Bytes of ``result``'s canonical JSON, the unit of the cache's byte bound.

    Canonical JSON is ASCII (non-ASCII is escaped), so its length in characters is its size in
    bytes; key order does not change the length, so the keys are not sorted (this runs on every
    cache put).
    """
    return len(
        json.dumps(
            _converter.unstructure(result), separators=(",", ":"), ensure_ascii=True, default=str
        )
    )


@attrs.frozen(kw_only=True)
class CacheStatistics:
    """A snapshot of a :class:`ResultCache`'s counters and occupancy."""

    hits: int
    misses: int
    #: Entries pushed out to respect ``max_entries`` or ``max_bytes`` (expiry is not eviction).
    evictions: int
    entries: int
    bytes: int
    max_entries: int
    max_bytes: int


@attrs.frozen
class _Entry:
    result: ToolResult
    ttl_s: float
    size: int


class _CountingTLRU(cachetools.TLRUCache):  # type: ignore[type-arg]
    """A TLRU cache that counts the entries it pushes out to make room."""

    def __init__(self, maxsize: int, timer: Callable[[], float]) -> None:
        super().__init__(
            maxsize=maxsize,
            ttu=lambda _key, entry, now: now + entry.ttl_s,
            timer=timer,
            getsizeof=lambda entry: entry.size,
        )
        self.evictions = 0

    def popitem(self) -> tuple[Any, Any]:
        # cachetools calls popitem only to make room, and expires stale entries first.
        item = super().popitem()
        self.evictions += 1
        return item


class ResultCache:
    """Results of cacheable tools: least recently used first out, each entry with its own TTL.

    Bounded both by entry count and by bytes (the canonical JSON size of each result, computed once
    when it is stored). Only successful results are kept; a result larger than ``max_bytes`` is
    silently not stored. Stored results are frozen attrs objects, so :meth:`get` hands back the
    stored object itself.

    ``get`` and ``put`` are async to satisfy the :class:`~tooldeck_hookspecs.Cache` protocol but
    never wait: an in-memory probe is cheaper than a checkpoint.

    :param max_entries: most entries kept at once.
    :param max_bytes: most bytes (sum of entry sizes) kept at once.
    :param timer: the clock, in seconds (monotonic by default); inject a fake one in tests.
    """

    def __init__(
        self,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("max_entries and max_bytes must be positive")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._store = _CountingTLRU(maxsize=max_bytes, timer=timer)
        self._hits = 0
        self._misses = 0

    async def get(self, key: str) -> ToolResult | None:
        """The cached result for ``key``, or None; an expired entry counts as a miss."""
        entry = self._store.get(key)
        if entry is None:
            self._misses += 1
            return None
        self._hits += 1
        result: ToolResult = entry.result
        return result

    async def put(self, key: str, result: ToolResult, ttl_s: float) -> None:
        """Keep ``result`` under ``key`` for ``ttl_s`` seconds (successful results only)."""
        if not result.success or ttl_s <= 0:
            return
        size = result_size(result)
        if size > self.max_bytes:
            # Too big to ever fit; drop any older value so that a stale one is not served.
            self._store.pop(key, None)
            return
        self._store[key] = _Entry(result, float(ttl_s), size)
        # cachetools enforces one bound (bytes); the entry count is enforced here.
        while len(self._store) > self.max_entries:
            self._store.popitem()

    async def invalidate(self, tools: Sequence[str]) -> int:
        """Drop every entry of these tools, whatever their arguments; return how many."""
        # Keys are "name@version:digest" (tooldeck_hookspecs.cache_key).
        prefixes = tuple(f"{name}@" for name in tools)
        stale = [key for key in list(self._store.keys()) if key.startswith(prefixes)]
        for key in stale:
            self._store.pop(key, None)
        return len(stale)

    def clear(self) -> None:
        """Drop every entry; counters are kept."""
        self._store.clear()

    def statistics(self) -> CacheStatistics:
        """Counters and current occupancy (expired entries are purged first)."""
        self._store.expire()
        return CacheStatistics(
            hits=self._hits,
            misses=self._misses,
            evictions=self._store.evictions,
            entries=len(self._store),
            bytes=int(self._store.currsize),
            max_entries=self.max_entries,
            max_bytes=self.max_bytes,
        )


def cache_from_settings(settings: Mapping[str, Any]) -> ResultCache:
    """Build a :class:`ResultCache` from the ``[tool.tooldeck.cache]`` table of ``settings``."""
    table = settings.get("cache", {}) or {}
    return ResultCache(
        max_entries=int(table.get("max_entries", DEFAULT_MAX_ENTRIES)),
        max_bytes=int(table.get("max_bytes", DEFAULT_MAX_BYTES)),
    )
