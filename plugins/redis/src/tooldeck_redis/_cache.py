"""Results of cacheable tools in Redis, shared by every process that points at the same server."""

from __future__ import annotations

import collections
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import attrs
import cattrs

from tooldeck_hookspecs import RateLimitOutcome, SessionInfo, ToolDefinition, ToolResult

from ._client import (
    RedisConnection,
    ReplyError,
    delete_matching,
    glob_escape,
    parse_info,
    scan_delete,
)
from ._limiter import GENERATION_LUA, RedisRateLimiter, bounded_get, cached_or_window
from ._settings import RedisSettings
from .exceptions import RedisUnavailable

__all__ = ["RedisCache", "RedisCacheStatistics"]

logger = logging.getLogger("tooldeck.redis")

# Results cross this boundary only: one converter for the module.
_converter = cattrs.Converter()

#: At most one INFO round trip per this many seconds to follow the server's evicted_keys.
_EVICTIONS_REFRESH_S = 10.0
#: Keys whose misses' generations are remembered until their results are stored (a call that
#: never stores, failed or cancelled, leaves one behind: the least recently missed keys go first).
_GENERATIONS_KEPT = 10_000
#: Generations noted per key at most (concurrent misses of one key beyond it forget the oldest).
_MISSES_KEPT_PER_KEY = 64
#: The generation noted for a probe that saw an entry but learnt no generation: it matches none,
#: so the put that follows stores nothing (it cannot tell whether the tool was invalidated).
_REFUSE = "-"
#: SCAN round trips (of 500 keys) an invalidation spends per tool deleting stale entries; the
#: next invalidation of the tool goes on from there. Only cleanup: the generation, raised first,
#: already keeps every stale entry from being served (see _BUMP).
_SWEEP_BATCHES = 4
#: The longest TTL stored (ms, about 285,000 years). Redis refuses an expiry past its clock's
#: range ("invalid expire time": 1e16 s and more), and each such put counted as a Redis error.
_MAX_TTL_MS = 2**53

# KEYS[1]: the entry, KEYS[2]: its tool's generation. ARGV: the generation the miss saw ('' for
# a put no miss of this process preceded: stored as it is), the value, the TTL in ms. Stored only
# if no process invalidated the tool since that miss: a call that read the old state while
# another process's write landed must not store it. The entry is '<generation>|<value>': reads
# serve it only while the tool's generation is still that one (see _ENTRY in _limiter).
# A damaged generation (see GENERATION_LUA) is repaired here too, and refuses a put that a miss
# preceded (that miss cannot have seen the fresh value).
_PUT_IF_CURRENT = GENERATION_LUA + """
local gen = generation(KEYS[2])
if ARGV[1] ~= '' and gen ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], gen .. '|' .. ARGV[2], 'PX', ARGV[3])
return 1
"""

# KEYS: generations of the tools to invalidate; each is raised (INCR), or, when damaged,
# replaced by a fresh value, which invalidates as well (see GENERATION_LUA). Returns how many
# were repaired. Before, a plain INCR failed on a damaged generation, and the invalidation then
# deleted no entry: the tool's stale results kept being served.
# This is the whole invalidation: every entry carries the generation it was stored under, and
# reads compare it. Before, reads did not, and the invalidation was only as good as a SCAN of
# the whole keyspace under the writing tool's deadline: cut off (2M unrelated keys), old entries
# kept being served.
_BUMP = GENERATION_LUA + """
local repaired = 0
for _, key in ipairs(KEYS) do
  local _, damaged = generation(key)
  if damaged == 1 then
    repaired = repaired + 1
  else
    redis.call('INCR', key)
  end
end
return repaired
"""


def _tool_of(key: str) -> str:
    """The tool name of a cache key (``name@version:digest``)."""
    return key.split("@", 1)[0]


