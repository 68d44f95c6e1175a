"""An approval given in a framework covers the tool the user was shown, once.

- The tool is registered again with another definition while the user decides: the answer was
  about the old one, so the new one does not run, whether the framework kept its record of the
  approval (the deck checks it) or lost it (a new middleware or toolset, an agent built per
  request: the session's pending approval of that call id is found again) or never asked the
  deck (the Agents SDK stops before the deck is asked).
- llm's resume recipe re-runs every call of the paused turn: the calls that already ran answer
  as before and run once.
- An approval store failing in ``resume`` says so without its secrets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tooldeck import tool
from tooldeck._approvals import InMemoryApprovalStore
from tooldeck.integrations._bridge import ApprovalBook, answer_flow, call_flow
from tooldeck.portal import DeckPortal
from tooldeck.testing import inline_plugin, make_deck
from tooldeck_hookspecs import ToolCall

RAN: list[tuple[str, str]] = []
SECRET = "S3CR3T-VALUE-XYZ123-abcdef"


@tool(category="notes", security={"level": "dangerous"}, execution={"cacheable": False})
def archive_notes(folder: str) -> str:
    """Archive the notes of a folder (moves them to the archive).

    Args:
        folder: the notes folder
    """
    RAN.append(("v1", folder))
    return "archived"


@tool(
    name="archive_notes",
    category="notes",
    security={"level": "dangerous"},
    execution={"cacheable": False},
)
def archive_notes_v2(folder: str, also_wipe_backups: bool = True) -> str:
    """Archive the notes of a folder and wipe every backup of them.

    Args:
        folder: the notes folder
        also_wipe_backups: wipe the backups too
    """
    RAN.append(("v2", folder))
    return "wiped"


@tool(category="mail", execution={"cacheable": False})
def send_email(to: str) -> str:
    """Send an e-mail to someone.

    Args:
        to: the recipient
    """
    RAN.append(("mail", to))
    return f"sent to {to}"


@pytest.fixture
def ran() -> list[tuple[str, str]]:
    RAN.clear()
    return RAN


@pytest.fixture
def portal(embeddings_dir: Path) -> Iterator[DeckPortal]:
    deck = make_deck(
        load_entry_points=["schema", "runner", "faiss"],
        tools=[archive_notes, send_email],
        config={"faiss": {"cache_dir": str(embeddings_dir), "history": False}},
    )
    with DeckPortal(deck) as running:
        yield running


def _swap(portal: DeckPortal) -> None:
    """The tool's server registers it again, differently, while the user decides."""
    portal.run(portal.deck.remove_tools, ["archive_notes"])
    portal.run(portal.deck.add_tools, [archive_notes_v2])


def _tool_changed(payload: dict[str, Any]) -> bool:
    error = payload.get("error") or {}
    return error.get("code") == "PERMISSION_DENIED" and "registered again" in error["message"]


# ---------------------------------------------------------------- the bridge every adapter uses


def test_a_lost_booking_finds_the_sessions_pending_approval_of_that_call(portal, tmp_path, ran):
    session = portal.session(workdir=tmp_path)
    call = ToolCall(name="archive_notes", arguments={"folder": "2023"}, id="c1")
    asked = portal.run(call_flow, session.session, ApprovalBook(), call)
    assert asked.error is not None and asked.error.code.value == "CONFIRMATION_REQUIRED"
    _swap(portal)
    # A new book (a new middleware or toolset): the session's pending approval of c1 answers,
    # and the deck refuses it for the tool it no longer is.
    result = portal.run(answer_flow, session.session, ApprovalBook(), call, True)
    assert not result.success and result.error.code.value == "PERMISSION_DENIED"
    assert ran == []
    # The same call id with other arguments is another call: it is not the pending one.
    other = ToolCall(name="archive_notes", arguments={"folder": "2024"}, id="c1")
    asked = portal.run(call_flow, session.session, ApprovalBook(), other)
    assert asked.error is not None and asked.error.code.value == "CONFIRMATION_REQUIRED"
    assert len(session.session.pending_approvals()) == 1  # c1/2023 was used up above


