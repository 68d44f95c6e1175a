"""Moving-window rate limits shared by every process through one server-side Lua script."""

from __future__ import annotations

import itertools
import logging
import math
import secrets
from typing import Any

import attrs
from tooldeck_ratelimit import parse_global_override

from tooldeck_hookspecs import RateLimit, RateLimitOutcome, SessionInfo, ToolDefinition

from ._client import Encoded, RedisConnection, delete_matching, glob_escape
from ._settings import RedisSettings
from .exceptions import RedisUnavailable

__all__ = ["GENERATION_LUA", "RedisRateLimiter", "bounded_get", "cached_or_window"]

logger = logging.getLogger("tooldeck.redis")

_ALLOWED = RateLimitOutcome(allowed=True)
_MEMBER_PREFIX = secrets.token_hex(8) + ":"
_members = itertools.count()
#: Sessions' window arguments kept at most (a dict cleared when full).
_ARGUMENTS_KEPT = 4096

# The window check on a table `keys` of sorted sets (members are call ids, scores are times in
# ms); ARGV: member, then (max_calls, window_ms) per key.
# Every window is trimmed and counted before any is written, all inside one script, so the check
# and the hits are atomic across processes and a refused call uses no slot. The time comes from
# the server (TIME), so workers on hosts with skewed clocks still share one window. Redis >= 5
# replicates a script by its effects, which is what allows TIME before writes.
#
# A window key holding anything else is foreign or damaged (another version, a manual edit): a
# key of another type would fail every call of the tool with WRONGTYPE, and members timed more
# than a window ahead of the server clock (+inf, 1e18: this script only writes `now`) would
# never leave it, refusing the tool for ever. Both are dropped, so the call gets a fresh window;
# the last item of the reply counts what was dropped (the client warns).
_WINDOWS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local member = ARGV[1]
local repaired = 0
for i, key in ipairs(keys) do
  local limit = tonumber(ARGV[2 * i])
  local window = tonumber(ARGV[2 * i + 1])
  -- pcall: a key of another type answers an error instead of failing the script (and costs no
  -- TYPE command on every call).
  if type(redis.pcall('ZREMRANGEBYSCORE', key, '-inf', now - window)) == 'table' then
    redis.call('UNLINK', key)
    repaired = repaired + 1
  end
  repaired = repaired + redis.call('ZREMRANGEBYSCORE', key, '(' .. (now + window), '+inf')
  local count = redis.call('ZCARD', key)
  if count >= limit then
    local retry = window
    if limit > 0 then
      -- A slot frees when the call `limit` places from the newest leaves the window.
      local entry = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
      retry = tonumber(entry[2]) + window - now
    end
    return {0, i, retry, repaired}
  end
end
for i, key in ipairs(keys) do
  local window = tonumber(ARGV[2 * i + 1])
  redis.call('ZADD', key, now, member)
  redis.call('PEXPIRE', key, window)
end
return {1, 0, 0, repaired}
"""

# KEYS: the windows.
_MOVING_WINDOW = "local keys = KEYS\n" + _WINDOWS

# A tool's cache generation is a decimal counter only tooldeck_redis._cache writes (INCR). What
# else may sit there (another key type, text, a number INCR cannot raise, a huge string) came
# from elsewhere: read as is, it made every probe or invalidation of the tool fail with WRONGTYPE
# or "not an integer", and a failed invalidation deleted nothing, so stale results kept being
# served. It is replaced by the server clock in microseconds: a value no earlier miss saw (it is
# above any counter), so that their puts are refused, as after an invalidation. Returns the
# generation and whether it was repaired. Needs the server's TIME before writes (Redis >= 5).
# A missing generation (never set, or evicted by an allkeys-* maxmemory policy) starts at the
# clock too, not at 0: entries stored under an earlier 0 or 1 must not match it again.
GENERATION_LUA = """
local function fresh_generation(key)
  local t = redis.call('TIME')
  local fresh = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('UNLINK', key)
  redis.call('SET', key, fresh)
  return fresh
end
local function generation(key)
  local gen = redis.pcall('GET', key)
  if not gen then
    return fresh_generation(key), 0
  end
  if type(gen) == 'string' and string.len(gen) <= 18 and string.match(gen, '^%d+$') then
    return gen, 0
  end
  return fresh_generation(key), 1
end
"""

# A cache entry is '<generation>|<JSON result>': the tool's generation when it was stored (see
# tooldeck_redis._cache). entry(key, gen, max_bytes) answers its JSON when it was stored under
# `gen`, false when there is none or it is stale (an invalidation came since: deleted here, so
# that invalidating is one INCR and no scan has to reach the entry), and 0 when it is foreign
# (another key type, over max_bytes, or no generation: another version's, or garbage).
_ENTRY = """
local function entry(key, gen, max_bytes)
  local value = redis.pcall('GET', key)
  if not value then
    return false
  end
  if type(value) ~= 'string' or string.len(value) > max_bytes then
    return 0
  end
  local head = string.match(string.sub(value, 1, 20), '^(%d+)|')
  if not head then
    return 0
  end
  if head ~= gen then
    redis.call('UNLINK', key)
    return false
  end
  return string.sub(value, string.len(head) + 2)