@attrs.frozen(kw_only=True)
class RedisCacheStatistics:
    """A snapshot of a :class:`RedisCache`'s counters (this process's view).

    ``evictions`` is the growth of the server's ``evicted_keys`` since this cache started
    (server-wide: keys pushed out by ``maxmemory``, whoever wrote them), refreshed at most every
    10 s or by :meth:`RedisCache.refresh_statistics`.
    """

    hits: int
    misses: int
    evictions: int
    #: Results stored in Redis.
    stored: int
    #: Results not stored: larger than ``max_entry_bytes``, or not JSON-serializable.
    skipped: int
    #: Stale entries deleted by :meth:`RedisCache.invalidate`'s cleanup (the others are never
    #: served either, and go when read or when their TTL ends).
    invalidated: int
    #: Redis operations that failed (each answered by the local cache or as a miss).
    errors: int
    #: Hits served by the local in-memory fallback while Redis was unavailable.
    local_hits: int
    #: True while the circuit breaker holds Redis calls back.
    redis_down: bool


class RedisCache:
    """Results of cacheable tools in Redis: ``SET key generation|value PX ttl``, JSON values.

    Keys are ``<namespace>:cache:<cache_key>`` (``tooldeck:cache:name@version:digest``); values are
    the tool's cache generation when stored, ``|``, and the cattrs-unstructured
    :class:`ToolResult` as JSON, so a hit comes back with JSON types (tuples become lists). Only
    an entry of the tool's current generation is served: :meth:`invalidate` raises it. Each
    entry expires on its own TTL in Redis; the total is bounded by the server's ``maxmemory``
    with an eviction policy such as ``allkeys-lru`` or ``volatile-ttl`` (configure it on the
    server: every entry here carries a TTL). A result larger than ``max_entry_bytes`` is not
    stored.

    When Redis fails, ``on_error = "local"`` (default) serves from an in-process
    :class:`tooldeck_cache.ResultCache` until Redis is back; ``"fail_closed"`` treats every
    lookup as a miss and stores nothing. Invalidations made meanwhile are replayed in Redis when it
    returns, and the local entries are dropped then, so neither serves a stale result later.

    :param connection: the Redis connection.
    :param settings: the parsed ``[tool.tooldeck.redis]`` table.
    """

    def __init__(self, connection: RedisConnection, settings: RedisSettings) -> None:
        self.connection = connection
        self.settings = settings
        self.max_entry_bytes = settings.max_entry_bytes
        self._prefix = f"{settings.namespace}:cache:"
        # Per tool, a counter every invalidation raises; a miss notes it, and the put of the
        # result that follows is conditional on it (see _PUT_IF_CURRENT).
        self._gen_prefix = f"{settings.namespace}:cachegen:"
        # Per key: the generations its misses saw, oldest first (see _saw).
        self._seen: collections.OrderedDict[str, collections.deque[str]] = (
            collections.OrderedDict()
        )
        self._local: Any = None
        self._pending_invalidations: set[str] = set()
        # Per tool: where the cleanup of its stale entries goes on (a SCAN cursor).
        self._sweep_cursors: dict[str, bytes | int] = {}
        self._ttl_capped = False
        self._degraded = False
        self._hits = self._misses = self._stored = self._skipped = 0
        self._invalidated = self._errors = self._local_hits = 0
        self._evicted_base: int | None = None
        self._evicted_now = 0
        self._evicted_checked = 0.0
        # Runs on this cache's connection, the one its puts go down: a probe sees every put
        # this process made before it (one connection's commands run in order).
        self._combined = connection.script(cached_or_window(self.max_entry_bytes))
        # Reads are bounded like writes: a value over max_entry_bytes stays on the server.
        self._get = connection.script(bounded_get(self.max_entry_bytes))
        self._put_if_current = connection.script(_PUT_IF_CURRENT)
        self._bump = connection.script(_BUMP)

    def _gen_key(self, key: str) -> str:
        return self._gen_prefix + _tool_of(key)

    def _saw(self, key: str, generation: Any) -> None:
        """Note the generation a miss of ``key`` saw, for the put that follows (None: it saw
        none, and that put stores nothing).

        Misses of one key queue their generations and each put takes the oldest. Puts may
        come in another order than their misses, and a failed call puts nothing: a put may then
        be judged by an older miss's generation. Generations only grow, so that is stricter,
        never looser: it refuses a store only when an invalidation came since that older miss.
        Taking the newest would let a read from before an invalidation store what it read.
        """
        queue = self._seen.get(key)
        if queue is None:
            queue = self._seen[key] = collections.deque(maxlen=_MISSES_KEPT_PER_KEY)
            while len(self._seen) > _GENERATIONS_KEPT:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(key)
        if generation is None:
            generation = _REFUSE
        queue.append(generation.decode() if isinstance(generation, bytes) else str(generation))

    def _took(self, key: str) -> str:
        """The generation for a put of ``key`` ('' when no miss of this process preceded it)."""
        queue = self._seen.get(key)
        if not queue:
            return ""
        generation = queue.popleft()
        if not queue:
            del self._seen[key]
        return generation

    # ------------------------------------------------------------------ fallback

    def _local_cache(self) -> Any:
        if self._local is None:
            from tooldeck_cache import ResultCache

            self._local = ResultCache(
                max_entries=self.settings.local_max_entries,
                max_bytes=self.settings.local_max_bytes,
            )
        return self._local

    @property
    def _use_local(self) -> bool:
        return self.settings.cache_on_error == "local"

    async def _after_recovery(self) -> None:
        """After an outage, before Redis serves again: replay the invalidations it missed and
        forget the local entries (both may be stale by now)."""
        if not self._degraded or self.connection.is_down:
            return
        pending = sorted(self._pending_invalidations)
        try:
            if pending:
                await self._invalidate_in_redis(pending)
            else:
                await self.connection.call("the cache cannot resume", "PING")
        except RedisUnavailable as exc:
            self._failed(exc)
            return
        self._pending_invalidations.difference_update(pending)
        if self._local is not None:
            self._local.clear()
        self._degraded = False

    def _failed(self, exc: RedisUnavailable) -> None:
        self._errors += 1
        self._degraded = True
        logger.debug("cache falls back: %s", exc)

    # ------------------------------------------------------------------ protocol

    async def get(self, key: str) -> ToolResult | None:
        """The cached result for ``key``, or None (a miss, an expired entry, or Redis down)."""
        await self._after_recovery()
        try:
            raw, generation, repaired = await self._get(
                "cached results cannot be read", [self._prefix + key, self._gen_key(key)], []
            )
        except RedisUnavailable as exc:
            self._failed(exc)
            return await self._local_get(key)
        if repaired:
            self._warn_generation(key)
        result = self._decoded(key, raw)
        if result is None:
            self._saw(key, generation)
        return result

    async def _local_get(self, key: str) -> ToolResult | None:
        """The entry of the process-local fallback cache while Redis fails (counted)."""
        if self._use_local:
            result: ToolResult | None = await self._local_cache().get(key)
            if result is not None:
                self._local_hits += 1
                self._hits += 1
                return result
        self._misses += 1
        return None

    def _decoded(self, key: str, raw: Any) -> ToolResult | None:
        # None: no entry (or a stale one); 0: over max_entry_bytes, not a string, or without a
        # generation (not read).
        if type(raw) is not bytes:
            if raw is not None:
                logger.warning(
                    "cache entry %r ignored: over max_entry_bytes, not a string in Redis, or "
                    "not written by this version (no generation)", key
                )
            self._misses += 1
            return None
        try:
            result = _converter.structure(json.loads(raw), ToolResult)
            if not result.success:
                # put stores successful results only: this one is not ours to serve.
                raise ValueError("a failed result")
        except Exception:
            # Written by another version, or corrupted: a miss, and the put that follows fixes it.
            logger.warning("unreadable cache entry %r ignored", key)
            self._misses += 1
            return None
        self._hits += 1
        return result

    def combines_with(self, limiter: object) -> bool:
        """Whether :meth:`get_and_hit` can serve this limiter: a :class:`RedisRateLimiter` on
        the same server (the deck asks once, at start-up)."""
        return isinstance(limiter, RedisRateLimiter) and limiter.settings.url == self.settings.url

    async def get_and_hit(
        self, key: str, limiter: RedisRateLimiter, tool: ToolDefinition, session: SessionInfo
    ) -> tuple[ToolResult | None, RateLimitOutcome | None]:
        """The cache probe and, on a miss, the rate-limit hit, in one round trip (one script).

        Returns ``(result, None)`` on a hit (the call is not counted, as with two separate
        stages) and ``(None, outcome)`` on a miss. When Redis fails, each stage answers as it
        would alone: the cache from its local fallback, the limiter by its ``on_error``.

        :raises RedisUnavailable: Redis failed and the limiter fails closed.
        """
        await self._after_recovery()
        windows, keys, args = limiter.script_arguments(tool, session)
        try:
            reply = await self._combined(
                "cached results and rate limits cannot be read",
                [self._prefix + key, self._gen_key(key), *keys],
                args,
            )
        except RedisUnavailable as exc:
            self._failed(exc)
            result = await self._local_get(key)
            if result is not None:
                return result, None
            return None, await limiter.hit(tool, session)
        if int(reply[0]) == 2:
            hit = self._decoded(key, reply[1])
            if hit is not None:
                return hit, None
            # An unreadable entry is a miss, and the script did not count the call: count it.
            # The put that follows is judged by the generation the script saw, like any miss's.
            # Before, none was noted and that put stored unconditionally: a write by another
            # process during the call left its pre-write result in the cache. A reply without
            # one (cannot happen with this script) refuses the put.
            self._saw(key, reply[2] if len(reply) > 2 else None)
            return None, await limiter.hit(tool, session)
        self._misses += 1
        self._saw(key, reply[3])
        if reply[4]:
            self._warn_generation(key)
        return None, limiter.outcome(windows, reply)

    def _warn_generation(self, key: str) -> None:
        logger.warning(
            "cache generation %r in Redis was not a counter (another key type, text, or a number "
            "too large); replaced by a fresh one: results cached before are no longer stored",
            self._gen_key(key),
        )

    async def put(self, key: str, result: ToolResult, ttl_s: float) -> None:
        """Store a successful result for ``ttl_s`` seconds (``SET ... PX``).

        A TTL longer than about 285,000 years (``2**53`` ms) is stored as that: Redis refuses
        expiries past its clock's range.
        """
        if not result.success or not ttl_s > 0:  # (NaN too)
            return
        if ttl_s * 1000 > _MAX_TTL_MS:
            if not self._ttl_capped:
                self._ttl_capped = True
                logger.info(
                    "cache_ttl_s %g is longer than Redis keeps a key; stored with the longest "
                    "TTL it accepts here (2**53 ms, about 285,000 years)", ttl_s,
                )
            ttl_s = _MAX_TTL_MS / 1000
        await self._after_recovery()
        try:
            payload: bytes | None = json.dumps(
                _converter.unstructure(result), separators=(",", ":"), ensure_ascii=False
            ).encode("utf-8")
        except (TypeError, ValueError):
            payload = None  # data that JSON cannot carry is not shared
        full_key = self._prefix + key
        ttl_ms = max(1, min(_MAX_TTL_MS, round(ttl_s * 1000)))
        if payload is None or len(payload) > self.max_entry_bytes:
            self._skipped += 1
            # Too big to share: drop an older value so that a stale one is not served.
            value = None
        else:
            value = payload
        # The generation our miss of this key saw; none for a put no probe of ours preceded (a
        # direct use of the cache, a probe answered locally while Redis failed): stored as is.
        generation = self._took(key)
        refresh = time.monotonic() - self._evicted_checked > _EVICTIONS_REFRESH_S
        try:
            # Awaited: once put returns, every process sees the entry. Concurrent callers'
            # puts and probes share the round trip (one pipelined connection).
            if value is None:
                # Too big to share: drop an older value so that a stale one is not served.
                replies = await self.connection.execute(
                    "results cannot be cached", ["DEL", full_key]
                )
                if isinstance(replies[0], ReplyError):
                    raise RedisUnavailable(
                        self.connection.url, "results cannot be cached", replies[0]
                    )
                stored = False
            else:
                stored = bool(
                    await self._put_if_current(
                        "results cannot be cached",
                        [full_key, self._gen_key(key)],
                        [generation, value, ttl_ms],
                    )
                )
            if refresh:
                self._evicted_checked = time.monotonic()
                info = await self.connection.call("statistics cannot be read", "INFO", "stats")
                self._note_evictions(_evicted_keys(info))
        except RedisUnavailable as exc:
            self._failed(exc)
            if self._use_local and value is not None:
                await self._local_cache().put(key, result, ttl_s)
            return
        if stored:
            self._stored += 1
        elif value is not None:
            self._skipped += 1  # another process invalidated the tool since the miss

    async def invalidate(self, tools: Sequence[str]) -> int:
        """Stop serving every cached result of these tools, in every process: one round trip
        raises each tool's generation, which every entry is compared with when read. Then, as
        cleanup, a few SCAN + UNLINK batches by ``name@`` prefix delete stale entries (the next
        invalidation goes on where this one stopped); returns how many it deleted.

        When Redis is unavailable the tools are remembered and invalidated in Redis once it is
        back; the count returned then is the local one.
        """
        if not tools:
            return 0
        await self._after_recovery()
        local = await self._local.invalidate(tools) if self._local is not None else 0
        try:
            await self._raise_generations(tools)
        except RedisUnavailable as exc:
            self._failed(exc)
            self._pending_invalidations.update(tools)
            return int(local)
        except BaseException:
            # Cut off (the caller's deadline) before Redis answered: the INCR may not have run.
            # Done again when this cache next reaches Redis; once too often only costs misses.
            self._pending_invalidations.update(tools)
            self._degraded = True
            raise
        return await self._sweep(tools)

    async def _invalidate_in_redis(self, tools: Sequence[str]) -> int:
        await self._raise_generations(tools)
        return await self._sweep(tools)

    async def _raise_generations(self, tools: Sequence[str]) -> None:
        # From here on, a call of these tools that missed before (and may have read the old
        # state) no longer stores its result, and no entry stored before is served, in any
        # process.
        repaired = await self._bump(
            "cached results cannot be invalidated", [self._gen_prefix + name for name in tools], []
        )
        if repaired:
            logger.warning(
                "%s cache generation(s) of %s in Redis were not counters; replaced by fresh ones",
                repaired, ", ".join(tools),
            )

    async def _sweep(self, tools: Sequence[str]) -> int:
        """Delete stale entries of these tools, a few batches each (best effort: they are no
        longer served; reads delete the ones they meet, and TTLs end the others)."""
        deleted = 0
        for name in tools:
            pattern = glob_escape(f"{self._prefix}{name}@") + "*"
            try:
                count, cursor = await scan_delete(
                    self.connection, "stale cached results cannot be deleted", pattern,
                    cursor=self._sweep_cursors.pop(name, 0), max_batches=_SWEEP_BATCHES,
                )
            except RedisUnavailable as exc:
                # The invalidation holds all the same; the next call falls back if Redis is down.
                self._errors += 1
                logger.debug("cleanup of stale cache entries stopped: %s", exc)
                break
            deleted += count
            if cursor not in (0, b"0"):
                self._sweep_cursors[name] = cursor
        self._invalidated += deleted
        return deleted

    # ------------------------------------------------------------------ statistics

    def _note_evictions(self, evicted: int) -> None:
        self._evicted_checked = time.monotonic()
        if self._evicted_base is None or evicted < self._evicted_base:
            # First reading, or the server restarted and its counter started over.
            self._evicted_base = evicted - (self._evicted_now if self._evicted_base else 0)
        self._evicted_now = evicted - self._evicted_base

    async def refresh_statistics(self) -> RedisCacheStatistics:
        """Read the server's ``evicted_keys`` now, then return :meth:`statistics`."""
        try:
            info = await self.connection.call("statistics cannot be read", "INFO", "stats")
            self._note_evictions(_evicted_keys(info))
        except RedisUnavailable as exc:
            self._failed(exc)
        return self.statistics()

    def statistics(self) -> RedisCacheStatistics:
        """Counters of this process (no Redis round trip)."""
        return RedisCacheStatistics(
            hits=self._hits,
            misses=self._misses,
            evictions=self._evicted_now,
            stored=self._stored,
            skipped=self._skipped,
            invalidated=self._invalidated,
            errors=self._errors,
            local_hits=self._local_hits,
            redis_down=self.connection.is_down,
        )

    async def clear(self) -> int:
        """Delete every cached result of this namespace in Redis (and the local fallback's)."""
        if self._local is not None:
            self._local.clear()
        pattern = glob_escape(self._prefix) + "*"
        return await delete_matching(self.connection, "cached results cannot be cleared", pattern)

    async def aclose(self) -> None:
        """Close the connection pool (the deck calls this on close)."""
        await self.connection.aclose()


def _evicted_keys(info: bytes) -> int:
    return int(parse_info(info).get("evicted_keys", 0))
