"""LangChain 1.x: a middleware for ``create_agent`` and StructuredTools, both through the deck.

.. code-block:: python

    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command
    from tooldeck.integrations.langchain import TooldeckMiddleware

    with DeckPortal(Deck.load()) as portal:
        session = portal.session(workdir=".")
        agent = create_agent(model, middleware=[TooldeckMiddleware(session)],
                             checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "1"}}
        state = agent.invoke({"messages": [("user", "delete the build folder")]}, config)
        for pending in state.get("__interrupt__", []):      # a dangerous call waits for you
            print(pending.value["name"], pending.value["args"])
        agent.invoke(Command(resume={"type": "approve"}), config)  # or {"type": "reject"}

:class:`TooldeckMiddleware` deals the hand for the current task (the latest user message) to each
model call, in place of any tool of the deck the request carried (the application's own tools are
left alone), and runs every call of a deck tool through the session, including tools that were not
dealt (the deck's widening fallback decides) and names the deck does not know (the model gets
``TOOL_NOT_FOUND`` with the closest names). A call the deck holds for the user's approval becomes a
LangGraph ``interrupt`` shaped like LangChain's own per-call approval request (``type:
"tool_approval"``, ``tool_call_id``, ``name``, ``args``, ``description``, plus ``approval_id``
and ``reasons``); resuming with ``{"type": "approve"}`` runs exactly that call once, ``{"type":
"reject", "message": ...}`` refuses it, ``{"type": "respond", "message": ...}`` answers for the
tool. Edits are refused: an approval covers the arguments the user saw. Interrupts need a
checkpointer, as LangGraph's own human-in-the-loop does.

:func:`to_langchain_tools` gives plain StructuredTools (for any LangChain agent or graph): their
results are the deck's JSON, and a call that needs approval answers ``CONFIRMATION_REQUIRED``
with its ``approval_id`` (no interrupt; resume it with ``session.resume(approval_id)``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tooldeck_hookspecs import ErrorCode, ToolCall, ToolDefinition, ToolResult

from .._deck import _EXCESS_MESSAGES, MAX_ARGUMENT_CHARS, Hand, Session, _argument_excess
from .._normalise import MAX_ARGUMENT_ITEMS
from ..adapters import provider_schema
from ..portal import PortalSession
from ._bridge import (
    Conversation,
    Conversations,
    PortalClosedError,
    SessionBridge,
    answer_flow,
    call_flow,
    definitions,
    needs_approval,
    pending_flow,
    portal_closed,
    result_text,
)

__all__ = ["TooldeckMiddleware", "to_langchain_tools"]

if TYPE_CHECKING:
    #: Built on first access (see ``__getattr__``): it subclasses LangChain's AgentMiddleware.
    TooldeckMiddleware: type

_EXTRA = {"extra": "langchain", "framework": "LangChain 1.x (langchain, langgraph)"}
#: Marks the StructuredTools this module made, so the middleware can tell them from the app's.
_MARK = "tooldeck_tool"


def _require(module: str) -> Any:
    from ._bridge import require

    return require(module, **_EXTRA)


@functools.cache
def _tool_class() -> type:
    """``StructuredTool`` that hands the model's arguments to the deck as one value.

    LangChain passes a tool's input as keyword arguments and adds its own ``config`` and
    ``run_manager`` keywords to them: a deck tool parameter of either name would be replaced
    (and the call refused for a missing field, or run without it). The whole input goes as one
    positional dict instead, out of reach of the injected keywords.
    """
    tools = _require("langchain_core.tools")

    class DeckStructuredTool(tools.StructuredTool):  # type: ignore[misc,name-defined]
        def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
            """LangChain's ``run``, on input it can show its callbacks (see :func:`_screened`)."""
            return super().run(_screened(tool_input), *args, **kwargs)

        async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
            """LangChain's ``arun``, on input it can show its callbacks (see :func:`_screened`)."""
            return await super().arun(_screened(tool_input), *args, **kwargs)

        def _to_args_and_kwargs(
            self, tool_input: str | dict[str, Any], tool_call_id: str | None
        ) -> tuple[tuple[Any, ...], dict[str, Any]]:
            if isinstance(tool_input, _Refused):
                raise tools.ToolException(tool_input.text)
            if not isinstance(tool_input, dict):
                # handle_tool_error turns this into the deck's structured error.
                raise tools.ToolException(result_text(ToolResult.fail(
                    ErrorCode.INVALID_ARGUMENTS,
                    f"the arguments must be a JSON object, not {type(tool_input).__name__}",
                    suggestion="Send the arguments as one JSON object.",
                )))
            return (dict(tool_input),), {}

    DeckStructuredTool.__module__ = __name__
    return DeckStructuredTool


