"""The selection history of a deployment in Redis, shared by all its processes.

tooldeck-faiss keeps (task, tool called) records to rank tools used for similar tasks higher
(its ``SelectionHistory``). This module is its shared store, found through the
``tooldeck.history_stores`` entry point ``redis`` and loaded only when a history opens (the
retriever's model load), so ``tooldeck call`` never imports it.

Keys, under ``<namespace>:history:<deployment>:`` (``deployment`` defaults to "default"):

- ``rec``  hash  record id -> JSON ``{"q": task, "tool": name}``
- ``n``    hash  record id -> use count
- ``lru``  zset  record id -> server time of the last use (ms): eviction order and the
  watermark of incremental reads
- ``vec``  hash  ``<model id>|<record id>`` -> the task vector (float16) by that model; a
  process reads only its own model's fields, so vectors of two models never mix
- ``models`` set of the model ids that wrote vectors (to drop their vectors on eviction)

One Lua script per exchange adds the new uses, evicts the least recently used records beyond
``max_records`` (with their vectors), and returns the records used since the caller's watermark,
all atomically on the server's clock. The client is redis-py's synchronous one, called from the
retriever's worker thread, with ``timeout_s`` as connect and socket timeout and no retries: a
stalled Redis costs a selection at most that long, then the history is skipped (the retriever
selects with its records in memory) until ``retry_interval_s`` has passed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tooldeck_hookspecs import ConfigError

from ._settings import mask_url, redis_settings

#: The most uses one record counts for (the file store's bound, tooldeck_faiss._history).
_MAX_COUNT = 1 << 31

__all__ = ["RedisHistoryStore", "history_store"]

logger = logging.getLogger("tooldeck.redis")

#: Largest record body and vector an exchange hands back (bytes): a task of max_query_chars
#: (1000) is a few KB of JSON, a float16 vector of 32768 dimensions 64 KiB. A larger field was
#: not written by this module (another version, a manual edit): deleted, never sent to the client.
_MAX_FIELD_BYTES = 65_536
#: Records evicted at most per exchange beyond the uses it adds: an exchange keeps the bound
#: (each adds at most its uses), and a foreign LRU of millions of members is trimmed over several
#: exchanges instead of one script that blocks the server for every client of it.
_MAX_EVICTIONS = 1_000

# The keys are checked first: one of another type (another version, a manual edit) would fail
# every exchange with WRONGTYPE, and the history would stay down for good. History is ranking
# data only, so a damaged key is dropped and rebuilt by the uses that follow; so is a use count
# that is not a plain integer (HINCRBY would fail on it). The first items of the reply: the
# server time, and how many keys or fields were repaired (the client warns).
_EXCHANGE = """
local rec, cnt, lru, vec, models = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local max_records = tonumber(ARGV[1])
local since = tonumber(ARGV[2])
local model = ARGV[3]
local n_uses = tonumber(ARGV[4])
local max_field = tonumber(ARGV[5])
local max_evictions = tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local repaired = 0
local kinds = {[rec] = 'hash', [cnt] = 'hash', [lru] = 'zset', [vec] = 'hash', [models] = 'set'}
for key, kind in pairs(kinds) do
  local found = redis.call('TYPE', key)['ok']
  if found ~= kind and found ~= 'none' then
    redis.call('UNLINK', key)
    repaired = repaired + 1
  end
end
local function count_ok(id)
  if redis.call('HSTRLEN', cnt, id) > 15 then
    return false
  end
  local c = redis.call('HGET', cnt, id)
  return c and string.match(c, '^%d+$') and c
end
if n_uses > 0 then redis.call('SADD', models, model) end
local i = 7
for _ = 1, n_uses do
  local id, body, inc, v = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  i = i + 4
  if inc > 0 then
    redis.call('HSET', rec, id, body)
    if redis.call('HEXISTS', cnt, id) == 1 and not count_ok(id) then
      redis.call('HDEL', cnt, id)
      repaired = repaired + 1
    end
    redis.call('HINCRBY', cnt, id, inc)
    redis.call('ZADD', lru, now, id)
  end
  if v ~= '' and redis.call('HEXISTS', rec, id) == 1 then
    redis.call('HSET', vec, model .. '|' .. id, v)
  end
