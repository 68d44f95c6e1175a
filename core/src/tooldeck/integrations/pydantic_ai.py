"""Pydantic AI: the deck as a toolset whose tools are the hand for the run's task.

.. code-block:: python

    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from tooldeck.integrations.pydantic_ai import TooldeckToolset

    with DeckPortal(Deck.load()) as portal:
        session = portal.session(workdir=".")
        agent = Agent(model, toolsets=[TooldeckToolset(session)],
                      output_type=[str, DeferredToolRequests])
        result = await agent.run("delete the build folder")
        if isinstance(result.output, DeferredToolRequests):   # dangerous calls wait for the user
            answers = DeferredToolResults(
                approvals={c.tool_call_id: True for c in result.output.approvals})  # or False
            result = await agent.run(message_history=result.all_messages(),
                                     deferred_tool_results=answers)

Each run step lists the hand the deck deals for the run's prompt (selected once per prompt; a run
resumed without a prompt keeps the session's current hand, or, in a new process or session, deals
the hand for the history's last user prompt), plus the tools of the calls the resumed run answers.
Every call goes through the session. A call the deck holds for approval becomes Pydantic AI's
approval-required deferred call (``ApprovalRequired``, with the deck's ``approval_id`` and reasons
in its metadata); approving it in ``DeferredToolResults`` runs exactly that call once; denying it
never reaches the tool, and the deck's pending approval is denied at the run's next step (it can
no longer be resumed, here or in a process sharing the approval store).

Pydantic AI only lets the model call the tools a step lists: pass ``tools=`` (a hand or names) to
list a fixed set instead; tools in it that the session's current hand does not hold still run
through the deck's widening fallback, which decides whether they may.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tooldeck_hookspecs import ToolCall, ToolDefinition

from .._deck import Hand, Session
from ..adapters import provider_schema
from ..portal import PortalSession
from ._bridge import (
    ApprovalBook,
    Conversation,
    Conversations,
    PortalClosedError,
    answer_flow,
    call_flow,
    definitions,
    needs_approval,
    portal_closed,
    require,
    result_value,
)

__all__ = ["TooldeckToolset"]

if TYPE_CHECKING:
    #: Built on first access (see ``__getattr__``): it subclasses Pydantic AI's AbstractToolset.
    TooldeckToolset: type


def _require(module: str) -> Any:
    return require(module, extra="pydantic-ai", framework="Pydantic AI (pydantic-ai-slim)")


def _prompt_text(prompt: str | Sequence[Any] | None) -> str | None:
    if prompt is None:
        return None
    if isinstance(prompt, str):
        return prompt.strip() or None
    # A multi-part prompt: its text parts (images and files do not describe the task in words).
    text = " ".join(part for part in prompt if isinstance(part, str)).strip()
    return text or None


def _history_task(messages: Sequence[Any]) -> str | None:
    """The last user prompt in a run's message history (a run resumed without a prompt, in a
    new process or with a new session, is still about that task)."""
    for message in reversed(messages or ()):
        for part in reversed(getattr(message, "parts", ()) or ()):
            if getattr(part, "part_kind", None) == "user-prompt":
                return _prompt_text(getattr(part, "content", None))
    return None


#: Message parts that answer a tool call (its result, or a request to retry it).
_ANSWERS = ("tool-return", "retry-prompt")


def _unanswered_calls(messages: Sequence[Any]) -> list[str]:
    """Tool names of the calls in the history's last model response that no tool return or
    retry prompt answered yet (the deferred calls a resumed run is about to answer)."""
    answered: set[str] = set()
    for message in reversed(messages or ()):
        parts = getattr(message, "parts", ()) or ()
        if getattr(message, "kind", None) == "response":
            return list(dict.fromkeys(
                str(p.tool_name) for p in parts
                if getattr(p, "part_kind", None) == "tool-call" and p.tool_call_id not in answered
            ))
        answered.update(
            str(p.tool_call_id) for p in parts
            if getattr(p, "part_kind", None) in _ANSWERS
        )
    return []


def _answered_ids(messages: Sequence[Any]) -> set[str]:
    """Ids of the tool calls the history answered (a tool return or a retry prompt)."""
    return {
        str(part.tool_call_id)
        for message in messages or ()
        for part in getattr(message, "parts", ()) or ()
        if getattr(part, "part_kind", None) in _ANSWERS
    }


async def _retire(session: Session, book: ApprovalBook, answered: set[str]) -> None:
    """On the deck's loop (the session's pending calls and the book live there): deny every
    pending approval whose call the history answered."""
    for approval_id, call in session.pending_approvals().items():
        if call.id and call.id in answered:
            book.forget(str(call.id))
            await session.deny(approval_id)


def _build_toolset() -> type:
    pydantic_ai = _require("pydantic_ai")
    pydantic_core = _require("pydantic_core")
    # The deck validates arguments against the tool's own schema: accept any object here.
    any_object = pydantic_core.SchemaValidator(
        pydantic_core.core_schema.dict_schema(
            pydantic_core.core_schema.str_schema(), pydantic_core.core_schema.any_schema()
        )
    )

    class TooldeckToolset(pydantic_ai.AbstractToolset):  # type: ignore[misc,name-defined]
        """A Pydantic AI toolset serving the deck's hand for the run's task.

        :param session: a :class:`~tooldeck.portal.PortalSession` (Pydantic AI runs on asyncio).
        :param tools: list these tools (a hand, names or definitions) instead of selecting a hand
            per prompt.
        :param id: the toolset's id (needed for durable execution).
        :param max_retries: how often the model may retry a call (Pydantic AI's ``ModelRetry``).
        """

        def __init__(
            self,
            session: PortalSession | Session,
            *,
            tools: Hand | Iterable[str | ToolDefinition] | None = None,
            id: str | None = None,
            max_retries: int = 1,
        ) -> None:
            self.session = session
            # Conversation id -> its session: the first conversation is served by the session
            # given, each other by a fork of it, so concurrent runs of one agent (many users)
            # never judge their calls against another run's hand or share its approvals.
            self._conversations = Conversations(session)
            base = self._conversations.default.bridge.session
            self._fixed = None if tools is None else definitions(base, tools)
            self._id = id
            self.max_retries = max_retries

        def _conversation(self, ctx: Any) -> Conversation:
            key = getattr(ctx, "conversation_id", None)
            return self._conversations.get(None if key is None else str(key))

        @property
        def id(self) -> str | None:
            """The toolset's id, as given."""
            return self._id

        async def _definitions(self, ctx: Any) -> list[ToolDefinition]:
            if self._fixed is not None:
                return self._fixed
            bridge = self._conversation(ctx).bridge
            session = bridge.session
            task = _prompt_text(ctx.prompt)
            hand = session.hand
            messages = getattr(ctx, "messages", None) or []
            if task is None and hand is None:
                # Resumed without a prompt in a new process (or with a new session): the task
                # is the history's last user prompt, so the deferred calls' tools are listed.
                task = _history_task(messages)
            if task is not None and (hand is None or hand.query != task):
                hand = await bridge.arun(session.select, task)
            listed = list(hand.tools) if hand is not None else []
            # The calls a resumed run answers now (approved ones run here) must name listed
            # tools, even one the model reached through the deck's widening fallback.
            names = {d.name for d in listed}
            catalog = session.deck.catalog
            for name in _unanswered_calls(messages):
                found = catalog.get(name) if name not in names else None
                if found is not None:
                    listed.append(found)
                    names.add(name)
            return listed

        async def _retire_answered(self, ctx: Any) -> None:
            """Deny the deck approvals of calls the run answered without running them through
            this toolset (``DeferredToolResults`` with ``False`` or ``ToolDenied``, or a result
            given directly): else the call the user refused stayed pending, and an approvals UI
            or a process sharing the approval store could still run it."""
            conversation = self._conversation(ctx)
            session = conversation.bridge.session
            # A size read from this thread (atomic), to spare the hop to the deck's loop on
            # the steps of a session with nothing pending, which are nearly all of them.
            if not session._pending:
                return
            answered = _answered_ids(getattr(ctx, "messages", None) or [])
            if answered:
                await conversation.bridge.arun(_retire, session, conversation.book, answered)

        async def get_tools(self, ctx: Any) -> dict[str, Any]:
            """The tools of this step: the hand for the run's prompt (or the fixed list)."""
            await self._retire_answered(ctx)
            tools = {}
            for d in await self._definitions(ctx):
                description, parameters = provider_schema(d)
                tools[d.name] = pydantic_ai.ToolsetTool(
                    toolset=self,
                    tool_def=pydantic_ai.ToolDefinition(
                        name=d.name,
                        description=description,
                        parameters_json_schema=parameters,
                        metadata={"tooldeck": True, "category": d.category},
                    ),
                    max_retries=self.max_retries,
                    args_validator=any_object,
                )
            return tools

        async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
            """Run the call through the session; a call needing approval is deferred for it."""
            call = ToolCall(name=name, arguments=tool_args, id=str(ctx.tool_call_id or ""))
            conversation = self._conversation(ctx)
            bridge, book = conversation.bridge, conversation.book
            session = bridge.session
            try:
                if ctx.tool_call_approved:
                    result = await bridge.arun(answer_flow, session, book, call, True)
                else:
                    result = await bridge.arun(call_flow, session, book, call)
            except PortalClosedError:
                return result_value(portal_closed(name))
            if not ctx.tool_call_approved and needs_approval(result):
                assert result.error is not None
                raise pydantic_ai.ApprovalRequired(
                    metadata={
                        "approval_id": result.error.details.get("approval_id"),
                        "reasons": result.error.details.get("reasons", []),
                        "message": result.error.message,
                    }
                )
            return result_value(result)

    TooldeckToolset.__module__ = __name__
    return TooldeckToolset


@functools.cache
def _toolset_class() -> type:
    return _build_toolset()


def __getattr__(name: str) -> Any:
    # TooldeckToolset subclasses Pydantic AI's AbstractToolset, so it is built on first use:
    # importing this module must not need Pydantic AI.
    if name == "TooldeckToolset":
        return _toolset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
