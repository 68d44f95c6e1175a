"""The OpenAI Agents SDK: to_function_tools in an Agent run by the SDK's Runner, driven end to end
by a scripted implementation of the SDK's own ``Model`` interface."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tooldeck.integrations.openai_agents import to_function_tools

set_tracing_disabled(True)


def _call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> Any:
    return ResponseFunctionToolCall(
        type="function_call", name=name, arguments=json.dumps(arguments), call_id=call_id
    )


def _say(text: str) -> Any:
    return ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """Answers each turn with the next scripted output; records the tools and inputs it got."""

    def __init__(self, *turns: list[Any]) -> None:
        self.turns = list(turns)
        self.offered: list[list[str]] = []
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions, input, model_settings, tools, *a, **kw):
        self.offered.append([t.name for t in tools])
        self.inputs.append(input)
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _outputs(model: ScriptedModel) -> list[dict[str, Any]]:
    """The function-call outputs the model was sent on its last turn, as the deck's JSON."""
    items = [i for i in model.inputs[-1] if isinstance(i, dict)]
    return [json.loads(i["output"]) for i in items if i.get("type") == "function_call_output"]


def test_a_normal_call_runs_through_the_deck(session):
    hand = session.select("how many words are in 'a b c'?")
    model = ScriptedModel([_call("word_count", {"text": "a b c"})], [_say("3")])
    agent = Agent(name="w", model=model, tools=to_function_tools(session, hand))
    result = asyncio.run(Runner.run(agent, "how many words are in 'a b c'?"))
    assert result.final_output == "3"
    assert model.offered[0] == hand.names
    assert _outputs(model) == [{"ok": True, "data": 3}]


def test_a_tool_that_was_not_dealt_runs_through_the_widening_fallback(session):
    hand = session.select("how many words are in 'a b c'?")
    assert "weather_forecast" not in hand.names
    model = ScriptedModel([_call("weather_forecast", {"city": "Oslo"})], [_say("sunny")])
    tools = to_function_tools(session, [*hand.names, "weather_forecast"])
    agent = Agent(name="w", model=model, tools=tools)
    asyncio.run(Runner.run(agent, "how many words are in 'a b c'?"))
    assert _outputs(model) == [{"ok": True, "data": "sunny in Oslo"}]


@pytest.mark.parametrize("approve", [True, False])
def test_approval_round_trip_through_the_run_state(session, markers, approve):
    hand = session.select("delete the notes in the work folder")
    model = ScriptedModel([_call("delete_notes", {"folder": "work"})], [_say("done")])
    agent = Agent(name="w", model=model, tools=to_function_tools(session, hand))

    async def main() -> Any:
        result = await Runner.run(agent, "delete the notes in the work folder")
        (item,) = result.interruptions
        assert item.name == "delete_notes" and json.loads(item.arguments) == {"folder": "work"}
        assert markers == []  # nothing ran while the user decides
        state = result.to_state()
        if approve:
            state.approve(item)
        else:
            state.reject(item)
        return await Runner.run(agent, state)

    result = asyncio.run(main())
    assert result.final_output == "done"
    if approve:
        assert markers == ["work"]
        assert _outputs(model) == [{"ok": True, "data": "deleted notes in work"}]
    else:
        assert markers == []
    assert session.session.pending_approvals() == {}


def test_bad_json_arguments_are_an_answer_not_a_crash(session):
    (tool,) = to_function_tools(session, ["word_count"])

    class Context:
        tool_call_id = "c1"

    out = json.loads(asyncio.run(tool.on_invoke_tool(Context(), "{not json")))
    assert out["error"]["code"] == "INVALID_ARGUMENTS"