end
"""

#: An entry's generation prefix is at most this long: 18 digits and '|'.
_ENTRY_OVERHEAD = 19

# KEYS[1]: a cache entry, then the windows. A hit returns {2, value, generation} and counts
# nothing (a cached answer is not a call); a miss counts the call as _MOVING_WINDOW does. One
# round trip for the cache probe and the limit of a cacheable, rate-limited call. An entry
# larger than the cache's max_entry_bytes is a miss: this deck never writes one (another
# deployment or version did), and sending it would move megabytes through the connection every
# other call shares. KEYS[2] is the tool's cache generation (see tooldeck_redis._cache): only an
# entry stored under it is a hit, and every answer carries it, so that the result of the call
# that follows is stored only if no process invalidated the tool meanwhile (the hit's too: its
# value may be unreadable to the client, a miss then). A miss's items: allowed, index, retry,
# generation, whether the generation was repaired, windows repaired.
# A cache entry of another key type (GET answers WRONGTYPE, caught by pcall) is a miss too: the
# put that follows overwrites it (SET replaces any type).
_CACHED_OR_WINDOW = (
    GENERATION_LUA.replace("%", "%%")
    + _ENTRY.replace("%", "%%")
    + """
local gen, gen_repaired = generation(KEYS[2])
local value = entry(KEYS[1], gen, %d)
if type(value) == 'string' then
  return {2, value, gen}
end
local keys = {}
for i = 3, #KEYS do
  keys[i - 2] = KEYS[i]
end
"""
    + _WINDOWS.replace("%", "%%")
    .replace("return {0, i, retry, repaired}", "return {0, i, retry, gen, gen_repaired, repaired}")
    .replace("return {1, 0, 0, repaired}", "return {1, 0, 0, gen, gen_repaired, repaired}")
)

# KEYS[1]: a cache entry, KEYS[2]: its tool's cache generation. {value, generation, repaired}:
# the entry's JSON, nil (none, or stale), or 0 (foreign: see _ENTRY); the generation; and
# whether the generation was repaired (see GENERATION_LUA).
_BOUNDED_GET = GENERATION_LUA.replace("%", "%%") + _ENTRY.replace("%", "%%") + """
local gen, gen_repaired = generation(KEYS[2])
return {entry(KEYS[1], gen, %d), gen, gen_repaired}
"""


def cached_or_window(max_entry_bytes: int) -> str:
    """The cache probe + window check script for entries of at most ``max_entry_bytes``."""
    return _CACHED_OR_WINDOW % (int(max_entry_bytes) + _ENTRY_OVERHEAD)


def bounded_get(max_entry_bytes: int) -> str:
    """The ``GET`` script that answers 0 instead of a value over ``max_entry_bytes`` and only
    the entries stored under the tool's current generation."""
    return _BOUNDED_GET % (int(max_entry_bytes) + _ENTRY_OVERHEAD)


@attrs.frozen
class _Window:
    key: str
    max_calls: int
    window_ms: int
    label: str


def _window_ms(window_s: float) -> int:
    return max(1, math.ceil(window_s * 1000))


def _describe(max_calls: int, window_s: float) -> str:
    return f"{max_calls} per {window_s:g} s"


