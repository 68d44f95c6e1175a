"""Framework adapters fed the worst a prompt-injected model (or an odd host) can give them.

Each framework runs for real (LangChain's tool invocation, the Agents SDK's Runner, Pydantic AI's
Agent, llm's chain) with a scripted model; the deck behind them is real (schema rules, runner,
the policy's redaction), without a retriever: tools are given by name.

- Arguments nested 100,000 deep reach LangChain's ``run``, which writes them with ``str()`` for
  its callbacks: the model must get INVALID_ARGUMENTS, not a ``RecursionError`` out of ``invoke``.
- A result holding a lone UTF-16 surrogate (a file name read with ``surrogateescape``, an
  ``"\\ud800"`` escape in the model's own JSON) must reach the model as text that encodes as
  UTF-8: the provider SDKs encode request bodies strictly and ended the run.
- A call made after the session's portal closed must answer CANCELLED to the model instead of
  raising ``PortalClosedError`` out of the framework's tool.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tooldeck import ExecutionConfig, ToolDefinition
from tooldeck.adapters import result_messages
from tooldeck.portal import DeckPortal, PortalSession
from tooldeck.testing import make_deck
from tooldeck_hookspecs import ToolCall, ToolResult

SURROGATE = "name-\udcff-\ud800"


def echo(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return dict(arguments)


def undecodable_name(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    # What os.listdir gives for a file name that is not UTF-8 (surrogateescape).
    return {"files": [b"report-\xff.txt".decode("utf-8", "surrogateescape"), SURROGATE]}


PARAMETERS = {"type": "object", "properties": {"text": {}}}
TOOLS = [
    ToolDefinition(
        name=name, description=f"The {name} tool.", category="api", parameters=PARAMETERS,
        execute=function, execution=ExecutionConfig(cacheable=False),
    )
    for name, function in [("echo", echo), ("list_names", undecodable_name)]
]


def _deck() -> Any:
    return make_deck(load_entry_points=["schema", "runner", "policy"], tools=TOOLS)


@pytest.fixture(scope="module")
def deck_session() -> Iterator[PortalSession]:
    with DeckPortal(_deck()) as portal:
        yield portal.session()


@pytest.fixture
def closed_session() -> PortalSession:
    """A session whose portal (and deck) has been closed."""
    with DeckPortal(_deck()) as portal:
        session = portal.session()
    return session


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _utf8(text: str) -> str:
    text.encode("utf-8")  # raises UnicodeEncodeError for a lone surrogate
    return text


# -------------------------------------------------------------------------------- LangChain


def _lc_invoke(tool: Any, args: Any, mode: str) -> Any:
    call = {"name": tool.name, "args": args, "id": "call_1", "type": "tool_call"}
    return tool.invoke(call) if mode == "sync" else asyncio.run(tool.ainvoke(call))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_langchain_arguments_nested_past_any_schema_are_a_tool_error(deck_session, mode):
    """Was: LangChain's ``run`` wrote the 100,000-deep arguments with ``str()`` for its
    callbacks and ``invoke`` raised RecursionError (the agent's tool step crashed). Now the
    deck tool refuses them before LangChain shows them: an error ToolMessage, INVALID_ARGUMENTS.
    """
    pytest.importorskip("langchain_core.tools")
    from tooldeck.integrations.langchain import to_langchain_tools

    (tool,) = to_langchain_tools(deck_session, ["echo"])
    message = _lc_invoke(tool, {"text": _nested(100_000)}, mode)
    assert message.status == "error"
    error = json.loads(message.content)["error"]
    assert error["code"] == "INVALID_ARGUMENTS"
    assert "nested deeper" in error["message"]
    # Shallow arguments still run.
    assert json.loads(_lc_invoke(tool, {"text": _nested(3)}, mode).content)["ok"] is True


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_langchain_surrogates_in_a_result_reach_the_model_as_utf8(deck_session, mode):
    """Was: the ToolMessage content held lone surrogates (``json.dumps(ensure_ascii=False)``),
    and encoding the request for the provider raised UnicodeEncodeError. Now each surrogate is
    written as its JSON escape: the same value, valid UTF-8."""
    pytest.importorskip("langchain_core.tools")
    from tooldeck.integrations.langchain import to_langchain_tools

    tool, echoing = to_langchain_tools(deck_session, ["list_names", "echo"])
    message = _lc_invoke(tool, {}, mode)
    assert json.loads(_utf8(message.content))["data"]["files"][1] == SURROGATE
    message = _lc_invoke(echoing, {"text": "\ud83d"}, mode)  # the model's own lone surrogate
    assert json.loads(_utf8(message.content))["data"] == {"text": "\ud83d"}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_langchain_call_after_the_portal_closed_is_cancelled(closed_session, mode):
    """Was: PortalClosedError went out of ``invoke`` (not a ToolException, so LangChain did not
    turn it into a ToolMessage) and ended the agent's run. Now: an error ToolMessage,
    CANCELLED, saying the deck is closed."""
    pytest.importorskip("langchain_core.tools")
    from tooldeck.integrations.langchain import to_langchain_tools

    (tool,) = to_langchain_tools(closed_session, ["echo"])
    message = _lc_invoke(tool, {"text": "a"}, mode)
    assert message.status == "error"
    error = json.loads(message.content)["error"]
    assert error["code"] == "CANCELLED" and "closed" in error["message"]


def test_langchain_middleware_call_after_the_portal_closed_is_cancelled(closed_session):
    """Was: the middleware's ``wrap_tool_call`` raised PortalClosedError out of
    ``agent.invoke``. Now the model reads CANCELLED and the agent finishes its run."""
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage

    from tooldeck.integrations.langchain import TooldeckMiddleware

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    model = Model(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "echo", "args": {"text": "a"}, "id": "c1"}]),
        AIMessage(content="done"),
    ]))
    middleware = TooldeckMiddleware(closed_session, task=lambda messages: None)
    state = create_agent(model, middleware=[middleware]).invoke({"messages": [("user", "go")]})
    (message,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(message.content)["error"]["code"] == "CANCELLED"
    assert state["messages"][-1].content == "done"


# ------------------------------------------------------------------------ OpenAI Agents SDK


def test_agents_sdk_surrogates_in_a_result_reach_the_model_as_utf8(deck_session, agents_run):
    """Was: the function call output held lone surrogates, and the request encoding (httpx's
    ``encode_json``) raised UnicodeEncodeError out of ``Runner.run``. Now escaped."""
    pytest.importorskip("agents")
    from tooldeck.integrations.openai_agents import to_function_tools

    # (Arguments with a lone surrogate never reach the tool: SDK 0.24 fingerprints them as
    # strict UTF-8 first and fails the run itself.)
    tools = to_function_tools(deck_session, ["list_names"])
    assert agents_run(tools, "list_names", "{}")["data"]["files"][1] == SURROGATE


def test_agents_sdk_call_after_the_portal_closed_is_cancelled(closed_session, agents_run):
    """Was: PortalClosedError out of ``on_invoke_tool`` made ``Runner.run`` raise. Now the
    model reads CANCELLED and the run ends normally."""
    pytest.importorskip("agents")
    from tooldeck.integrations.openai_agents import to_function_tools

    tools = to_function_tools(closed_session, ["echo"])
    assert agents_run(tools, "echo", '{"text": "a"}')["error"]["code"] == "CANCELLED"


# ------------------------------------------------------------------------------ Pydantic AI


def _pydantic_ai_run(session: PortalSession, name: str) -> tuple[Any, bytes]:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent, ToolReturnPart
    from pydantic_ai.messages import (
        ModelMessagesTypeAdapter,
        ModelResponse,
        TextPart,
        ToolCallPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from tooldeck.integrations.pydantic_ai import TooldeckToolset

    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for m in messages for p in getattr(m, "parts", ())):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(name, {}, tool_call_id="call_1")])

    toolset = TooldeckToolset(session, tools=[name])
    result = asyncio.run(Agent(FunctionModel(respond), toolsets=[toolset]).run("go"))
    (content,) = [p.content for m in result.all_messages() for p in getattr(m, "parts", ())
                  if isinstance(p, ToolReturnPart)]
    # What Pydantic AI writes when it stores or sends the history (pydantic-core, strict UTF-8).
    return content, ModelMessagesTypeAdapter.dump_json(result.all_messages())


def test_pydantic_ai_surrogates_in_a_result_serialise(deck_session):
    """Was: the tool return held lone surrogates and pydantic-core's JSON serialiser raised
    PydanticSerializationError on the run's messages. Now they read U+FFFD."""
    content, dumped = _pydantic_ai_run(deck_session, "list_names")
    assert content["data"]["files"][1] == "name-\ufffd-\ufffd"
    assert b"report-" in dumped


def test_pydantic_ai_call_after_the_portal_closed_is_cancelled(closed_session):
    """Was: PortalClosedError out of ``call_tool`` ended ``agent.run``. Now CANCELLED."""
    content, _ = _pydantic_ai_run(closed_session, "echo")
    assert content["error"]["code"] == "CANCELLED"


# -------------------------------------------------------------------------------------- llm


def test_llm_surrogates_and_a_closed_portal(deck_session, closed_session, llm_model):
    """Was: the tool output held lone surrogates (not encodable for any provider request), and
    after the portal closed the tool raised PortalClosedError (llm showed the model its bare
    text). Now the output is UTF-8-safe JSON, and a closed portal answers CANCELLED."""
    pytest.importorskip("llm")
    from tooldeck.integrations.llm import to_llm_tools

    tools = to_llm_tools(deck_session, ["list_names"])
    out = llm_model("list_names", {}).chain("go", tools=tools).text()
    assert json.loads(_utf8(out))["data"]["files"][1] == SURROGATE
    tools = to_llm_tools(closed_session, ["echo"])
    out = llm_model("echo", {"text": "a"}).chain("go", tools=tools).text()
    assert json.loads(out)["error"]["code"] == "CANCELLED"


# ------------------------------------------------------------------------- provider adapters


@pytest.mark.parametrize("format", ["openai", "openai-responses", "anthropic", "mcp"])
def test_provider_result_text_with_surrogates_encodes_as_utf8(format):
    """Was: ``result_messages`` wrote lone surrogates into each result's JSON text, which the
    provider SDKs cannot encode (UnicodeEncodeError). Now each is escaped: the same value."""
    result = ToolResult.ok({"files": [SURROGATE]})
    (message,) = result_messages(
        format, [(ToolCall(name="list_names", arguments={}, id="c1"), result)]
    )
    text = {
        "openai": lambda m: m["content"],
        "openai-responses": lambda m: m["output"],
        "anthropic": lambda m: m["content"][0]["content"],
        "mcp": lambda m: m["content"][0]["text"],
    }[format](message)
    assert json.loads(_utf8(text))["data"] == {"files": [SURROGATE]}


# ---------------------------------------------------------------------------- trio callers


def test_async_entry_point_awaited_from_trio_cancels_the_deck_call():
    """Was: awaited from trio code, the adapters waited for the portal's loop in a worker
    thread trio cannot abandon: ``move_on_after`` around the Agents SDK's ``on_invoke_tool``
    had no effect until the tool ended (8 s of an 8 s tool, measured), and the tool ran to its
    end. Now the caller's cancellation cancels the call on the deck's loop and returns at once.
    """
    pytest.importorskip("agents")
    import threading

    import trio
    from agents.tool_context import ToolContext

    from tooldeck.integrations.openai_agents import to_function_tools

    started, cancelled = threading.Event(), threading.Event()

    async def wait_forever(arguments: dict[str, Any], context: Any) -> str:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    slow = ToolDefinition(
        name="wait_forever", description="Wait.", category="api", parameters=PARAMETERS,
        execute=wait_forever, execution=ExecutionConfig(cacheable=False, timeout_s=10.0),
    )
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[slow])
    returned: list[Any] = []
    with DeckPortal(deck) as portal:
        (tool,) = to_function_tools(portal.session(), ["wait_forever"])
        context = ToolContext(
            context=None, tool_name="wait_forever", tool_call_id="c1", tool_arguments="{}"
        )

        async def main() -> None:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    async def call() -> None:
                        returned.append(await tool.on_invoke_tool(context, "{}"))

                    nursery.start_soon(call)
                    await trio.to_thread.run_sync(started.wait, 60)
                    scope.cancel()  # the framework gives up on the call

        trio.run(main)
        assert cancelled.wait(60), "the deck call was not cancelled"
    # Before: the tool's own 10 s timeout ended it, and on_invoke_tool returned its TIMEOUT.
    assert returned == []
