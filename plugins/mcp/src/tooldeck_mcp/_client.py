"""Connections to remote MCP servers, kept in one background event loop for the whole process.

The deck registers tools synchronously (pluggy cannot await) and runs calls under trio; the MCP
SDK wants an anyio loop whose tasks own each connection's context managers for as long as the
connection lives. So the bridge runs one asyncio loop in a daemon thread (an anyio
``BlockingPortal``), every connection is a task there, and callers hand work over as
``concurrent.futures.Future`` objects: registration blocks on them, trio awaits them through a
done-callback (no worker thread is held while a remote call runs).

A connection that breaks (the server died, the HTTP endpoint went away) answers the call with a
retryable ``EXECUTION_ERROR`` and is started again on the next call. Restarts back off
exponentially after consecutive failures, and pause for ``backoff_max_s`` after
``max_restarts`` of them, so a server that crashes at start-up is not relaunched in a loop.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

import anyio
import anyio.abc
import attrs
from anyio.from_thread import BlockingPortal
from mcp import Client, MCPError, types
from mcp.shared.message import SessionMessage
from mcp.types import CONNECTION_CLOSED

from tooldeck_hookspecs import ErrorCode, ToolFailure, wait_future

from ._config import McpServerConfig

__all__ = ["RemoteServer", "ServerStatistics", "fingerprint", "remote_server", "shutdown"]

log = logging.getLogger("tooldeck.mcp")

T = TypeVar("T")

def fingerprint(tools: list[types.Tool], name: str) -> str | None:
    """What the deck pins of the remote tool ``name`` in the listing ``tools``: a digest of
    every entry of that name (title, description, schemas, annotations), None when unlisted.

    A definition registered from one listing is called only while the server lists the tool
    exactly so: the user reviewed (and approved calls of) the tool as it was registered, and a
    server must not swap in another description, schema or destructive behaviour under the
    same name after a restart or a ``tools/list_changed`` (a "rug pull").
    """
    import hashlib
    import json

    entries = [
        t.model_dump(
            mode="json", by_alias=True, exclude_none=True,
            include={"name", "title", "description", "input_schema", "output_schema",
                     "annotations"},
        )
        for t in tools
        if t.name == name
    ]
    if not entries:
        return None
    text = json.dumps(entries, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _http_client(config: McpServerConfig) -> Any:
    """The HTTP client of a streamable HTTP connection: ``config.headers``, and no read timeout
    that could end a call before its own deadline.

    A plain ``httpx2.AsyncClient(headers=...)`` has httpx's 5 s default for every read: a
    remote tool that took longer than 5 s to answer lost its response stream, and the call
    failed as a lost connection (the server then restarted) whatever ``timeout_s`` said. The
    SDK's own client waits 300 s between two bytes of a stream, which still cut a call given
    longer (``timeout_s``, or a deployment's ``[tools.NAME.execution] timeout_s``). Each call
    is bounded by the bridge's deadline (``RemoteServer.call``), so reads have no timeout of
    their own; connecting, writing and the pool keep the SDK's.
    """
    import httpx2
    from mcp.shared._httpx_utils import MCP_DEFAULT_TIMEOUT, create_mcp_http_client

    return create_mcp_http_client(
        headers=dict(config.headers) or None,
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=None),
    )


#: How long a server suspected dead (its connection reported closed, or an answer the SDK
#: could not read) has to answer again before the bridge restarts it.
_PING_TIMEOUT_S = 5.0


class _Loop:
    """One asyncio loop in a daemon thread, reached through an anyio portal."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._thread: threading.Thread | None = None

    def portal(self) -> BlockingPortal:
        with self._lock:
            if self._portal is None:
                ready = threading.Event()
                failure: list[BaseException] = []
                # A daemon thread: the interpreter must not wait for a loop that serves forever;
                # atexit closes the connections (and their subprocesses) before it exits.
                self._thread = threading.Thread(
                    target=self._main, args=(ready, failure), name="tooldeck-mcp", daemon=True
                )
                self._thread.start()
                ready.wait()
                if failure:
                    raise RuntimeError("the MCP bridge's loop failed to start") from failure[0]
                assert self._portal is not None
            return self._portal

    def _main(self, ready: threading.Event, failure: list[BaseException]) -> None:
        try:
            anyio.run(self._serve, ready, backend="asyncio")
        except BaseException as exc:  # reported to the thread waiting on `ready`
            failure.append(exc)
            ready.set()

    async def _serve(self, ready: threading.Event) -> None:
        async with anyio.create_task_group() as group, BlockingPortal() as portal:
            self._group = group
            self._portal = portal
            ready.set()
            await portal.sleep_until_stopped()
            group.cancel_scope.cancel()

    @property
    def running(self) -> bool:
        """Whether the loop thread has been started (and not closed)."""
        return self._portal is not None

    def spawn(self, function: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start a long-lived task in the loop; call from inside the loop only."""
        assert self._group is not None
        self._group.start_soon(function)

    def close(self) -> None:
        with self._lock:
            portal, self._portal = self._portal, None
        if portal is None:
            return
        with contextlib.suppress(Exception):
            portal.call(_close_all)
        with contextlib.suppress(Exception):
            portal.call(portal.stop, True)
        if self._thread is not None:
            self._thread.join(timeout=10)


_LOOP = _Loop()
_SERVERS: dict[McpServerConfig, RemoteServer] = {}
_SERVERS_LOCK = threading.Lock()


def remote_server(config: McpServerConfig) -> RemoteServer:
    """The process-wide connection manager of ``config`` (equal configurations share one)."""
    with _SERVERS_LOCK:
        server = _SERVERS.get(config)
        if server is None:
            server = _SERVERS[config] = RemoteServer(config)
        return server


async def _close_all() -> None:
    for server in list(_SERVERS.values()):
        await server._close()


def shutdown() -> None:
    """Close every connection (stdio servers are terminated) and stop the background loop."""
    _LOOP.close()


atexit.register(shutdown)


@attrs.frozen(kw_only=True)
class ServerStatistics:
    """What happened to one remote server so far."""

    name: str
    transport: str
    connected: bool
    starts: int
    crashes: int
    consecutive_failures: int
    calls: int
    #: Tools of its ``tools/list`` left out as malformed so far (each reported once).
    malformed_tools: int = 0


#: Servers already warned about (by name and folder): once per process, not at every restart.
_WARNED_CWD: set[tuple[str, str]] = set()


def _start_folder(config: McpServerConfig) -> str:
    """The folder ``config``'s stdio server starts in (:attr:`McpServerConfig.start_folder`).

    An explicit ``cwd`` is honoured, with a warning (once) when it lies in the deck's current
    folder, the default workdir of every session: files a session writes there (a
    ``node_modules/.bin/`` entry, ``uv.toml``, ``.python-version``, a module ``python -m``
    imports) change what the server's launcher runs on the host.
    """
    folder = config.start_folder
    if config.cwd is None:
        return folder
    try:
        real = os.path.realpath(folder)
        here = os.path.realpath(os.getcwd())
    except OSError:
        return folder
    inside = real == here or real.startswith(here.rstrip(os.sep) + os.sep)
    if inside and (config.name, real) not in _WARNED_CWD:
        _WARNED_CWD.add((config.name, real))
        log.warning(
            "MCP server %r starts in %s, inside the deck's current folder (the default "
            "workdir of sessions): files the model writes there can change what its command "
            "runs on the host (npx's node_modules/.bin, uv.toml, .python-version, modules of "
            "'python -m'); use a folder sessions do not write, or absolute paths and no 'cwd'",
            config.name, real,
        )
    return folder


class _Connection:
    """One live MCP client session; :meth:`run` owns its transport from start to close."""

    def __init__(
        self, config: McpServerConfig, report: Callable[[str, str], None] | None = None
    ) -> None:
        self.config = config
        self._report = report
        self.ready = anyio.Event()
        self.stopped = anyio.Event()
        self._stop = anyio.Event()
        self.client: Client | None = None
        self.tools: list[types.Tool] = []
        #: Fingerprints of ``tools`` by name, computed on first use (cleared on a new listing).
        self.fingerprints: dict[str, str | None] = {}
        self.error: BaseException | None = None
        self.alive = False
        # Cancelled by close() when the connection never became ready: a server that does not
        # answer initialize or tools/list (or pages its tools without end) must not keep its
        # process and this task after the start was given up.
        self._scope = anyio.CancelScope()
        self.screen: _ListingScreen | None = None
        #: ``screen.list_changed`` when ``tools`` was last read: a higher count means the
        #: server announced a new listing since.
        self.listed_at_change = 0

    def listing(self, tools: list[types.Tool]) -> None:
        """Take ``tools`` as the server's current listing."""
        self.tools = tools
        self.fingerprints = {}

    def fingerprint(self, name: str) -> str | None:
        """:func:`fingerprint` of ``name`` in the current listing (cached)."""
        if name not in self.fingerprints:
            self.fingerprints[name] = fingerprint(self.tools, name)
        return self.fingerprints[name]

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        config = self.config
        if config.command is not None:
            from mcp import StdioServerParameters

            from ._stdio_client import stdio_transport

            errlog: Any = sys.stderr
            if config.stderr == "discard":
                errlog = stack.enter_context(open(os.devnull, "w"))
            params = StdioServerParameters(
                command=config.command[0],
                args=list(config.command[1:]),
                env=dict(config.env) or None,
                cwd=_start_folder(config),
            )
            return stdio_transport(params, errlog, server=config.name)
        from mcp.client.streamable_http import streamable_http_client

        assert config.url is not None
        http_client = _http_client(config)
        # The SDK closes only a client it made itself: this one ends with the connection.
        stack.push_async_callback(http_client.aclose)
        return streamable_http_client(config.url, http_client=http_client)

    async def run(self) -> None:
        try:
            with self._scope:
                async with contextlib.AsyncExitStack() as stack:
                    self.screen = _ListingScreen(self.config.name, self._report)
                    transport = _screened(self._transport(stack), self.screen)
                    client = await stack.enter_async_context(Client(transport, cache=None))
                    changes = self.screen.list_changed
                    self.listing(await _list_all(client, self.config.name))
                    self.listed_at_change = changes
                    self.client = client
                    self.alive = True
                    self.ready.set()
                    await self._stop.wait()
        except Exception as exc:  # recorded; the next call restarts the server
            self.error = exc
            if self.alive:
                log.warning("MCP server %r: connection ended: %s", self.config.name, exc)
        finally:
            self.alive = False
            self.client = None
            self.ready.set()
            self.stopped.set()

    async def close(self) -> None:
        started = self.alive
        self.alive = False
        self._stop.set()
        if not started:
            # Still starting (or it failed): there is no session to end politely. The
            # transports shut their process down under cancellation (shielded, bounded).
            self._scope.cancel()
        with anyio.move_on_after(10):
            await self.stopped.wait()
        if not self.stopped.is_set():  # a polite stop that did not finish: forced
            self._scope.cancel()
            with anyio.move_on_after(10):
                await self.stopped.wait()


#: Most ``tools/list`` pages and tools read from one server: a server that pages without end
#: (or lists a million tools) must not grow the deck's memory without bound.
MAX_LIST_PAGES = 100
MAX_TOOLS = 5000


async def _list_all(client: Client, server: str = "?") -> list[types.Tool]:
    """Every tool of the server, following ``nextCursor`` up to :data:`MAX_LIST_PAGES` pages
    and :data:`MAX_TOOLS` tools; past either bound (or at a cursor seen before, a loop) the
    listing stops there with a warning."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools[: MAX_TOOLS + 1 - len(tools)])
        cursor = page.next_cursor
        if len(tools) > MAX_TOOLS:
            log.warning(
                "MCP server %r lists more than %d tools; only the first %d are registered",
                server, MAX_TOOLS, MAX_TOOLS,
            )
            return tools[:MAX_TOOLS]
        if not cursor:
            return tools
        if len(tools) >= MAX_TOOLS or cursor in seen:
            break
        seen.add(cursor)
    log.warning(
        "MCP server %r: tools/list stopped after %d tool(s): the server keeps paging (at most "
        "%d pages and %d tools are read, a repeated cursor ends the listing); the rest is not "
        "registered", server, min(len(tools), MAX_TOOLS), MAX_LIST_PAGES, MAX_TOOLS,
    )
    return tools[:MAX_TOOLS]


#: Malformed tools of one server reported one by one; beyond, one summary line.
_MALFORMED_LOGGED = 50


class _ListingScreen:
    """Between the SDK's client and its transport: each ``tools/list`` answer is checked tool
    by tool before the SDK sees it, and a malformed tool (no ``inputSchema``, a schema that is
    not an object schema, a name that is not a string...) is left out and reported.

    The SDK validates a listing as a whole: one malformed tool failed the whole page, and the
    bridge registered none of the server's tools. Each tool is checked here exactly as the SDK
    checks it for the negotiated protocol version, so what passes, the SDK takes.
    """

    def __init__(self, server: str, report: Callable[[str, str], None] | None) -> None:
        self.server = server
        self._report = report
        #: ``tools/list`` requests in flight: the protocol version each was stamped with (the
        #: 2026 era stamps every request) or None.
        self._listing: dict[Any, str | None] = {}
        self._initializing: set[Any] = set()
        #: The version ``initialize`` negotiated (handshake era).
        self.version: str | None = None
        #: ``notifications/tools/list_changed`` received so far.
        self.list_changed = 0

    def sent(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCRequest):
            if message.method == "tools/list":
                meta = (message.params or {}).get("_meta")
                stamped = meta.get(_VERSION_META_KEY) if isinstance(meta, dict) else None
                self._listing[message.id] = stamped if isinstance(stamped, str) else None
            elif message.method == "initialize":
                self._initializing.add(message.id)

    def received(self, item: Any) -> Any:
        message = getattr(item, "message", None)
        if (
            isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/tools/list_changed"
        ):
            self.list_changed += 1
        if not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            return item
        if message.id in self._initializing:
            self._initializing.discard(message.id)
            if isinstance(message, types.JSONRPCResponse):
                version = message.result.get("protocolVersion")
                self.version = version if isinstance(version, str) else None
        if message.id not in self._listing:
            return item
        version = self._listing.pop(message.id) or self.version
        if not isinstance(message, types.JSONRPCResponse):
            return item
        result = self._screen(message.result, version)
        if result is message.result:
            return item
        return SessionMessage(
            types.JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result),
            metadata=item.metadata,
        )

    def _screen(self, result: dict[str, Any], version: str | None) -> dict[str, Any]:
        tools = result.get("tools")
        page = {**result, "tools": []}
        if not isinstance(tools, list) or _page_problem(page, version) is not None:
            return result  # the page itself is malformed: the SDK reports it as it does
        kept = []
        for index, tool in enumerate(tools):
            problem = _page_problem({**page, "tools": [tool]}, version)
            if problem is None:
                kept.append(tool)
                continue
            name = tool.get("name") if isinstance(tool, dict) else None
            label = repr(name[:100]) if isinstance(name, str) else f"at index {index}"
            if self._report is not None:
                self._report(label, problem)
        if len(kept) == len(tools):
            return result
        return {**result, "tools": kept}


#: ``_meta`` key of the protocol version a 2026-era request is stamped with (``mcp_types``).
_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"


def _page_problem(page: dict[str, Any], version: str | None) -> str | None:
    """Why the SDK would refuse the ``tools/list`` result ``page`` on ``version`` (None: it
    takes it): the SDK's own checks, run here on a page of one tool at a time."""
    import mcp_types.methods
    import mcp_types.version
    from pydantic import ValidationError

    if version not in mcp_types.version.KNOWN_PROTOCOL_VERSIONS:
        version = "2025-11-25"  # what the SDK assumes without a negotiated version
    try:
        mcp_types.methods.validate_server_result("tools/list", version, page)
        types.ListToolsResult.model_validate(page, by_name=False)
    except ValidationError as exc:
        return _first_problem(exc, skip=2)  # ("tools", 0, ...)
    except (KeyError, ValueError):  # a method or version the SDK has no check for
        pass
    return None


def _first_problem(error: Any, skip: int = 0) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())[skip:]) or "the entry"
    return f"{where}: {first.get('msg', 'invalid')}"[:300]


