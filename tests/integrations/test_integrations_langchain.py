"""LangChain 1.x: TooldeckMiddleware in create_agent and to_langchain_tools, driven end to end by
LangChain's own fake chat model (GenericFakeChatModel, taught bind_tools so that the test sees what
the model was offered)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("langchain.agents")
pytest.importorskip("langgraph")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool as lc_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from tooldeck.integrations.langchain import TooldeckMiddleware, to_langchain_tools


class FakeToolModel(GenericFakeChatModel):
    """The fake chat model, plus the bind_tools that create_agent needs; records each offer."""

    offered: list[list[str]] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.offered.append([getattr(t, "name", None) or t["name"] for t in tools])
        return self


def _model(*replies: AIMessage) -> FakeToolModel:
    model = FakeToolModel(messages=iter(replies))
    model.offered = []
    return model


def _call(name: str, args: dict[str, Any], call_id: str = "call_1") -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def _tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def _payload(message: ToolMessage) -> dict[str, Any]:
    return json.loads(message.content)


@lc_tool
def app_clock() -> str:
    """The application's own tool: what time it is."""
    return "noon"


def test_each_model_call_sees_the_hand_and_calls_go_through_the_deck(session):
    model = _model(_call("word_count", {"text": "a b c d"}), AIMessage(content="4 words"))
    agent = create_agent(model, tools=[app_clock], middleware=[TooldeckMiddleware(session)])
    state = agent.invoke({"messages": [("user", "how many words are in 'a b c d'?")]})

    hand = session.session.hand
    assert hand is not None and "word_count" in hand.names
    # Both model calls were offered the app's own tool plus exactly the deck's hand.
    assert model.offered == [["app_clock", *hand.names]] * 2
    (message,) = _tool_messages(state)
    assert message.status == "success"
    assert _payload(message) == {"ok": True, "data": 4}
    assert state["messages"][-1].content == "4 words"


def test_a_tool_that_was_not_dealt_runs_through_the_widening_fallback(session):
    model = _model(
        _call("weather_forecast", {"city": "Paris"}, "c1"),
        _call("wether_forcast", {"city": "Paris"}, "c2"),
        AIMessage(content="done"),
    )
    agent = create_agent(model, middleware=[TooldeckMiddleware(session)])
    state = agent.invoke({"messages": [("user", "how many words are in 'a b c d'?")]})

    assert "weather_forecast" not in session.session.hand.names
    dealt, invented = _tool_messages(state)
    assert _payload(dealt) == {"ok": True, "data": "sunny in Paris"}
    # A name nobody registered reaches the deck too, which names the closest tools.
    assert invented.status == "error"
    error = _payload(invented)["error"]
    assert error["code"] == "TOOL_NOT_FOUND"
    assert "weather_forecast" in error["suggestion"]


