"""tooldeck as an MCP server: ``tooldeck serve mcp [--transport stdio|http]``.

Any MCP client (Claude Desktop, an IDE, an agent framework) gets the deck's tools, and every call
goes through the whole pipeline (validation, policy, cache, rate limits, sandbox) in one
:class:`~tooldeck.Session` per MCP connection. Errors come back as ``isError`` results carrying
the structured error JSON, exactly as :func:`tooldeck.result_messages` builds them for ``mcp``.

Built on the official SDK's low-level ``Server`` (full control of ``tools/list`` and
``tools/call``: raw JSON Schemas and annotations pass through as they are). The deck is trio
code, so the server runs on trio: the SDK is written against anyio and works on its trio backend;
stdio uses the SDK's own transport; streamable HTTP is the SDK's Starlette app served by
Hypercorn's trio worker (uvicorn is asyncio-only), so there is one event loop and no thread hop
per call.

Configuration, ``[tool.tooldeck.mcp]`` (the ``servers`` sub-table belongs to the MCP client
bridge, ``tooldeck-mcp``)::

    [tool.tooldeck.mcp]
    list = "all"             # "all": every tool; "hand": only a hand + search_tools
    default_task = ""        # "hand" mode: the task whose hand tools/list shows before a search
    search_limit = 15        # default `limit` of search_tools
    confirm = "error"        # "elicit": ask the user through the client (MCP elicitation)
    confirm_timeout_s = 120  # how long an elicitation waits for the user
    allow_approvals = false  # offer approve_call (a model approving its own calls: off!)
    allow_remote = false     # HTTP on a non-loopback address (plain HTTP: put TLS in front)
    token = ""               # HTTP bearer token (else TOOLDECK_MCP_TOKEN, else generated)
    max_sessions = 1000      # HTTP: most deck sessions; only idle ones are ever evicted
    session_idle_timeout_s = 1800  # HTTP: an MCP session with no request for this long ends

Extra tools the server adds: ``search_tools`` (when a retriever is installed) returns the hand
for a task with full input schemas, so a client facing hundreds of tools can ask for the right
ones; ``approve_call`` (only with ``allow_approvals = true``) runs a call that answered
``CONFIRMATION_REQUIRED``. It is off by default because the model would approve its own calls:
turn it on only when the MCP client shows the user each ``approve_call`` and asks first.

Calls that need confirmation (dangerous tools) answer ``CONFIRMATION_REQUIRED`` with an
``approval_id`` by default. With ``confirm = "elicit"`` and a client that declared form
elicitation, the server asks the user instead (``elicitation/create``, out of the model's reach):
accepted, the call runs (once, or for the rest of the session if they tick "always"); declined or
unanswered, it is ``PERMISSION_DENIED``.

Authentication (HTTP only; stdio belongs to the process that started the server): every
request must carry ``Authorization: Bearer <token>``. The token is ``mcp.token`` from the
configuration, else the ``TOOLDECK_MCP_TOKEN`` environment variable, else one generated at
start-up (``secrets.token_urlsafe(32)``) and printed once to stderr. It is compared in constant
time (:func:`hmac.compare_digest`); a request without it, or with another one, is answered
``401`` with ``WWW-Authenticate: Bearer`` before it reaches the MCP layer, so no tool runs.
``tooldeck serve mcp --transport http --no-auth`` turns this off (with a warning). The SDK's
Host and Origin checks (DNS rebinding protection) apply as well::

    from mcp.client.streamable_http import streamablehttp_client
    async with streamablehttp_client(url, headers={"Authorization": f"Bearer {token}"}) as ...

    curl -H "Authorization: Bearer $TOOLDECK_MCP_TOKEN" ...

Sessions: stdio is one connection, one deck session. Streamable HTTP gives each MCP session
(``mcp-session-id``) its own deck session, closed when the MCP session ends (the client's
``DELETE``, the idle timeout ``session_idle_timeout_s``, the server's shutdown); requests of the
stateless 2026 protocol carry no identity and share one session. At ``max_sessions`` deck
sessions, a new MCP session evicts the least recently used *idle* one (no call in flight, no
approval pending); when every session is busy, the new one is refused (HTTP 503 at
``initialize``, ``RATE_LIMIT_EXCEEDED`` for a call) and no running call is ever cancelled.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import os
import secrets
import signal
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import trio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server

from tooldeck_hookspecs import (
    LEVEL_ORDER,
    ConfigError,
    ErrorCode,
    ToolCall,
    ToolDefinition,
    ToolResult,
)

from ._deck import Deck, Session
from .adapters import export_tool, result_messages

__all__ = [
    "McpServerSettings",
    "DeckMcpServer",
    "SEARCH_TOOL",
    "APPROVE_TOOL",
    "serve_stdio",
    "serve_http",
    "serve_mcp_cli",
    "TOKEN_ENV",
    "SessionsFullError",
    "resolve_token",
    "bearer_auth",
]

log = logging.getLogger("tooldeck.mcp")

#: Name of the tool that deals a hand for a task.
SEARCH_TOOL = "search_tools"
#: Name of the tool that approves a pending call (only when ``allow_approvals`` is on).
APPROVE_TOOL = "approve_call"

_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})

#: Connections without a transport session id (stdio, stateless HTTP) share this session key.
_DEFAULT_KEY = "default"

#: Environment variable holding the HTTP transport's bearer token.
TOKEN_ENV = "TOOLDECK_MCP_TOKEN"

#: Shortest token taken from configuration or the environment without a warning.
_MIN_TOKEN_LENGTH = 16


class SessionsFullError(Exception):
    """Every one of the ``max_sessions`` deck sessions is busy: a new MCP session is refused."""

_SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "minLength": 1,
            "description": "What you are trying to do, in a sentence.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
            "description": "How many tools to return (default 15).",
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}

_APPROVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approval_id": {
            "type": "string",
            "minLength": 1,
            "description": "The approval_id of a CONFIRMATION_REQUIRED result.",
        }
    },
    "required": ["approval_id"],
    "additionalProperties": False,
}


@attrs.frozen(kw_only=True)
class McpServerSettings:
    """The ``[tool.tooldeck.mcp]`` table as far as the server is concerned."""

    list: Literal["all", "hand"] = "all"
    default_task: str = ""
    search_limit: int = 15
    allow_approvals: bool = False
    #: "error": CONFIRMATION_REQUIRED goes back to the model; "elicit": the server asks the user
    #: through the client (MCP elicitation) when the client supports it, and runs the call if
    #: they accept.
    confirm: Literal["error", "elicit"] = "error"
    confirm_timeout_s: float = 120.0
    #: Let ``serve mcp --transport http`` bind an address other than loopback. The server
    #: speaks plain HTTP (the bearer token travels in clear): only behind a TLS proxy.
    allow_remote: bool = False
    #: Most concurrent HTTP deck sessions; beyond it the least recently used *idle* one is
    #: closed, and a new session is refused when none is idle.
    max_sessions: int = 1000
    #: The HTTP bearer token from configuration ("" when unset).
    token: str = attrs.field(default="", repr=False)
    #: Seconds without any request after which an HTTP MCP session (and its deck session) ends.
    session_idle_timeout_s: float = 1800.0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> McpServerSettings:
        """Read the ``mcp`` table of the whole tooldeck configuration.

        :raises ConfigError: a key has the wrong type or value.
        """
        table = settings.get("mcp", {})
        if not isinstance(table, Mapping):
            raise ConfigError("'mcp' must be a table")
        mode = table.get("list", "all")
        if mode not in ("all", "hand"):
            raise ConfigError(f"mcp.list must be 'all' or 'hand', not {mode!r}")
        default_task = table.get("default_task", "")
        if not isinstance(default_task, str):
            raise ConfigError("mcp.default_task must be a string")
        flags: dict[str, bool] = {}
        for key in ("allow_approvals", "allow_remote"):
            flags[key] = table.get(key, False)
            if not isinstance(flags[key], bool):
                raise ConfigError(f"mcp.{key} must be true or false")
        confirm = table.get("confirm", "error")
        if confirm not in ("error", "elicit"):
            raise ConfigError(f"mcp.confirm must be 'error' or 'elicit', not {confirm!r}")
        timeout = table.get("confirm_timeout_s", 120.0)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ConfigError(f"mcp.confirm_timeout_s must be a number > 0, not {timeout!r}")
        idle = table.get("session_idle_timeout_s", 1800.0)
        if (
            not isinstance(idle, int | float)
            or isinstance(idle, bool)
            or not math.isfinite(idle)
            or idle <= 0
        ):
            raise ConfigError(f"mcp.session_idle_timeout_s must be a number > 0, not {idle!r}")
        token = table.get("token", "")
        if not isinstance(token, str):
            raise ConfigError("mcp.token must be a string")
        numbers: dict[str, int] = {}
        for key, default in (("search_limit", 15), ("max_sessions", 1000)):
            value = table.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"mcp.{key} must be an integer >= 1, not {value!r}")
            numbers[key] = value
        return cls(
            list=mode,
            default_task=default_task,
            allow_approvals=flags["allow_approvals"],
            allow_remote=flags["allow_remote"],
            confirm=confirm,
            confirm_timeout_s=float(timeout),
            search_limit=numbers["search_limit"],
            max_sessions=numbers["max_sessions"],
            token=token.strip(),
            session_idle_timeout_s=float(idle),
        )


def resolve_token(
    settings: McpServerSettings, environ: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The HTTP bearer token and where it came from (``"config"``, ``"env"``, ``"generated"``).

    ``mcp.token`` wins, then :data:`TOKEN_ENV`; otherwise a fresh ``secrets.token_urlsafe(32)``
    (about 256 bits) that lives as long as the process.
    """
    environ = os.environ if environ is None else environ
    for token, source in ((settings.token, "config"), (environ.get(TOKEN_ENV, "").strip(), "env")):
        if token:
            if len(token) < _MIN_TOKEN_LENGTH:
                log.warning(
                    "the MCP bearer token from %s is only %d characters long; use at least %d "
                    "(python -c 'import secrets; print(secrets.token_urlsafe(32))')",
                    source, len(token), _MIN_TOKEN_LENGTH,
                )
            return token, source
    return secrets.token_urlsafe(32), "generated"


