"""The LRU + TTL result cache behind ``tooldeck_cache``."""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import cachetools
import cattrs
import orjson

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
    """Bytes of ``result`` as UTF-8 JSON, the unit of the cache's byte bound.

    Computed once per cache put, so it uses orjson (about 30x faster than unstructuring and
    ``json.dumps``). Values JSON cannot hold count as their ``str()``. What orjson refuses (a
    lone surrogate, an integer over 64 bits) is measured by ``json.dumps`` with ASCII escapes
    instead, whose length in characters is its size in bytes.
    """
    error = result.error
    document = {
        "success": result.success,
        "data": result.data,
        "error": None if error is None else _converter.unstructure(error),
        "metadata": result.metadata,
    }
    try:
        return len(orjson.dumps(document, default=str))
    except TypeError:  # orjson.JSONEncodeError is one
        pass
    try:
        # Non-string keys (slower to serialise, so not the first attempt).
        return len(orjson.dumps(document, default=str, option=orjson.OPT_NON_STR_KEYS))
    except TypeError:
        return len(json.dumps(document, separators=(",", ":"), ensure_ascii=True, default=str))


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


#: Exact types whose values nobody can change in place: a result holding only these is shared.
_IMMUTABLE = frozenset({str, int, float, bool, type(None), bytes})
_PLAIN_LEAVES = frozenset({str, int, bool, type(None)})
#: Snapshots larger than this are decoded in a worker thread, off the event loop.
_DECODE_IN_THREAD_BYTES = 1024 * 1024
#: What :func:`result_size` adds to the JSON of ``[data, metadata]`` for a successful result.
_SUCCESS_FRAME = len(b'{"success":true,"data":,"error":null,"metadata":}') - len(b"[,]")


def _shareable(result: ToolResult) -> bool:
    """Whether handing ``result`` itself to every caller is safe: immutable data and metadata
    whose values are immutable (the usual text or number result, and its timings)."""
    if type(result.data) not in _IMMUTABLE or type(result.metadata) is not dict:
        return False
    return all(type(value) in _IMMUTABLE for value in result.metadata.values())


def _plain_json(value: Any) -> bool:
    """Whether ``value`` is exactly plain JSON (dicts with str keys, lists, str, int, bool, None,
    finite floats), so that a JSON round trip gives back an equal value of the same types.
    Iterative."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in _PLAIN_LEAVES:
            continue
        if kind is float:
            if not math.isfinite(item):
                return False
        elif kind is dict:
            if not all(type(key) is str for key in item):
                return False
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        else:
            return False
    return True


class _Entry:
    """A stored result, its expiry time on the cache's clock, and its size in bytes.

    ``snapshot`` is None when ``result`` is immutable all the way down and handed out as is.
    Otherwise ``result`` is a template without data and metadata, and ``snapshot`` holds them
    as ``[data, metadata]``: JSON bytes for plain JSON, else a private deep copy. Every hit
    then builds fresh containers, so a caller that changes its result in place (appends to a
    list, pops a key) cannot change what the cache serves to the next session.
    """

    __slots__ = ("result", "expires", "size", "snapshot")

    def __init__(
        self, result: ToolResult, expires: float, size: int, snapshot: bytes | list[Any] | None
    ) -> None:
        self.result = result
        self.expires = expires
        self.size = size
        self.snapshot = snapshot


def _entry_size(entry: _Entry) -> int:
    return entry.size


class _CountingLRU(cachetools.LRUCache):  # type: ignore[type-arg]
    """cachetools' LRU, bounded by bytes, that counts the live entries it pushes out."""

    def __init__(self, maxsize: int, timer: Callable[[], float]) -> None:
        super().__init__(maxsize=maxsize, getsizeof=_entry_size)
        self.timer = timer
        self.evictions = 0

    def popitem(self) -> tuple[Any, Any]:
        # cachetools calls popitem only to make room; an entry already past its TTL that goes
        # this way expired, it was not evicted.
        key, entry = super().popitem()
        if entry.expires > self.timer():
            self.evictions += 1
        return key, entry


