"""simonw/llm: to_llm_tools in llm's own chain loop, driven end to end by a scripted ``llm.Model``
(llm ships no mock model; this is the plugin API a model plugin implements), including a chain
paused for approval and resumed."""

from __future__ import annotations

import json
from typing import Any

import pytest

llm = pytest.importorskip("llm")

from tooldeck.integrations.llm import ApprovalPending, to_llm_tools  # noqa: E402


class ScriptedModel(llm.Model):
    """Calls one tool on the first turn, then repeats the tool's output as its answer."""

    model_id = "tooldeck-scripted"
    supports_tools = True
    can_stream = False

    def __init__(self, name: str, arguments: dict[str, Any]) -> None:
        self.call = (name, arguments)
        self.offered: list[list[str]] = []

    def execute(self, prompt: Any, stream: bool, response: Any, conversation: Any) -> Any:
        self.offered.append([t.name for t in prompt.tools])
        if prompt.tool_results:
            yield " | ".join(r.output for r in prompt.tool_results)
            return
        name, arguments = self.call
        response.add_tool_call(llm.ToolCall(name=name, arguments=arguments, tool_call_id="tc_1"))
        yield ""


def _run(model: ScriptedModel, tools: list[Any], prompt: str) -> str:
    return model.chain(prompt, tools=tools).text()


def test_a_normal_call_runs_through_the_deck(session):
    hand = session.select("how many words are in 'a b c'?")
    model = ScriptedModel("word_count", {"text": "a b c"})
    out = _run(model, to_llm_tools(session, hand), "how many words are in 'a b c'?")
    assert json.loads(out) == {"ok": True, "data": 3}
    assert model.offered[0] == hand.names


def test_a_tool_that_was_not_dealt_runs_through_the_widening_fallback(session):
    hand = session.select("how many words are in 'a b c'?")
    assert "weather_forecast" not in hand.names
    model = ScriptedModel("weather_forecast", {"city": "Lima"})
    out = _run(model, to_llm_tools(session, [*hand.names, "weather_forecast"]), "weather?")
    assert json.loads(out) == {"ok": True, "data": "sunny in Lima"}


@pytest.mark.parametrize("approve", [True, False])
def test_a_paused_chain_resumes_with_the_users_answer(session, markers, approve):
    tools = to_llm_tools(session, session.select("delete the notes in the work folder"))
    model = ScriptedModel("delete_notes", {"folder": "work"})
    with pytest.raises(ApprovalPending) as paused:
        for response in model.chain("delete the notes in the work folder", tools=tools).responses():
            response.text()
    pending = paused.value
    assert (pending.tool, pending.arguments) == ("delete_notes", {"folder": "work"})
    assert pending.approval_id in session.session.pending_approvals()
    assert markers == []  # nothing ran while the user decides

    pending.approve() if approve else pending.deny()
    history = [*response.prompt.messages, *response.messages()]
    out = json.loads(model.chain(messages=history, tools=tools).text())
    if approve:
        assert markers == ["work"]
        assert out == {"ok": True, "data": "deleted notes in work"}
    else:
        assert markers == []
        assert out["error"]["code"] == "PERMISSION_DENIED"
    assert session.session.pending_approvals() == {}


def test_confirm_decides_inline(session, markers):
    asked = []

    def confirm(tool: str, arguments: dict[str, Any]) -> bool:
        asked.append((tool, arguments))
        return True

    tools = to_llm_tools(session, ["delete_notes"], confirm=confirm)
    out = _run(ScriptedModel("delete_notes", {"folder": "x"}), tools, "wipe x")
    assert asked == [("delete_notes", {"folder": "x"})]
    assert json.loads(out)["ok"] is True and markers == ["x"]
