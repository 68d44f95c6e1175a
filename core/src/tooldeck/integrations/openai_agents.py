"""The OpenAI Agents SDK: a hand as ``FunctionTool`` objects that call the deck.

.. code-block:: python

    from agents import Agent, Runner
    from tooldeck.integrations.openai_agents import to_function_tools

    with DeckPortal(Deck.load()) as portal:
        session = portal.session(workdir=".")
        hand = session.select(task)
        agent = Agent(name="worker", tools=to_function_tools(session, hand))
        result = await Runner.run(agent, task)
        while result.interruptions:                       # dangerous calls wait for the user
            state = result.to_state()
            for item in result.interruptions:
                state.approve(item)                       # or state.reject(item)
            result = await Runner.run(agent, state)

A tool the deck always confirms (``dangerous``, or ``require_confirm``) declares the SDK's
``needs_approval``, so the run stops with an interruption before anything runs; approving it in
the ``RunState`` runs exactly that call once through the deck (the deck's approval is created and
answered for that call id and those arguments), rejecting it never reaches the tool. A call the
policy asks about only for some arguments answers ``CONFIRMATION_REQUIRED`` with its
``approval_id`` instead, for the application to resume (``session.resume``).

The SDK only lets the model call the tools an ``Agent`` carries. Tools given here that the
session's current hand does not hold (an agent built for an earlier task, or a wider list of
names) still run through the deck's widening fallback, which decides whether they may.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from tooldeck_hookspecs import ToolCall, ToolDefinition, ToolResult

from .._deck import Hand, Session
from ..adapters import _parse_arguments, provider_schema
from ..portal import PortalSession
from ._bridge import (
    ApprovalBook,
    PortalClosedError,
    SessionBridge,
    answer_flow,
    call_flow,
    definitions,
    may_ask,
    portal_closed,
    require,
    result_text,
)

__all__ = ["to_function_tools"]


def _arguments(name: str, raw: str) -> dict[str, Any] | ToolResult:
    """The model's arguments as a dict, or the deck's INVALID_ARGUMENTS answer.

    The same parsing as :func:`tooldeck.adapters.parse_tool_calls`: JSON nested past what any
    schema needs (which would raise ``RecursionError`` out of ``json.loads`` and end the SDK's
    run) is refused like any other bad JSON.
    """
    parsed = _parse_arguments("", name, raw.strip() if isinstance(raw, str) else raw)
    if parsed.error is not None:
        return ToolResult(success=False, error=parsed.error)
    return dict(parsed.call.arguments)


def _function_tool(
    agents: Any, bridge: SessionBridge, book: ApprovalBook, definition: ToolDefinition
) -> Any:
    name = definition.name
    session = bridge.session
    confirms = may_ask(definition)

    async def invoke(context: Any, raw_arguments: str) -> str:
        arguments = _arguments(name, raw_arguments)
        if isinstance(arguments, ToolResult):
            return result_text(arguments)
        call_id = str(getattr(context, "tool_call_id", "") or "")
        call = ToolCall(name=name, arguments=arguments, id=call_id)
        try:
            return result_text(await run(context, call))
        except PortalClosedError:
            return result_text(portal_closed(name))

    async def run(context: Any, call: ToolCall) -> ToolResult:
        call_id = call.id
        if confirms and call_id and context.is_tool_approved(name, call_id) is True:
            # The user approved this call in the RunState: answer the deck's approval for it,
            # for the definition this FunctionTool showed (a tool registered again since then
            # is refused, not run on the strength of an answer about the old one).
            return await bridge.arun(
                functools.partial(answer_flow, shown=definition), session, book, call, True
            )
        return await bridge.arun(call_flow, session, book, call)

    async def always_allowed() -> bool:
        # Bound to the definition the user allowed: a tool registered again differently asks.
        return session.is_always_allowed(name)

    async def needs_approval(context: Any, arguments: dict[str, Any], call_id: str) -> bool:
        # "Always allow this tool" granted in the session makes the deck stop asking (read on the
        # deck's loop, which owns the session).
        try:
            return not await bridge.arun(always_allowed)
        except PortalClosedError:
            return False  # nothing can run: the call answers CANCELLED without asking anyone

    description, parameters = provider_schema(definition)
    return agents.FunctionTool(
        name=name,
        description=description,
        params_json_schema=parameters,
        on_invoke_tool=invoke,
        # The deck validates arguments against the tool's own schema; the SDK's strict mode would
        # rewrite schemas it does not accept.
        strict_json_schema=False,
        needs_approval=needs_approval if confirms else False,
    )


def to_function_tools(
    session: PortalSession | Session, hand: Hand | Iterable[str | ToolDefinition] | None = None
) -> list[Any]:
    """Agents SDK ``FunctionTool`` objects for a hand (or tool names), each calling the session.

    :param session: a :class:`~tooldeck.portal.PortalSession` (the SDK runs on asyncio).
    :param hand: a :class:`~tooldeck.Hand`, tool names or definitions; default the session's hand.
    :raises ImportError: without the SDK (``pip install "tooldeck[openai-agents]"``).
    """
    agents = require("agents", extra="openai-agents", framework="the OpenAI Agents SDK")
    bridge = SessionBridge(session)
    book = ApprovalBook()
    return [_function_tool(agents, bridge, book, d) for d in definitions(bridge.session, hand)]