class RedisRateLimiter:
    """Admission control for tools that declare ``security.rate_limit``, shared through Redis.

    The windows are those of tooldeck-ratelimit: one per (session, tool) with the tool's own
    limit, one per tool across sessions (``[ratelimit] global_factor`` times the limit, or the
    tool's entry in ``[ratelimit.global]``). Both are checked and counted by one Lua script, so
    the limits hold exactly across any number of processes, and a window lives in Redis only as
    long as its own ``window_s`` (``PEXPIRE``).

    When Redis fails: ``on_error = "fail_closed"`` (default) raises :class:`RedisUnavailable`,
    which the core reports as a ``PLUGIN_ERROR`` and does not run the call; ``"local"`` counts the
    call in this process's own memory (tooldeck-ratelimit's limiter) until Redis is back.

    :param connection: the Redis connection (shared or own).
    :param settings: the parsed ``[tool.tooldeck.redis]`` table.
    """

    def __init__(self, connection: RedisConnection, settings: RedisSettings) -> None:
        self.connection = connection
        self.settings = settings
        self._script = connection.script(_MOVING_WINDOW)
        self._prefix = f"{settings.namespace}:rl:"
        for name, value in settings.global_overrides.items():
            parse_global_override(name, value, 60.0)  # a malformed override fails at start-up
        self._globals: dict[tuple[str, RateLimit], _Window | None] = {}
        # Per (tool, limit, session): the windows and the constant part of the script's
        # arguments, built once (a call then only adds its member).
        self._arguments: dict[
            tuple[str, RateLimit, str], tuple[list[_Window], list[Any], list[Any]]
        ] = {}
        self._local: Any = None
        #: Calls decided by the local fallback while Redis was unavailable.
        self.local_decisions = 0

    def _global_window(self, tool: ToolDefinition, limit: RateLimit) -> _Window | None:
        cache_key = (tool.name, limit)
        if cache_key in self._globals:
            return self._globals[cache_key]
        glob: RateLimit | None
        if tool.name in self.settings.global_overrides:
            glob = parse_global_override(
                tool.name, self.settings.global_overrides[tool.name], limit.window_s
            )
        elif self.settings.global_factor > 0:
            glob = RateLimit(
                max_calls=math.ceil(self.settings.global_factor * limit.max_calls),
                window_s=limit.window_s,
            )
        else:
            glob = None
        window = None
        if glob is not None:
            window = _Window(
                key=f"{self._prefix}t:{tool.name}",
                max_calls=max(0, glob.max_calls),
                window_ms=_window_ms(glob.window_s),
                label=f"{_describe(glob.max_calls, glob.window_s)} for {tool.name} across sessions",
            )
        self._globals[cache_key] = window
        return window

    def _windows(self, tool: ToolDefinition, limit: RateLimit, session_id: str) -> list[_Window]:
        # Tool names are snake_case (no colon), so "tool:session" cannot collide across sessions.
        windows = [
            _Window(
                key=f"{self._prefix}s:{tool.name}:{session_id}",
                max_calls=max(0, limit.max_calls),
                window_ms=_window_ms(limit.window_s),
                label=f"{_describe(limit.max_calls, limit.window_s)} for {tool.name} "
                "in this session",
            )
        ]
        glob = self._global_window(tool, limit)
        if glob is not None:
            windows.append(glob)
        return windows

    def script_arguments(
        self, tool: ToolDefinition, session: SessionInfo
    ) -> tuple[list[_Window], list[Any], list[Any]]:
        """The windows of a rate-limited ``tool`` in ``session``, and the script's KEYS and
        ARGV for them (used by :meth:`RedisCache.get_and_hit` too; the constant parts are
        :class:`Encoded` words)."""
        limit = tool.security.rate_limit
        assert limit is not None
        cache_key = (tool.name, limit, session.session_id)
        known = self._arguments.get(cache_key)
        if known is None:
            if len(self._arguments) >= _ARGUMENTS_KEPT:
                self._arguments.clear()  # many sessions: start over rather than grow
            windows = self._windows(tool, limit, session.session_id)
            tail: list[Any] = []
            for window in windows:
                tail += [window.max_calls, window.window_ms]
            # Encoded once: every call of this session sends the same keys and limits.
            known = self._arguments[cache_key] = (
                windows,
                [Encoded(*(w.key for w in windows))],
                [Encoded(*tail)],
            )
        windows, keys, tail = known
        # A member unique across processes (a random prefix per process) and cheap (uuid4 costs
        # more than the rest of this method).
        return windows, keys, [f"{_MEMBER_PREFIX}{next(_members):x}", *tail]

    @staticmethod
    def outcome(windows: list[_Window], reply: Any) -> RateLimitOutcome:
        """The script's reply ``{allowed, index, retry_ms, ..., repaired}`` as an outcome."""
        allowed, index, retry_ms = reply[:3]
        if len(reply) > 3 and reply[-1]:
            logger.warning(
                "rate-limit window %s in Redis held foreign data (another key type, or calls "
                "timed in the future); dropped %s, the window starts afresh",
                " and ".join(w.key for w in windows), reply[-1],
            )
        if allowed:
            return _ALLOWED
        window = windows[int(index) - 1]
        return RateLimitOutcome(
            allowed=False,
            retry_after_s=max(0.001, int(retry_ms) / 1000),
            limit=window.label,
        )

    async def hit(self, tool: ToolDefinition, session: SessionInfo) -> RateLimitOutcome:
        """Count one call of ``tool`` in ``session``; say whether it may proceed.

        Tools without ``security.rate_limit`` are always allowed and not counted.

        :raises RedisUnavailable: Redis failed and ``on_error`` is ``fail_closed``.
        """
        if tool.security.rate_limit is None:
            return _ALLOWED
        windows, keys, args = self.script_arguments(tool, session)
        try:
            reply = await self._script("rate limits cannot be checked", keys, args)
        except RedisUnavailable:
            if self.settings.ratelimit_on_error != "local":
                raise
            self.local_decisions += 1
            outcome: RateLimitOutcome = await self._local_limiter().hit(tool, session)
            return outcome
        return self.outcome(windows, reply)

    def _local_limiter(self) -> Any:
        if self._local is None:
            # Built on first need: most processes never see Redis fail.
            from tooldeck_ratelimit import ToolRateLimiter

            self._local = ToolRateLimiter(
                global_factor=self.settings.global_factor,
                global_overrides=self.settings.global_overrides,
            )
        return self._local

    async def reset(self) -> int:
        """Delete every window this namespace holds in Redis; return how many keys."""
        pattern = glob_escape(self._prefix) + "*"
        return await delete_matching(self.connection, "rate limits cannot be reset", pattern)

    async def aclose(self) -> None:
        """Close the connection pool and the local fallback (the deck calls this on close)."""
        if self._local is not None:
            await self._local.aclose()
        await self.connection.aclose()
