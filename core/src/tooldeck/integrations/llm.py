"""simonw/llm: a hand as ``llm.Tool`` objects that call the deck.

.. code-block:: python

    import llm
    from tooldeck.integrations.llm import ApprovalPending, to_llm_tools

    with DeckPortal(Deck.load()) as portal:
        session = portal.session(workdir=".")
        tools = to_llm_tools(session, session.select(task))
        model = llm.get_model("gpt-4.1-mini")
        try:
            for response in model.chain(task, tools=tools).responses():
                print(response.text())
        except ApprovalPending as pending:                # a dangerous call waits for the user
            print(pending.tool, pending.arguments)
            pending.approve()                             # or pending.deny()
            history = [*response.prompt.messages, *response.messages()]
            print(model.chain(messages=history, tools=tools).text())

A call the deck holds for approval pauses the chain with :class:`ApprovalPending` (llm's
``PauseChain``, which llm re-raises out of ``chain()`` instead of showing the model an error).
Answer it with ``approve()`` or ``deny()`` and re-run the chain on its history: llm executes the
unresolved call again, and the tool answers the deck's approval for exactly that call (same call id,
same arguments), running it once or refusing it. The turn's other calls, which that history does
not answer, get the answer they already had and do not run again. Pass ``confirm=`` (a function of
the tool name and arguments returning True or False) to decide inline instead, as
``llm --tools-approve`` does.

llm only lets the model call the tools a chain carries: tools given here that the session's current
hand does not hold still run through the deck's widening fallback, which decides whether they may.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tooldeck_hookspecs import ToolCall, ToolDefinition, ToolResult

from .._deck import Hand, Session
from ..adapters import provider_schema
from ..portal import PortalSession
from ._bridge import (
    ApprovalBook,
    PortalClosedError,
    SessionBridge,
    answer_flow,
    call_flow,
    definitions,
    keep_newest,
    needs_approval,
    pending_flow,
    portal_closed,
    require,
    result_text,
)

__all__ = ["ApprovalPending", "to_llm_tools"]

if TYPE_CHECKING:
    #: Built on first access (see ``__getattr__``): it subclasses llm's PauseChain.
    ApprovalPending: type[Exception]

#: A confirm callback: may this tool run with these arguments?
Confirm = Callable[[str, Mapping[str, Any]], bool]


def _llm() -> Any:
    return require("llm", extra="llm", framework="llm (simonw/llm)")


#: Answered calls remembered per set of tools (each entry is one call's result text).
_MAX_ANSWERED = 4096


class _Decisions:
    """The user's answers to pending approvals, by approval id, and the calls already answered,
    by llm's tool call id (shared by one set of tools)."""

    def __init__(self) -> None:
        self.answers: dict[str, bool] = {}
        self._answered: dict[str, tuple[str, dict[str, Any], str]] = {}

    def answered(self, call: ToolCall) -> str | None:
        """The result this exact call (id, name, arguments) already got, if any."""
        found = self._answered.get(call.id) if call.id else None
        if found is None or found[0] != call.name or found[1] != dict(call.arguments):
            return None
        return found[2]

    def remember(self, call: ToolCall, text: str) -> str:
        """Record what this call answered (a resumed chain runs it again)."""
        if call.id:
            keep_newest(
                self._answered, call.id, (call.name, dict(call.arguments), text), _MAX_ANSWERED
            )
        return text


@functools.cache
def _pending_class() -> type:
    llm = _llm()

    class ApprovalPending(llm.PauseChain):  # type: ignore[misc,name-defined]
        """The deck holds a call for the user's approval; llm's chain is paused on it.

        ``tool`` and ``arguments`` say what would run, ``reasons`` why it is asked,
        ``approval_id`` is the deck's id; llm sets ``tool_call`` (its own) and
        ``tool_results`` (sibling calls that completed).
        """

        def __init__(
            self,
            decisions: _Decisions,
            *,
            approval_id: str,
            tool: str,
            arguments: Mapping[str, Any],
            reasons: list[str],
            message: str,
        ) -> None:
            super().__init__(message)
            self._decisions = decisions
            self.approval_id = approval_id
            self.tool = tool
            self.arguments = dict(arguments)
            self.reasons = reasons

        def approve(self) -> None:
            """Let this exact call run once when the chain is resumed."""
            self._decisions.answers[self.approval_id] = True

        def deny(self) -> None:
            """Refuse this call: the resumed chain tells the model it was not run."""
            self._decisions.answers[self.approval_id] = False

    ApprovalPending.__module__ = __name__
    return ApprovalPending


