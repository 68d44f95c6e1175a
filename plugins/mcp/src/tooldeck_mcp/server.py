"""tooldeck as an MCP server: ``tooldeck serve mcp [--transport stdio|http]``.

Part of ``tooldeck-mcp`` (next to the client bridge), which adds ``serve mcp`` to the
``tooldeck`` command line through ``tooldeck_register_commands``.

Any MCP client (Claude Desktop, an IDE, an agent framework) gets the deck's tools, and every call
goes through the whole pipeline (validation, policy, cache, rate limits, sandbox) in one
:class:`~tooldeck.Session` per MCP connection. Errors come back as ``isError`` results carrying
the structured error JSON, exactly as :func:`tooldeck.result_messages` builds them for ``mcp``.

Built on the official SDK's low-level ``Server`` (full control of ``tools/list`` and
``tools/call``: raw JSON Schemas and annotations pass through as they are). The deck is trio
code, so the server runs on trio: the SDK is written against anyio and works on its trio backend;
stdio is read and written by :mod:`tooldeck_mcp._stdio` (it answers what the SDK's reader
drops: batches, ids that are not strings or integers); streamable HTTP is the SDK's Starlette
app served by Hypercorn's trio worker (uvicorn is asyncio-only), so there is one event loop and
no thread hop per call.

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
    max_sessions = 1000      # HTTP: most MCP sessions; only idle ones are ever evicted
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

What a tool does during a call reaches its client: ``ToolContext.emit`` progress as
``notifications/progress`` (when the request carried a progress token), and the records of
``ToolContext.logger`` as ``notifications/message`` at or above the level the client asked for
(``logging/setLevel``, or per request on 2026-07-28+ connections; ``warning`` for the other
sessions once one client asked; nothing before any did, and the process's own logging keeps its
level). A tool can ask the client itself through :func:`current_client`: ``sample`` (its model)
and ``elicit`` (its user), on clients that declared them over a handshake-era connection.

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
stateless 2026 protocol carry no identity and share one session. At ``max_sessions`` MCP
sessions (``initialize``-only ones count too), a new one evicts the least recently used *idle*
one (no request being served, no call in flight, no approval pending that this server can
take, ``allow_approvals``, asked less than ``confirm_timeout_s`` ago); when every session is
busy, the new one is refused (HTTP 503 at ``initialize``, ``RATE_LIMIT_EXCEEDED`` for a call)
and no running call is ever cancelled.
"""

from __future__ import annotations

import collections
import hmac
import json
import logging
import math
import os
import secrets
import signal
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs
import trio

from tooldeck import Deck, Session
from tooldeck.adapters import export_tool, result_messages
from tooldeck_hookspecs import (
    LEVEL_ORDER,
    ConfigError,
    ErrorCode,
    ToolCall,
    ToolDefinition,
    ToolResult,
)
from tooldeck_mcp._stdio import (
    HANDSHAKE_VERSIONS,
    MAX_IN_FLIGHT,
    MAX_LINE_BYTES,
    MAX_MESSAGE_VALUES,
    SERVER_BUSY,
    StdioConnection,
    json_values,
    negotiate,
    stdout_kept_aside,
    valid_id,
)

if TYPE_CHECKING:
    from mcp import types
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
else:
    class _SdkTypes:
        """``mcp.types``, imported on first use.

        The SDK costs about a second to import (its pydantic models): ``tooldeck serve mcp``
        answers ``initialize`` and the first ``tools/list`` over stdio before it is loaded
        (see :class:`StdioPreface`), and importing this module stays cheap.
        """

        def __getattr__(self, name: str) -> Any:
            import mcp.types

            return getattr(mcp.types, name)

    types = _SdkTypes()

__all__ = [
    "McpServerSettings",
    "DeckMcpServer",
    "SEARCH_TOOL",
    "APPROVE_TOOL",
    "serve_stdio",
    "StdioPreface",
    "serve_http",
    "serve_mcp_cli",
    "TOKEN_ENV",
    "SessionsFullError",
    "resolve_token",
    "bearer_auth",
    "McpClient",
    "McpClientError",
    "current_client",
]

log = logging.getLogger("tooldeck.mcp")
_T = TypeVar("_T")

#: Name of the tool that deals a hand for a task.
SEARCH_TOOL = "search_tools"
#: Name of the tool that approves a pending call (only when ``allow_approvals`` is on).
APPROVE_TOOL = "approve_call"

_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})

#: ``mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS`` of the SDK (oldest to newest), so that
#: ``initialize`` can be answered before the SDK is imported; a test keeps them equal.
_HANDSHAKE_VERSIONS = HANDSHAKE_VERSIONS

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
        content=[_content_block(b) for b in message["content"]],
        structured_content=message["structuredContent"],
        is_error=message["isError"],
    )


def _content_block(block: dict[str, Any]) -> Any:
    """One block of :func:`result_messages` ``mcp`` as the SDK's type (text, image, audio,
    embedded resource, resource link)."""
    kind = block["type"]
    if kind in ("image", "audio"):
        cls = types.ImageContent if kind == "image" else types.AudioContent
        return cls(type=kind, data=block["data"], mime_type=block["mimeType"])
    if kind == "resource":
        inner = block["resource"]
        contents: Any
        if "text" in inner:
            contents = types.TextResourceContents(
                uri=inner["uri"], mime_type=inner.get("mimeType"), text=inner["text"]
            )
        else:
            contents = types.BlobResourceContents(
                uri=inner["uri"], mime_type=inner.get("mimeType"), blob=inner["blob"]
            )
        return types.EmbeddedResource(type="resource", resource=contents)
    if kind == "resource_link":
        return types.ResourceLink(
            type="resource_link", uri=block["uri"], name=block["name"],
            mime_type=block.get("mimeType"), description=block.get("description"),
        )
    return types.TextContent(type="text", text=block["text"])


#: Progress events queued for one call's client beyond this are dropped (a slow client must not
#: hold a fast tool's events in memory).
_PROGRESS_BACKLOG = 256
#: Characters of a text a tool sends its client (a sampling prompt, a question) redacted on the
#: event loop at most; longer ones are redacted in a worker thread.
_INLINE_REDACT_CHARS = 16 * 1024


async def _call_reporting_progress(
    session: Session,
    call: ToolCall,
    ctx: ServerRequestContext[Any, Any],
    log_level: str | None = None,
) -> ToolResult:
    """``session.call`` with the tool's ``ToolContext.emit`` events sent to the client as
    ``notifications/progress`` (progress strictly increasing, as MCP requires), and, with
    ``log_level``, the tool's log records at or above it as ``notifications/message``.

    ``report_progress`` answers the request's own progress token, and is a no-op when the
    client sent none, on every transport (JSON-RPC, in-process). The tool can reach the client
    itself (sampling, elicitation) through :func:`current_client`."""
    send, receive = trio.open_memory_channel[Mapping[str, Any]](_PROGRESS_BACKLOG)

    def on_progress(event: Mapping[str, Any]) -> None:
        try:
            send.send_nowait(event)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the client is slower than the tool: this event is skipped

    async def forward() -> None:
        last = 0.0
        async with receive:
            async for event in receive:
                value = event.get("progress")
                progress = float(value) if isinstance(value, int | float) else last + 1
                if progress <= last:
                    progress = last + 1e-6 if isinstance(value, int | float) else last + 1
                last = progress
                total = event.get("total")
                try:
                    await ctx.session.report_progress(
                        progress,
                        float(total) if isinstance(total, int | float) and total >= progress
                        else None,
                        event.get("message"),
                    )
                except Exception as exc:  # the client went away: the call goes on
                    log.debug("progress not sent: %s: %s", type(exc).__name__, exc)
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(forward)
        log_send: trio.MemorySendChannel[tuple[str, str, str]] | None = None
        sink: _LogSink | None = None
        if log_level is not None:
            log_send, log_receive = trio.open_memory_channel[tuple[str, str, str]](
                _PROGRESS_BACKLOG
            )
            nursery.start_soon(_forward_logs, ctx, log_receive)
            sink = _LogSink(log_send, log_level)
        log_token = _call_log.set(sink)
        client_token = _current_client.set(McpClient(ctx, _outward_text(session.deck)))
        try:
            result = await session.call(
                call.name, call.arguments, call_id=call.id or None, on_progress=on_progress
            )
        finally:
            _current_client.reset(client_token)
            _call_log.reset(log_token)
            send.close()
            if sink is not None:
                sink.flush()  # what the tool's threads logged, before the channel closes
            if log_send is not None:
                log_send.close()
    return result