class _Refused(str):
    """Tool input refused before LangChain touched it: what its callbacks show instead
    (``str``), and the deck's error the model reads (``text``)."""

    text: str


def _screened(tool_input: Any) -> Any:
    """The tool input as given, or a :class:`_Refused` for arguments the deck would refuse
    for their size (nested past its depth limit, too many items or characters).

    LangChain's ``run`` writes the input with ``str()`` for its callbacks before the tool
    sees it: arguments nested 100,000 deep (``[[[...]]]`` from the model) raised
    ``RecursionError`` out of ``invoke``, ending the agent's step instead of answering the
    model; a million items held the caller's loop while being written out. The check is the
    deck's own (iterative, and it stops after ~``MAX_ARGUMENT_ITEMS`` values).
    """
    if not isinstance(tool_input, Mapping):
        return tool_input
    excess = _argument_excess(tool_input, MAX_ARGUMENT_ITEMS, MAX_ARGUMENT_CHARS)
    if excess is None:
        return tool_input
    refused = _Refused(f"<arguments not shown: {_EXCESS_MESSAGES[excess]}>")
    refused.text = result_text(ToolResult.fail(
        ErrorCode.INVALID_ARGUMENTS,
        f"the arguments were not read: {_EXCESS_MESSAGES[excess]}",
        suggestion="Send smaller, flatter arguments matching the tool's schema.",
        details={"errors": [{"path": "$", "message": _EXCESS_MESSAGES[excess]}]},
    ))
    # ``run`` gets the call's arguments (``invoke`` took them out of a ToolCall): the
    # ToolException from ``_to_args_and_kwargs`` becomes a ToolMessage with status "error".
    return refused


def _make_tool(bridge: SessionBridge, definition: ToolDefinition) -> Any:
    tools = _require("langchain_core.tools")
    name = definition.name

    def finish(result: ToolResult) -> str:
        if result.success:
            return result_text(result)
        # handle_tool_error turns this into a ToolMessage with status="error".
        raise tools.ToolException(result_text(result))

    def run(arguments: dict[str, Any]) -> str:
        try:
            return finish(bridge.run(bridge.session.call, name, arguments))
        except PortalClosedError:
            return finish(portal_closed(name))

    async def arun(arguments: dict[str, Any]) -> str:
        try:
            return finish(await bridge.arun(bridge.session.call, name, arguments))
        except PortalClosedError:
            return finish(portal_closed(name))

    description, parameters = provider_schema(definition)
    return _tool_class()(
        name=name,
        description=description,
        args_schema=parameters,
        func=run,
        coroutine=arun,
        handle_tool_error=True,
        metadata={_MARK: name, "category": definition.category},
    )


def to_langchain_tools(
    session: PortalSession | Session, hand: Hand | Iterable[str | ToolDefinition] | None = None
) -> list[Any]:
    """LangChain ``StructuredTool`` objects for a hand (or tool names), each calling the session.

    :param session: a :class:`~tooldeck.portal.PortalSession` (``DeckPortal(deck).session()``).
    :param hand: a :class:`~tooldeck.Hand`, tool names or definitions; default the session's hand.
    :raises ImportError: without LangChain (``pip install "tooldeck[langchain]"``).
    """
    _require("langchain_core.tools")
    bridge = SessionBridge(session)
    return [_make_tool(bridge, d) for d in definitions(bridge.session, hand)]


def _task(messages: Sequence[Any]) -> str | None:
    """The current task: the text of the latest user message."""
    for message in reversed(messages):
        if getattr(message, "type", None) == "human":
            text = message.text
            # langchain-core 1.x: a str property (also callable, deprecated); 0.3: a method.
            text = text if isinstance(text, str) else text()
            return str(text).strip() or None
    return None