end
local over = math.min(redis.call('ZCARD', lru) - max_records, n_uses + max_evictions)
if over > 0 then
  local gone = redis.call('ZRANGE', lru, 0, over - 1)
  local known = redis.call('SMEMBERS', models)
  for _, id in ipairs(gone) do
    redis.call('ZREM', lru, id)
    redis.call('HDEL', rec, id)
    redis.call('HDEL', cnt, id)
    for _, m in ipairs(known) do redis.call('HDEL', vec, m .. '|' .. id) end
  end
end
local function bounded(key, field)
  if redis.call('HSTRLEN', key, field) > max_field then
    redis.call('HDEL', key, field)  -- a record without its body is skipped, then evicted
    repaired = repaired + 1
    return ''
  end
  return redis.call('HGET', key, field) or ''
end
local rows = {}
local ids = redis.call('ZRANGEBYSCORE', lru, since, '+inf', 'WITHSCORES', 'LIMIT', 0, max_records)
for k = 1, #ids, 2 do
  local id = ids[k]
  rows[#rows + 1] = ids[k + 1]
  rows[#rows + 1] = bounded(rec, id)
  rows[#rows + 1] = count_ok(id) or '1'
  rows[#rows + 1] = bounded(vec, model .. '|' .. id)
end
local out = {tostring(now), repaired}
for _, item in ipairs(rows) do out[#out + 1] = item end
return out
"""

_FORGET = """
local rec, cnt, lru, vec, models = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local gone = {}
for _, tool in ipairs(ARGV) do gone[tool] = true end
local all = redis.call('HGETALL', rec)
local known = redis.call('SMEMBERS', models)
local dropped = 0
for k = 1, #all, 2 do
  local ok, row = pcall(cjson.decode, all[k + 1])
  local tool = ok and type(row) == 'table' and row['tool']
  if not ok then
    -- cjson refuses an escaped lone surrogate ("\\ud800", see _record_body): the tool is the
    -- last field, a plain name.
    tool = string.match(all[k + 1], '"tool": ?"([^"\\]*)"}$')
  end
  if tool and gone[tool] then
    local id = all[k]
    redis.call('ZREM', lru, id)
    redis.call('HDEL', rec, id)
    redis.call('HDEL', cnt, id)
    for _, m in ipairs(known) do redis.call('HDEL', vec, m .. '|' .. id) end
    dropped = dropped + 1
  end
end
return dropped
"""


def _record_id(query: str, tool: str) -> str:
    # surrogatepass: any str has an id. A task may hold a lone surrogate (valid in a JSON
    # request: "\ud800"); encoded strictly it raised, and failed every later exchange.
    return hashlib.sha256(f"{tool}\0{query}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _record_body(query: str, tool: str) -> bytes:
    """The record as UTF-8 JSON; a text UTF-8 cannot carry (a lone surrogate) is escaped
    (``\\ud800``), which JSON reads back to the same text."""
    row = {"q": query, "tool": tool}
    try:
        return json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(row).encode("ascii")


class RedisHistoryStore:
    """A ``tooldeck_faiss.HistoryStore`` in Redis (see the module docstring for the keys).

    :param url: the Redis URL (passwords are masked in :attr:`label`).
    :param prefix: the deployment's key prefix, e.g. ``"tooldeck:history:default:"``.
    :param model_id: the model whose vectors this process reads and writes.
    :param max_records: the bound, held by the server-side script.
    :param timeout_s: connect and socket timeout of every command (the selection's deadline).
    :param retry_interval_s: how long the history skips the store after a failure.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        model_id: str,
        max_records: int,
        timeout_s: float = 0.25,
        retry_interval_s: float = 1.0,
    ) -> None:
        # redis-py is imported here, when a deck's history opens, not when the plugin loads.
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.prefix = prefix
        self.model_id = model_id
        self.max_records = max(1, int(max_records))
        self.retry_interval_s = float(retry_interval_s)
        self.label = f"{mask_url(url)} ({prefix}*)"
        self._client = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            # One try: a timeout is the answer; the history retries on a later search.
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
        )
        self._exchange = self._client.register_script(_EXCHANGE)
        self._forget = self._client.register_script(_FORGET)
        self._keys = [prefix + k for k in ("rec", "n", "lru", "vec", "models")]

    def exchange(self, uses: Sequence[Any], since: float) -> tuple[list[Any], float]:
        """Add ``uses`` and return the records used at or after ``since`` (seconds)."""
        from tooldeck_faiss import HistoryRow

        args: list[Any] = [
            self.max_records, int(since * 1000), self.model_id, len(uses), _MAX_FIELD_BYTES,
            _MAX_EVICTIONS,
        ]  # fmt: skip
        sent = 0
        for use in uses:
            try:
                packed = (
                    b"" if use.vector is None else np.asarray(use.vector, np.float16).tobytes()
                )
                row = [_record_id(use.query, use.tool), _record_body(use.query, use.tool),
                       int(use.count), packed]
            except (TypeError, ValueError) as exc:
                # This row, not Redis: skipped alone. Raised, it failed the exchange, and the
                # history took it for Redis being down and sent the row again, for ever.
                logger.warning("selection history %s: a use that cannot be stored was dropped "
                               "(%s: %s)", self.label, type(exc).__name__, exc)
                continue
            args += row
            sent += 1
        args[3] = sent
        reply = self._exchange(keys=self._keys, args=args)
        now = int(reply[0]) / 1000
        if int(reply[1]):
            logger.warning(
                "selection history %s: %s damaged key(s) or field(s) in Redis (another key "
                "type, a count that is not an integer, a field over %d bytes) dropped or skipped",
                self.label, int(reply[1]), _MAX_FIELD_BYTES,
            )
        rows = []
        for k in range(2, len(reply) - 3, 4):
            score, body, count, raw = reply[k : k + 4]
            try:
                row = json.loads(body)
                query, tool = row["q"], row["tool"]
            except (ValueError, TypeError, KeyError):
                continue  # a damaged record says nothing
            if not isinstance(query, str) or not isinstance(tool, str):
                continue
            vector = None
            if raw and len(raw) % 2 == 0:
                vector = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
                if not np.isfinite(vector).all():
                    # As the file loader refuses it: an infinite component made the tool's
                    # lift infinite for half of all queries. Without a vector, it is re-embedded.
                    vector = None
            # +inf or a far-future score (a manual ZADD) would rank the record above every
            # other for ever: as the file loader does, a non-finite time counts as long ago.
            last = float(score) / 1000
            if not math.isfinite(last) or last > now + 86_400:
                last = 0.0
            try:
                # Bounded as in the file: a planted count of 10^15 must not outweigh all use.
                total = max(1, min(int(count), _MAX_COUNT))
            except (TypeError, ValueError):
                total = 1
            rows.append(HistoryRow(
                query=query, tool=tool, count=total, last=last, vector=vector
            ))
        return rows, now

    def forget(self, tools: Sequence[str]) -> None:
        """Drop the records of these tools (one script; a scan of the record hash)."""
        if tools:
            self._forget(keys=self._keys, args=list(tools))

    def close(self) -> None:
        """Close the connections."""
        self._client.close()


def history_store(
    settings: Mapping[str, Any], *, model_id: str, max_records: int
) -> RedisHistoryStore | None:
    """The ``tooldeck.history_stores`` entry point: a store when a Redis URL is configured.

    Reads ``[tool.tooldeck.redis]`` (``url`` or ``TOOLDECK_REDIS_URL``, ``namespace``) and
    ``[tool.tooldeck.redis.history]``: ``enabled`` (true), ``deployment`` ("default": the
    private part of the key prefix, one per deployment sharing a Redis), ``timeout_s`` (0.25).

    :raises ConfigError: a malformed value.
    """
    parsed = redis_settings(settings)
    if parsed is None:
        return None
    redis_table = settings.get("redis") if isinstance(settings, Mapping) else None
    table = (redis_table or {}).get("history") or {} if isinstance(redis_table, Mapping) else {}
    if not isinstance(table, Mapping):
        raise ConfigError("redis.history must be a table")
    unknown = sorted(set(table) - {"enabled", "deployment", "timeout_s"})
    if unknown:
        raise ConfigError(f"redis.history: unknown setting(s) {', '.join(unknown)}")
    if not table.get("enabled", True):
        return None
    deployment = str(table.get("deployment", "default"))
    if not deployment or any(c.isspace() or c in "*?[]" for c in deployment):
        raise ConfigError(f"redis.history.deployment must be a plain word, not {deployment!r}")
    timeout = table.get("timeout_s", 0.25)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"redis.history.timeout_s must be a positive number, not {timeout!r}")
    return RedisHistoryStore(
        parsed.url,
        prefix=f"{parsed.namespace}:history:{deployment}:",
        model_id=model_id,
        max_records=max_records,
        timeout_s=float(timeout),
        retry_interval_s=parsed.retry_interval_s,
    )
