"""One Redis connection pool driven from trio through a bounded set of worker threads."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
import trio
from redis.backoff import NoBackoff
from redis.retry import Retry

from ._settings import RedisSettings
from .exceptions import RedisUnavailable

__all__ = ["RedisConnection", "delete_matching", "glob_escape"]

logger = logging.getLogger("tooldeck.redis")

T = TypeVar("T")


class RedisConnection:
    """A redis-py client whose blocking calls run in worker threads, with a circuit breaker.

    redis-py's asyncio client needs an asyncio loop and cannot run under trio, so the plain
    (sync) client is used from ``trio.to_thread.run_sync``. A :class:`trio.CapacityLimiter` of
    ``max_connections`` bounds both the threads in use and the pool's connections, so a burst of
    calls queues in trio instead of opening sockets without bound. Every command has a socket
    timeout; a connection error is retried once at once (a pooled socket may be stale after a
    server restart), a timeout never (a script that ran must not run twice).

    After a failure the connection is *down* for ``retry_interval_s``: calls fail at once with
    :class:`RedisUnavailable` instead of each waiting for a timeout; the first call after that
    interval tries Redis again. ``recoveries`` counts the successes that followed a failure, so
    that a provider notices (in its own task, not in the worker thread) that Redis came back.
    """

    def __init__(self, settings: RedisSettings, *, client: redis.Redis | None = None) -> None:
        self.settings = settings
        self.url = settings.masked_url
        if client is None:
            pool = redis.BlockingConnectionPool.from_url(
                settings.url,
                max_connections=settings.max_connections,
                timeout=settings.socket_timeout_s,
                socket_timeout=settings.socket_timeout_s,
                socket_connect_timeout=settings.connect_timeout_s,
                retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
            )
            client = redis.Redis(connection_pool=pool)
        self.client = client
        self._limiter = trio.CapacityLimiter(settings.max_connections)
        self._down_until = 0.0
        self._last_error = ""
        self.failures = 0
        self.recoveries = 0

    @property
    def is_down(self) -> bool:
        """True while the circuit breaker holds calls back after a failure."""
        return time.monotonic() < self._down_until

    def script(self, source: str) -> Any:
        """Register a Lua script (run by SHA, loaded again when the server lost it)."""
        return self.client.register_script(source)

    async def run(self, what: str, function: Callable[[redis.Redis], T]) -> T:
        """Run ``function(client)`` in a worker thread.

        :param what: what the call was for, used in the error message
            ("cache get", "rate limit", ...).
        :raises RedisUnavailable: Redis is down, timed out or failed the command.
        """
        if time.monotonic() < self._down_until:
            raise RedisUnavailable(self.url, what, f"not retried after {self._last_error}")
        # abandon_on_cancel: a call whose deadline passes returns at once (the deck answers it
        # TIMEOUT) instead of waiting for the socket timeout of a hung server; the command's
        # thread finishes on its own, keeping its connection slot until then.
        return await trio.to_thread.run_sync(
            self._call, what, function, limiter=self._limiter, abandon_on_cancel=True
        )

    def _call(self, what: str, function: Callable[[redis.Redis], T]) -> T:
        recovering = self._down_until != 0.0
        try:
            value = function(self.client)
        except redis.RedisError as exc:
            self.failures += 1
            self._last_error = f"{type(exc).__name__}: {exc}"
            self._down_until = time.monotonic() + self.settings.retry_interval_s
            logger.warning("Redis at %s failed (%s): %s", self.url, what, self._last_error)
            raise RedisUnavailable(self.url, what, exc) from exc
        if recovering:
            self._down_until = 0.0
            self.recoveries += 1
            logger.warning("Redis at %s is reachable again", self.url)
        return value

    async def aclose(self) -> None:
        """Close the pool's connections."""
        await trio.to_thread.run_sync(self.client.close)


def glob_escape(text: str) -> str:
    """``text`` with the glob characters of Redis' MATCH patterns escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def delete_matching(client: redis.Redis, pattern: str, batch_size: int = 500) -> int:
    """Delete every key matching ``pattern`` with SCAN + UNLINK (never KEYS, which blocks the
    server); return how many were deleted."""
    deleted = 0
    batch: list[Any] = []
    for key in client.scan_iter(match=pattern, count=batch_size):
        batch.append(key)
        if len(batch) >= batch_size:
            deleted += int(client.unlink(*batch))
            batch.clear()
    if batch:
        deleted += int(client.unlink(*batch))
    return deleted