@pytest.mark.parametrize("answer", [{"type": "approve"}, {"type": "reject", "message": "keep"}])
def test_a_dangerous_call_is_an_interrupt_and_resuming_answers_that_exact_call(
    session, markers, answer
):
    model = _model(_call("delete_notes", {"folder": "work"}), AIMessage(content="finished"))
    agent = create_agent(
        model, middleware=[TooldeckMiddleware(session)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t1"}}
    state = agent.invoke({"messages": [("user", "delete the notes in the work folder")]}, config)

    (pending,) = state["__interrupt__"]
    request = pending.value
    assert request["type"] == "tool_approval"
    assert (request["name"], request["args"], request["tool_call_id"]) == (
        "delete_notes",
        {"folder": "work"},
        "call_1",
    )
    assert request["approval_id"] in session.session.pending_approvals()
    assert markers == []  # nothing ran while the user decides

    state = agent.invoke(Command(resume=answer), config)
    (message,) = _tool_messages(state)
    if answer["type"] == "approve":
        assert markers == ["work"]
        assert _payload(message) == {"ok": True, "data": "deleted notes in work"}
    else:
        assert markers == []
        assert message.status == "error"
        assert "keep" in _payload(message)["error"]["message"]
    # The one approval the deck asked for was answered: none is left waiting.
    assert session.session.pending_approvals() == {}
    assert state["messages"][-1].content == "finished"


def test_the_async_agent_approves_through_the_same_interrupt(session, markers):
    model = _model(_call("delete_notes", {"folder": "async"}), AIMessage(content="ok"))
    agent = create_agent(
        model, middleware=[TooldeckMiddleware(session)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t2"}}

    async def main() -> dict[str, Any]:
        state = await agent.ainvoke(
            {"messages": [("user", "delete the notes in the async folder")]}, config
        )
        assert state["__interrupt__"] and markers == []
        return await agent.ainvoke(Command(resume={"type": "approve"}), config)

    state = asyncio.run(main())
    assert markers == ["async"]
    assert _payload(_tool_messages(state)[0])["ok"] is True


def test_structured_tools_call_the_session(session, markers):
    hand = session.select("how many words are in a sentence")
    tools = {t.name: t for t in to_langchain_tools(session, hand)}
    assert set(tools) == set(hand.names)
    assert json.loads(tools["word_count"].invoke({"text": "one two"})) == {"ok": True, "data": 2}
    # Without the middleware a dangerous call answers CONFIRMATION_REQUIRED with its approval id.
    (delete,) = to_langchain_tools(session, ["delete_notes"])
    out = delete.invoke(
        {"type": "tool_call", "name": "delete_notes", "args": {"folder": "x"}, "id": "c9"}
    )
    assert out.status == "error"
    error = json.loads(out.content)["error"]
    assert error["code"] == "CONFIRMATION_REQUIRED"
    assert session.resume(error["details"]["approval_id"]).data == "deleted notes in x"
    assert markers == ["x"]


def test_parallel_approvals_are_answered_by_interrupt_id(session, markers):
    both = AIMessage(
        content="",
        tool_calls=[
            {"name": "delete_notes", "args": {"folder": "a"}, "id": "ca"},
            {"name": "delete_notes", "args": {"folder": "b"}, "id": "cb"},
        ],
    )
    model = _model(both, AIMessage(content="finished"))
    agent = create_agent(
        model, middleware=[TooldeckMiddleware(session)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t3"}}
    state = agent.invoke({"messages": [("user", "delete the notes in folders a and b")]}, config)
    by_folder = {i.value["args"]["folder"]: i.id for i in state["__interrupt__"]}
    assert set(by_folder) == {"a", "b"} and markers == []

    answers = {by_folder["a"]: {"type": "approve"}, by_folder["b"]: {"type": "reject"}}
    state = agent.invoke(Command(resume=answers), config)
    assert markers == ["a"]
    results = {m.tool_call_id: _payload(m)["ok"] for m in _tool_messages(state)}
    assert results == {"ca": True, "cb": False}
    assert session.session.pending_approvals() == {}


@pytest.mark.parametrize("kind", ["respond", "edit"])
def test_respond_answers_for_the_tool_and_edit_is_refused(session, markers, kind):
    model = _model(_call("delete_notes", {"folder": "work"}), AIMessage(content="finished"))
    agent = create_agent(
        model, middleware=[TooldeckMiddleware(session)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t4"}}
    agent.invoke({"messages": [("user", "delete the notes in the work folder")]}, config)
    answer: dict[str, Any] = {"type": kind, "message": "already empty"}
    if kind == "edit":
        answer = {
            "type": "edit",
            "edited_action": {"name": "delete_notes", "args": {"folder": "/"}},
        }
    state = agent.invoke(Command(resume=answer), config)
    (message,) = _tool_messages(state)
    assert markers == []
    if kind == "respond":
        assert (message.status, message.content) == ("success", "already empty")
    else:
        assert message.status == "error"
        assert "edits are not accepted" in _payload(message)["error"]["message"]
    assert session.session.pending_approvals() == {}