#: Characters of a call's arguments an approval question shows from its start and its end.
_SHOWN_HEAD = 1500
_SHOWN_TAIL = 500
#: Unicode categories that show nothing or reorder text (controls, bidi and zero-width format
#: characters, line and paragraph separators, private use, unassigned, surrogates).
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp"})
# Letters and marks that render as nothing or as blank space (Hangul fillers, the braille
# blank, the combining grapheme joiner, Mongolian and other variation selectors): a model can
# pad a prompt with them as with a zero-width space.
_BLANK_LOOKING = frozenset("\u3164\u115f\u1160\uffa0\u2800\u034f\u180b\u180c\u180d\u180f"
                           "\u17b4\u17b5") | frozenset(map(chr, range(0xFE00, 0xFE10))) \
    | frozenset(map(chr, range(0xE0100, 0xE01F0)))


def _visible(text: str) -> str:
    """``text`` with every character that could hide or reorder what the user reads (a
    right-to-left override, a zero-width space) written as its escape (``\\u202e``)."""
    import unicodedata

    out = []
    for ch in text:
        if ch not in "\n\t" and (
            unicodedata.category(ch) in _INVISIBLE_CATEGORIES or ch in _BLANK_LOOKING
        ):
            code = ord(ch)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def _shown_arguments(arguments: Mapping[str, Any]) -> str:
    """A call's arguments as the user is asked to approve them: JSON, every invisible or
    reordering character escaped, and, when too long to show whole, its start and its end with
    the number of characters left out said in words (the model writes these arguments: padding
    must not push the part that matters out of sight unnoticed)."""
    text = json.dumps(dict(arguments), ensure_ascii=False, default=str)
    if len(text) > _SHOWN_HEAD + _SHOWN_TAIL + 2 * _REDACT_MARGIN:
        # Only what can be shown is escaped (per character: seconds for megabytes).
        return _cut_view(_visible(text[: _SHOWN_HEAD + _REDACT_MARGIN]),
                         _visible(text[-(_SHOWN_TAIL + _REDACT_MARGIN):]), len(text))
    return _cut_view(_visible(text), "", None)


def _cut_view(text: str, tail: str, total: int | None) -> str:
    """``text`` (or the start ``text`` and end ``tail`` of a text of ``total`` characters) as
    shown: whole when short enough, else its head and tail around the count left out."""
    if total is None:
        if len(text) <= _SHOWN_HEAD + _SHOWN_TAIL:
            return text
        total, tail = len(text), text
    hidden = total - _SHOWN_HEAD - _SHOWN_TAIL
    return (
        f"{text[:_SHOWN_HEAD]}\n[... {hidden} characters of the arguments are NOT shown; "
        f"decline unless you expect arguments this long ...]\n{tail[-_SHOWN_TAIL:]}"
    )


#: Characters kept beyond what is shown of long arguments when they are redacted, so that a
#: secret the edge of the shown part cuts (a PEM key is a few thousand characters) is still
#: whole, and found, when its part is redacted.
_REDACT_MARGIN = 8192


def _outward_text(deck: Deck) -> Callable[[str], Awaitable[str]]:
    """What a tool sends its client itself, through the deck's redaction without blocking the
    loop (:meth:`Deck.aredact`: a redactor that may block runs in a worker thread under a
    deadline; a long text goes to a worker thread whole)."""

    async def outward(text: str) -> str:
        return await deck.aredact(text, offload=len(text) > _INLINE_REDACT_CHARS)

    return outward


async def _approval_view(arguments: Mapping[str, Any], deck: Deck) -> tuple[str, bool]:
    """What an approval question shows of a call's arguments (see :func:`_shown_arguments`),
    redacted (:meth:`Deck.aredact`, which never blocks the loop), and whether the redaction
    hid anything in it.

    Short arguments are redacted whole (as a structure); of long ones only what can be shown
    (its start and end, with a margin) is redacted and escaped: linear work on megabytes of
    arguments is what the user never sees. What is linear in long arguments (writing them as
    JSON, comparing them) runs in a worker thread.
    """
    long = _rough_size(arguments) > _INLINE_REDACT_CHARS
    text = await _maybe_in_thread(long, _arguments_json, arguments)
    if len(text) <= _SHOWN_HEAD + _SHOWN_TAIL + 2 * _REDACT_MARGIN:
        shown = await deck.aredact(arguments, offload=long)
        return await _maybe_in_thread(long, _shown_and_changed, shown, arguments)
    head = text[: _SHOWN_HEAD + _REDACT_MARGIN]
    tail = text[-(_SHOWN_TAIL + _REDACT_MARGIN):]
    # ~10,000 characters each, with a margin: redacted in a worker thread (the policy's
    # redaction of hostile text costs up to ~1.5 ms per thousand characters).
    shown_head = await deck.aredact(head, offload=True)
    shown_tail = await deck.aredact(tail, offload=True)
    hid = shown_head != head or shown_tail != tail
    return _cut_view(_visible(shown_head), _visible(shown_tail), len(text)), hid


def _arguments_json(arguments: Mapping[str, Any]) -> str:
    return json.dumps(dict(arguments), ensure_ascii=False, default=str)


def _shown_and_changed(shown: Mapping[str, Any], arguments: Mapping[str, Any]) -> tuple[str, bool]:
    return _shown_arguments(shown), shown != arguments