class ResultCache:
    """Results of cacheable tools: least recently used first out, each entry with its own TTL.

    Bounded both by entry count and by bytes (the JSON size of each result, computed once when
    it is stored). Only successful results are kept; a result larger than ``max_bytes`` is not
    stored. The cache serves every session of the deck, and ``ToolResult`` is frozen but its
    ``data`` and ``metadata`` are ordinary dicts and lists: a result made only of immutable
    values is handed back as the stored object itself, any other is kept as a snapshot taken at
    :meth:`put` and rebuilt at each hit, so that one caller changing its result in place never
    changes what another session is served.

    Expiry is checked when an entry is read (an expired entry is a miss and is dropped), and an
    expired entry the LRU order pushes out is not counted as an eviction. cachetools' own
    ``TLRUCache`` would also drop expired entries eagerly, but it keeps a heap of entries
    compared in Python: 5 µs per put, a third of the pipeline's budget. Expired entries that
    nobody reads stay until the LRU order reaches them or :meth:`statistics` purges them; they
    count toward both bounds meanwhile.

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
        self._timer = timer
        self._store = _CountingLRU(maxsize=max_bytes, timer=timer)
        self._hits = 0
        self._misses = 0

    async def get(self, key: str) -> ToolResult | None:
        """The cached result for ``key``, or None; an expired entry counts as a miss.

        A result whose data or metadata can be changed in place comes back as a fresh copy at
        every hit (see :class:`_Entry`); an immutable one is the stored object itself.
        """
        entry = self._store.get(key)
        if entry is None or entry.expires <= self._timer():
            if entry is not None:
                self._store.pop(key, None)
            self._misses += 1
            return None
        self._hits += 1
        snapshot = entry.snapshot
        if snapshot is None:
            stored: ToolResult = entry.result
            return stored
        if type(snapshot) is bytes:
            if len(snapshot) > _DECODE_IN_THREAD_BYTES:
                import trio  # only for big entries: decoding megabytes must not stall the loop

                data, metadata = await trio.to_thread.run_sync(orjson.loads, snapshot)
            else:
                data, metadata = orjson.loads(snapshot)
        else:
            data, metadata = copy.deepcopy(snapshot)
        template = entry.result
        if type(template) is ToolResult:
            return ToolResult(success=True, data=data, error=None, metadata=metadata)
        rebuilt: ToolResult = attrs.evolve(template, data=data, metadata=metadata)
        return rebuilt

    async def put(self, key: str, result: ToolResult, ttl_s: float) -> None:
        """Keep ``result`` under ``key`` for ``ttl_s`` seconds (successful results only).

        What is kept is a snapshot taken now: changing ``result``'s data afterwards (the caller
        holds the same object) does not change what later hits get.
        """
        if not result.success or not ttl_s > 0:  # NaN too: it would never expire
            return
        store = self._store
        snapshot: bytes | list[Any] | None = None
        if _shareable(result):
            size = result_size(result)
            stored = result
        else:
            pair = [result.data, dict(result.metadata)]
            if _plain_json(pair):
                try:
                    snapshot = orjson.dumps(pair)
                except TypeError:  # an integer over 64 bits: orjson refuses it
                    snapshot = None
            if snapshot is not None:
                # The same bytes result_size() would count, without encoding twice.
                size = len(snapshot) + _SUCCESS_FRAME
            else:
                size = result_size(result)
                try:
                    snapshot = copy.deepcopy(pair)
                except Exception:  # an object that cannot be copied cannot be kept safely
                    store.pop(key, None)
                    return
            stored = (
                ToolResult(success=True)
                if type(result) is ToolResult
                else attrs.evolve(result, data=None, metadata={})
            )
        if size > self.max_bytes:
            # Too big to ever fit; drop any older value so that a stale one is not served.
            store.pop(key, None)
            return
        store[key] = _Entry(stored, self._timer() + ttl_s, size, snapshot)
        # cachetools enforces one bound (bytes); the entry count is enforced here. One put adds
        # at most one entry, so one eviction restores the bound.
        if len(store) > self.max_entries:
            store.popitem()

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

    def purge_expired(self) -> int:
        """Drop every expired entry now; return how many."""
        now = self._timer()
        expired = [key for key, entry in list(self._store.items()) if entry.expires <= now]
        for key in expired:
            self._store.pop(key, None)
        return len(expired)

    def statistics(self) -> CacheStatistics:
        """Counters and current occupancy (expired entries are purged first)."""
        self.purge_expired()
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