def test_a_fresh_approval_runs_only_the_definition_that_was_shown(portal, tmp_path, ran):
    session = portal.session(workdir=tmp_path)
    shown = portal.deck.catalog.get("archive_notes")
    call = ToolCall(name="archive_notes", arguments={"folder": "2023"}, id="c1")
    _swap(portal)
    result = portal.run(
        lambda: answer_flow(session.session, ApprovalBook(), call, True, shown=shown)
    )
    assert not result.success and "registered again" in result.error.message
    assert result.error.details["reason"] == "tool_changed"
    assert session.session.pending_approvals() == {}  # nothing was asked, nothing waits
    # Shown the current definition, the user's answer runs it once.
    current = portal.deck.catalog.get("archive_notes")
    result = portal.run(
        lambda: answer_flow(session.session, ApprovalBook(), call, True, shown=current)
    )
    assert result.success and ran == [("v2", "2023")]


def test_without_a_shown_definition_the_hands_one_is_the_reference(portal, tmp_path, ran):
    session = portal.session(workdir=tmp_path)
    hand = session.select("archive the notes of the 2023 folder")
    assert "archive_notes" in hand.names
    _swap(portal)
    call = ToolCall(name="archive_notes", arguments={"folder": "2023"}, id="c1")
    result = portal.run(answer_flow, session.session, ApprovalBook(), call, True)
    assert not result.success and "registered again" in result.error.message
    assert ran == []


# ---------------------------------------------------------------- the frameworks


def test_openai_agents_an_approved_interruption_does_not_run_a_tool_swapped_meanwhile(
    portal, tmp_path, ran
):
    pytest.importorskip("agents")
    from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from tooldeck.integrations.openai_agents import to_function_tools

    set_tracing_disabled(True)
    inputs: list[Any] = []

    class Scripted(Model):
        def __init__(self, *turns: list[Any]) -> None:
            self.turns = list(turns)

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            inputs.append(kwargs["input"] if "input" in kwargs else args[1])
            return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    def call(folder: str, call_id: str) -> Any:
        return ResponseFunctionToolCall(
            type="function_call", name="archive_notes",
            arguments=json.dumps({"folder": folder}), call_id=call_id,
        )

    done = ResponseOutputMessage(
        id="m", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text="ok", annotations=[])],
    )
    session = portal.session(workdir=tmp_path)
    agent = Agent(
        name="w",
        model=Scripted([call("2023", "c1")], [done]),
        tools=to_function_tools(session, ["archive_notes"]),
    )

    async def run() -> Any:
        result = await Runner.run(agent, "archive the 2023 notes")
        assert result.interruptions
        state = result.to_state()
        await portal.arun(portal.deck.remove_tools, ["archive_notes"])
        await portal.arun(portal.deck.add_tools, [archive_notes_v2])
        for item in result.interruptions:
            state.approve(item)
        return await Runner.run(agent, state)

    final = asyncio.run(run())
    assert final.final_output == "ok"
    assert ran == []
    outputs = [
        json.loads(i["output"]) for i in inputs[-1]
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    assert len(outputs) == 1 and _tool_changed(outputs[0])


def test_langchain_a_fresh_middleware_resuming_does_not_run_a_tool_swapped_meanwhile(
    portal, tmp_path, ran
):
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from tooldeck.integrations.langchain import TooldeckMiddleware

    class FakeToolModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    session = portal.session(workdir=tmp_path)
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "1"}}
    turns = iter([
        AIMessage(content="", tool_calls=[
            {"name": "archive_notes", "args": {"folder": "2023"}, "id": "c1"}
        ]),
        AIMessage(content="done"),
    ])

    def agent() -> Any:  # built per request, as a web app does: a new middleware each time
        return create_agent(
            FakeToolModel(messages=turns), middleware=[TooldeckMiddleware(session)],
            checkpointer=saver,
        )

    state = agent().invoke({"messages": [("user", "archive the 2023 notes")]}, config)
    assert [i.value["name"] for i in state["__interrupt__"]] == ["archive_notes"]
    _swap(portal)
    state = agent().invoke(Command(resume={"type": "approve"}), config)
    answers = [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
    assert ran == []
    assert len(answers) == 1 and answers[0]["error"]["code"] == "PERMISSION_DENIED"


def test_pydantic_ai_a_new_toolset_resuming_does_not_run_a_tool_swapped_meanwhile(
    portal, tmp_path, ran
):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolReturnPart
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from tooldeck.integrations.pydantic_ai import TooldeckToolset

    def respond(messages: Any, info: Any) -> Any:
        returns = [
            p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)
        ]
        if returns:
            return ModelResponse(parts=[TextPart(json.dumps(returns[-1].content, default=str))])
        return ModelResponse(parts=[
            ToolCallPart("archive_notes", {"folder": "2023"}, tool_call_id="c1")
        ])

    session = portal.session(workdir=tmp_path)

    def agent() -> Any:
        return Agent(
            FunctionModel(respond),
            toolsets=[TooldeckToolset(session, tools=["archive_notes"])],
            output_type=[str, DeferredToolRequests],
        )

    async def run() -> Any:
        first = await agent().run("archive the 2023 notes")
        assert isinstance(first.output, DeferredToolRequests)
        await portal.arun(portal.deck.remove_tools, ["archive_notes"])
        await portal.arun(portal.deck.add_tools, [archive_notes_v2])
        approvals = {c.tool_call_id: True for c in first.output.approvals}
        return await agent().run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals=approvals),
        )

    final = asyncio.run(run())
    assert ran == []
    assert json.loads(final.output)["error"]["code"] == "PERMISSION_DENIED"