def _token_matches(presented: bytes, expected: bytes) -> bool:
    """Constant-time comparison: how long it takes says nothing about how much matched."""
    return hmac.compare_digest(presented, expected)


def bearer_auth(app: Any, token: str) -> Any:
    """ASGI middleware: only requests with ``Authorization: Bearer <token>`` reach ``app``.

    Any other HTTP request is answered ``401`` with ``WWW-Authenticate: Bearer`` (RFC 6750) and
    never reaches the MCP layer. Lifespan events pass through.
    """
    expected = token.encode("utf-8")
    if not expected:
        raise ValueError("the bearer token must not be empty")

    async def middleware(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        presented = b""
        present = False
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                scheme, _, credentials = bytes(value).strip().partition(b" ")
                if scheme.lower() == b"bearer":
                    present = True
                    presented = credentials.strip()
                break
        # Compared even when absent (against b""): one code path, whatever was sent.
        if _token_matches(presented, expected) and present:
            await app(scope, receive, send)
            return
        challenge = b'Bearer realm="tooldeck"'
        if present:
            challenge += b', error="invalid_token"'
        body = json.dumps({
            "error": "invalid_token" if present else "unauthorized",
            "error_description": (
                "wrong bearer token" if present else
                "this MCP server needs the header 'Authorization: Bearer <token>'"
            ),
        }).encode()
        # The body is not read: an unauthenticated client gets nothing for sending one.
        await send({
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"www-authenticate", challenge),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        })
        await send({"type": "http.response.body", "body": body})

    return middleware


