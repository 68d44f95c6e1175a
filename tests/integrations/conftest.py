"""A small app-local tool pack and a deck behind a portal, shared by the framework adapter tests.

The deck is real: the schema validator, the runner, the MiniLM + FAISS retriever (embeddings cached
per test session) and the core's confirmation baseline for the dangerous tool.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from tooldeck_faiss import RetrieverSettings

from tooldeck import tool
from tooldeck.portal import DeckPortal, PortalSession
from tooldeck.testing import make_deck

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Where the dangerous tool writes; a test reads it to know whether the tool really ran.
MARKERS: list[str] = []


@tool(category="text", execution={"cacheable": False})
def word_count(text: str) -> int:
    """Count the words in a piece of text.

    Args:
        text: the text whose words are counted
    """
    return len(text.split())


@tool(category="text", execution={"cacheable": False})
def reverse_text(text: str) -> str:
    """Reverse the characters of a piece of text.

    Args:
        text: the text to reverse
    """
    return text[::-1]


@tool(category="weather", execution={"cacheable": False})
def weather_forecast(city: str) -> str:
    """Tell tomorrow's weather forecast for a city: temperature, rain and wind.

    Args:
        city: the city name
    """
    return f"sunny in {city}"


@tool(category="notes", security={"level": "dangerous"}, execution={"cacheable": False})
def delete_notes(folder: str) -> str:
    """Permanently delete every note in a notes folder.

    Args:
        folder: the notes folder to wipe
    """
    MARKERS.append(folder)
    return f"deleted notes in {folder}"


TOOLS = [word_count, reverse_text, weather_forecast, delete_notes]


@pytest.fixture(scope="session")
def embeddings_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("embeddings")


@pytest.fixture(scope="session")
def portal(embeddings_dir: Path) -> Iterator[DeckPortal]:
    # One deck for every adapter test: loading torch and MiniLM is the slow part, and each test
    # opens its own session (its own hand, approvals and grants) on it.
    faiss: dict[str, object] = {"cache_dir": str(embeddings_dir)}
    if "history" in attrs.fields_dict(RetrieverSettings):
        # Selection that learns from use would carry one test's calls into the next test's hand
        # (and write to the user's state folder): these tests pin the hand to the task alone.
        faiss["history"] = False
    deck = make_deck(
        load_entry_points=["schema", "runner", "faiss"],
        tools=TOOLS,
        config={"faiss": faiss, "hand": {"limit": 2}},
    )
    with DeckPortal(deck) as running:
        yield running


@pytest.fixture
def markers() -> list[str]:
    """The folders ``delete_notes`` really wiped during this test."""
    MARKERS.clear()
    return MARKERS


@pytest.fixture
def session(portal: DeckPortal, tmp_path: Path, markers: list[str]) -> PortalSession:
    return portal.session(workdir=tmp_path)


def _agents_run(tools: list[Any], name: str, arguments: str) -> dict[str, Any]:
    """One Runner run: the model calls ``name``, then encodes what it was sent as httpx does
    for the real API (strict UTF-8), and reads the call's output."""
    agents = pytest.importorskip("agents")
    from httpx._content import encode_json
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    agents.set_tracing_disabled(True)
    seen: list[Any] = []

    class ScriptedModel(agents.Model):
        async def get_response(self, system_instructions, input, *args, **kwargs):
            encode_json({"input": input})  # what the OpenAI client sends: must encode
            seen.append(input)
            if len(seen) == 1:
                output: list[Any] = [ResponseFunctionToolCall(
                    type="function_call", name=name, arguments=arguments, call_id="call_1",
                )]
            else:
                output = [ResponseOutputMessage(
                    id="msg_1", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
                )]
            return agents.ModelResponse(output=output, usage=agents.Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    agent = agents.Agent(name="worker", tools=tools, model=ScriptedModel())
    asyncio.run(agents.Runner.run(agent, "go"))
    (output,) = [i["output"] for i in seen[-1] if isinstance(i, dict)
                 and i.get("type") == "function_call_output"]
    return json.loads(output)


@pytest.fixture
def agents_run() -> Any:
    """:func:`_agents_run`: one scripted OpenAI Agents SDK run calling a tool."""
    return _agents_run


def _llm_model(name: str, arguments: dict[str, Any]) -> Any:
    llm = pytest.importorskip("llm")

    class ScriptedModel(llm.Model):
        model_id = "tooldeck-hostile-scripted"
        supports_tools = True
        can_stream = False

        def execute(self, prompt: Any, stream: bool, response: Any, conversation: Any) -> Any:
            if prompt.tool_results:
                yield " | ".join(r.output for r in prompt.tool_results)
                return
            response.add_tool_call(
                llm.ToolCall(name=name, arguments=arguments, tool_call_id="tc_1")
            )
            yield ""

    return ScriptedModel()


@pytest.fixture
def llm_model() -> Any:
    """:func:`_llm_model`: an llm model scripted to call one tool, then echo its output."""
    return _llm_model