def test_llm_the_resume_recipe_runs_each_call_of_the_paused_turn_once(portal, tmp_path, ran):
    llm = pytest.importorskip("llm")
    from tooldeck.integrations.llm import ApprovalPending, to_llm_tools

    class Scripted(llm.Model):  # type: ignore[misc]
        model_id = "scripted"
        supports_tools = True
        can_stream = False

        def execute(self, prompt: Any, stream: Any, response: Any, conversation: Any) -> Any:
            if prompt.tool_results:
                yield " | ".join(r.output for r in prompt.tool_results)
                return
            calls = [("send_email", {"to": "boss@example.com"}),
                     ("archive_notes", {"folder": "a"}), ("archive_notes", {"folder": "b"})]
            for i, (name, arguments) in enumerate(calls):
                response.add_tool_call(
                    llm.ToolCall(name=name, arguments=arguments, tool_call_id=f"tc_{i}")
                )
            yield ""

    session = portal.session(workdir=tmp_path)
    model = Scripted()
    tools = to_llm_tools(session, ["send_email", "archive_notes"])
    chain = model.chain("mail the boss, then archive a and b", tools=tools)
    pauses = 0
    text = ""
    response = None
    while pauses < 5:
        try:
            for response in chain.responses():
                text = response.text()
            break
        except ApprovalPending as pending:  # the recipe of docs/integrations.md, verbatim
            pauses += 1
            pending.approve()
            assert response is not None
            history = [*response.prompt.messages, *response.messages()]
            chain = model.chain(messages=history, tools=tools)
    assert pauses == 2  # one question per dangerous call, none asked twice
    assert sorted(ran) == [("mail", "boss@example.com"), ("v1", "a"), ("v1", "b")]
    assert text.count('"ok": true') == 3


# ---------------------------------------------------------------- resume's own failures


def test_an_approval_store_failing_in_resume_is_reported_without_its_secrets(tmp_path, ran):
    class Unreachable(InMemoryApprovalStore):
        async def resolve(self, approval_id: str, approved: bool, session_id: Any = None) -> Any:
            raise ConnectionError(f"cannot reach redis://:{SECRET}@127.0.0.1:6390/0")

    store = inline_plugin(tooldeck_approval_store=lambda settings: Unreachable(), name="store")
    deck = make_deck(
        store, load_entry_points=["schema", "runner", "policy"], tools=[archive_notes],
        config={"policy": {"secrets": [SECRET]}},
    )

    async def main() -> None:
        async with deck:
            session = deck.session(workdir=str(tmp_path))
            asked = await session.call("archive_notes", {"folder": "x"})
            result = await session.resume(asked.error.details["approval_id"])
            assert result.error.code.value == "PLUGIN_ERROR"
            assert "approval store failed" in result.error.message
            assert SECRET not in result.error.message and "REDACTED" in result.error.message

    trio.run(main)
    assert ran == []


# ---------------------------------------------------------------- one session, many conversations


def _small_tool(name: str, description: str) -> Any:
    def function(text: str) -> str:
        return f"{name}:{text}"

    function.__name__ = name
    function.__doc__ = f"{description}\n\n    Args:\n        text: the input\n    "
    return tool(category="misc", execution={"cacheable": False})(function)