def _decision(answer: Any) -> tuple[str, str | None]:
    """(kind, message) of a resume value: a LangChain HITL decision, a bool or a word."""
    if isinstance(answer, bool):
        return ("approve" if answer else "reject"), None
    if isinstance(answer, str):
        return answer, None
    if isinstance(answer, dict):
        message = answer.get("message")
        return str(answer.get("type", "reject")), (str(message) if message else None)
    return "reject", None


def _build_middleware() -> type:
    middleware = _require("langchain.agents.middleware")
    messages = _require("langchain_core.messages")
    langgraph_types = _require("langgraph.types")

    class TooldeckMiddleware(middleware.AgentMiddleware):  # type: ignore[misc,name-defined]
        """A ``create_agent`` middleware: the deck deals each model call's tools and runs them.

        :param session: a :class:`~tooldeck.portal.PortalSession` (``DeckPortal(deck).session()``).
        :param task: how to find the task in a request's messages (default: the latest user
            message's text); return None to leave the request's tools as they are.
        """

        def __init__(
            self,
            session: PortalSession | Session,
            *,
            task: Callable[[Sequence[Any]], str | None] | None = None,
        ) -> None:
            super().__init__()
            self.session = session
            self._task = task or _task
            # LangGraph thread id -> its session (Conversations: the first thread is served by
            # the session given, each other by a fork of it), so one thread's hand never
            # judges another's calls.
            self._conversations = Conversations(session)
            # The deck's tools are dynamic (a new hand per task): wrap_tool_call runs them, so
            # the agent registers none up front.
            self.tools: list[Any] = []

        def _conversation(self) -> Conversation:
            """The conversation of the LangGraph thread running now."""
            return self._conversations.get(_thread_id())

        # ---------------------------------------------------------------- model calls

        def _with_hand(self, conversation: Conversation, request: Any, hand: Hand) -> Any:
            own = [t for t in request.tools if not _is_deck_tool(t)]
            return request.override(tools=[*own, *_tools_for(conversation, hand)])

        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            """Give the model the hand for the current task instead of the deck's other tools."""
            task = self._task(request.messages)
            if task is None:
                return handler(request)
            conversation = self._conversation()
            bridge = conversation.bridge
            hand = _current_hand(conversation, task)
            if hand is None:
                hand = bridge.run(bridge.session.select, task)
            return handler(self._with_hand(conversation, request, hand))

        async def awrap_model_call(
            self, request: Any, handler: Callable[[Any], Awaitable[Any]]
        ) -> Any:
            """Async :meth:`wrap_model_call`."""
            task = self._task(request.messages)
            if task is None:
                return await handler(request)
            conversation = self._conversation()
            bridge = conversation.bridge
            hand = _current_hand(conversation, task)
            if hand is None:
                hand = await bridge.arun(bridge.session.select, task)
            return await handler(self._with_hand(conversation, request, hand))

        # ---------------------------------------------------------------- tool calls

        def _ours(self, request: Any) -> bool:
            # The app's own tools run as they are; the deck answers for its tools and for names
            # nobody registered (TOOL_NOT_FOUND with the closest names beats a bare error).
            return request.tool is None or _is_deck_tool(request.tool)

        def _call(self, request: Any) -> ToolCall:
            tool_call = request.tool_call
            arguments = tool_call.get("args")
            return ToolCall(
                name=str(tool_call["name"]),
                arguments=arguments if arguments is not None else {},
                # Without an id a re-run cannot be matched to its approval: the deck is asked
                # afresh, for the same call, when the user answers.
                id=tool_call.get("id") or f"lc_{uuid.uuid4().hex[:16]}",
            )

        def _interrupt(self, call: ToolCall, approval_id: str, result: ToolResult | None) -> Any:
            error = result.error if result is not None else None
            reasons = list(error.details.get("reasons", [])) if error is not None else []
            description = (
                error.message
                if error is not None
                else f"calling {call.name!r} with these arguments needs the user's approval"
            )
            return langgraph_types.interrupt(
                {
                    "type": "tool_approval",
                    "tool_call_id": call.id,
                    "name": call.name,
                    "args": dict(call.arguments),
                    "description": description,
                    "approval_id": approval_id,
                    "reasons": reasons,
                }
            )

        def _message(self, call: ToolCall, result: ToolResult) -> Any:
            return messages.ToolMessage(
                content=result_text(result),
                tool_call_id=call.id,
                name=call.name,
                status="success" if result.success else "error",
            )

        def _edit_refused(self, call: ToolCall) -> Any:
            return self._message(
                call,
                ToolResult.fail(
                    ErrorCode.PERMISSION_DENIED,
                    f"the call of {call.name!r} was not run: an approval covers the exact call "
                    "the user saw, so edits are not accepted",
                    suggestion="Make the call again with the arguments the user asked for.",
                ),
            )

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            """Run a deck tool's call through the session; turn approvals into interrupts."""
            if not self._ours(request):
                return handler(request)
            call = self._call(request)
            try:
                return self._run_call(call)
            except PortalClosedError:
                return self._message(call, portal_closed(call.name))

        def _run_call(self, call: ToolCall) -> Any:
            conversation = self._conversation()
            session, book, run = conversation.bridge.session, conversation.book, (
                conversation.bridge.run
            )
            approval_id = run(pending_flow, session, book, call)
            first = None
            if approval_id is None:
                first = run(call_flow, session, book, call)
                if not needs_approval(first):
                    return self._message(call, first)
                assert first.error is not None
                approval_id = str(first.error.details["approval_id"])
            kind, text = _decision(self._interrupt(call, approval_id, first))
            if kind == "approve":
                return self._message(call, run(answer_flow, session, book, call, True))
            result = run(answer_flow, session, book, call, False, text)
            return self._after_refusal(call, kind, text, result)

        async def awrap_tool_call(
            self, request: Any, handler: Callable[[Any], Awaitable[Any]]
        ) -> Any:
            """Async :meth:`wrap_tool_call`."""
            if not self._ours(request):
                return await handler(request)
            call = self._call(request)
            try:
                return await self._arun_call(call)
            except PortalClosedError:
                return self._message(call, portal_closed(call.name))

        async def _arun_call(self, call: ToolCall) -> Any:
            conversation = self._conversation()
            session, book, arun = conversation.bridge.session, conversation.book, (
                conversation.bridge.arun
            )
            approval_id = await arun(pending_flow, session, book, call)
            first = None
            if approval_id is None:
                first = await arun(call_flow, session, book, call)
                if not needs_approval(first):
                    return self._message(call, first)
                assert first.error is not None
                approval_id = str(first.error.details["approval_id"])
            kind, text = _decision(self._interrupt(call, approval_id, first))
            if kind == "approve":
                result = await arun(answer_flow, session, book, call, True)
                return self._message(call, result)
            result = await arun(answer_flow, session, book, call, False, text)
            return self._after_refusal(call, kind, text, result)

        def _after_refusal(
            self, call: ToolCall, kind: str, text: str | None, result: ToolResult
        ) -> Any:
            if kind == "edit":
                return self._edit_refused(call)
            if kind == "respond" and text is not None:
                # The user answered on the tool's behalf (LangChain's "respond" decision).
                return messages.ToolMessage(
                    content=text, tool_call_id=call.id, name=call.name, status="success"
                )
            return self._message(call, result)

    TooldeckMiddleware.__module__ = __name__
    return TooldeckMiddleware


