"""One pipelined Redis connection driven by trio itself: no worker threads, no asyncio loop.

Every command of every caller goes down one socket. Commands queued during the same scheduler
tick leave in one ``send`` (one round trip for all of them), and the replies come back in the
order the commands were sent (Redis guarantees it), so a reader task hands each caller its own.
A call whose deadline passes stops waiting at once; its replies are read and dropped later, so
the connection stays in step.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import math
import select
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from ._settings import RedisSettings
from .exceptions import RedisUnavailable

__all__ = [
    "Encoded",
    "RedisConnection",
    "ReplyError",
    "Script",
    "delete_matching",
    "glob_escape",
    "parse_info",
    "scan_delete",
]

logger = logging.getLogger("tooldeck.redis")

#: A command: its words (bytes, str, int or float).
Command = Sequence[Any]

#: A reply may be this much larger than ``max_entry_bytes`` (the largest value this client
#: reads): SCAN batches of keys, INFO, error messages. A peer announcing or streaming more is
#: not answering this client: the connection is dropped, its callers fail at once.
_REPLY_MARGIN = 1024 * 1024
#: A caller's deadline that expires while it waits this long for Redis counts as a failure for
#: the circuit breaker; one that expires sooner says more about the caller (a deadline nearly
#: spent before it asked) than about Redis.
_STALLED_S = 0.1


class ReplyError(Exception):
    """An error reply of Redis (``-ERR ...``, ``-NOSCRIPT ...``): the server answered, so the
    connection is fine; the command was refused."""


class _ConnectionLost(Exception):
    """The socket closed, failed or timed out (``timeout``: the commands may have run)."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


# ---------------------------------------------------------------------------- RESP2


class Encoded(bytes):
    """Words already in RESP form (``$3\r\nfoo\r\n...``), ``words`` of them: the constant
    part of a command encoded once (a script's SHA, a session's window keys)."""

    words: int

    def __new__(cls, *words: Any) -> Encoded:
        self = super().__new__(cls, _encode_words(words))
        self.words = len(words)
        return self


def _encode_words(words: Sequence[Any]) -> bytes:
    return _encode([words])[_header_length(len(words)) :]


def _header_length(count: int) -> int:
    return len(b"*%d\r\n" % count)


def _encode(commands: Sequence[Command]) -> bytes:
    parts: list[bytes] = []
    append = parts.append
    for command in commands:
        count = len(command)
        for word in command:
            if type(word) is Encoded:
                count += word.words - 1
        append(b"*%d\r\n" % count)
        for word in command:
            kind = type(word)  # exact types first: this runs for every word of every command
            if kind is Encoded:
                append(word)
                continue
            if kind is bytes:
                data = word
            elif kind is str:
                data = word.encode("utf-8")
            elif kind is int:
                data = b"%d" % word
            elif isinstance(word, bytes | bytearray | memoryview):
                data = bytes(word)
            elif isinstance(word, str):
                data = word.encode("utf-8")
            elif isinstance(word, int | float) and not isinstance(word, bool):
                data = repr(word).encode("ascii")
            else:
                raise TypeError(f"a Redis argument must be bytes, str or a number, not {word!r}")
            append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


class _Incomplete(Exception):
    pass


#: Arrays nest at most this deep in the replies this client asks for (SCAN: 2). Deeper is not
#: Redis answering us: a peer streaming ``*1\r\n*1\r\n...`` recursed until RecursionError.
_MAX_DEPTH = 8