def _screened(transport: Any, screen: _ListingScreen) -> Any:
    """``transport`` with :class:`_ListingScreen` on its streams."""

    @contextlib.asynccontextmanager
    async def screened() -> Any:
        async with transport as (read_stream, write_stream):
            yield _ScreenedRead(read_stream, screen), _ScreenedWrite(write_stream, screen)

    return screened()


class _ScreenedRead:
    """A transport's read stream, each item passed through the screen."""

    def __init__(self, inner: Any, screen: _ListingScreen) -> None:
        self._inner = inner
        self._screen = screen

    def __getattr__(self, name: str) -> Any:  # last_context and the like
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        return self._screen.received(await self._inner.receive())

    def __aiter__(self) -> _ScreenedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, StopAsyncIteration):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _ScreenedRead:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _ScreenedWrite:
    """A transport's write stream, each request noted by the screen."""

    def __init__(self, inner: Any, screen: _ListingScreen) -> None:
        self._inner = inner
        self._screen = screen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def send(self, item: Any, /) -> None:
        self._screen.sent(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _ScreenedWrite:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class RemoteServer:
    """Connection manager of one remote server: start, call, detect death, restart.

    The sync and trio methods are called from the deck's threads; everything that touches the
    connection runs in the bridge's loop, so no state here needs a thread lock.
    """

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self._connection: _Connection | None = None
        self._connecting: anyio.Lock | None = None
        self._failures = 0
        self._failed_at = 0.0
        self._starts = 0
        self._crashes = 0
        self._calls = 0
        #: (tool, problem) of each malformed tool reported so far: reported once, not on every
        #: listing (bounded: a server cannot grow it past MAX_TOOLS entries).
        self._malformed: set[tuple[str, str]] = set()

    def _report_malformed(self, tool: str, problem: str) -> None:
        key = (tool, problem)
        if key in self._malformed or len(self._malformed) >= MAX_TOOLS:
            return
        self._malformed.add(key)
        if len(self._malformed) <= _MALFORMED_LOGGED:
            log.warning(
                "MCP server %r: the tool %s of its tools/list is malformed and is not "
                "registered (%s); its other tools are", self.config.name, tool, problem,
            )
        elif len(self._malformed) == _MALFORMED_LOGGED + 1:
            log.warning(
                "MCP server %r: more malformed tools in its tools/list are left out (not "
                "reported one by one; see statistics().malformed_tools)", self.config.name,
            )

    # ------------------------------------------------------------------ callers' side

    def list_tools_blocking(self) -> list[types.Tool]:
        """Connect if needed and list the server's tools (blocks; for registration)."""
        return _LOOP.portal().call(self._list_tools)

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        progress: Callable[[Mapping[str, Any]], None] | None = None,
        pinned: str | None = None,
        deadline: float | None = None,
    ) -> types.CallToolResult:
        """Forward one ``tools/call`` from trio (or asyncio).

        :param progress: receives the server's progress notifications for this call
            (``ToolContext.emit`` of the bridged tool: it hands them to the deck's caller).
        :param pinned: the tool's :func:`fingerprint` when it was registered: the call is
            refused, not forwarded, when the server now lists the tool otherwise.
        :param deadline: the ``time.monotonic()`` instant by which the server must have
            answered, (re)start included (None: its ``timeout_s`` from the call's start, after
            any (re)start).
        :raises ToolFailure: the server could not be reached, died, refused or timed out.
        """
        future = _LOOP.portal().start_task_soon(
            self._call, tool, arguments, progress, pinned, deadline
        )
        return await wait_future(future)

    def statistics(self) -> ServerStatistics:
        """Starts, crashes and calls so far."""
        connection = self._connection
        return ServerStatistics(
            name=self.config.name,
            transport=self.config.transport,
            connected=connection is not None and connection.alive,
            starts=self._starts,
            crashes=self._crashes,
            consecutive_failures=self._failures,
            calls=self._calls,
            malformed_tools=len(self._malformed),
        )

    # ------------------------------------------------------------------ the loop's side

    def _backoff_s(self) -> float:
        config = self.config
        if self._failures <= 1:
            return 0.0
        if self._failures > config.max_restarts:
            return config.backoff_max_s
        delay = config.backoff_initial_s * 2.0 ** (self._failures - 2)
        return min(delay, config.backoff_max_s)

    def _record_failure(self) -> None:
        self._failures += 1
        self._failed_at = time.monotonic()

    async def _ensure(self) -> _Connection:
        if self._connecting is None:
            self._connecting = anyio.Lock()
        async with self._connecting:
            connection = self._connection
            if connection is not None and connection.alive:
                return connection
            config = self.config
            wait = self._failed_at + self._backoff_s() - time.monotonic()
            if wait > 0:
                raise ToolFailure(
                    ErrorCode.EXECUTION_ERROR,
                    f"MCP server {config.name!r} failed {self._failures} time(s) in a row; the "
                    f"next restart is in {wait:.1f} s",
                    retryable=True,
                    suggestion=f"Wait {wait:.0f} s and try again, or use another tool.",
                    details={"server": config.name, "retry_after_s": round(wait, 3)},
                )
            connection = _Connection(config, self._report_malformed)
            _LOOP.spawn(connection.run)
            with anyio.move_on_after(config.startup_timeout_s):
                await connection.ready.wait()
            if not connection.alive:
                reason = (
                    _describe(connection.error)
                    if connection.error is not None
                    else f"no answer within {config.startup_timeout_s:g} s"
                )
                await connection.close()
                self._record_failure()
                raise ToolFailure(
                    ErrorCode.EXECUTION_ERROR,
                    f"could not start MCP server {config.name!r}: {reason}",
                    retryable=True,
                    suggestion="The tool's server is unavailable; try again later or use "
                    "another tool.",
                    details={"server": config.name},
                )
            self._starts += 1
            if self._starts > 1:
                log.warning("MCP server %r restarted (start #%d)", config.name, self._starts)
            self._connection = connection
            return connection

    async def _list_tools(self) -> list[types.Tool]:
        connection = await self._ensure()
        assert connection.client is not None
        try:
            # Bounded like the first listing: a live server that stops answering tools/list
            # must not block the deck's registration for ever.
            with anyio.fail_after(self.config.startup_timeout_s):
                changes = connection.screen.list_changed if connection.screen else 0
                connection.listing(await _list_all(connection.client, self.config.name))
                connection.listed_at_change = changes
        except Exception as exc:  # keep the listing made at connect time
            log.warning("MCP server %r: tools/list failed: %s", self.config.name, exc)
        return connection.tools

    async def _died(self, connection: _Connection) -> None:
        self._crashes += 1
        self._record_failure()
        if self._connection is connection:
            self._connection = None
        await connection.close()

    async def _call(
        self,
        tool: str,
        arguments: dict[str, Any],
        progress: Callable[[Mapping[str, Any]], None] | None = None,
        pinned: str | None = None,
        deadline: float | None = None,
    ) -> types.CallToolResult:
        started = time.monotonic()
        connection = await self._ensure()
        client = connection.client
        config = self.config
        # The limit the message names: the server's timeout_s, or the deployment's time for
        # the tool (its deadline, counted from the call's start).
        limit = config.timeout_s if deadline is None else round(max(deadline - started, 0.0), 3)
        left = config.timeout_s if deadline is None else max(deadline - time.monotonic(), 0.0)
        self._calls += 1
        lost = (
            f"the connection to MCP server {config.name!r} was lost (the server may have "
            "crashed); it is restarted on the next call"
        )
        again = "The tool's server stopped and is restarted on the next call: call again."
        if client is None:
            await self._died(connection)
            raise ToolFailure(ErrorCode.EXECUTION_ERROR, lost, retryable=True, suggestion=again)
        if pinned is not None:
            await self._check_pin(connection, client, tool, pinned)
        try:
            with anyio.fail_after(left):
                result = await client.call_tool(
                    tool, arguments, progress_callback=_forward(progress) if progress else None
                )
        except TimeoutError:
            # A slow tool, or a server that stopped answering anything (stopped, deadlocked,
            # its event loop held): the latter held every later call to its deadline for as
            # long as it lived (measured: a SIGSTOPped server, 3 s a call under timeout_s 3,
            # never restarted). Asked once; shielded, so that a caller cancelled at its own
            # deadline right after does not leave the frozen server in place.
            with anyio.CancelScope(shield=True):
                frozen = not await self._answers(client)
                if frozen:
                    log.warning("MCP server %r answered nothing, not even tools/list, after "
                                "%r timed out; restarting it at the next call", config.name,
                                tool)
                    await self._died(connection)
            raise ToolFailure(
                ErrorCode.TIMEOUT,
                f"MCP server {config.name!r} did not answer {tool!r} within {limit:.3g} s"
                + ("; it no longer answered at all, so it was stopped and is restarted on "
                   "the next call" if frozen else ""),
                retryable=True,
                details={"server": config.name, "timeout_s": limit,
                         **({"server_restarted": True} if frozen else {})},
            ) from None
        except MCPError as exc:
            # CONNECTION_CLOSED is -32000, also the code JSON-RPC leaves to servers for their
            # own errors: only a connection that no longer answers is dead.
            if exc.code != CONNECTION_CLOSED or await self._answers(client):
                # A JSON-RPC error from a live server (unknown tool, bad params): the call's.
                raise ToolFailure(
                    ErrorCode.EXECUTION_ERROR,
                    f"MCP server {config.name!r} refused the call of {tool!r}: {exc.message}",
                    details={"server": config.name, "jsonrpc_code": exc.code},
                ) from None
            await self._died(connection)
            raise ToolFailure(
                ErrorCode.EXECUTION_ERROR,
                lost,
                retryable=True,
                suggestion=again,
                details={"server": config.name},
            ) from None
        except Exception as exc:  # a transport failure, or an answer the SDK cannot read
            if await self._answers(client):
                # The server is alive and sent something that is not MCP (a content block of
                # an unknown type, a malformed result): this call failed, the connection and
                # the other calls in flight on it stay.
                raise ToolFailure(
                    ErrorCode.EXECUTION_ERROR,
                    f"MCP server {config.name!r} answered the call of {tool!r} with a result "
                    f"that is not valid MCP: {_describe(exc)[:500]}",
                    suggestion="The tool's server answered in a form tooldeck cannot read; "
                    "use another tool.",
                    details={"server": config.name},
                ) from None
            await self._died(connection)
            raise ToolFailure(
                ErrorCode.EXECUTION_ERROR,
                f"{lost} ({_describe(exc)})",
                retryable=True,
                suggestion=again,
                details={"server": config.name},
            ) from None
        self._failures = 0
        return result

    async def _check_pin(
        self, connection: _Connection, client: Client, tool: str, pinned: str
    ) -> None:
        """Refuse the call when the server no longer lists ``tool`` as it was registered.

        The listing checked is the one read when the connection started (a restarted server
        is listed anew) or, once the server announced ``tools/list_changed``, a fresh one.
        """
        config = self.config
        screen = connection.screen
        if screen is not None and screen.list_changed > connection.listed_at_change:
            changes = screen.list_changed
            try:
                with anyio.fail_after(min(config.timeout_s, config.startup_timeout_s)):
                    tools = await _list_all(client, config.name)
            except Exception as exc:
                raise ToolFailure(
                    ErrorCode.EXECUTION_ERROR,
                    f"MCP server {config.name!r} announced new tools but did not list them "
                    f"({_describe(exc)[:200]}); {tool!r} was not called",
                    retryable=True,
                    details={"server": config.name},
                ) from None
            connection.listing(tools)
            connection.listed_at_change = changes
        if connection.fingerprint(tool) == pinned:
            return
        if (tool, "changed") not in self._malformed and len(self._malformed) < MAX_TOOLS:
            self._malformed.add((tool, "changed"))
            log.warning(
                "MCP server %r changed its tool %r since the deck registered it (description, "
                "schema or annotations differ, or it is no longer listed); its calls are "
                "refused until the deck registers the tool again", config.name, tool,
            )
        raise ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"MCP server {config.name!r} changed the tool {tool!r} since the deck registered "
            "it (its description, schema or annotations differ, or it is no longer listed); "
            "it was not called",
            suggestion="Use another tool: this one needs the deck to register it again "
            "(a restart) so that its new definition can be reviewed.",
            details={"server": config.name, "tool": tool, "reason": "tool_changed"},
        )

    async def _answers(self, client: Client) -> bool:
        """Whether the server still answers (bounded: a silent server is dead).

        Asked with ``tools/list``, which every protocol era has (``ping`` is gone from
        2026-07-28) and every server the bridge talks to answers.
        """
        try:
            with anyio.fail_after(min(self.config.timeout_s, _PING_TIMEOUT_S)):
                await client.list_tools()
        except Exception:
            return False
        return True

    def close(self) -> None:
        """Close the connection now (a stdio server is terminated); the next call reconnects."""
        if _LOOP.running:
            _LOOP.portal().call(self._close)

    async def _close(self) -> None:
        # The lock belongs to this loop; a later loop (after shutdown()) makes its own.
        self._connecting = None
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()


def _forward(progress: Callable[[Mapping[str, Any]], None]) -> Any:
    """An MCP progress callback that hands each notification to ``progress`` as an event."""

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        event: dict[str, Any] = {"progress": value}
        if total is not None:
            event["total"] = total
        if message is not None:
            event["message"] = message
        try:
            progress(event)
        except Exception:  # a listener's bug must not end the remote call
            log.debug("progress listener raised", exc_info=True)

    return on_progress