def _tools_for(conversation: Conversation, hand: Hand) -> list[Any]:
    """The StructuredTools of a hand, made once per hand and conversation."""
    dealt = conversation.state.get("dealt")
    if dealt is not None and [t.name for t in dealt] == hand.names:
        return dealt  # type: ignore[no-any-return]
    tools = [_make_tool(conversation.bridge, d) for d in hand.tools]
    conversation.state["dealt"] = tools
    return tools


def _current_hand(conversation: Conversation, task: str) -> Hand | None:
    hand = conversation.bridge.session.hand
    return hand if hand is not None and hand.query == task else None


def _thread_id() -> str | None:
    """The ``thread_id`` of the LangGraph run this code runs in, if any."""
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable") or {}
    except (ImportError, RuntimeError, LookupError):
        return None
    thread = configurable.get("thread_id")
    return None if thread is None else str(thread)


def _is_deck_tool(tool: Any) -> bool:
    metadata = getattr(tool, "metadata", None)
    return isinstance(metadata, dict) and _MARK in metadata


@functools.cache
def _middleware_class() -> type:
    return _build_middleware()


def __getattr__(name: str) -> Any:
    # TooldeckMiddleware subclasses LangChain's AgentMiddleware, so it is built on first use:
    # importing this module must not need LangChain.
    if name == "TooldeckMiddleware":
        return _middleware_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
