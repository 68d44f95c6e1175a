"""Pending approvals in Redis: granted through one worker, honoured once by any worker."""

from __future__ import annotations

import logging
import secrets

from ._client import RedisConnection, ReplyError
from ._settings import RedisSettings
from .exceptions import RedisUnavailable

__all__ = ["RedisApprovalStore"]

logger = logging.getLogger("tooldeck.redis")

# An approval create() wrote is a hash with an expiry (HSET and PEXPIRE in one MULTI). Anything
# else at its key is damaged or foreign: another key type (HMGET would fail with WRONGTYPE, which
# read as "Redis unavailable", for ever), or a hash without expiry (PERSIST, a manual HSET),
# which would otherwise stay usable for ever, past the approval TTL. Fail closed: it decides and
# approves nothing, and is deleted; -1 tells the client to warn.
_DAMAGED = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
  return 0
end
if ttl == -1 or type(redis.pcall('HLEN', KEYS[1])) ~= 'number' then
  redis.call('UNLINK', KEYS[1])
  return -1
end
"""

# KEYS[1]: the approval's hash. ARGV: new state (approved | denied), session id, "1" when the
# session is to be checked (a session id may be "": it must not skip the check).
# A pending approval is decided once, by its own session only; an approved one not yet used can
# still be denied (revoked). In one script with consume's: of a deny and a use racing, exactly
# one wins.
#
# _DAMAGED first (both scripts): a key create() did not write answers -1, and is deleted.
_RESOLVE = _DAMAGED + """
local a = redis.call('HMGET', KEYS[1], 'state', 'session')
if not (a[1] == 'pending' or (a[1] == 'approved' and ARGV[1] == 'denied'))
    or (ARGV[3] == '1' and a[2] ~= ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[1])
return 1
"""

# KEYS[1]: the approval's hash. ARGV: session, tool, arguments hash.
# Check and delete in one script: of two workers racing with the same approval id, exactly one
# sees it approved; a call for another session, tool or arguments leaves it in place.
_CONSUME = _DAMAGED + """
local a = redis.call('HMGET', KEYS[1], 'state', 'session', 'tool', 'args')
if a[1] ~= 'approved' or a[2] ~= ARGV[1] or a[3] ~= ARGV[2] or a[4] ~= ARGV[3] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
"""


class RedisApprovalStore:
    """Single-use approvals bound to a session, a tool and a hash of the exact arguments.

    The semantics of the core's in-memory store, shared across processes: one hash per approval
    (``<namespace>:approval:<id>`` with fields ``session``, ``tool``, ``args``, ``state``) that
    Redis expires on its own (``PEXPIRE``); ``resolve`` and ``consume`` are Lua scripts, hence
    atomic. Unanswered approvals are bounded by their TTL and the server's ``maxmemory``.

    Approvals fail closed: when Redis is unavailable ``create``, ``resolve`` and ``consume``
    raise :class:`RedisUnavailable`, which names Redis and its URL. The core then refuses the
    call with ``PLUGIN_ERROR``, and, a failure not being a refusal, keeps a resumed call pending
    so that the user can resume it again once Redis is back.

    :param connection: the Redis connection.
    :param settings: the parsed ``[tool.tooldeck.redis]`` table.
    """

    def __init__(self, connection: RedisConnection, settings: RedisSettings) -> None:
        self.connection = connection
        self._prefix = f"{settings.namespace}:approval:"
        self._resolve = connection.script(_RESOLVE)
        self._consume = connection.script(_CONSUME)
        #: Redis failures of ``resolve`` and ``consume`` (each raised; the call did not run).
        self.errors = 0

    async def create(self, *, session_id: str, tool: str, arguments_hash: str, ttl_s: float) -> str:
        """Record a pending approval for ``ttl_s`` seconds; return its unguessable id.

        :raises RedisUnavailable: Redis failed (nothing is recorded).
        """
        approval_id = "apr_" + secrets.token_urlsafe(16)
        key = self._prefix + approval_id
        ttl_ms = max(1, round(ttl_s * 1000))

        what = "approvals cannot be recorded"
        # MULTI/EXEC: the hash never exists without its expiry. One round trip.
        replies = await self.connection.execute(
            what,
            ["MULTI"],
            [
                "HSET", key, "session", session_id, "tool", tool, "args", arguments_hash,
                "state", "pending",
            ],
            ["PEXPIRE", key, ttl_ms],
            ["EXEC"],
        )  # fmt: skip
        refused = [r for r in replies if isinstance(r, ReplyError)]
        if refused or not isinstance(replies[-1], list):
            raise RedisUnavailable(self.connection.url, what, refused[0] if refused else "aborted")
        return approval_id

    async def resolve(
        self, approval_id: str, approved: bool, *, session_id: str | None = None
    ) -> bool:
        """Approve or deny; False when unknown, expired, already decided, or another
        session's (with ``session_id``). An approval given but not yet used can still be
        denied: its call is then refused by every worker.

        :raises RedisUnavailable: Redis failed (nothing was decided).
        """
        key = self._prefix + approval_id
        state = "approved" if approved else "denied"
        try:
            done = await self._resolve(
                "approvals cannot be decided",
                [key],
                [state, session_id or "", "0" if session_id is None else "1"],
            )
        except RedisUnavailable as exc:
            self.errors += 1
            logger.error("approval %s not decided: %s", approval_id, exc)
            raise
        return _is_one(done, approval_id, "decided")

    async def consume(
        self, *, approval_id: str, session_id: str, tool: str, arguments_hash: str
    ) -> bool:
        """Use an approved approval once, for exactly this session, tool and arguments.

        False when it is not approved (or was denied), expired, for another call, or already
        used.

        :raises RedisUnavailable: Redis failed (the call must not run; after a timeout the
            script may have run, so a retry may find the approval used).
        """
        key = self._prefix + approval_id
        try:
            done = await self._consume(
                "approvals cannot be checked", [key], [session_id, tool, arguments_hash]
            )
        except RedisUnavailable as exc:
            self.errors += 1
            logger.error("approval %s refused: %s", approval_id, exc)
            raise
        return _is_one(done, approval_id, "used")

    async def get(self, approval_id: str) -> dict[str, str] | None:
        """The approval's fields (``session``, ``tool``, ``args``, ``state``), or None."""
        key = self._prefix + approval_id
        raw = await self.connection.call("approvals cannot be read", "HGETALL", key)
        if not raw:
            return None
        return {_text(k): _text(v) for k, v in zip(raw[::2], raw[1::2], strict=True)}

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.connection.aclose()


def _is_one(reply: object, approval_id: str, what: str) -> bool:
    """True only for the script's ``1``: a reply it never gives ("OK", a list, 2) comes from
    something that is not our script on a Redis server, and approvals fail closed."""
    if type(reply) is int and reply in (0, 1):
        return reply == 1
    if type(reply) is int and reply == -1:
        logger.warning(
            "approval %s not %s: its state in Redis was damaged (not a hash with an expiry); "
            "deleted, the approval is refused",
            approval_id, what,
        )
        return False
    logger.error("approval %s not %s: unexpected reply %.80r from Redis", approval_id, what, reply)
    return False


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
