"""Pydantic AI: TooldeckToolset in an Agent, driven end to end by Pydantic AI's own FunctionModel
(and TestModel), including deferred approval of a dangerous call."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ToolReturnPart,
)
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from tooldeck.integrations.pydantic_ai import TooldeckToolset


def scripted(name: str, args: dict[str, Any]) -> tuple[FunctionModel, list[list[str]]]:
    """A model that calls ``name`` once, then answers with the tool's return; and what it saw."""
    offered: list[list[str]] = []

    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        offered.append([t.name for t in info.function_tools])
        returns = [
            p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)
        ]
        if returns:
            return ModelResponse(parts=[TextPart(repr(returns[-1].content))])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id="call_1")])

    return FunctionModel(respond), offered


def _returns(result: Any) -> list[Any]:
    return [
        p.content
        for m in result.all_messages()
        for p in getattr(m, "parts", ())
        if isinstance(p, ToolReturnPart)
    ]


def test_the_toolset_lists_the_hand_for_the_prompt_and_calls_the_deck(session):
    model, offered = scripted("word_count", {"text": "a b c"})
    agent = Agent(model, toolsets=[TooldeckToolset(session)])
    result = asyncio.run(agent.run("how many words are in 'a b c'?"))
    hand = session.session.hand
    assert hand is not None and hand.query == "how many words are in 'a b c'?"
    assert offered == [hand.names, hand.names]
    assert _returns(result) == [{"ok": True, "data": 3}]


def test_with_the_test_model(session):
    # TestModel calls every listed tool with generated arguments; each goes through the deck.
    agent = Agent(TestModel(call_tools=["word_count"]), toolsets=[TooldeckToolset(session)])
    result = asyncio.run(agent.run("count the words of a text"))
    (payload,) = _returns(result)
    assert payload["ok"] is True and isinstance(payload["data"], int)


def test_a_tool_that_was_not_dealt_runs_through_the_widening_fallback(session):
    hand = session.select("how many words are in 'a b c'?")
    assert "weather_forecast" not in hand.names
    model, offered = scripted("weather_forecast", {"city": "Rome"})
    toolset = TooldeckToolset(session, tools=[*hand.names, "weather_forecast"])
    result = asyncio.run(Agent(model, toolsets=[toolset]).run("what is the weather in Rome?"))
    assert _returns(result) == [{"ok": True, "data": "sunny in Rome"}]


@pytest.mark.parametrize("approve", [True, False])
def test_a_dangerous_call_is_deferred_for_approval(session, markers, approve):
    model, _ = scripted("delete_notes", {"folder": "work"})
    agent = Agent(
        model, toolsets=[TooldeckToolset(session)], output_type=[str, DeferredToolRequests]
    )

    async def main() -> Any:
        first = await agent.run("delete the notes in the work folder")
        requests = first.output
        assert isinstance(requests, DeferredToolRequests)
        (call,) = requests.approvals
        assert (call.tool_name, call.args_as_dict()) == ("delete_notes", {"folder": "work"})
        assert requests.metadata[call.tool_call_id]["approval_id"]
        assert markers == []  # nothing ran while the user decides
        answers = DeferredToolResults(approvals={call.tool_call_id: approve})
        return await agent.run(message_history=first.all_messages(), deferred_tool_results=answers)

    result = asyncio.run(main())
    if approve:
        assert markers == ["work"]
        assert _returns(result) == [{"ok": True, "data": "deleted notes in work"}]
        assert session.session.pending_approvals() == {}
    else:
        assert markers == []
        assert "denied" in str(_returns(result)[-1])


def _deferred_first_run(session: Any) -> tuple[Any, Any]:
    model, _ = scripted("delete_notes", {"folder": "work"})
    agent = Agent(
        model, toolsets=[TooldeckToolset(session)], output_type=[str, DeferredToolRequests]
    )
    first = asyncio.run(agent.run("delete the notes in the work folder"))
    assert isinstance(first.output, DeferredToolRequests)
    return model, first


@pytest.mark.parametrize("denial", [False, "ToolDenied"])
def test_a_denied_call_leaves_no_approval_behind(session, markers, denial):
    # Pydantic AI answers a denied call itself: before, the deck's approval stayed pending and
    # session.resume(approval_id) ran the call the user had refused.
    from pydantic_ai import ToolDenied

    model, first = _deferred_first_run(session)
    (call,) = first.output.approvals
    approval_id = first.output.metadata[call.tool_call_id]["approval_id"]
    assert approval_id in session.session.pending_approvals()
    answer = False if denial is False else ToolDenied("not today")
    agent = Agent(
        model, toolsets=[TooldeckToolset(session)], output_type=[str, DeferredToolRequests]
    )
    asyncio.run(agent.run(message_history=first.all_messages(),
                          deferred_tool_results=DeferredToolResults(
                              approvals={call.tool_call_id: answer})))
    assert session.session.pending_approvals() == {}
    late = session.resume(approval_id)
    assert not late.success and markers == []


@pytest.mark.parametrize("approve", [True, False])
def test_a_run_resumed_with_a_new_session_and_toolset_answers_the_call(portal, tmp_path, markers,
                                                                      approve):
    # The resumed run is what a new process does: a new session (no hand) and a new toolset,
    # with the message history saved from the first run. Before, the step listed no tools and
    # Pydantic AI answered "Unknown tool name: 'delete_notes'".
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    first_session = portal.session(workdir=tmp_path)
    model, first = _deferred_first_run(first_session)
    (call,) = first.output.approvals
    saved = ModelMessagesTypeAdapter.dump_json(first.all_messages())
    later = portal.session(workdir=tmp_path)
    assert later.session.hand is None
    agent = Agent(
        model, toolsets=[TooldeckToolset(later)], output_type=[str, DeferredToolRequests]
    )
    result = asyncio.run(agent.run(
        message_history=ModelMessagesTypeAdapter.validate_json(saved),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: approve})))
    if approve:
        assert markers == ["work"]
        assert _returns(result)[-1] == {"ok": True, "data": "deleted notes in work"}
    else:
        assert markers == []
        assert "denied" in str(_returns(result)[-1])
    assert later.session.pending_approvals() == {}
