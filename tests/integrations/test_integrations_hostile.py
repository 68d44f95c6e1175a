"""Framework adapters fed tools whose schemas and parameter names are hostile to the framework.

Each framework runs its own loop (llm's chain, the Agents SDK's Runner, Pydantic AI's Agent,
LangChain's tool invocation) with a scripted model; the deck behind them is real (schema rules,
runner), without a retriever: tools are given by name.

- A parameter named like a keyword the framework injects (llm's ``llm_tool_call``, the Agents
  SDK's and Pydantic AI's ``ctx`` / ``context``, LangChain's ``config``) or that is no Python
  identifier must reach the tool as the model sent it.
- A tool whose parameters have ``anyOf`` at the top (OpenAI and Anthropic refuse the whole request
  for it) reaches each framework as a plain object schema, and the deck still enforces the
  alternatives.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tooldeck import ExecutionConfig, ToolDefinition
from tooldeck.portal import DeckPortal, PortalSession
from tooldeck.testing import make_deck

ODD = ["llm_tool_call", "self", "ctx", "context", "config", "run_manager", "callbacks",
       "tool_call_id", "class", "user name", "a.b", "ünï"]

SOURCE = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "url": {"type": "string"}},
    "anyOf": [{"required": ["path"]}, {"required": ["url"]}],
}


def echo(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return dict(arguments)


TOOLS = [
    ToolDefinition(
        name="odd_names", description="Echo arguments with odd names.", category="api",
        parameters={"type": "object", "properties": {n: {"type": "string"} for n in ODD}},
        execute=echo, execution=ExecutionConfig(cacheable=False),
    ),
    ToolDefinition(
        name="open_source", description="Open a source.", category="api",
        parameters=SOURCE, execute=echo, execution=ExecutionConfig(cacheable=False),
    ),
]
ARGUMENTS = {n: f"value of {n}" for n in ODD}


@pytest.fixture(scope="module")
def deck_session() -> Iterator[PortalSession]:
    deck = make_deck(load_entry_points=["schema", "runner"], tools=TOOLS)
    with DeckPortal(deck) as portal:
        yield portal.session()


def _plain_top(schema: dict[str, Any]) -> None:
    assert schema["type"] == "object"
    assert not {"anyOf", "oneOf", "allOf"} & set(schema), schema
    assert set(schema["properties"]) == {"path", "url"}


# ------------------------------------------------------------------------------------- llm


def test_llm_parameter_named_like_its_injected_keyword_reaches_the_tool(
    deck_session, llm_model
):
    pytest.importorskip("llm")
    from tooldeck.integrations.llm import to_llm_tools

    tools = to_llm_tools(deck_session, ["odd_names"])
    out = llm_model("odd_names", ARGUMENTS).chain("echo", tools=tools).text()
    assert json.loads(out) == {"ok": True, "data": ARGUMENTS}


def test_llm_gets_a_plain_object_schema_and_the_deck_enforces_the_rest(
    deck_session, llm_model
):
    pytest.importorskip("llm")
    from tooldeck.integrations.llm import to_llm_tools

    (tool,) = to_llm_tools(deck_session, ["open_source"])
    _plain_top(tool.input_schema)
    assert "(path) or (url)" in tool.description
    out = llm_model("open_source", {}).chain("open", tools=[tool]).text()
    assert json.loads(out)["error"]["code"] == "INVALID_ARGUMENTS"


# ------------------------------------------------------------------------ OpenAI Agents SDK


def test_agents_sdk_odd_names_and_a_plain_object_schema(deck_session, agents_run):
    pytest.importorskip("agents")
    from tooldeck.integrations.openai_agents import to_function_tools

    odd, source = to_function_tools(deck_session, ["odd_names", "open_source"])
    assert agents_run([odd], "odd_names", json.dumps(ARGUMENTS)) == {"ok": True,
                                                                     "data": ARGUMENTS}
    _plain_top(source.params_json_schema)
    assert "(path) or (url)" in source.description
    refused = agents_run([source], "open_source", "{}")
    assert refused["error"]["code"] == "INVALID_ARGUMENTS"


# ------------------------------------------------------------------------------ Pydantic AI


def _pydantic_ai_run(deck_session: PortalSession, name: str, args: dict[str, Any]) -> Any:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent, ToolReturnPart
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from tooldeck.integrations.pydantic_ai import TooldeckToolset

    offered: list[Any] = []

    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        offered.extend(info.function_tools)
        if any(isinstance(p, ToolReturnPart) for m in messages for p in getattr(m, "parts", ())):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id="call_1")])

    toolset = TooldeckToolset(deck_session, tools=[name])
    result = asyncio.run(Agent(FunctionModel(respond), toolsets=[toolset]).run("go"))
    (content,) = [p.content for m in result.all_messages() for p in getattr(m, "parts", ())
                  if isinstance(p, ToolReturnPart)]
    return content, offered[0]


def test_pydantic_ai_odd_names_and_a_plain_object_schema(deck_session):
    content, _ = _pydantic_ai_run(deck_session, "odd_names", ARGUMENTS)
    assert content == {"ok": True, "data": ARGUMENTS}
    refused, offered = _pydantic_ai_run(deck_session, "open_source", {})
    _plain_top(offered.parameters_json_schema)
    assert "(path) or (url)" in offered.description
    assert refused["error"]["code"] == "INVALID_ARGUMENTS"


# -------------------------------------------------------------------------------- LangChain


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_langchain_odd_names_and_a_plain_object_schema(deck_session, mode):
    pytest.importorskip("langchain_core.tools")
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from tooldeck.integrations.langchain import to_langchain_tools

    odd, source = to_langchain_tools(deck_session, ["odd_names", "open_source"])
    call = {"name": "odd_names", "args": ARGUMENTS, "id": "call_1", "type": "tool_call"}
    output = odd.invoke(call) if mode == "sync" else asyncio.run(odd.ainvoke(call))
    assert json.loads(output.content) == {"ok": True, "data": ARGUMENTS}
    sent = convert_to_openai_tool(source)["function"]
    _plain_top(sent["parameters"])
    assert "(path) or (url)" in sent["description"]
    call = {"name": "open_source", "args": {}, "id": "call_2", "type": "tool_call"}
    refused = source.invoke(call) if mode == "sync" else asyncio.run(source.ainvoke(call))
    assert refused.status == "error"
    assert json.loads(refused.content)["error"]["code"] == "INVALID_ARGUMENTS"


@pytest.mark.parametrize(
    "raw",
    ["[" * 100_000 + "]" * 100_000, '{"path": ' * 100_000 + "1" + "}" * 100_000],
    ids=["deep-array", "deep-object"],
)
def test_agents_sdk_arguments_nested_past_any_schema_are_invalid_arguments(deck_session, raw):
    """JSON nested past Python's recursion limit is refused, not raised out of the tool.

    Called through the tool's own ``on_invoke_tool``, as the Runner does: the Runner of SDK 0.24
    itself parses the same string first (to de-duplicate calls) and fails the run there.
    """
    agents = pytest.importorskip("agents")
    from agents.tool_context import ToolContext

    from tooldeck.integrations.openai_agents import to_function_tools

    (source,) = to_function_tools(deck_session, ["open_source"])
    context = ToolContext(
        context=None, tool_name="open_source", tool_call_id="call_9", tool_arguments=raw
    )
    assert isinstance(source, agents.FunctionTool)
    output = json.loads(asyncio.run(source.on_invoke_tool(context, raw)))
    assert output["ok"] is False and output["error"]["code"] == "INVALID_ARGUMENTS"
