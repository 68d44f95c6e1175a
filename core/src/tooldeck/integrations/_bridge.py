"""What every framework adapter shares: reaching the session, running calls, keeping approvals.

A framework runs on asyncio (LangChain's ``ainvoke``, the Agents SDK, Pydantic AI) or in plain
threads (LangChain's ``invoke``, llm); the deck runs on trio. The :class:`SessionBridge` takes a
:class:`~tooldeck.portal.PortalSession` (any caller) or a plain :class:`~tooldeck.Session`
(callers already on the deck's trio loop) and runs trio-native coroutines on the deck's loop, so
that each adapter's logic is written once, for trio.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from types import ModuleType
from typing import Any, TypeVar

import trio

from tooldeck_hookspecs import (
    ErrorCode,
    SecurityLevel,
    ToolCall,
    ToolDefinition,
    ToolResult,
    canonical_json_bytes,
)

from .._deck import (
    _INLINE_ARGUMENT_CHARS,
    _INLINE_ARGUMENT_ITEMS,
    Hand,
    Session,
    _argument_excess,
    _tool_fingerprint,
)
from .._normalise import shorten
from ..adapters import _SURROGATE, result_payload, utf8_json
from ..portal import DeckPortal, PortalClosedError, PortalSession

__all__ = [
    "ApprovalBook",
    "Conversation",
    "Conversations",
    "SessionBridge",
    "answer_flow",
    "call_flow",
    "definitions",
    "keep_newest",
    "may_ask",
    "needs_approval",
    "pending_flow",
    "portal_closed",
    "PortalClosedError",
    "rejected",
    "require",
    "result_text",
    "result_value",
]

T = TypeVar("T")

#: Framework approvals kept at most (each entry is one unanswered approval request).
_MAX_BOOKED = 4096


def require(module: str, *, extra: str, framework: str) -> ModuleType:
    """Import a framework module, or fail with the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this tooldeck integration needs {framework} ({module!r} could not be imported): "
            f'pip install "tooldeck[{extra}]"'
        ) from exc


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