async def _maybe_in_thread(offload: bool, function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)``: in a worker thread when ``offload`` (its work grows with the
    arguments), else here."""
    if offload:
        return await trio.to_thread.run_sync(function, *args, abandon_on_cancel=True)
    return function(*args)


def _rough_size(value: Any, budget: int = _INLINE_REDACT_CHARS) -> int:
    """About how many characters ``value`` takes as JSON, counted until past ``budget`` (so
    that deciding where to redact it costs little whatever its size)."""
    size = 0
    stack = [value]
    while stack and size <= budget:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, Mapping):
            size += 2
            for key, inner in item.items():
                size += len(str(key)) + 4
                stack.append(inner)
                if size > budget or len(stack) > budget:
                    return budget + 1
        elif isinstance(item, list | tuple):
            size += 2 + len(item)
            if size > budget:
                return size
            stack.extend(item)
        else:
            size += 8
    return size


# ---------------------------------------------------------------------- logging to the client

#: MCP log levels, least to most severe (``logging/setLevel``, ``notifications/message``).
_MCP_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

#: What a client that never sent ``logging/setLevel`` is sent of the tools' log records.
_DEFAULT_LOG_LEVEL = "warning"

#: ``_meta`` key of a 2026-07-28+ request opting in to log notifications (``mcp_types``).
_LOG_LEVEL_META_KEY = "io.modelcontextprotocol/logLevel"

#: The sink of the ``tools/call`` running in this context (its task, the tasks and worker
#: threads it starts, which inherit the context): where a tool's log record goes.
_call_log: ContextVar[Callable[[logging.LogRecord], None] | None] = ContextVar(
    "tooldeck_mcp_call_log", default=None
)


def _mcp_level(levelno: int) -> str:
    """A :mod:`logging` level as the MCP level of the same severity."""
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warning"
    if levelno >= logging.INFO:
        return "info"
    return "debug"


class _LogSink:
    """A record sink feeding one call's log channel, callable from any thread.

    A worker thread's records wait in a thread-safe queue for the loop, which :meth:`flush`
    empties into the channel. The call flushes before it closes the channel: a sync tool on
    the executor's quick path (the loop waits for its thread directly) returned before the
    loop had run the hand-overs, and the call's records were dropped against the closed
    channel, after another test had left the quick path taken (the conformance test saw no
    log at all).
    """

    def __init__(self, send: trio.MemorySendChannel[tuple[str, str, str]], level: str) -> None:
        self._send = send
        self._floor = _MCP_LEVELS.index(level)
        self._token = trio.lowlevel.current_trio_token()
        self._loop_thread = threading.get_ident()
        self._pending: collections.deque[tuple[str, str, str]] = collections.deque()

    def _put(self, item: tuple[str, str, str]) -> None:
        try:
            self._send.send_nowait(item)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the client is slower than the tool (or the call ended): record skipped

    def flush(self) -> None:
        """On the loop's thread: hand the worker threads' records to the channel, in order."""
        while self._pending:
            self._put(self._pending.popleft())

    def __call__(self, record: logging.LogRecord) -> None:
        mcp_level = _mcp_level(record.levelno)
        if _MCP_LEVELS.index(mcp_level) < self._floor:
            return
        try:
            text = record.getMessage()
        except Exception:  # a bad format string must not break the tool
            text = str(record.msg)
        item = (mcp_level, record.name, text)
        if threading.get_ident() == self._loop_thread:
            self.flush()  # after what a thread logged before
            self._put(item)
        else:  # a worker thread: trio channels are not thread-safe, the loop puts it
            self._pending.append(item)
            try:
                self._token.run_sync_soon(self.flush)
            except trio.RunFinishedError:
                pass


async def _forward_logs(
    ctx: ServerRequestContext[Any, Any], receive: trio.MemoryReceiveChannel[tuple[str, str, str]]
) -> None:
    """Send one call's log records to its client (on the call's own stream)."""
    async with receive:
        async for level, logger_name, text in receive:
            try:
                await ctx.session.send_log_message(
                    level,  # type: ignore[arg-type]  # one of _MCP_LEVELS
                    text,
                    logger=logger_name,
                    related_request_id=ctx.request_id,
                )
            except Exception as exc:  # the client went away: the call goes on
                log.debug("log message not sent: %s: %s", type(exc).__name__, exc)
                return


class _ClientLogHandler(logging.Handler):
    """On the ``tooldeck.tool`` logger while a client asked for logs: a tool's record goes to
    the client of the call it was logged in, then on to the handlers above as it would have.

    The logger is set to DEBUG so that ``info``/``debug`` records exist at all (the process's
    logging is usually at WARNING); it stops propagating, and this handler passes on only what
    the ``tooldeck`` logger's own level lets through, so stderr sees no more than before.
    """

    def __init__(self, previous_level: int) -> None:
        super().__init__(logging.DEBUG)
        self.previous_level = previous_level

    def emit(self, record: logging.LogRecord) -> None:
        sink = _call_log.get()
        if sink is not None:
            sink(record)
        parent = logging.getLogger("tooldeck")
        floor = self.previous_level or parent.getEffectiveLevel()
        if record.levelno >= floor:
            parent.handle(record)


#: The installed handler and how many servers use it (installed on the first
#: ``logging/setLevel``, removed when the last server that installed it closes).
_log_handler: list[_ClientLogHandler] = []
_log_handler_users = [0]


def _acquire_log_handler() -> None:
    if not _log_handler:
        tools_logger = logging.getLogger("tooldeck.tool")
        handler = _ClientLogHandler(tools_logger.level)
        tools_logger.addHandler(handler)
        tools_logger.setLevel(logging.DEBUG)
        tools_logger.propagate = False
        _log_handler.append(handler)
    _log_handler_users[0] += 1


def _release_log_handler() -> None:
    _log_handler_users[0] -= 1
    if _log_handler_users[0] > 0 or not _log_handler:
        return
    handler = _log_handler.pop()
    tools_logger = logging.getLogger("tooldeck.tool")
    tools_logger.removeHandler(handler)
    tools_logger.setLevel(handler.previous_level)
    tools_logger.propagate = True


# ---------------------------------------------------------------------- the client, for tools

#: The client of the ``tools/call`` running in this context (see :func:`current_client`).
_current_client: ContextVar[McpClient | None] = ContextVar(
    "tooldeck_mcp_client", default=None
)


class McpClientError(Exception):
    """The MCP client cannot do what a tool asked (no such capability, or it failed)."""


class McpClient:
    """The MCP client whose ``tools/call`` is running, for a tool that needs to ask it
    something: a completion from its model (sampling) or an answer from its user (elicitation).

    Get it with :func:`current_client` inside the tool; it is None when the call did not come
    through ``tooldeck serve mcp``. A tool that depends on it should say so in its result::

        client = current_client()
        if client is None or not client.can_sample:
            raise RuntimeError("this tool needs an MCP client that supports sampling")
        answer = await client.sample("Summarize: ...", max_tokens=200)
    """

    def __init__(
        self,
        ctx: ServerRequestContext[Any, Any],
        redact: Callable[[str], Awaitable[str]] | None = None,
    ) -> None:
        self._ctx = ctx
        # What a tool sends the client itself (a prompt quoting a file, a question) leaves
        # the deck like its result does: through the deck's redaction, awaited so that it
        # never blocks the loop (the server passes Deck.aredact).
        self._redact = redact

    async def _outward(self, text: str) -> str:
        if self._redact is None:
            return text
        return await self._redact(text)

    def _capabilities(self) -> Any:
        return getattr(self._ctx.session, "client_capabilities", None)

    @property
    def can_sample(self) -> bool:
        """Whether the client declared sampling (``sampling/createMessage``)."""
        caps = self._capabilities()
        if caps is None or getattr(caps, "sampling", None) is None:
            return False
        # 2026-07-28+ connections have no back-channel for server requests (sampling is
        # deprecated there); handshake-era ones do.
        return bool(getattr(self._ctx.session, "can_send_request", True))

    @property
    def can_elicit(self) -> bool:
        """Whether the client declared form elicitation and this request can carry one."""
        return _can_elicit(self._ctx)

    async def sample(
        self, prompt: str, *, max_tokens: int = 100, system_prompt: str | None = None
    ) -> str:
        """Ask the client's model for a completion of ``prompt`` (one user message).

        :return: the text of the reply ("" when the reply is not text).
        :raises McpClientError: the client has no sampling capability, or the request failed.
        """
        if not self.can_sample:
            raise McpClientError("the MCP client does not support sampling")
        message = types.SamplingMessage(
            role="user", content=types.TextContent(type="text", text=await self._outward(prompt))
        )
        if system_prompt is not None:
            system_prompt = await self._outward(system_prompt)
        try:
            reply = await self._ctx.session.create_message(
                [message], max_tokens=max_tokens, system_prompt=system_prompt,
                related_request_id=self._ctx.request_id,
            )
        except Exception as exc:
            raise McpClientError(f"sampling failed: {type(exc).__name__}: {exc}") from exc
        content = reply.content
        blocks = content if isinstance(content, list) else [content]
        return "".join(getattr(b, "text", "") for b in blocks)

    async def elicit(
        self, message: str, schema: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any] | None]:
        """Ask the client's user to fill in a form (``elicitation/create``, form mode).

        :param schema: the requested schema (a flat object of primitive properties, as MCP
            allows).
        :return: ``(action, content)``: ``"accept"`` with the answers, or ``"decline"`` /
            ``"cancel"`` with None.
        :raises McpClientError: the client cannot elicit, or the request failed.
        """
        if not self.can_elicit:
            raise McpClientError("the MCP client does not support elicitation")
        try:
            answer = await self._ctx.session.elicit_form(
                await self._outward(message), dict(schema), related_request_id=self._ctx.request_id
            )
        except Exception as exc:
            raise McpClientError(f"elicitation failed: {type(exc).__name__}: {exc}") from exc
        return str(answer.action), (dict(answer.content) if answer.content else None)


def current_client() -> McpClient | None:
    """The MCP client of the ``tools/call`` this tool runs in, or None (not served over MCP)."""
    return _current_client.get()


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


def _connection_exit_stack(ctx: ServerRequestContext[Any, Any] | None) -> Any:
    """The SDK's per-connection exit stack, unwound however the MCP session ends; or None."""
    connection = getattr(getattr(ctx, "session", None), "_connection", None)
    return getattr(connection, "exit_stack", None)