def _parse(buffer: bytes | bytearray, pos: int, limit: int, depth: int = 0) -> tuple[Any, int]:
    """One reply from ``buffer`` at ``pos``: (value, position after it).

    ``limit`` bounds what a reply may announce (a bulk string's length, an array's count): a
    peer announcing more is not answering this client (see :data:`_REPLY_MARGIN`).
    """
    end = buffer.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind = buffer[pos]
    line = buffer[pos + 1 : end]
    pos = end + 2
    if kind == 36:  # $ bulk string
        size = int(line)
        if size < 0:
            return None, pos
        if size > limit:
            raise _ConnectionLost(f"Redis announced a reply of {size} bytes, over the {limit} "
                                  "this client reads (max_entry_bytes and a margin)")
        if len(buffer) < pos + size + 2:
            raise _Incomplete
        return bytes(buffer[pos : pos + size]), pos + size + 2
    if kind == 58:  # : integer
        return int(line), pos
    if kind == 43:  # + simple string
        return bytes(line), pos
    if kind == 42:  # * array
        count = int(line)
        if count < 0:
            return None, pos
        # Each item takes at least 4 bytes (":0\r\n"): more items cannot fit in the limit.
        if count * 4 > limit:
            raise _ConnectionLost(f"Redis announced an array of {count} items, more than fit in "
                                  f"the {limit} bytes this client reads (max_entry_bytes and a "
                                  "margin)")
        if depth >= _MAX_DEPTH:
            raise _ConnectionLost(f"Redis sent arrays nested {depth} deep, deeper than any "
                                  "reply this client asks for")
        items = []
        for _ in range(count):
            item, pos = _parse(buffer, pos, limit, depth + 1)
            items.append(item)
        return items, pos
    if kind == 45:  # - error
        return ReplyError(bytes(line).decode("utf-8", "replace")), pos
    raise _ConnectionLost(f"unexpected reply byte {bytes([kind])!r} from Redis")


# ---------------------------------------------------------------------------- connection


class _Waiter:
    __slots__ = ("count", "replies", "error", "done", "sent_at")

    def __init__(self, count: int) -> None:
        self.count = count
        self.replies: list[Any] = []
        self.error: _ConnectionLost | None = None
        self.done = trio.Event()
        # When its bytes left (set by the writer): a reply is overdue only from then on.
        self.sent_at = math.inf

    def finish(self) -> None:
        self.done.set()