class SessionBridge:
    """One session, reachable from sync code, asyncio and trio."""

    def __init__(self, session: PortalSession | Session) -> None:
        self.portal: DeckPortal | None
        self._portal_session: PortalSession | None = None
        if isinstance(session, PortalSession):
            self.portal = session.portal
            self.session: Session = session.session
            self._portal_session = session
        elif isinstance(session, Session):
            self.portal = None
            self.session = session
        else:
            raise TypeError(
                "expected a tooldeck session (DeckPortal(deck).session(...) from asyncio or "
                f"threads, or deck.session(...) on trio), got {type(session).__name__}"
            )

    def run(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await function(*args)`` on the deck's loop from synchronous code; block."""
        if self.portal is None:
            raise TypeError(
                "a trio Session cannot be used from synchronous code: open the session through "
                "tooldeck.portal.DeckPortal(deck).session(...) instead"
            )
        if self._portal_session is not None:
            # Through the session's own guard: a blocking call on the loop its confirm
            # callback needs is refused (RuntimeError), not a wait until the confirm timeout.
            return self._portal_session._sync(lambda: function(*args))
        return self.portal.run(function, *args)

    async def arun(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``function(*args)`` on the deck's loop from asyncio or trio code.

        From trio, the portal's loop is another trio run: cancelling the caller cancels the
        work there, as from asyncio (it was once waited for in a worker thread that trio could
        not abandon: a ``move_on_after(1)`` around a call of an 8 s tool returned after 8 s,
        the tool having run to its end).
        """
        if self.portal is None:
            if _in_trio():
                return await function(*args)
            raise TypeError(
                "a trio Session can only be awaited from trio code; from asyncio open the session "
                "through tooldeck.portal.DeckPortal(deck).session(...)"
            )
        return await self.portal.arun(function, *args)


def definitions(
    session: Session, tools: Hand | Iterable[str | ToolDefinition] | None
) -> list[ToolDefinition]:
    """The tool definitions to expose: a hand's, the named ones, or the session's current hand.

    :raises ValueError: for a name the deck has not registered (a developer's mistake).
    """
    if tools is None:
        if session.hand is None:
            raise ValueError(
                "the session has no hand yet: pass one (session.select(task)) or tool names"
            )
        return list(session.hand.tools)
    if isinstance(tools, Hand):
        return list(tools.tools)
    out: list[ToolDefinition] = []
    for item in tools:
        if isinstance(item, ToolDefinition):
            out.append(item)
            continue
        found = session.deck.catalog.get(item)
        if found is None:
            close = session.deck.closest_names(item, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"no tool named {item!r} is registered in the deck{hint}")
        out.append(found)
    return out


def may_ask(definition: ToolDefinition) -> bool:
    """Whether the deck's baseline asks the user before this tool runs (dangerous or confirm)."""
    security = definition.security
    return security.level is SecurityLevel.DANGEROUS or security.require_confirm


def needs_approval(result: ToolResult) -> bool:
    """Whether a result is the deck asking for the user's approval of the call."""
    return result.error is not None and result.error.code is ErrorCode.CONFIRMATION_REQUIRED


def result_text(result: ToolResult) -> str:
    """What the model reads: the JSON the provider adapters send (data, or the error), as
    text that encodes as UTF-8 (lone surrogates escaped: :func:`tooldeck.adapters.utf8_json`)."""
    return utf8_json(json.dumps(result_payload(result), ensure_ascii=False, default=str))


def result_value(result: ToolResult) -> dict[str, Any]:
    """:func:`result_payload` for a framework that serialises the value itself (Pydantic AI).

    Its serialiser (pydantic-core, strict UTF-8) raised on a lone surrogate in a result and
    ended the run; such text has each surrogate replaced by U+FFFD (a value cannot carry the
    escape the JSON text of :func:`result_text` does).
    """
    payload = result_payload(result)
    text = json.dumps(payload, ensure_ascii=False, default=str)
    if utf8_json(text) is text:
        return payload
    return json.loads(_SURROGATE.sub("\ufffd", text))  # type: ignore[no-any-return]


def portal_closed(name: str) -> ToolResult:
    """The answer to a call made after the session's portal closed.

    ``PortalClosedError`` went out of the framework's tool (LangChain's ``invoke``, the Agents
    SDK's ``on_invoke_tool``, Pydantic AI's ``call_tool``) and ended the agent's run; the
    model now reads ``CANCELLED``, as for a call of a closed deck's session.
    """
    return ToolResult.fail(
        ErrorCode.CANCELLED,
        f"the tool deck is closed; the call of {shorten(name, 80)!r} did not run",
        suggestion="Do not call the deck's tools again in this run; tell the user.",
    )


def rejected(call: ToolCall, message: str | None = None) -> ToolResult:
    """The result of a call the user rejected before the deck was asked about it."""
    reason = f": {message}" if message else ""
    return ToolResult.fail(
        ErrorCode.PERMISSION_DENIED,
        f"the user rejected this call of {call.name!r}{reason}; it did not run",
        suggestion="Do not retry this call; ask the user how to proceed.",
    )


def keep_newest(entries: dict[str, T], key: str, value: T, most: int) -> None:
    """Set ``entries[key]`` as the newest entry, dropping the oldest ones (insertion order)
    to keep at most ``most``: the bound of what an adapter remembers per call."""
    entries.pop(key, None)
    while len(entries) >= most:
        del entries[next(iter(entries))]
    entries[key] = value


class ApprovalBook:
    """Which deck approval belongs to which framework tool call (by the call's id).

    Frameworks re-run a paused tool call from the start when the user answers. The book lets the
    re-run answer the approval the first run asked for instead of asking for a new one. Touched
    only on the deck's loop (inside the flows below), so it needs no lock.
    """

    def __init__(self) -> None:
        self._by_call: dict[str, str] = {}

    def remember(self, call_id: str, approval_id: str) -> None:
        """Record the approval the deck asked for this call."""
        keep_newest(self._by_call, call_id, approval_id, _MAX_BOOKED)

    def get(self, call_id: str) -> str | None:
        """The approval recorded for this call, if any."""
        return self._by_call.get(call_id)

    def forget(self, call_id: str) -> None:
        """Drop the record of this call."""
        self._by_call.pop(call_id, None)


#: Conversations one adapter keeps a session for (least recently used out first).
_MAX_CONVERSATIONS = 1024


class Conversation:
    """What an adapter keeps per conversation: its session (through a bridge), the approvals
    booked by call id, and room for the adapter's own per-conversation state."""

    def __init__(self, bridge: SessionBridge) -> None:
        self.bridge = bridge
        self.book = ApprovalBook()
        self.state: dict[str, Any] = {}


class Conversations:
    """One configured session serving many conversations (LangGraph threads, Pydantic AI
    conversations), each with a session of its own.

    The first conversation seen is served by the session given; each other one by a fork of it
    (:meth:`Session.fork <tooldeck.Session.fork>`: the same settings, a hand and approvals of
    its own), so that one conversation's hand never judges another's calls and one's approvals
    and "always allow" answers never cover another's. Calls outside any conversation (no key)
    go to the session given. At most :data:`_MAX_CONVERSATIONS` forks are kept.
    """

    def __init__(self, session: PortalSession | Session) -> None:
        self.default = Conversation(SessionBridge(session))
        self._owner = session
        self._first: str | None = None
        self._forks: OrderedDict[str, Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str | None) -> Conversation:
        """The conversation of ``key`` (made on first use)."""
        if key is None:
            return self.default
        with self._lock:
            if self._first is None:
                self._first = key
            if key == self._first:
                return self.default
            found = self._forks.get(key)
            if found is not None:
                self._forks.move_to_end(key)
                return found
            digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            fork = self._owner.fork(f"{self._owner.id}:conversation-{digest}")
            found = self._forks[key] = Conversation(SessionBridge(fork))
            while len(self._forks) > _MAX_CONVERSATIONS:
                self._forks.popitem(last=False)
            return found


def _same_call(pending: ToolCall, call: ToolCall) -> bool:
    # Compared as the deck's approval hash sees them, not with ==: Python finds 1, 1.0 and
    # True equal, and the pending call (the one that runs) must be exactly the one shown.
    return pending.name == call.name and (
        canonical_json_bytes(dict(pending.arguments)) == canonical_json_bytes(dict(call.arguments))
    )


async def pending_flow(session: Session, book: ApprovalBook, call: ToolCall) -> str | None:
    """The approval this exact call still waits for, if the book (or the session) knows one.

    A framework re-runs a paused call with the same call id. When the book lost it (a new
    middleware or toolset instance on the same session, an agent built per request), the
    session's own pending approval of that call id, name and arguments is the one the user
    was shown: answering it keeps the deck's check of the tool's definition, where asking
    afresh would bind the answer to whatever is registered by then.
    """
    pending = session.pending_approvals()
    approval_id = book.get(call.id)
    if approval_id is not None:
        found = pending.get(approval_id)
        if found is not None and await _same_call_off_loop(found, call):
            return approval_id
        book.forget(call.id)
    if not call.id:
        return None
    for approval_id, found in pending.items():
        if found.id == call.id and await _same_call_off_loop(found, call):
            return approval_id
    return None


async def _same_call_off_loop(pending: ToolCall, call: ToolCall) -> bool:
    """:func:`_same_call`, in a worker thread for arguments over the deck's inline budget
    (writing megabytes of arguments as canonical JSON is linear work, and this runs on the
    deck's loop)."""
    if pending.name != call.name:
        return False
    if all(
        _argument_excess(c.arguments, _INLINE_ARGUMENT_ITEMS, _INLINE_ARGUMENT_CHARS) is None
        for c in (pending, call)
    ):
        return _same_call(pending, call)
    return await trio.to_thread.run_sync(_same_call, pending, call)


def _changed_since_shown(
    session: Session, call: ToolCall, shown: ToolDefinition | None
) -> ToolResult | None:
    """A refusal when the tool registered under the call's name is no longer the definition
    the model was dealt (``shown``, else the session's hand's): the user's answer was about
    that one."""
    if shown is None and session.hand is not None:
        shown = next((t for t in session.hand.tools if t.name == call.name), None)
    if shown is None:
        return None
    current = session.deck.catalog.get(call.name)
    if current is shown or (
        current is not None and _tool_fingerprint(current) == _tool_fingerprint(shown)
    ):
        return None
    return ToolResult.fail(
        ErrorCode.PERMISSION_DENIED,
        f"the tool {call.name!r} was "
        + ("removed" if current is None else "registered again with another definition")
        + " after the user was asked about this call; it did not run",
        suggestion="Make the call again: the user will be asked about the tool as it is now.",
        details={"reason": "tool_changed"},
    )


async def call_flow(session: Session, book: ApprovalBook, call: ToolCall) -> ToolResult:
    """Run a call through the deck; if it asks for approval, book the request under the call."""
    result = await session.call(call)
    if needs_approval(result):
        assert result.error is not None
        book.remember(call.id, str(result.error.details["approval_id"]))
    return result


async def answer_flow(
    session: Session,
    book: ApprovalBook,
    call: ToolCall,
    approved: bool,
    message: str | None = None,
    *,
    shown: ToolDefinition | None = None,
) -> ToolResult:
    """The framework's user answered for this exact call: run it once, or refuse it.

    Uses the approval pending for the call when there is one with the same arguments (the
    deck then checks the tool is still the one the user was asked about); otherwise (another
    process asked, or it expired) asks the deck afresh and answers that, so an approval never
    covers arguments other than the ones the user saw. A fresh approval only runs when the
    tool registered under the call's name is still ``shown`` (the definition the framework
    showed; by default the one in the session's hand).
    """
    approval_id = await pending_flow(session, book, call)
    book.forget(call.id)
    if approval_id is None:
        if not approved:
            return rejected(call, message)
        changed = _changed_since_shown(session, call, shown)
        if changed is not None:
            return changed
        first = await session.call(call)
        if not needs_approval(first):
            return first  # ran (or was refused) without needing an approval any more
        assert first.error is not None
        approval_id = str(first.error.details["approval_id"])
    elif approved and shown is not None:
        changed = _changed_since_shown(session, call, shown)
        if changed is not None:
            await session.resume(approval_id, approved=False)
            return changed
    result = await session.resume(approval_id, approved=approved)
    if approved and approval_id in session.pending_approvals():
        # The approval store failed (the deck kept the call pending for a retry): the
        # framework's re-run of this call must find the same approval, not ask anew.
        book.remember(call.id, approval_id)
    if not approved and message:
        return rejected(call, message)
    return result
