"""A guarding forward proxy on 127.0.0.1, run on the browser thread's asyncio loop.

Chromium sends every request of a context through it (``CONNECT host:port`` for https and
WebSockets, absolute-form requests for plain http). Each connection is checked by
:func:`._guard.allowed_addresses` and connected to a checked address, or answered with
``403`` and an ``X-Tooldeck-Blocked`` header naming the reason, which the tools turn into
``URL_NOT_ALLOWED``. One proxy serves one allow-list.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import urllib.parse

from ._guard import allowed_addresses

__all__ = ["BLOCKED_HEADER", "UNREACHABLE_HEADER", "GuardProxy", "ProxyDoor"]

#: Response header of a refused plain-http request (the reason, URL-quoted).
BLOCKED_HEADER = "X-Tooldeck-Blocked"
#: Response header of a plain-http request whose server could not be reached.
UNREACHABLE_HEADER = "X-Tooldeck-Unreachable"

_MAX_HEAD = 64 * 1024
_MAX_RESPONSE_HEAD = 256 * 1024
_HEAD_TIMEOUT_S = 30.0
#: How long an origin may take to start its answer. Not _HEAD_TIMEOUT_S: a page slower than
#: 30 s was cut by the proxy while its browser_navigate still had time (timeout_s goes up to
#: 90 s); Chromium then sent the request again and the call failed with TIMEOUT at its full
#: timeout_s, having never waited for the first answer. The browser's own timeout is the limit
#: (it closes its side, which ends the relay); this only bounds a connection nobody closes.
_RESPONSE_HEAD_TIMEOUT_S = 600.0
_CONNECT_TIMEOUT_S = 10.0
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
}


class _BlockLog:
    """What the connections through one listening port were refused, for the tools to report."""

    def __init__(self) -> None:
        #: The last refusals, newest last: (host, reason). Read to explain a failed navigation.
        self.blocked: collections.deque[tuple[str, str]] = collections.deque(maxlen=64)
        #: How many connections were refused so far (to tell what one action caused).
        self.block_count = 0
        #: Hosts that could not be reached, newest last.
        self.unreachable: collections.deque[str] = collections.deque(maxlen=64)

    def last_block_for(self, host: str | None) -> str | None:
        """The newest refusal reason for ``host`` (any host when None)."""
        for blocked_host, reason in reversed(self.blocked):
            if host is None or blocked_host == host:
                return reason
        return None


class ProxyDoor(_BlockLog):
    """A listening port of a :class:`GuardProxy` for one browser context, with its own log.

    The sessions of one allow-list share a proxy, and its log was theirs together: a page of
    one session that kept reaching for refused hosts filled the ``blocked_requests`` of every
    other session's results with them (the other session's internal host names included). Each
    context now goes through a door of its own, and reads only what its own door refused.
    """

    def __init__(self, proxy: GuardProxy) -> None:
        super().__init__()
        self.proxy = proxy
        self.allow = proxy.allow
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen on an ephemeral loopback port; return it."""
        self._server = await asyncio.start_server(
            functools.partial(self.proxy._accept, log=self), "127.0.0.1", 0, limit=_MAX_HEAD
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def close(self) -> None:
        """Stop listening (the connections in flight end with their browser context)."""
        if self._server is not None:
            self._server.close()


class GuardProxy(_BlockLog):
    """Check and forward the connections of the browser contexts that use one allow-list."""

    def __init__(self, allow: tuple[str, ...]) -> None:
        super().__init__()
        self.allow = allow
        self._server: asyncio.Server | None = None
        self._doors: set[ProxyDoor] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> int:
        """Listen on an ephemeral loopback port; return it."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, limit=_MAX_HEAD)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def open_door(self) -> ProxyDoor:
        """A port of its own for one browser context (see :class:`ProxyDoor`)."""
        door = ProxyDoor(self)
        await door.start()
        self._doors.add(door)
        return door

    def close_door(self, door: ProxyDoor) -> None:
        """Stop listening on ``door``."""
        door.close()
        self._doors.discard(door)

    async def aclose(self) -> None:
        """Stop listening and end the connections in flight."""
        if self._server is not None:
            self._server.close()
        for door in list(self._doors):
            self.close_door(door)
        for writer in list(self._writers):
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2.0)

    async def _accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        log: _BlockLog | None = None,
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        try:
            await self._serve(reader, writer, self if log is None else log)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # a client or upstream that went away mid-way: nothing to report to anyone
        except RuntimeError:
            # The loop's executor is shut down (the process is exiting) while a page still
            # connects: nothing to check it with, and nobody to tell.
            pass
        except (TimeoutError, asyncio.CancelledError):
            # Nobody awaits a connection's task: ending quietly keeps asyncio from logging a
            # cancelled callback when the loop shuts down.
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log: _BlockLog
    ) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT_S)
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = (lines[0].split(" ", 2) + ["", ""])[:3]
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            host = host.strip("[]")
            scheme, port = "https", int(port_text or 443)
        else:
            parts = urllib.parse.urlsplit(target)
            if parts.scheme.lower() != "http" or not parts.hostname:
                await _answer(writer, 400, "Bad Request", "absolute http URL expected")
                return
            scheme, host, port = "http", parts.hostname, parts.port or 80
        verdict = await asyncio.get_running_loop().run_in_executor(
            None, allowed_addresses, scheme, host, port, self.allow
        )
        if isinstance(verdict, str):
            log.blocked.append((host, verdict))
            log.block_count += 1
            await _answer(writer, 403, "Forbidden", verdict, blocked=verdict)
            return
        upstream = await _connect(verdict, port)
        if upstream is None:
            log.unreachable.append(host)
            await _answer(
                writer, 502, "Bad Gateway", f"could not connect to {host}:{port}", unreachable=True
            )
            return
        up_reader, up_writer = upstream
        self._writers.add(up_writer)
        try:
            if method.upper() == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await writer.drain()
                await _pipe_both(reader, writer, up_reader, up_writer)
            else:
                up_writer.write(_origin_form(method, target, version, lines[1:]))
                await up_writer.drain()
                await _pipe_both(reader, writer, up_reader, up_writer, closing_head=True)
        finally:
            self._writers.discard(up_writer)
            with contextlib.suppress(OSError, RuntimeError):
                up_writer.close()


def _origin_form(method: str, target: str, version: str, header_lines: list[str]) -> bytes:
    """The request as the origin server expects it: path only, no proxy headers, one request
    per connection (so that a reused client connection cannot reach a host never checked; the
    response is marked ``Connection: close`` for the browser too, see :func:`_relay_closing`)."""
    parts = urllib.parse.urlsplit(target)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    kept = [
        line
        for line in header_lines
        if line and line.split(":", 1)[0].strip().lower() not in _HOP_BY_HOP
    ]
    kept.append("Connection: close")
    return (f"{method} {path} {version}\r\n" + "\r\n".join(kept) + "\r\n\r\n").encode("latin-1")


async def _connect(
    addresses: list[str], port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    for address in addresses:
        try:
            return await asyncio.wait_for(
                # Chromium accepts response heads up to 256 KiB: _relay_closing reads them whole.
                asyncio.open_connection(address, port, limit=_MAX_RESPONSE_HEAD),
                _CONNECT_TIMEOUT_S,
            )
        except (TimeoutError, OSError):
            continue
    return None


async def _answer(
    writer: asyncio.StreamWriter,
    status: int,
    phrase: str,
    text: str,
    *,
    blocked: str | None = None,
    unreachable: bool = False,
) -> None:
    body = (text + "\n").encode("utf-8", "replace")
    extra = f"{BLOCKED_HEADER}: {urllib.parse.quote(blocked)}\r\n" if blocked else ""
    if unreachable:
        extra += f"{UNREACHABLE_HEADER}: 1\r\n"
    writer.write(
        (
            f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
        ).encode("latin-1")
        + body
    )
    with contextlib.suppress(OSError, RuntimeError):
        await writer.drain()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
    except (OSError, RuntimeError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


_CONNECTION_HEADERS = {"connection", "keep-alive", "proxy-connection"}


async def _relay_closing(up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy a plain-http response to the browser, its head marked ``Connection: close``.

    The check is made once per client connection, for the host of its first request. An origin
    that ignores our ``Connection: close`` (any allowed host may) would otherwise leave the browser
    believing the proxy connection reusable, and the browser's next request on it, for whatever
    host, would be piped unchecked to that origin. Whether that next request may name another
    host is the browser's socket-pool policy (Chromium 156 keeps one pool per destination);
    closing makes it a non-question.
    """
    while True:
        head = await asyncio.wait_for(
            up_reader.readuntil(b"\r\n\r\n"), _RESPONSE_HEAD_TIMEOUT_S
        )
        lines = head.decode("latin-1").split("\r\n")
        status = (lines[0].split(" ", 2) + [""])[1]
        if status.startswith("1"):
            # 100 Continue, 103 Early Hints: the final head follows. 101 hands the connection
            # over to another protocol with the same, checked, origin: copy it as it is.
            writer.write(head)
            await writer.drain()
            if status == "101":
                break
            continue
        kept = [
            line
            for line in lines[1:]
            if line and line.split(":", 1)[0].strip().lower() not in _CONNECTION_HEADERS
        ]
        kept += ["Connection: close", "Proxy-Connection: close"]
        writer.write((lines[0] + "\r\n" + "\r\n".join(kept) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        break
    await _copy(up_reader, writer)


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    *,
    closing_head: bool = False,
) -> None:
    # The tunnel ends as soon as either side is done: browsers do not half-close, and with one
    # request per connection nothing useful can follow the end of either direction.
    downstream = _relay_closing(up_reader, writer) if closing_head else _copy(up_reader, writer)
    directions = {
        asyncio.ensure_future(_copy(reader, up_writer)),
        asyncio.ensure_future(downstream),
    }
    try:
        await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in directions:
            task.cancel()
        await asyncio.gather(*directions, return_exceptions=True)