class _Pipe:
    """One open socket: a writer that flushes whatever was queued, a reader that matches
    replies to waiters in order. Lives in a trio system task of the run that opened it."""

    def __init__(
        self, stream: trio.abc.Stream, socket_timeout_s: float, max_reply_bytes: int
    ) -> None:
        self.stream = stream
        self.timeout = socket_timeout_s
        self.max_reply_bytes = max_reply_bytes
        self.outbox: list[bytes] = []
        self.queued: list[_Waiter] = []
        self.pending: collections.deque[_Waiter] = collections.deque()
        self.wake_writer = trio.Event()
        self.closed: _ConnectionLost | None = None
        self.token = trio.lowlevel.current_trio_token()
        self._scope = trio.CancelScope()

    def submit(self, commands: Sequence[Command]) -> _Waiter:
        if self.closed is not None:
            raise self.closed
        waiter = _Waiter(len(commands))
        self.outbox.append(_encode(commands))
        self.queued.append(waiter)
        self.pending.append(waiter)
        self.wake_writer.set()
        return waiter

    async def serve(self) -> None:
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._guarded, self._write)
                    await self._guarded(self._read)
        finally:
            self._fail(_ConnectionLost("the connection was closed"))
            with trio.CancelScope(shield=True):
                try:
                    await self.stream.aclose()
                except Exception:
                    pass

    async def _guarded(self, loop: Callable[[], Awaitable[None]]) -> None:
        # A system task must never raise (the run would crash): a failure closes the pipe, and
        # its waiters learn why.
        try:
            await loop()
        except _ConnectionLost as exc:
            self._fail(exc)
        except Exception as exc:
            self._fail(_ConnectionLost(f"{type(exc).__name__}: {exc}"))
        self._scope.cancel()

    def _readable_now(self) -> bool:
        """Whether reply bytes are already here, unread (this process was too busy to read)."""
        stream: Any = self.stream
        # A TLS stream holds what it took off the socket in its own buffers (trio.SSLStream's
        # SSLObject and incoming MemoryBIO): the socket may be empty while a reply waits there.
        ssl_object = getattr(stream, "_ssl_object", None)
        incoming = getattr(stream, "_incoming", None)
        try:
            if (ssl_object is not None and ssl_object.pending()) or (
                incoming is not None and incoming.pending
            ):
                return True
        except (AttributeError, TypeError, ssl.SSLError):
            pass
        sock = getattr(stream, "socket", None) or getattr(
            getattr(stream, "transport_stream", None), "socket", None
        )
        if sock is None:
            return False
        try:
            return bool(select.select([sock.fileno()], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        self._fail(_ConnectionLost("the connection was closed"))
        self._scope.cancel()

    def _fail(self, error: _ConnectionLost) -> None:
        if self.closed is None:
            self.closed = error
        while self.pending:
            waiter = self.pending.popleft()
            waiter.error = self.closed
            waiter.finish()
        self.wake_writer.set()

    async def _write(self) -> None:
        while self.closed is None:
            await self.wake_writer.wait()
            # One more scheduler tick before writing: the callers that became runnable with
            # this one (woken by the same reply, or by the last write) queue their commands
            # too, and all of them leave in one send. A send wakes redis-server, which on a
            # busy machine can take the CPU from us: fewer sends, fewer of those.
            await trio.lowlevel.cancel_shielded_checkpoint()
            self.wake_writer = trio.Event()
            if not self.outbox:
                continue
            data = b"".join(self.outbox) if len(self.outbox) > 1 else self.outbox[0]
            self.outbox.clear()
            queued, self.queued = self.queued, []
            try:
                with trio.move_on_after(self.timeout) as stuck:
                    await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise _ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
            if stuck.cancelled_caught:
                # The server reads nothing (hung, its buffer full): the stream is cut mid-way.
                raise _ConnectionLost(
                    f"could not write within {self.timeout:g}s (socket_timeout_s)", timeout=True
                )
            now = time.monotonic()
            for waiter in queued:
                waiter.sent_at = now

    def _overdue_at(self) -> float | None:
        """When the oldest pending command's reply is overdue (None: nothing was sent)."""
        if self.pending and self.pending[0].sent_at != math.inf:
            return self.pending[0].sent_at + self.timeout
        return None

    async def _read(self) -> None:
        buffer = bytearray()
        limit = self.max_reply_bytes
        while True:
            # socket_timeout_s counts from when the oldest pending command left, whether or not
            # bytes trickle in meanwhile: a peer sending a few bytes every 0.1 s used to keep a
            # reply that never completes alive for good (every caller then waited its whole
            # deadline, and the circuit breaker never opened).
            overdue_at = self._overdue_at()
            now = time.monotonic()
            if overdue_at is None:
                # Idle, or commands not yet written: look again within socket_timeout_s (a
                # command sent meanwhile is overdue no earlier than that).
                deadline = now + self.timeout
            elif now < overdue_at:
                deadline = overdue_at
            elif self._readable_now():
                # Overdue, but the reply may be here already, unread because this process was
                # busy: read what is here (bounded, should a TLS record be incomplete).
                deadline = now + self.timeout
            else:
                raise _ConnectionLost(
                    f"no reply within {self.timeout:g}s (socket_timeout_s)", timeout=True
                )
            data = None
            with trio.move_on_after(deadline - now):  # (trio's clock is not time.monotonic)
                try:
                    data = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    raise _ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
            if data is None:
                continue
            if not data:
                raise _ConnectionLost("Redis closed the connection")
            buffer += data
            pos = 0
            try:
                while pos < len(buffer):
                    value, pos = _parse(buffer, pos, limit)
                    if not self.pending:
                        raise _ConnectionLost("a reply from Redis that nobody asked for")
                    waiter = self.pending[0]
                    waiter.replies.append(value)
                    if len(waiter.replies) == waiter.count:
                        self.pending.popleft()
                        waiter.finish()
            except _Incomplete:
                pass
            del buffer[:pos]
            if len(buffer) > limit + 64:
                # What is left is one reply, incomplete: none this client asks for is that big
                # (a line without its end, a bulk string streamed without end). Unbounded, a peer
                # streaming one grew the process by gigabytes after its callers had given up.
                raise _ConnectionLost(
                    f"a reply from Redis over {limit} bytes (max_entry_bytes and a margin)"
                )


class RedisConnection:
    """One pipelined connection to Redis for trio, with a circuit breaker.

    ``execute`` queues commands and waits for their replies; everything queued in the same
    scheduler tick is sent in one write, so N concurrent callers cost one round trip, not N. The
    caller's deadline (a trio cancel scope) bounds the wait: a hung server (SIGSTOP) holds no call
    past it. ``socket_timeout_s`` bounds how long a reply may be overdue before the connection is
    declared broken; a connection error on a connection that had been working is retried once at
    once (the server may have restarted meanwhile), a timeout never (a script that ran must not
    run twice).

    After a failure the connection is *down* for ``retry_interval_s``: calls fail at once with
    :class:`RedisUnavailable` instead of each waiting for a timeout; the first call after that
    interval connects again. A caller's deadline that expires while it waits for Redis is a
    failure too (the connection stays open: the late replies are read and dropped).
    ``recoveries`` counts the successes that followed a failure.
    """

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self.url = settings.masked_url
        # Imported here, not at module level: the plugin loads in every command (``tooldeck
        # call`` included) and redis-py costs ~150 ms to import; only a configured URL needs it.
        from redis.connection import SSLConnection, UnixDomainSocketConnection, parse_url

        options = parse_url(settings.url)  # type: ignore[no-untyped-call]
        self._path: str | None = options.get("path")
        self._host: str = options.get("host", "127.0.0.1")
        self._port: int = int(options.get("port", 6379))
        self._tls = options.get("connection_class") is SSLConnection
        if options.get("connection_class") is UnixDomainSocketConnection and not self._path:
            raise ValueError("a unix:// Redis URL needs a path")
        self._hello: list[list[Any]] = []
        if options.get("password"):
            user = options.get("username")
            self._hello.append(
                ["AUTH", user, options["password"]] if user else ["AUTH", options["password"]]
            )
        if int(options.get("db", 0) or 0):
            self._hello.append(["SELECT", int(options["db"])])
        self.max_reply_bytes = settings.max_entry_bytes + _REPLY_MARGIN
        self._pipe: _Pipe | None = None
        self._connecting: tuple[trio.lowlevel.TrioToken, trio.Lock] | None = None
        self._down_until = 0.0
        self._failed_before = False
        self._last_error = ""
        self.failures = 0
        self.recoveries = 0

    @property
    def is_down(self) -> bool:
        """True while the circuit breaker holds calls back after a failure."""
        return time.monotonic() < self._down_until

    def script(self, source: str) -> Script:
        """A Lua script run by SHA (``EVALSHA``), sent in full when the server lost it."""
        return Script(self, source)

    async def execute(self, what: str, *commands: Command) -> list[Any]:
        """Send ``commands`` in one go and return their replies (error replies included, as
        :class:`ReplyError` values).

        :param what: what the call was for, used in the error message
            ("cache get", "rate limit", ...).
        :raises RedisUnavailable: Redis is down, unreachable, closed the connection or timed out.
        """
        self._check(what)
        started = time.monotonic()
        for attempt in (0, 1):
            fresh = True
            pipe: _Pipe | None = None
            waiter: _Waiter | None = None
            try:
                pipe, fresh = await self._current_pipe()
                waiter = pipe.submit(commands)
                await waiter.done.wait()
                if waiter.error is not None:
                    raise waiter.error
            except _ConnectionLost as exc:
                # A connection that served before may have been cut by a restart: once more on
                # a new one. Not after a timeout: the commands may have run.
                if attempt == 0 and not fresh and not exc.timeout:
                    continue
                self._failed(what, exc, pipe)
            except (OSError, trio.TooSlowError, ssl.SSLError) as exc:
                self._failed(what, exc, pipe)
            except trio.Cancelled as exc:
                waited = time.monotonic() - started
                if (
                    # (trio >= 0.31 says why a task was cancelled; with an older trio the
                    # socket timeout alone opens the circuit)
                    getattr(exc, "source", None) == "deadline"
                    and (waiter is None or not waiter.done.is_set())
                    and waited >= _STALLED_S
                ):
                    # Redis did not answer within the caller's deadline: a failure like a
                    # socket timeout, or a server that trickles bytes or stalls below
                    # socket_timeout_s held every call for its whole deadline, never "down".
                    # The connection stays: other callers' commands are in flight on it.
                    self._note_failure(
                        what, TimeoutError(f"no reply before the caller's deadline ({waited:.2g}s)")
                    )
                raise
            else:
                self._succeeded()
                return waiter.replies
        raise AssertionError("unreachable")

    def _check(self, what: str) -> None:
        if time.monotonic() < self._down_until:
            raise RedisUnavailable(self.url, what, f"not retried after {self._last_error}")

    async def _current_pipe(self) -> tuple[_Pipe, bool]:
        """The open pipe of this run (and False), or a new one (and True)."""
        pipe = self._pipe
        if pipe is None or pipe.closed is not None or not self._same_run(pipe):
            return await self._connect(), True
        return pipe, False

    def _succeeded(self) -> None:
        if self._failed_before:
            self._failed_before = False
            self._down_until = 0.0
            self.recoveries += 1
            logger.warning("Redis at %s is reachable again", self.url)

    async def call(self, what: str, *command: Any) -> Any:
        """One command's reply.

        :raises RedisUnavailable: as :meth:`execute`, and for an error reply.
        """
        (reply,) = await self.execute(what, command)
        if isinstance(reply, ReplyError):
            raise RedisUnavailable(self.url, what, reply)
        return reply

    def _failed(self, what: str, exc: BaseException, pipe: _Pipe | None = None) -> None:
        # Name the failure as redis-py would: a timeout, or a connection error.
        if isinstance(exc, _ConnectionLost) and exc.timeout:
            exc = TimeoutError(str(exc))
        elif isinstance(exc, trio.TooSlowError):
            exc = TimeoutError(f"no connection within {self.settings.connect_timeout_s:g}s")
        elif isinstance(exc, _ConnectionLost | OSError) and not isinstance(exc, TimeoutError):
            exc = ConnectionError(str(exc))
        self._note_failure(what, exc)
        if pipe is not None and self._pipe is pipe:
            # Only the connection that failed: another caller may have opened a new one.
            self._pipe.close()
            self._pipe = None
        raise RedisUnavailable(self.url, what, exc) from exc

    def _note_failure(self, what: str, exc: BaseException) -> None:
        """Count a failure and open the circuit for ``retry_interval_s``."""
        was_down = self.is_down
        self.failures += 1
        self._failed_before = True
        self._last_error = f"{type(exc).__name__}: {exc}"
        self._down_until = time.monotonic() + self.settings.retry_interval_s
        if not was_down:  # concurrent callers failing together: one line
            logger.warning("Redis at %s failed (%s): %s", self.url, what, self._last_error)

    @staticmethod
    def _same_run(pipe: _Pipe) -> bool:
        # A pipe's tasks belong to the trio run that opened it; another run needs its own.
        return pipe.token is trio.lowlevel.current_trio_token()

    async def _connect(self) -> _Pipe:
        token = trio.lowlevel.current_trio_token()
        if self._connecting is None or self._connecting[0] is not token:
            # One lock per trio run: a run that ended while connecting left its lock held.
            self._connecting = (token, trio.Lock())
        async with self._connecting[1]:
            pipe = self._pipe
            if pipe is not None and pipe.closed is None and self._same_run(pipe):
                return pipe  # another caller connected meanwhile
            if pipe is not None:
                pipe.close()
                self._pipe = None
            settings = self.settings
            with trio.fail_after(settings.connect_timeout_s):
                stream: trio.abc.Stream
                if self._path:
                    stream = await trio.open_unix_socket(self._path)
                else:
                    stream = await trio.open_tcp_stream(self._host, self._port)
                if self._tls:
                    tls = trio.SSLStream(
                        stream, ssl.create_default_context(), server_hostname=self._host
                    )
                    try:
                        await tls.do_handshake()
                    except BaseException:
                        await trio.aclose_forcefully(stream)
                        raise
                    stream = tls
            pipe = _Pipe(stream, settings.socket_timeout_s, self.max_reply_bytes)
            trio.lowlevel.spawn_system_task(pipe.serve, name="tooldeck-redis-connection")
            try:
                if self._hello:
                    waiter = pipe.submit(self._hello)
                    with trio.fail_after(settings.connect_timeout_s):
                        await waiter.done.wait()
                    if waiter.error is not None:
                        raise waiter.error
                    refused = [r for r in waiter.replies if isinstance(r, ReplyError)]
                    if refused:
                        raise _ConnectionLost(f"Redis refused the connection: {refused[0]}")
            except BaseException:
                pipe.close()  # its task closes the socket
                raise
            self._pipe = pipe
            return pipe

    async def aclose(self) -> None:
        """Close the connection (a later call opens a new one). Every command that matters was
        awaited by its caller; what is still pending belongs to callers that gave up."""
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        await trio.lowlevel.checkpoint()


class Script:
    """A Lua script: ``EVALSHA`` by its SHA1, ``EVAL`` again if the server answers NOSCRIPT
    (after a restart or ``SCRIPT FLUSH``; a NOSCRIPT reply means nothing ran)."""

    def __init__(self, connection: RedisConnection, source: str) -> None:
        self.connection = connection
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8")).hexdigest()
        self._evalsha = Encoded("EVALSHA", self.sha)

    def command(self, keys: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        """The ``EVALSHA`` command, to send within a batch (an :class:`Encoded` word stands for
        as many keys or arguments as it holds)."""
        count = sum(k.words if type(k) is Encoded else 1 for k in keys)
        return [self._evalsha, count, *keys, *args]

    async def __call__(self, what: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run the script; its reply.

        :raises RedisUnavailable: as :meth:`RedisConnection.call`.
        """
        connection = self.connection
        (reply,) = await connection.execute(what, self.command(keys, args))
        if isinstance(reply, ReplyError) and str(reply).startswith("NOSCRIPT"):
            count = sum(k.words if type(k) is Encoded else 1 for k in keys)
            (reply,) = await connection.execute(what, ["EVAL", self.source, count, *keys, *args])
        if isinstance(reply, ReplyError):
            raise RedisUnavailable(connection.url, what, reply)
        return reply


def glob_escape(text: str) -> str:
    """``text`` with the glob characters of Redis' MATCH patterns escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


async def delete_matching(
    connection: RedisConnection, what: str, pattern: str, batch_size: int = 500
) -> int:
    """Delete every key matching ``pattern`` with SCAN + UNLINK (never KEYS, which blocks the
    server); return how many were deleted."""
    deleted, _ = await scan_delete(connection, what, pattern, batch_size=batch_size)
    return deleted


async def scan_delete(
    connection: RedisConnection,
    what: str,
    pattern: str,
    *,
    cursor: bytes | int = 0,
    max_batches: int | None = None,
    batch_size: int = 500,
) -> tuple[int, bytes | int]:
    """Delete the keys matching ``pattern`` with SCAN + UNLINK from ``cursor`` on, for at most
    ``max_batches`` SCAN round trips; return how many were deleted and the cursor to go on
    from (0 once the whole keyspace was scanned)."""
    deleted = 0
    batches = 0
    while max_batches is None or batches < max_batches:
        batches += 1
        cursor, keys = await connection.call(
            what, "SCAN", cursor, "MATCH", pattern, "COUNT", batch_size
        )
        if keys:
            deleted += int(await connection.call(what, "UNLINK", *keys))
        if cursor in (b"0", 0):
            return deleted, 0
    return deleted, cursor


def parse_info(raw: bytes) -> dict[str, str]:
    """The ``field:value`` lines of an ``INFO`` reply."""
    fields = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        name, sep, value = line.partition(":")
        if sep and not name.startswith("#"):
            fields[name] = value.strip()
    return fields