def _call_result(call: ToolCall, result: ToolResult) -> types.CallToolResult:
    message = result_messages("mcp", [(call, result)])[0]
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=b["text"]) for b in message["content"]],
        structured_content=message["structuredContent"],
        is_error=message["isError"],
    )


def _can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared form elicitation and this request can carry one."""
    server_session = ctx.session
    capabilities = server_session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return False
    return bool(getattr(server_session, "can_send_request", True))


async def _notify_tools_changed(ctx: ServerRequestContext[Any, Any]) -> None:
    """Tell the client that tools/list changed (the hand did); best effort."""
    try:
        await ctx.session.send_tool_list_changed()
    except Exception as exc:  # a client that cannot hear it re-lists on its own terms
        log.debug("tools/list_changed not sent: %s: %s", type(exc).__name__, exc)


def _mcp_tool(spec: Mapping[str, Any]) -> types.Tool:
    return types.Tool.model_validate(dict(spec))


class DeckMcpServer:
    """An MCP server over a loaded :class:`Deck`.

    :param deck: the deck (the caller enters and closes it).
    :param workdir: the sessions' working directory (default: the ``[session]`` table, then cwd).
    :param settings: server settings; default: read from ``deck.config``.
    :param session_options: extra keyword arguments for :meth:`Deck.session` (grants, max_level,
        ...); unset ones come from the ``[session]`` table.

    ``server`` is the SDK's low-level server; :meth:`run_stdio` and :meth:`run_http` serve it.
    """

    def __init__(
        self,
        deck: Deck,
        *,
        workdir: str | None = None,
        settings: McpServerSettings | None = None,
        session_options: Mapping[str, Any] | None = None,
    ) -> None:
        from . import __version__

        self.deck = deck
        self.workdir = workdir
        self.settings = settings or McpServerSettings.from_settings(deck.config.settings)
        self._session_options = dict(session_options or {})
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        #: Calls (tools/call, elicitations included) running per session key: a busy session
        #: is never evicted.
        self._busy: dict[str, int] = {}
        self._closing: list[Session] = []
        self._scratch: Session | None = None
        if self.settings.list == "hand" and deck.retriever is None:
            log.warning("mcp.list = 'hand' needs a retriever (tooldeck-faiss); listing all tools")
        self.server: Server[Any] = Server(
            "tooldeck",
            version=__version__,
            instructions=self._instructions(),
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
        )

    # ------------------------------------------------------------------ sessions

    @property
    def _hand_mode(self) -> bool:
        return self.settings.list == "hand" and self.deck.retriever is not None

    def _new_session(self) -> Session:
        return self.deck.session(workdir=self.workdir, **self._session_options)

    @staticmethod
    def _key(ctx: ServerRequestContext[Any, Any] | None) -> str:
        request = getattr(ctx, "request", None) if ctx is not None else None
        headers = getattr(request, "headers", None)
        if headers is not None:
            return str(headers.get("mcp-session-id") or _DEFAULT_KEY)
        return _DEFAULT_KEY

    def _idle(self, key: str, session: Session) -> bool:
        """No call in flight and no approval pending: closing it loses nothing in progress."""
        return not self._busy.get(key) and not session.pending_approvals()

    def _evictable(self) -> str | None:
        """The least recently used idle session's key (never the shared default session)."""
        for key, session in self._sessions.items():  # oldest first
            if key != _DEFAULT_KEY and self._idle(key, session):
                return key
        return None

    def has_room(self) -> bool:
        """Whether a new MCP session would get a deck session (a free slot or an idle one)."""
        counted = len(self._sessions) - (_DEFAULT_KEY in self._sessions)
        return counted < self.settings.max_sessions or self._evictable() is not None

    def session_for(self, ctx: ServerRequestContext[Any, Any] | None) -> Session:
        """The deck session of the MCP connection that sent ``ctx``.

        Streamable HTTP connections carry an ``mcp-session-id`` header: one deck session each,
        closed when that MCP session ends. stdio is one connection per process; stateless HTTP
        requests have no identity at all: both use one shared session (not counted against
        ``max_sessions``, never evicted).

        :raises SessionsFullError: ``max_sessions`` sessions are open and each has a call in
            flight or an approval pending (busy sessions are never evicted).
        """
        key = self._key(ctx)
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
            return session
        if key != _DEFAULT_KEY:
            counted = len(self._sessions) - (_DEFAULT_KEY in self._sessions)
            if counted >= self.settings.max_sessions:
                victim = self._evictable()
                if victim is None:
                    raise SessionsFullError(
                        f"all {self.settings.max_sessions} sessions of this MCP server are busy "
                        "(calls in flight or approvals pending)"
                    )
                log.info("MCP session %s evicted (idle, least recently used)", victim[:16])
                self._closing.append(self._sessions.pop(victim))
        session = self._sessions[key] = self._new_session()
        if key != _DEFAULT_KEY:
            self._close_with_connection(ctx, key, session)
        return session

    def _close_with_connection(
        self, ctx: ServerRequestContext[Any, Any] | None, key: str, session: Session
    ) -> None:
        """Close ``session`` when its MCP session ends (DELETE, idle timeout, shutdown).

        The SDK unwinds a per-connection exit stack however a connection ends; the request
        context reaches it through the server session. Without it (another SDK layout), a
        DELETE still ends the deck session (:meth:`end_session`, called by the HTTP layer).
        """
        connection = getattr(getattr(ctx, "session", None), "_connection", None)
        stack = getattr(connection, "exit_stack", None)
        if stack is None:
            log.debug("no per-connection exit stack: deck session %s ends on DELETE", session.id)
            return

        async def ended() -> None:
            await self.end_session(key, session)

        stack.push_async_callback(ended)

    async def end_session(self, key: str, session: Session | None = None) -> None:
        """The MCP session ``key`` ended: close its deck session (once; idempotent).

        :param session: close only if this is still the key's session (a callback registered
            for an evicted session must not close its successor).
        """
        current = self._sessions.get(key)
        if current is None or (session is not None and current is not session):
            return
        del self._sessions[key]
        self._busy.pop(key, None)
        await current.aclose()

    async def _close_dropped(self) -> None:
        while self._closing:
            await self._closing.pop().aclose()

    async def aclose(self) -> None:
        """End every deck session this server opened (observers see ``session.closed``)."""
        await self._close_dropped()
        sessions = list(self._sessions.values())
        if self._scratch is not None:
            sessions.append(self._scratch)
        self._sessions.clear()
        self._busy.clear()
        self._scratch = None
        for session in sessions:
            await session.aclose()

    @property
    def sessions(self) -> Mapping[str, Session]:
        """Open deck sessions by MCP session key (``"default"`` for stdio and stateless HTTP)."""
        return dict(self._sessions)

    # ------------------------------------------------------------------ tools/list

    def _instructions(self) -> str:
        parts = [
            "Tools of a tooldeck deck. Every call is validated and authorized; a failed call "
            "returns isError with a JSON error whose 'suggestion' says what to do next."
        ]
        if self.deck.retriever is not None:
            parts.append(
                f"Call {SEARCH_TOOL} with your task to get the tools that fit it, with their "
                "input schemas."
            )
        return " ".join(parts)

    def _visible(self, session: Session, tools: Sequence[ToolDefinition]) -> list[ToolDefinition]:
        """Leave out what the session could never run (excluded categories, too high a level)."""
        ceiling = LEVEL_ORDER[session.max_level]
        return [
            t
            for t in tools
            if t.category not in session.excluded_categories
            and LEVEL_ORDER[t.security.level] <= ceiling
            and t.name not in (SEARCH_TOOL, APPROVE_TOOL)
        ]

    async def _default_hand(self, session: Session) -> list[ToolDefinition]:
        if session.hand is not None:
            return list(session.hand.tools)
        pinned = [t for t in (self.deck.catalog.get(n) for n in session.pinned) if t is not None]
        if not self.settings.default_task:
            return pinned
        hand = await session.select(self.settings.default_task)
        return list(hand.tools)

    def _meta_tools(self) -> list[types.Tool]:
        extra: list[types.Tool] = []
        if self.deck.retriever is not None and SEARCH_TOOL not in self.deck.catalog:
            extra.append(
                types.Tool(
                    name=SEARCH_TOOL,
                    title="search tools",
                    description=(
                        "Find the tools for a task: returns the best matching tools with their "
                        "descriptions, relevance scores and full input schemas. Use it when the "
                        "tool you need is not in your list."
                    ),
                    input_schema=_SEARCH_SCHEMA,
                    annotations=types.ToolAnnotations(
                        title="search tools",
                        read_only_hint=True,
                        destructive_hint=False,
                        idempotent_hint=True,
                        open_world_hint=False,
                    ),
                )
            )
        if self.settings.allow_approvals and APPROVE_TOOL not in self.deck.catalog:
            extra.append(
                types.Tool(
                    name=APPROVE_TOOL,
                    title="approve call",
                    description=(
                        "Run a call that returned CONFIRMATION_REQUIRED, exactly as it was asked "
                        "for, once. Only call this after the user explicitly approved that call."
                    ),
                    input_schema=_APPROVE_SCHEMA,
                    annotations=types.ToolAnnotations(
                        title="approve call",
                        read_only_hint=False,
                        destructive_hint=True,
                        idempotent_hint=False,
                        open_world_hint=True,
                    ),
                )
            )
        return extra

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any] | None = None
    ) -> list[types.Tool]:
        """What ``tools/list`` answers for the connection of ``ctx``.

        :raises MCPError: every session is busy (see :meth:`session_for`).
        """
        try:
            session = self.session_for(ctx)
        except SessionsFullError as exc:
            from mcp.shared.exceptions import MCPError

            raise MCPError(types.INTERNAL_ERROR, f"{exc}; try again later") from exc
        await self._close_dropped()
        if self._hand_mode:
            tools = await self._default_hand(session)
        else:
            tools = list(self.deck.catalog)
        listed = [_mcp_tool(export_tool(t, "mcp")) for t in self._visible(session, tools)]
        return listed + self._meta_tools()

    async def _on_list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await self.list_tools(ctx))

    # ------------------------------------------------------------------ tools/call

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        ctx: ServerRequestContext[Any, Any] | None = None,
    ) -> types.CallToolResult:
        """Run one ``tools/call`` through the pipeline; never raises for a model's mistake."""
        request_id = getattr(ctx, "request_id", None) if ctx is not None else None
        call = ToolCall(
            name=name,
            arguments=dict(arguments or {}),
            id=f"mcp_{request_id}" if request_id is not None else "",
        )
        try:
            session = self.session_for(ctx)
        except SessionsFullError as exc:
            return _call_result(call, ToolResult.fail(
                ErrorCode.RATE_LIMIT_EXCEEDED,
                f"{exc}: this new MCP session was refused and no call ran",
                suggestion="Wait a little and call again; another session's calls must finish.",
                retry_after_s=5.0,
            ))
        key = self._key(ctx)
        # Counted before the first checkpoint: from here on this session is busy, so no other
        # connection's new session can evict it while the call runs or awaits approval.
        self._busy[key] = self._busy.get(key, 0) + 1
        try:
            await self._close_dropped()
            return await self._call(session, call, ctx)
        finally:
            left = self._busy.get(key, 0) - 1
            if left > 0:
                self._busy[key] = left
            else:
                self._busy.pop(key, None)

    async def _call(
        self, session: Session, call: ToolCall, ctx: ServerRequestContext[Any, Any] | None
    ) -> types.CallToolResult:
        name = call.name
        if name == SEARCH_TOOL and SEARCH_TOOL not in self.deck.catalog:
            if self.deck.retriever is not None:
                found = await self._search(session, call.arguments)
                if found.success and self._hand_mode and ctx is not None:
                    await _notify_tools_changed(ctx)
                return _call_result(call, found)
        if name == APPROVE_TOOL and APPROVE_TOOL not in self.deck.catalog:
            if self.settings.allow_approvals:
                return _call_result(call, await self._approve(session, call.arguments))
        result = await session.call(call.name, call.arguments, call_id=call.id or None)
        if (
            self.settings.confirm == "elicit"
            and result.error is not None
            and result.error.code is ErrorCode.CONFIRMATION_REQUIRED
            and ctx is not None
            and _can_elicit(ctx)
        ):
            result = await self._ask_user(ctx, session, call, result)
        return _call_result(call, self._explain(result))

    async def _ask_user(
        self,
        ctx: ServerRequestContext[Any, Any],
        session: Session,
        call: ToolCall,
        asked: ToolResult,
    ) -> ToolResult:
        """Answer a CONFIRMATION_REQUIRED by asking the user through the client (elicitation).

        The model never sees the question: the user accepts (the call runs once, or "always"
        for the rest of the session) or declines (PERMISSION_DENIED). When the client cannot
        be asked after all, the original CONFIRMATION_REQUIRED goes back.
        """
        assert asked.error is not None
        approval_id = str(asked.error.details.get("approval_id", ""))
        reasons = asked.error.details.get("reasons") or [asked.error.message]
        arguments = json.dumps(dict(call.arguments), ensure_ascii=False, default=str)
        if len(arguments) > 2000:
            arguments = arguments[:2000] + " ..."
        message = (
            f"The assistant wants to run the tool {call.name!r} with these arguments:\n"
            f"{arguments}\n\nWhy approval is needed: " + "; ".join(map(str, reasons))
            + "\n\nAllow this call?"
        )
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                "always": {
                    "type": "boolean",
                    "title": f"Always allow {call.name} in this session",
                    "default": False,
                }
            },
        }
        answer: types.ElicitResult | None = None
        try:
            with trio.move_on_after(self.settings.confirm_timeout_s):
                answer = await ctx.session.elicit_form(
                    message, schema, related_request_id=ctx.request_id
                )
        except Exception as exc:  # the client could not ask after all: the model is told
            log.warning("elicitation failed (%s: %s); returning CONFIRMATION_REQUIRED",
                        type(exc).__name__, exc)
            return asked
        if answer is None or answer.action != "accept":
            await session.deny(approval_id)
            what = "no answer" if answer is None else answer.action
            return ToolResult.fail(
                ErrorCode.PERMISSION_DENIED,
                f"the user did not approve this call of {call.name!r} ({what})",
                suggestion="Do not retry this call; ask the user how to proceed.",
            )
        if (answer.content or {}).get("always") is True:
            session.always_allow(call.name)
        return await session.resume(approval_id)

    async def _on_call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await self.call_tool(params.name, params.arguments, ctx)

    def _explain(self, result: ToolResult) -> ToolResult:
        """Tell the model how (or whether) a CONFIRMATION_REQUIRED can be answered over MCP."""
        error = result.error
        if error is None or error.code is not ErrorCode.CONFIRMATION_REQUIRED:
            return result
        approval_id = error.details.get("approval_id")
        if self.settings.allow_approvals:
            suggestion = (
                "Ask the user whether to run exactly this call. Only if they agree, call "
                f"{APPROVE_TOOL} with approval_id {approval_id!r}."
            )
        else:
            suggestion = (
                "This server does not take approvals from the model. Tell the user this call "
                "needs their approval and cannot run from here; do not retry it."
            )
        return attrs.evolve(result, error=attrs.evolve(error, suggestion=suggestion))

    async def _search(self, session: Session, arguments: Mapping[str, Any]) -> ToolResult:
        problems: list[dict[str, str]] = []
        task = arguments.get("task")
        limit = arguments.get("limit", self.settings.search_limit)
        if not isinstance(task, str) or not task.strip():
            problems.append({"path": "$.task", "message": "must be a non-empty string"})
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50:
            problems.append({"path": "$.limit", "message": "must be an integer from 1 to 50"})
        unknown = sorted(set(arguments) - {"task", "limit"})
        problems += [{"path": f"$.{k}", "message": "is not a parameter"} for k in unknown]
        if problems:
            listed = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
            return ToolResult.fail(
                ErrorCode.INVALID_ARGUMENTS,
                f"{len(problems)} invalid argument(s): {listed}",
                suggestion=f"Fix these fields and call again: {listed}",
                details={"errors": problems},
            )
        assert isinstance(task, str) and isinstance(limit, int)
        # In "all" mode the client already holds every tool: a search must not narrow what the
        # connection's session will run, so the hand is dealt in a scratch session.
        if self._hand_mode:
            target = session
        else:
            if self._scratch is None:
                self._scratch = self._new_session()
            target = self._scratch
        hand = await target.select(task, limit=limit)
        tools = []
        for tool in hand.tools:
            spec = export_tool(tool, "mcp")
            score = hand.scores.get(tool.name, 0.0)
            tools.append(
                {
                    "name": tool.name,
                    "description": tool.description,
                    "category": tool.category,
                    "level": str(tool.security.level),
                    "score": score if math.isfinite(score) else None,
                    "reasons": list(hand.reasons.get(tool.name, ())),
                    "inputSchema": spec["inputSchema"],
                    "annotations": spec["annotations"],
                }
            )
        excluded = [{"name": e.name, "reason": e.reason} for e in hand.exclusions]
        return ToolResult.ok({"task": task, "tools": tools, "excluded": excluded})

    async def _approve(self, session: Session, arguments: Mapping[str, Any]) -> ToolResult:
        approval_id = arguments.get("approval_id")
        if not isinstance(approval_id, str) or not approval_id:
            return ToolResult.fail(
                ErrorCode.INVALID_ARGUMENTS,
                "1 invalid argument(s): $.approval_id: must be a non-empty string",
                details={"errors": [{"path": "$.approval_id", "message": "must be a string"}]},
            )
        return await session.resume(approval_id)

    # ------------------------------------------------------------------ transports

    async def run_stdio(self) -> None:
        """Serve one client over stdin/stdout until it closes stdin."""
        from mcp.server.stdio import stdio_server

        try:
            async with stdio_server() as (read_stream, write_stream):
                await self.server.run(
                    read_stream,
                    write_stream,
                    self.server.create_initialization_options(
                        NotificationOptions(tools_changed=self._hand_mode)
                    ),
                )
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    def _session_gate(self, app: Any) -> Any:
        """ASGI middleware: refuse a new MCP session up front when every deck session is busy,
        and end the deck session of an MCP session the client deleted."""
        from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
        from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        session_header = MCP_SESSION_ID_HEADER.lower().encode("latin-1")
        version_header = MCP_PROTOCOL_VERSION_HEADER.lower().encode("latin-1")

        async def gate(scope: Any, receive: Any, send: Any) -> None:
            if scope.get("type") != "http":
                await app(scope, receive, send)
                return
            headers = {bytes(k).lower(): bytes(v) for k, v in scope.get("headers", ())}
            session_id = headers.get(session_header, b"").decode("latin-1")
            version = headers.get(version_header, b"").decode("latin-1")
            method = scope.get("method", "")
            # A stateful (handshake-era) POST without a session id opens a new MCP session;
            # the stateless 2026 protocol shares the default session and is not counted.
            opens = (
                method == "POST" and not session_id
                and (not version or version in HANDSHAKE_PROTOCOL_VERSIONS)
            )
            if opens and not self.has_room():
                body = json.dumps({
                    "jsonrpc": "2.0", "id": None,
                    "error": {"code": types.INTERNAL_ERROR, "message": (
                        f"all {self.settings.max_sessions} sessions of this MCP server are "
                        "busy (calls in flight or approvals pending); try again later"
                    )},
                }).encode()
                await send({"type": "http.response.start", "status": 503, "headers": [
                    (b"content-type", b"application/json"),
                    (b"retry-after", b"5"),
                    (b"content-length", str(len(body)).encode()),
                ]})
                await send({"type": "http.response.body", "body": body})
                return

            async def watch(message: Any) -> None:
                # The deck session ends before the client hears that its MCP session did.
                if (
                    method == "DELETE" and session_id
                    and message.get("type") == "http.response.start"
                    and 200 <= int(message.get("status", 0)) < 300
                ):
                    with trio.CancelScope(shield=True):
                        await self.end_session(session_id)
                await send(message)

            await app(scope, receive, watch if method == "DELETE" else send)

        return gate

    async def run_http(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        token: str | None,
        path: str = "/mcp",
        shutdown: trio.Event | None = None,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve streamable HTTP at ``http://host:port/mcp`` until ``shutdown`` is set.

        :param token: the bearer token every request must carry (see :func:`bearer_auth`);
            ``None`` serves without authentication (say so explicitly: any local process can
            then run tools with this server's grants).

        ``task_status.started`` receives the URL actually bound (``port=0`` picks a free port).
        """
        from hypercorn.config import Config as HypercornConfig
        from hypercorn.trio import serve

        # Starlette is an ASGI app; Hypercorn's stricter ASGI typing does not see that.
        sdk_app: Any = self.server.streamable_http_app(
            streamable_http_path=path,
            host=host,
            session_idle_timeout=self.settings.session_idle_timeout_s,
        )
        app: Any = self._session_gate(sdk_app)
        if token is not None:
            app = bearer_auth(app, token)
        config = HypercornConfig()
        config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("tooldeck.mcp.http")
        stop = shutdown if shutdown is not None else trio.Event()

        async def started(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(app, config, shutdown_trigger=stop.wait, task_status=task_status)

        try:
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(started)
                task_status.started(binds[0].rstrip("/") + path)
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()


async def serve_stdio(
    deck: Deck,
    *,
    workdir: str | None = None,
    session_options: Mapping[str, Any] | None = None,
) -> None:
    """Serve ``deck`` over stdio (enters and closes the deck)."""
    async with deck:
        await DeckMcpServer(deck, workdir=workdir, session_options=session_options).run_stdio()


async def serve_http(
    deck: Deck,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    token: str | None,
    show_token: bool = False,
    workdir: str | None = None,
    session_options: Mapping[str, Any] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``deck`` over streamable HTTP until SIGINT or SIGTERM (enters and closes the deck).

    :param token: the bearer token requests must carry; ``None``: no authentication.
    :param show_token: print the token and how to use it to stderr once listening (a token
        generated at start-up exists nowhere else).
    """
    async with deck:
        server = DeckMcpServer(deck, workdir=workdir, session_options=session_options)
        stop = trio.Event()

        async def on_signals() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    stop.set()
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_signals)
            url = await nursery.start(lambda task_status: server.run_http(
                host, port, token=token, shutdown=stop, task_status=task_status
            ))
            log.warning("tooldeck MCP server on %s", url)
            if token is not None and show_token:
                sys.stderr.write(_token_banner(url, token))
                sys.stderr.flush()
            task_status.started(url)
            await stop.wait()
            nursery.cancel_scope.cancel()


def _token_banner(url: str, token: str) -> str:
    return (
        f"tooldeck serve mcp: generated bearer token for {url} (valid until the server stops; "
        f"set {TOKEN_ENV} or mcp.token to choose one):\n"
        f"  {token}\n"
        f"Clients send the header 'Authorization: Bearer <token>', e.g.\n"
        f"  streamablehttp_client(url, headers={{'Authorization': 'Bearer ' + token}})\n"
        f"  curl -H 'Authorization: Bearer <token>' {url}\n"
    )


def serve_mcp_cli(
    transport: str,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    workdir: str | None = None,
    grants: Sequence[str] | None = None,
    no_auth: bool = False,
) -> int:
    """``tooldeck serve mcp``: load the deck from the configuration and serve it.

    :param transport: ``stdio`` or ``http`` (streamable HTTP at ``http://host:port/mcp``).
    :param workdir: the sessions' working directory (default: ``[session] workdir``, then cwd).
    :param grants: categories granted to every session (default: ``[session] grants``).
    :param no_auth: HTTP without the bearer token (see :func:`resolve_token`); a warning says
        that any local process can then use the server.
    :return: the exit code (0 when the client or a signal ended the server, 2 on a bad
        transport). Start-up errors raise :class:`TooldeckError` (the CLI prints them, exit 2).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not logging.getLogger().handlers:
        # stdout belongs to the protocol on stdio: every log line goes to stderr.
        logging.basicConfig(
            stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s"
        )
    if transport not in ("stdio", "http"):
        sys.stderr.write(f"tooldeck serve mcp: unknown transport {transport!r} (stdio, http)\n")
        return 2
    if workdir is not None and not os.path.isdir(workdir):
        sys.stderr.write(f"tooldeck serve mcp: --workdir {workdir!r} is not a directory\n")
        return 2
    deck = Deck.load()
    settings = McpServerSettings.from_settings(deck.config.settings)
    if transport == "http" and host not in _LOOPBACK:
        if not settings.allow_remote:
            sys.stderr.write(
                f"tooldeck serve mcp: refusing to listen on {host!r}: the MCP server speaks "
                "plain HTTP (its bearer token would travel in clear); use 127.0.0.1 (or set "
                "mcp.allow_remote = true behind a TLS proxy)\n"
            )
            return 2
        if no_auth:
            sys.stderr.write(
                f"tooldeck serve mcp: refusing --no-auth on {host!r}: without a token anyone "
                "who reaches the port runs tools\n"
            )
            return 2
    options = {"grants": list(grants)} if grants else {}
    if transport == "stdio":
        trio.run(lambda: serve_stdio(deck, workdir=workdir, session_options=options))
        return 0
    token: str | None = None
    source = "disabled"
    if no_auth:
        sys.stderr.write(
            "tooldeck serve mcp: WARNING: --no-auth: any process that can reach the port "
            "(every local user and program) runs tools with this server's grants\n"
        )
    else:
        token, source = resolve_token(settings)
    trio.run(lambda: serve_http(
        deck, host, port, token=token, show_token=source == "generated",
        workdir=workdir, session_options=options,
    ))
    return 0