#: Model loads (:meth:`DeckMcpServer.warm_selection`) running in worker threads of this process.
_loads_running = [0]
_loads_lock = threading.Lock()


class DeckMcpServer:
    """An MCP server over a loaded :class:`Deck`.

    :param deck: the deck (the caller enters and closes it).
    :param workdir: the sessions' working directory (default: the ``[session]`` table, then cwd).
    :param settings: server settings; default: read from ``deck.config``.
    :param session_options: extra keyword arguments for :meth:`Deck.session` (grants, max_level,
        ...); unset ones come from the ``[session]`` table.

    ``server`` is the SDK's low-level server (built, and the SDK imported, on first use);
    :meth:`run_stdio` and :meth:`run_http` serve it. Both start loading the retriever's model and
    index in the background (:meth:`warm_selection`): ``tools/list`` never waits for it, a
    search or a hand does (``selection_ready`` is set once it is loaded).
    """

    def __init__(
        self,
        deck: Deck,
        *,
        workdir: str | None = None,
        settings: McpServerSettings | None = None,
        session_options: Mapping[str, Any] | None = None,
    ) -> None:
        from tooldeck import __version__

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
        #: When each session last got a CONFIRMATION_REQUIRED (monotonic): a pending approval
        #: keeps its session from eviction for confirm_timeout_s at most.
        self._asked_at: dict[str, float] = {}
        #: HTTP: the SDK's session manager, the MCP sessions it admitted (least recently used
        #: first) and the requests each has in flight (see :meth:`_admit_mcp_session`).
        self._http_manager: Any = None
        self._mcp_used: OrderedDict[str, None] = OrderedDict()
        self._mcp_in_flight: dict[str, int] = {}
        #: HTTP: JSON-RPC requests being served per MCP session (the stateless requests of the
        #: 2026 protocol count as one session): at most MAX_IN_FLIGHT each.
        self._requests_in_flight: dict[str, int] = {}
        if self.settings.list == "hand" and deck.retriever is None:
            log.warning("mcp.list = 'hand' needs a retriever (tooldeck-faiss); listing all tools")
        self._version = __version__
        self._server: Server[Any] | None = None
        #: Set once the retriever's model and index are loaded (at once without a retriever).
        self.selection_ready = trio.Event()
        if deck.retriever is None:
            self.selection_ready.set()
        #: Client sessions that were listed a provisional hand (the model was still loading):
        #: told ``tools/list_changed`` once it is ready.
        self._provisional: list[Any] = []
        self._warming = False
        #: Set once a model load started in a worker thread has ended (see warm_up_running).
        self._warm_up_done = threading.Event()
        self._warm_up_done.set()
        #: ``logging/setLevel`` per MCP session key: the least severe level its calls' tool
        #: log records are sent to it at (``_DEFAULT_LOG_LEVEL`` until it sets one).
        self._log_levels: dict[str, str] = {}
        self._holds_log_handler = False

    @property
    def server(self) -> Server[Any]:
        """The SDK's low-level server (the SDK is imported the first time this is read)."""
        if self._server is None:
            import warnings

            from mcp.server.lowlevel import Server

            with warnings.catch_warnings():
                # logging/setLevel is deprecated by the 2026-07-28 revision only; the handshake
                # versions clients speak today still use it (and the conformance suite checks it).
                warnings.filterwarnings("ignore", message=".*logging capability is deprecated")
                self._server = Server(
                    "tooldeck",
                    version=self._version,
                    instructions=self._instructions(),
                    on_list_tools=self._on_list_tools,
                    on_call_tool=self._on_call_tool,
                    on_set_logging_level=self._on_set_logging_level,
                )
        return self._server

    def initialize_result(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """The ``initialize`` result the SDK answers, as JSON, built without the SDK.

        Used by :class:`StdioPreface` to answer before the SDK is imported; a test keeps it equal
        to the SDK's own answer.
        """
        version = negotiate((params or {}).get("protocolVersion"))
        return {
            "capabilities": {"logging": {}, "tools": {"listChanged": self._hand_mode}},
            "instructions": self._instructions(),
            "protocolVersion": version,
            "serverInfo": {"name": "tooldeck", "version": self._version},
        }

    async def warm_selection(self) -> None:
        """Load the retriever's model and index the catalog now (in worker threads), then set
        :attr:`selection_ready`; a failure is logged and left to the first search to report."""
        if self.deck.retriever is None:
            self.selection_ready.set()
            return
        if self._warming:  # already loading (or loaded): wait for that one
            await self.selection_ready.wait()
            return
        self._warming = True
        try:
            warm_up = getattr(self.deck.retriever, "warm_up", None)
            if warm_up is not None:
                # Loading a model takes seconds and cannot be interrupted: it runs in a thread
                # (with an event loop of its own) that a server shutting down leaves behind,
                # so a client closing the connection never waits for it. (The process must
                # then not finalize under it: see warm_up_running.)
                self._warm_up_done.clear()
                with _loads_lock:
                    _loads_running[0] += 1

                def load() -> None:
                    try:
                        trio.run(warm_up)
                    finally:
                        with _loads_lock:
                            _loads_running[0] -= 1
                        self._warm_up_done.set()

                await trio.to_thread.run_sync(load, abandon_on_cancel=True)
            await self.deck.ensure_index()  # quick now: the model is loaded
        except Exception as exc:  # the search that needs it answers with the error
            log.warning("loading the retriever failed: %s: %s", type(exc).__name__, exc)
        finally:
            self.selection_ready.set()
        provisional, self._provisional = self._provisional, []
        for server_session in provisional:
            try:
                await server_session.send_tool_list_changed()
            except Exception as exc:  # a client that cannot hear it re-lists on its own terms
                log.debug("tools/list_changed not sent: %s: %s", type(exc).__name__, exc)

    @property
    def warm_up_running(self) -> bool:
        """Whether the model load :meth:`warm_selection` started still runs in its worker
        thread (the server may have stopped meanwhile: it does not wait for the load).

        A process must not finalize under it: the interpreter ends its daemon threads at exit,
        and one inside a native model load (ONNX) aborts the process (SIGABRT, "terminate
        called without an active exception"). ``tooldeck serve mcp`` ends with ``os._exit``
        after its deck is closed in that case; a program serving a deck itself can wait for
        this to turn False, or do the same."""
        return not self._warm_up_done.is_set()

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
        """No call in flight and no approval that can still be given: closing it loses nothing
        in progress.

        A pending approval keeps its session only when this server can take one
        (``allow_approvals``; an elicitation is a call in flight and counts as such), and for
        ``confirm_timeout_s`` after it was asked at most: an approval nobody can (or does)
        answer must not pin a session slot until it expires.
        """
        if self._busy.get(key):
            return False
        if not self.settings.allow_approvals or not session.pending_approvals():
            return True
        asked = self._asked_at.get(key)
        return asked is None or time.monotonic() - asked >= self.settings.confirm_timeout_s

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
                self._asked_at.pop(victim, None)
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
        stack = _connection_exit_stack(ctx)
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
        if current is None:
            # Evicted (or never opened): the MCP session itself ended all the same, and its
            # logging level with it.
            self._log_levels.pop(key, None)
            return
        if session is not None and current is not session:
            return
        del self._sessions[key]
        self._busy.pop(key, None)
        self._asked_at.pop(key, None)
        self._log_levels.pop(key, None)
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
        self._asked_at.clear()
        self._mcp_used.clear()
        self._mcp_in_flight.clear()
        self._log_levels.clear()
        self._scratch = None
        if self._holds_log_handler:
            self._holds_log_handler = False
            _release_log_handler()
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

    def _meta_tool_specs(self) -> list[dict[str, Any]]:
        """The server's own tools (search, approvals) as ``tools/list`` entries (wire JSON)."""
        extra: list[dict[str, Any]] = []
        if self.deck.retriever is not None and SEARCH_TOOL not in self.deck.catalog:
            extra.append(
                {
                    "name": SEARCH_TOOL,
                    "title": "search tools",
                    "description": (
                        "Find the tools for a task: returns the best matching tools with their "
                        "descriptions, relevance scores and full input schemas. Use it when the "
                        "tool you need is not in your list."
                    ),
                    "inputSchema": _SEARCH_SCHEMA,
                    "annotations": {
                        "title": "search tools",
                        "readOnlyHint": True,
                        "destructiveHint": False,
                        "idempotentHint": True,
                        "openWorldHint": False,
                    },
                }
            )
        if self.settings.allow_approvals and APPROVE_TOOL not in self.deck.catalog:
            extra.append(
                {
                    "name": APPROVE_TOOL,
                    "title": "approve call",
                    "description": (
                        "Run a call that returned CONFIRMATION_REQUIRED, exactly as it was asked "
                        "for, once. Only call this after the user explicitly approved that call."
                    ),
                    "inputSchema": _APPROVE_SCHEMA,
                    "annotations": {
                        "title": "approve call",
                        "readOnlyHint": False,
                        "destructiveHint": True,
                        "idempotentHint": False,
                        "openWorldHint": True,
                    },
                }
            )
        return extra

    def _meta_tools(self) -> list[types.Tool]:
        return [_mcp_tool(spec) for spec in self._meta_tool_specs()]

    def listing_needs_selection(self, session: Session) -> bool:
        """Whether ``tools/list`` for ``session`` deals a hand (waits for the model)."""
        return self._hand_mode and (session.hand is not None or bool(self.settings.default_task))

    def tool_specs(self, session: Session) -> list[dict[str, Any]]:
        """``tools/list`` entries (wire JSON) when no hand is needed: the whole catalog in
        ``all`` mode, the pinned tools in ``hand`` mode without a hand yet; plus the server's
        own tools. Needs neither the SDK nor the model."""
        if self._hand_mode:
            tools = [t for t in (self.deck.catalog.get(n) for n in session.pinned) if t]
        else:
            tools = list(self.deck.catalog)
        listed = [export_tool(t, "mcp") for t in self._visible(session, tools)]
        return listed + self._meta_tool_specs()

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
        if not self.listing_needs_selection(session):
            return [_mcp_tool(spec) for spec in self.tool_specs(session)]
        if session.hand is None and self._warming and not self.selection_ready.is_set():
            # The model is still loading: the pinned tools and search_tools now, the default
            # task's hand once it is ready (the client is told tools/list changed).
            server_session = getattr(ctx, "session", None)
            if server_session is not None and server_session not in self._provisional:
                self._provisional.append(server_session)
            return [_mcp_tool(spec) for spec in self.tool_specs(session)]
        tools = await self._default_hand(session)
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
                return _call_result(call, await self.deck.aredact(
                    found, offload=_rough_size(found.data) > _INLINE_REDACT_CHARS
                ))
        if name == APPROVE_TOOL and APPROVE_TOOL not in self.deck.catalog:
            if self.settings.allow_approvals:
                # The answer may quote the model's approval id: outward text.
                approved = await self._approve(session, call.arguments)
                return _call_result(call, await self.deck.aredact(approved))
        if ctx is None:
            result = await session.call(call.name, call.arguments, call_id=call.id or None)
        else:
            result = await _call_reporting_progress(session, call, ctx, self._log_level(ctx))
        if (
            self.settings.confirm == "elicit"
            and result.error is not None
            and result.error.code is ErrorCode.CONFIRMATION_REQUIRED
            and ctx is not None
            and _can_elicit(ctx)
        ):
            result = await self._ask_user(ctx, session, call, result)
        if result.error is not None and result.error.code is ErrorCode.CONFIRMATION_REQUIRED:
            self._asked_at[self._key(ctx)] = time.monotonic()
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
        # The definition the user is asked about: an "always" binds to it, not to whatever is
        # registered under the name when the answer comes (the approval itself is bound too).
        shown_tool = self.deck.catalog.get(call.name)
        # Redacted before they are cut to what is shown (a cut secret is harder to find; long
        # arguments keep a margin around what is shown), off the loop when long; the reasons
        # passed the result processors with the rest of the answer.
        shown_text, redacted = await _approval_view(call.arguments, self.deck)
        hidden = ""
        if redacted:
            # Redaction hides what looks like a secret, and a payload can be dressed as one
            # (API_KEY="`curl ... | sh`"): the user must know that part is unseen.
            hidden = (
                "\n\nWARNING: parts of these arguments are hidden above ([REDACTED:...]) "
                "because they look like secrets. Approving runs them as the assistant wrote "
                "them, unseen. Decline unless you expected a secret exactly there."
            )
        message = (
            f"The assistant wants to run the tool {call.name!r} with these arguments:\n"
            f"{shown_text}{hidden}\n\nWhy approval is needed: "
            + _visible("; ".join(map(str, reasons)))
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
            try:
                await session.deny(approval_id)
            except Exception as exc:  # the session refuses the id all the same; the store
                # could not record the denial (Redis down): the call still did not run.
                log.warning("could not record the denial of %s (%s)", approval_id,
                            type(exc).__name__)
            what = "no answer" if answer is None else answer.action
            return ToolResult.fail(
                ErrorCode.PERMISSION_DENIED,
                f"the user did not approve this call of {call.name!r} ({what})",
                suggestion="Do not retry this call; ask the user how to proceed.",
            )
        if (answer.content or {}).get("always") is True and shown_tool is not None:
            session.always_allow(call.name, shown=shown_tool)
        return await session.resume(approval_id)

    async def _on_call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await self.call_tool(params.name, params.arguments, ctx)

    def _log_level(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The least severe level of tool log records this call sends its client, or None.

        2026-07-28+ clients opt in per request (the ``io.modelcontextprotocol/logLevel`` key of
        ``_meta``); earlier ones once per session with ``logging/setLevel``.
        """
        meta = getattr(ctx, "meta", None)
        requested = meta.get(_LOG_LEVEL_META_KEY) if isinstance(meta, Mapping) else None
        if requested in _MCP_LEVELS:
            self._hold_log_handler()
            return str(requested)
        if not self._holds_log_handler:
            return None
        return self._log_levels.get(self._key(ctx), _DEFAULT_LOG_LEVEL)

    def _hold_log_handler(self) -> None:
        if not self._holds_log_handler:
            # Only once a client asks: until then tool logging is left exactly as configured.
            self._holds_log_handler = True
            _acquire_log_handler()

    async def _on_set_logging_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """``logging/setLevel``: from now on, this MCP session's calls send it their tools'
        log records (``ToolContext.logger``) at or above ``level`` as ``notifications/message``.
        """
        key = self._key(ctx)
        if key != _DEFAULT_KEY and key not in self._log_levels:
            # Forgotten when the MCP session ends, whether or not it ever got a deck session
            # (a client may set its level and leave without a call): one entry per MCP
            # session ever seen, otherwise.
            stack = _connection_exit_stack(ctx)
            if stack is not None:

                async def ended() -> None:
                    self._log_levels.pop(key, None)

                stack.push_async_callback(ended)
        self._log_levels[key] = str(params.level)
        self._hold_log_handler()
        return types.EmptyResult()

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
                    # The export's: it tells of alternatives a flattened schema lost.
                    "description": spec["description"],
                    "category": tool.category,
                    "level": str(tool.security.level),
                    "score": score if math.isfinite(score) else None,
                    "reasons": list(hand.reasons.get(tool.name, ())),
                    "inputSchema": spec["inputSchema"],
                    "annotations": spec["annotations"],
                }
            )
        excluded = [{"name": e.name, "reason": e.reason} for e in hand.exclusions]
        # The hand's query and reasons are redacted (Session.select); the raw task is not.
        return ToolResult.ok({"task": hand.query, "tools": tools, "excluded": excluded})

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

    async def run_stdio(self, preface: StdioPreface | None = None) -> None:
        """Serve one client over stdin/stdout until it closes stdin.

        :param preface: what :class:`StdioPreface` already read and answered before the SDK
            was imported: its messages are replayed to the SDK first (its own answer to the
            replayed ``initialize`` is dropped: the client already has it).
        """
        from mcp.server.lowlevel import NotificationOptions

        if preface is not None and preface.session is not None:
            adopted = self._sessions.setdefault(_DEFAULT_KEY, preface.session)
            if adopted is not preface.session:  # this server already had its stdio session
                await preface.session.aclose()
        connection = StdioConnection(
            read_fd=preface.read_fd if preface is not None else 0,
            write_fd=preface.write_fd if preface is not None else 1,
            replay=preface.replay if preface is not None else (),
            rest=preface.rest if preface is not None else b"",
            answered_ids=preface.answered_ids if preface is not None else (),
        )
        options = self.server.create_initialization_options(
            NotificationOptions(tools_changed=self._hand_mode)
        )
        try:
            async with trio.open_nursery() as tasks:
                tasks.start_soon(self.warm_selection)
                await connection.serve(lambda read, write: self.server.run(read, write, options))
                tasks.cancel_scope.cancel()
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
            request_id: Any = _NOT_A_REQUEST
            if method == "POST":
                # One JSON-RPC message per POST: read it whole, up to the cap, before the SDK
                # (which would read any size into memory) sees it.
                with trio.move_on_after(_BODY_TIMEOUT_S):
                    body = await _bounded_body(headers, receive)
                    if body is None:
                        await _refuse(send, 413, types.INVALID_REQUEST, (
                            f"the request body is larger than {MAX_REQUEST_BYTES} bytes; it "
                            "was not read"))
                        return
                    if body is _GONE:
                        return
                    # Counted before it is parsed: tiny values multiply in memory.
                    if len(body) > _INLINE_COUNT_BYTES:
                        values = await trio.to_thread.run_sync(json_values, body)
                    else:
                        values = json_values(body)
                    if values > MAX_MESSAGE_VALUES:
                        await _refuse(send, 413, types.INVALID_REQUEST, (
                            f"the message holds more than {MAX_MESSAGE_VALUES} JSON values; "
                            "it was not read"))
                        return
                    problem, body, request_id = _screen_body(body)
                    if problem is not None:
                        await _refuse(send, 400, types.INVALID_REQUEST, problem)
                        return
                    receive = _replay(body, receive)
                if not isinstance(receive, _Replayed):  # the body did not come in time
                    await _refuse(send, 408, types.INVALID_REQUEST, (
                        f"the request body did not arrive within {_BODY_TIMEOUT_S:g} s"))
                    return
            if opens and not await self._admit_mcp_session():
                await _refuse(send, 503, types.INTERNAL_ERROR, (
                    f"all {self.settings.max_sessions} sessions of this MCP server are busy "
                    "(calls in flight or approvals pending); try again later"),
                    retry_after=5)
                return
            known = bool(session_id) and session_id in self._mcp_used
            # Requests (not the client's notifications and responses: an answer to the
            # server's own elicitation must always get through) take a turn of their MCP
            # session; past MAX_IN_FLIGHT one is refused at once and does not run. A request
            # whose answer the client does not read holds its turn until it is read, so a
            # client that never reads holds at most MAX_IN_FLIGHT answers per session.
            turns = (
                session_id if known
                else _STATELESS_KEY if method == "POST" and not session_id and not opens
                else None
            )
            if turns is not None and request_id is not _NOT_A_REQUEST:
                held = self._requests_in_flight.get(turns, 0)
                if held >= MAX_IN_FLIGHT:
                    await _refuse(send, 429, SERVER_BUSY, (
                        f"the server is busy with {held} requests of this MCP session; this "
                        "request did not run: send it again once an answer came"),
                        retry_after=1, request_id=request_id)
                    return
                self._requests_in_flight[turns] = held + 1
            else:
                turns = None
            if known:
                self._mcp_used.move_to_end(session_id)
                if method != "GET":  # a listening stream does not keep a session from eviction
                    self._mcp_in_flight[session_id] = self._mcp_in_flight.get(session_id, 0) + 1
            elif opens:
                send = self._noting_new_session(send, session_header)

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

            try:
                await app(scope, receive, watch if method == "DELETE" else send)
            finally:
                if turns is not None:
                    left = self._requests_in_flight.get(turns, 0) - 1
                    if left > 0:
                        self._requests_in_flight[turns] = left
                    else:
                        self._requests_in_flight.pop(turns, None)
                if known and method != "GET":
                    left = self._mcp_in_flight.get(session_id, 0) - 1
                    if left > 0:
                        self._mcp_in_flight[session_id] = left
                    else:
                        self._mcp_in_flight.pop(session_id, None)

        return gate

    def _noting_new_session(self, send: Any, header: bytes) -> Any:
        """``send`` that records the MCP session an ``initialize`` opened (as most recently
        used) once its response starts."""

        async def noting(message: Any) -> None:
            if message.get("type") == "http.response.start":
                for name, value in message.get("headers", ()):
                    if bytes(name).lower() == header:
                        self._mcp_used[bytes(value).decode("latin-1")] = None
                        break
            await send(message)

        return noting

    async def _admit_mcp_session(self) -> bool:
        """Make room for a new HTTP MCP session: at ``max_sessions`` open MCP sessions (every
        one counts, including those that only sent ``initialize``), end the least recently
        used one that is idle; False when none is (the new session is refused).

        An MCP session is idle when no request of it is being served (an open GET stream does
        not count) and its deck session, if it has one, is idle (see :meth:`_idle`). The SDK
        enforces the same limit as a backstop.
        """
        manager = self._http_manager
        instances = getattr(manager, "_server_instances", None)
        discard = getattr(manager, "_discard_session", None)
        if not isinstance(instances, Mapping) or discard is None:
            return self.has_room()  # another SDK layout: deck sessions only
        if len(self._mcp_used) > 2 * self.settings.max_sessions:
            for ended in [k for k in self._mcp_used if k not in instances]:
                del self._mcp_used[ended]
        if len(instances) < self.settings.max_sessions:
            return True
        for key in list(self._mcp_used):  # least recently used first
            if key not in instances:
                del self._mcp_used[key]  # ended (DELETE, idle timeout) since
                continue
            if self._mcp_in_flight.get(key):
                continue
            session = self._sessions.get(key)
            if session is not None and not self._idle(key, session):
                continue
            log.info("MCP session %s evicted (idle, least recently used)", key[:16])
            del self._mcp_used[key]
            transport = instances.get(key)
            with trio.CancelScope(shield=True):
                if transport is not None:
                    await discard(key, transport)
                await self.end_session(key)
            return True
        return False

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
            # One limit each, the SDK's equal to the gate's: the gate evicts (or refuses) first
            # and answers with a JSON-RPC error; the SDK's are the backstop.
            max_sessions=self.settings.max_sessions,
            max_request_body_size=MAX_REQUEST_BYTES,
        )
        self._http_manager = getattr(self.server, "_session_manager", None)
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
                # Listening first, loading the model after: tools/list never waits for it.
                nursery.start_soon(self.warm_selection)
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()


#: Largest HTTP request body the server reads (a JSON-RPC message with a tool's arguments).
MAX_REQUEST_BYTES = 32 * 1024 * 1024
#: Seconds a request body has to arrive in whole (a client trickling it in is cut off).
_BODY_TIMEOUT_S = 60.0
#: Bodies longer than this have their JSON values counted in a worker thread.
_INLINE_COUNT_BYTES = 1 << 20
_GONE = b"\x00gone"  # the client went away before its body arrived
#: What :func:`_screen_body` says of a body that is not a request (no id to answer).
_NOT_A_REQUEST: Any = object()
#: The key under which the stateless requests of the 2026 protocol take their turns.
_STATELESS_KEY = "\x00stateless"


async def _bounded_body(headers: Mapping[bytes, bytes], receive: Any) -> bytes | None:
    """The whole request body, or None when it is (or says it is) over MAX_REQUEST_BYTES.

    An oversized body is read on and dropped (kept nowhere) up to 4x the cap, so that the
    client, still sending, reads the 413 instead of a reset connection; past that, or when the
    declared length is past it, the answer goes out at once."""
    length = headers.get(b"content-length", b"")
    declared = int(length) if length.isdigit() else None
    if declared is not None and declared > 4 * MAX_REQUEST_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return _GONE
        chunk = message.get("body", b"") or b""
        size += len(chunk)
        too_big = size > MAX_REQUEST_BYTES or (declared or 0) > MAX_REQUEST_BYTES
        if too_big:
            chunks.clear()
            if size > 4 * MAX_REQUEST_BYTES:
                return None
        else:
            chunks.append(chunk)
        if not message.get("more_body", False):
            return None if too_big else b"".join(chunks)


def _screen_body(body: bytes) -> tuple[str | None, bytes, Any]:
    """An HTTP request body checked before the SDK sees it: ``(why it is refused, None when
    it is not; the body to pass on; the id of the request it holds, or _NOT_A_REQUEST)``.

    The SDK's HTTP transport takes a request whose id is null, a float, an object or a
    boolean for a notification (202, never answered), and answers a batch or a scalar with a
    -32602 pydantic dump: such bodies are refused here with -32600 (id null). Batches are not
    served over HTTP (one message per POST; the stdio transport serves them on the protocol
    versions that have them). A malformed response to one of the server's own requests
    (elicitation, sampling) is passed on as an error response for its id, so that request
    fails now instead of waiting out its timeout. What is not JSON is left to the SDK
    (-32700)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None, body, _NOT_A_REQUEST
    if isinstance(message, list):
        return (
            "JSON-RPC batches are not supported over HTTP by this server; send one message "
            "per request"
        ), body, _NOT_A_REQUEST
    if not isinstance(message, dict):
        return "the message was not a valid JSON-RPC request", body, _NOT_A_REQUEST
    if "method" in message:
        if "id" in message and not valid_id(message["id"]):
            return "the id of a request must be a string or an integer", body, _NOT_A_REQUEST
        return None, body, message["id"] if "id" in message else _NOT_A_REQUEST
    if ("result" in message or "error" in message) and valid_id(message.get("id")):
        import mcp_types

        try:
            mcp_types.jsonrpc_message_adapter.validate_json(body, by_name=False)
        except Exception:
            log.warning("http: the client's response to request %r was malformed",
                        message["id"])
            failed = {"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": types.INVALID_REQUEST,
                "message": "the client's response was not a valid JSON-RPC response",
            }}
            return None, json.dumps(failed).encode(), _NOT_A_REQUEST
    return None, body, _NOT_A_REQUEST


class _Replayed:
    """An ASGI ``receive`` that gives ``body`` first, then whatever the connection sends."""

    def __init__(self, body: bytes, receive: Any) -> None:
        self._body: bytes | None = body
        self._receive = receive

    async def __call__(self) -> Any:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        return await self._receive()


def _replay(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that gives ``body`` first, then whatever the connection sends."""
    return _Replayed(body, receive)


async def _refuse(
    send: Any, status: int, code: int, message: str, *, retry_after: int | None = None,
    request_id: Any = None,
) -> None:
    """Answer an HTTP request with a JSON-RPC error (id null unless given) and ``status``."""
    payload = json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    ).encode()
    headers = [(b"content-type", b"application/json")]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    headers.append((b"content-length", str(len(payload)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


#: Longest line the preface parses (initialize, ping and tools/list are far shorter).
_PREFACE_LINE_BYTES = 256 * 1024


class StdioPreface:
    """The start of a stdio connection, served before the MCP SDK is imported.

    Importing the SDK costs about a second; a client's first requests need none of it. This
    reads the client's messages straight from file descriptor 0 (unbuffered, so nothing is
    read that the connection's reader will not get back through :attr:`replay` and
    :attr:`rest`), answers ``initialize`` (exactly as the SDK would: a test compares them),
    ``ping`` and the first ``tools/list`` when it needs no hand (``all`` mode, or ``hand`` mode
    without a default task), and stops at the first message it does not answer itself. Only
    plain, valid requests are answered here: anything else (not JSON, a batch, an id that is
    not a string or an integer) is left to the connection's reader, which answers it as
    JSON-RPC asks. The SDK then gets every message read so far that it has to see
    (``initialize`` and ``notifications/initialized`` included, so its session state is what
    it would have been) in :attr:`replay`.

    :param read_fd: / :param write_fd: the connection (default: standard input and output).
    """

    def __init__(
        self, server: DeckMcpServer, session: Session, *, read_fd: int = 0, write_fd: int = 1
    ) -> None:
        self.server = server
        #: The connection's deck session (the server adopts it as its stdio session).
        self.session: Session | None = session
        self.read_fd = read_fd
        self.write_fd = write_fd
        self._buffer = b""
        #: Raw lines for the SDK, in the order they came.
        self.replay: list[bytes] = []
        #: What was read after the last whole line (the start of the next message).
        self.rest = b""
        #: Request ids answered here whose replay the SDK will answer again (dropped).
        self.answered_ids: list[Any] = []
        #: Whether the client closed the connection during the preface.
        self.closed = False
        #: Seconds from the preface's start until ``tools/list`` was answered (None if not).
        self.listed_after_s: float | None = None

    def _line(self) -> bytes | None:
        """The next line; None at the end of input or at a line too long to read here."""
        end = self._buffer.find(b"\n")
        if end < 0:
            pending = bytearray(self._buffer)  # grows in place: a long line is not copied over
            while end < 0:
                if len(pending) > MAX_LINE_BYTES:
                    self._buffer = bytes(pending)
                    return None  # the connection's reader skips it
                chunk = os.read(self.read_fd, 65536)
                if not chunk:
                    self._buffer = bytes(pending)
                    self.closed = not self._buffer.strip()
                    return None
                found = chunk.find(b"\n")
                end = len(pending) + found if found >= 0 else -1
                pending += chunk
            self._buffer = bytes(pending)
        if end > MAX_LINE_BYTES:
            return None  # the connection's reader skips it
        line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
        return line

    def _send(self, message: Mapping[str, Any]) -> None:
        data = (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        while data:
            data = data[os.write(self.write_fd, data) :]

    def run(self) -> StdioPreface:
        """Serve the start of the connection; return self (what the SDK must be given)."""
        import time

        started = time.perf_counter()
        first = True
        while True:
            line = self._line()
            if line is None:
                break
            if not line.strip():
                continue
            if len(line) > _PREFACE_LINE_BYTES:
                # Not one of the small requests answered here; parsed, it could take tens of
                # times its size: the connection's reader checks it first.
                self.replay.append(line)
                break
            message = _plain_request(line)
            if message is None:
                # Not a message answered here (not JSON, a batch, an id that is not a string
                # or an integer...): the connection's reader answers it as JSON-RPC asks.
                self.replay.append(line)
                break
            method, request_id = message["method"], message.get("id")
            if first:
                first = False
                if method != "initialize" or request_id is None:
                    self.replay.append(line)  # not the handshake era: all for the SDK
                    break
                params = message.get("params")
                result = self.server.initialize_result(params if isinstance(params, dict) else {})
                self._send({"jsonrpc": "2.0", "id": request_id, "result": result})
                self.replay.append(line)
                self.answered_ids.append(request_id)
                continue
            if method == "notifications/initialized" and request_id is None:
                self.replay.append(line)
                continue
            if method == "ping" and request_id is not None:
                self._send({"jsonrpc": "2.0", "id": request_id, "result": {}})
                continue
            if (
                method == "tools/list"
                and request_id is not None
                and self.session is not None
                and not self.server.listing_needs_selection(self.session)
            ):
                tools = self.server.tool_specs(self.session)
                self._send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
                self.listed_after_s = time.perf_counter() - started
                break
            self.replay.append(line)
            break
        # Whatever else was read already belongs to the connection's reader: whole lines are
        # replayed, a partial one is completed from the pipe by that reader.
        whole, newline, self.rest = self._buffer.rpartition(b"\n")
        if not newline:
            whole, self.rest = b"", self._buffer
        self.replay.extend(line for line in whole.split(b"\n") if line.strip())
        self._buffer = b""
        return self


def _plain_request(line: bytes) -> dict[str, Any] | None:
    """``line`` as a JSON-RPC request or notification the preface may answer (as the SDK
    would): an object with ``jsonrpc`` "2.0", a string ``method``, object ``params`` if any,
    and, if it has an ``id``, a string or an integer. None for anything else."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if (
        not isinstance(message, dict)
        or message.get("jsonrpc") != "2.0"
        or not isinstance(message.get("method"), str)
        or not isinstance(message.get("params", {}), dict | None)
        or ("id" in message and not valid_id(message["id"]))
    ):
        return None
    try:
        # A lone surrogate (which the SDK refuses) must not be echoed back in an answer.
        json.dumps(message, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return None
    return message


async def serve_stdio(
    deck: Deck,
    *,
    workdir: str | None = None,
    session_options: Mapping[str, Any] | None = None,
    server: DeckMcpServer | None = None,
    preface: StdioPreface | None = None,
) -> None:
    """Serve ``deck`` over stdio (enters and closes the deck).

    :param server: the server to run (default: a new one over ``deck``).
    :param preface: the start of the connection, already served (see :class:`StdioPreface`).
    """
    async with deck:
        if server is None:
            server = DeckMcpServer(deck, workdir=workdir, session_options=session_options)
        await server.run_stdio(preface)


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
        When the retriever's model is still loading as the server ends, the process ends
        here, with that code (see :attr:`DeckMcpServer.warm_up_running`).

    Over stdio nothing but protocol messages reaches the real standard output: fd 1 and
    ``sys.stdout`` point at stderr, from before any plugin was imported when the command line
    runs this (:func:`tooldeck.cli.protocol_stdout`), else from the deck's loading on.
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
    if transport == "stdio":
        with _protocol_output() as wire:
            return _served(lambda: _serve_stdio_cli(wire, workdir, grants))
    # The deck of this `tooldeck` run: the plugins the command line loaded, not a second set.
    from tooldeck.cli import load_deck

    deck = load_deck()
    settings = McpServerSettings.from_settings(deck.config.settings)
    if host not in _LOOPBACK:
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
    token: str | None = None
    source = "disabled"
    if no_auth:
        sys.stderr.write(
            "tooldeck serve mcp: WARNING: --no-auth: any process that can reach the port "
            "(every local user and program) runs tools with this server's grants\n"
        )
    else:
        token, source = resolve_token(settings)
    return _served(lambda: trio.run(lambda: serve_http(
        deck, host, port, token=token, show_token=source == "generated",
        workdir=workdir, session_options=options,
    )))


def _protocol_output() -> Any:
    """The real standard output for the protocol, fd 1 and ``sys.stdout`` pointing at stderr:
    kept aside by the command line before any plugin was imported, else here (from the
    deck's loading on)."""
    from contextlib import nullcontext

    try:
        from tooldeck.cli import protocol_stdout
    except ImportError:  # a core without it
        kept = None
    else:
        kept = protocol_stdout()
    return nullcontext(kept) if kept is not None else stdout_kept_aside()


def _serve_stdio_cli(wire: int, workdir: str | None, grants: Sequence[str] | None) -> None:
    from tooldeck.cli import load_deck

    deck = load_deck()
    McpServerSettings.from_settings(deck.config.settings)  # a bad table: a start-up error
    options = {"grants": list(grants)} if grants else {}
    server = DeckMcpServer(deck, workdir=workdir, session_options=options)
    # initialize and the first tools/list are answered before the SDK is even imported.
    preface = StdioPreface(server, server._new_session(), write_fd=wire).run()
    trio.run(lambda: serve_stdio(deck, server=server, preface=preface))


def _served(serve: Callable[[], None]) -> int:
    """Run ``serve`` and return 0 (a Ctrl-C propagates); but when a model is still loading
    in a worker thread, end the process here with that code (130 after a Ctrl-C), see
    :attr:`DeckMcpServer.warm_up_running`: the deck is closed by then, atexit handlers run,
    output is flushed, and the interpreter is not finalized under the native load (SIGABRT)."""
    try:
        serve()
        code = 0
    except KeyboardInterrupt:
        if not _loads_running[0]:
            raise
        code = 130
    if not _loads_running[0]:
        return code
    import atexit

    log.debug("a model is still loading: the process ends without finalizing under it")
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