def _llm_tool(
    llm: Any,
    bridge: SessionBridge,
    book: ApprovalBook,
    decisions: _Decisions,
    confirm: Confirm | None,
    definition: ToolDefinition,
) -> Any:
    name = definition.name
    session = bridge.session

    def pause(call: ToolCall, approval_id: str, result: ToolResult | None) -> Exception:
        error = result.error if result is not None else None
        pending: Exception = _pending_class()(
            decisions,
            approval_id=approval_id,
            tool=name,
            arguments=call.arguments,
            reasons=list(error.details.get("reasons", [])) if error is not None else [],
            message=error.message if error is not None else f"{name!r} needs the user's approval",
        )
        return pending

    def implementation(llm_tool_call: Any = None, **arguments: Any) -> str:
        call_id = str(getattr(llm_tool_call, "tool_call_id", None) or "")
        sent = getattr(llm_tool_call, "arguments", None)
        if isinstance(sent, Mapping):
            # The model's arguments as llm received them: llm puts its own ToolCall under the
            # keyword ``llm_tool_call``, which replaces a tool parameter of that name.
            arguments = dict(sent)
        call = ToolCall(name=name, arguments=arguments, id=call_id)
        # A chain resumed on a history without the paused turn's completed results (llm's
        # PauseChain recipe) runs every call of that turn again: a call that already got its
        # answer gets the same answer, and does not run (or ask the user) a second time.
        done = decisions.answered(call)
        if done is not None:
            return done
        try:
            return run(call, arguments)
        except PortalClosedError:
            return result_text(portal_closed(name))

    def run(call: ToolCall, arguments: Mapping[str, Any]) -> str:
        call_id = call.id
        approval_id = bridge.run(pending_flow, session, book, call) if call_id else None
        first = None
        if approval_id is None:
            first = bridge.run(call_flow, session, book, call)
            if not needs_approval(first):
                return decisions.remember(call, result_text(first))
            assert first.error is not None
            approval_id = str(first.error.details["approval_id"])
        if confirm is not None:
            # Only True approves, as for the deck's own confirm callbacks: bool() made a "no"
            # (the text of an input() prompt, a {"approved": False}) a yes.
            answer = confirm(name, dict(arguments)) is True
        elif approval_id in decisions.answers:
            answer = decisions.answers.pop(approval_id)
        else:
            raise pause(call, approval_id, first)
        return decisions.remember(
            call, result_text(bridge.run(answer_flow, session, book, call, answer))
        )

    description, parameters = provider_schema(definition)
    return llm.Tool(
        name=name,
        description=description,
        input_schema=parameters,
        implementation=implementation,
        plugin="tooldeck",
    )


def to_llm_tools(
    session: PortalSession | Session,
    hand: Hand | Iterable[str | ToolDefinition] | None = None,
    *,
    confirm: Confirm | None = None,
) -> list[Any]:
    """llm ``Tool`` objects for a hand (or tool names), each calling the session.

    :param session: a :class:`~tooldeck.portal.PortalSession` (llm calls tools synchronously).
    :param hand: a :class:`~tooldeck.Hand`, tool names or definitions; default the session's hand.
    :param confirm: decide approvals inline (``confirm(tool_name, arguments) -> bool``) instead of
        pausing the chain with :class:`ApprovalPending`; only ``True`` approves.
    :raises ImportError: without llm (``pip install "tooldeck[llm]"``).
    """
    llm = _llm()
    bridge = SessionBridge(session)
    book = ApprovalBook()
    decisions = _Decisions()
    return [
        _llm_tool(llm, bridge, book, decisions, confirm, d)
        for d in definitions(bridge.session, hand)
    ]


def __getattr__(name: str) -> Any:
    # ApprovalPending subclasses llm's PauseChain, so it is built on first use: importing this
    # module must not need llm.
    if name == "ApprovalPending":
        return _pending_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