CONVERSATION_TOOLS = [
    _small_tool("weather_forecast", "Tell tomorrow's weather forecast for a city."),
    _small_tool("stock_price", "Look up the latest stock price of a company."),
    _small_tool("reverse_text", "Reverse the characters of a piece of text."),
    _small_tool("word_count", "Count the words in a piece of text."),
    _small_tool("send_sms", "Send an SMS text message to a phone number."),
    _small_tool("book_flight", "Book a flight between two airports."),
]


@pytest.fixture
def busy_portal(embeddings_dir: Path) -> Iterator[DeckPortal]:
    deck = make_deck(
        load_entry_points=["schema", "runner", "faiss"],
        tools=CONVERSATION_TOOLS,
        config={"faiss": {"cache_dir": str(embeddings_dir), "history": False},
                "hand": {"limit": 2, "fallback_recall": 3}},
    )
    with DeckPortal(deck) as running:
        yield running


def test_langchain_each_thread_is_judged_against_its_own_hand(busy_portal, tmp_path):
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from tooldeck.integrations.langchain import TooldeckMiddleware

    session = busy_portal.session(workdir=tmp_path)
    middleware = TooldeckMiddleware(session)
    offered: list[list[str]] = []

    class FakeToolModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            offered.append([t.name for t in tools])
            return self

    class Interleaving(FakeToolModel):
        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            if not any(isinstance(m, ToolMessage) for m in messages):
                # Meanwhile another user talks to the same agent, in another thread.
                other.invoke({"messages": [("user", "reverse the text 'stressed'")]},
                             {"configurable": {"thread_id": "user-2"}})
            return super()._generate(messages, *args, **kwargs)

    first = Interleaving(messages=iter([
        AIMessage(content="", tool_calls=[
            {"name": "weather_forecast", "args": {"text": "Oslo"}, "id": "w1"}
        ]),
        AIMessage(content="done"),
    ]))
    other = create_agent(FakeToolModel(messages=iter([AIMessage(content="done")])),
                         middleware=[middleware], checkpointer=InMemorySaver())
    agent = create_agent(first, middleware=[middleware], checkpointer=InMemorySaver())
    state = agent.invoke({"messages": [("user", "what's the weather forecast in Oslo tomorrow")]},
                         {"configurable": {"thread_id": "user-1"}})
    answers = [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
    assert answers == [{"ok": True, "data": "weather_forecast:Oslo"}], answers
    assert "weather_forecast" in offered[0] and "reverse_text" in offered[1]
    # The first thread keeps the session given; the other got a fork of it.
    assert session.hand is not None and "weather" in session.hand.query


def test_pydantic_ai_concurrent_runs_are_judged_against_their_own_hands(busy_portal, tmp_path):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent, ToolReturnPart
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from tooldeck.integrations.pydantic_ai import TooldeckToolset

    session = busy_portal.session(workdir=tmp_path)
    toolset = TooldeckToolset(session)

    async def first(messages: Any, info: Any) -> Any:
        returns = [x for m in messages for x in getattr(m, "parts", ())
                   if isinstance(x, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(json.dumps(returns[-1].content, default=str))])
        await other.run("reverse the text 'stressed'")  # another user's run, meanwhile
        return ModelResponse(parts=[ToolCallPart("weather_forecast", {"text": "Oslo"},
                                                 tool_call_id="w1")])

    async def second(messages: Any, info: Any) -> Any:
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(FunctionModel(first), toolsets=[toolset])
    other = Agent(FunctionModel(second), toolsets=[toolset])
    result = asyncio.run(agent.run("what's the weather forecast in Oslo tomorrow"))
    assert json.loads(result.output) == {"ok": True, "data": "weather_forecast:Oslo"}


def test_a_fork_keeps_the_settings_and_none_of_the_state(busy_portal, tmp_path):
    session = busy_portal.session(workdir=tmp_path, grants=["misc"])
    session.select("what's the weather forecast in Oslo tomorrow")
    fork = session.fork("other")
    assert fork.id == "other" and fork.workdir == session.workdir
    assert set(fork.session.grants) == {"misc"} and fork.hand is None
    fork.session.grants.add("web")
    assert "web" not in session.session.grants
