"""A third-party redactor that blocks never stalls ``serve mcp``: the client's other requests
are answered meanwhile.

The server redacted what it words itself with the synchronous ``Deck.redact`` on the deck's
loop: a sampling prompt or an elicitation question a tool sends the client
(``McpClient._outward``), the arguments shown in an approval question (``_approval_view``),
the answers of ``search_tools`` and ``approve_call``. A ``tooldeck_redact`` hook that blocked
there (a network call, a lock) stalled every request of every client. Now each goes through
``Deck.aredact``: an unmarked hook runs in a worker thread under a deadline.

The property checked is structural: another request of the same client was answered while
the hook was still blocked (it holds a threading.Event); the events only bound the run time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, types
from tooldeck_mcp.server import DeckMcpServer, McpServerSettings, current_client

from tooldeck import ToolContext, tool
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck

pytestmark = pytest.mark.filterwarnings("ignore:The sampling capability is deprecated")

MARK = "ZQXJ"
GUARD_S = 15.0  # how long the blocked hook waits at most (a test without the fix ends, failing)


@tool(category="work", execution={"timeout_s": 60.0})
def echo(value: int) -> int:
    """Echo a number.

    Args:
        value: the number
    """
    return value


@tool(category="work", execution={"timeout_s": 60.0})
async def ask_model(prompt: str, context: ToolContext) -> str:
    """Ask the client's model (sampling) and return its answer.

    Args:
        prompt: what to ask
    """
    client = current_client()
    assert client is not None
    answer = await client.sample(prompt, max_tokens=10)
    return str(answer)


@tool(category="work", security={"level": "dangerous"}, execution={"timeout_s": 60.0})
def launch(target: str) -> str:
    """Launch something (dangerous: the user is asked).

    Args:
        target: what to launch
    """
    return f"launched {target}"


class Gate:
    """What the blocking hook holds: ``entered`` when it blocks, ``left`` once it returns."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.left = threading.Event()
        self.values: list[str] = []

    def block(self, value: Any) -> None:
        self.values.append(type(value).__name__)
        self.entered.set()
        try:
            self.release.wait(GUARD_S)
        finally:
            self.left.set()


def _redactor(gate: Gate, kinds: tuple[type, ...]) -> object:
    def tooldeck_redact(value: Any) -> Any:
        if isinstance(value, kinds) and MARK in repr(value) and not gate.release.is_set():
            gate.block(value)
        return None

    return inline_plugin(tooldeck_redact=tooldeck_redact, name="slow-redactor")


@asynccontextmanager
async def _client(
    gate: Gate, kinds: tuple[type, ...], workdir: Path, **settings: Any
) -> AsyncIterator[Client]:
    retriever = inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever())
    deck = make_deck(
        _redactor(gate, kinds), retriever, load_entry_points=["schema", "runner"],
        tools=[echo, ask_model, launch],
    )

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> Any:
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="fine"),
            model="test-model", stop_reason="endTurn",
        )

    async def decline(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with deck:
        server = DeckMcpServer(
            deck, workdir=str(workdir), settings=McpServerSettings(**settings)
        )
        try:
            async with Client(
                server.server, mode="legacy", sampling_callback=sample,
                elicitation_callback=decline,
            ) as client:
                yield client
        finally:
            gate.release.set()
            await server.aclose()


async def _served_while_blocked(client: Client, gate: Gate, name: str, arguments: Any) -> Any:
    """Call ``name`` (whose redaction blocks); once the hook blocks, the same client calls
    ``echo``. Returns the first call's result; asserts ``echo`` was answered meanwhile."""
    answer: list[Any] = []
    served: list[bool] = []

    async def hit() -> None:
        answer.append(await client.call_tool(name, arguments))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hit)
        await trio.to_thread.run_sync(gate.entered.wait, GUARD_S)
        assert gate.entered.is_set()
        other = await client.call_tool("echo", {"value": 7})
        served.append(not other.is_error and not gate.left.is_set())
        gate.release.set()
    assert served == [True]
    return answer[0]


def _payload(result: types.CallToolResult) -> Any:
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def test_a_sampling_prompt_in_redaction_stalls_no_request(tmp_path: Path) -> None:
    gate = Gate()
    async with _client(gate, (str,), tmp_path) as client:
        result = await _served_while_blocked(
            client, gate, "ask_model", {"prompt": f"what is {MARK}?"}
        )
    assert not result.is_error and _payload(result)["data"] == "fine"
    assert gate.values == ["str"]  # the prompt, as McpClient._outward redacts it


async def test_an_approval_question_in_redaction_stalls_no_request(tmp_path: Path) -> None:
    gate = Gate()
    # Only a dict blocks: the arguments as _approval_view redacts them for the question.
    async with _client(gate, (dict,), tmp_path, confirm="elicit") as client:
        result = await _served_while_blocked(client, gate, "launch", {"target": f"x {MARK}"})
    assert _payload(result)["error"]["code"] == "PERMISSION_DENIED"  # the user declined
    assert gate.values == ["dict"]


async def test_a_long_approval_question_in_redaction_stalls_no_request(tmp_path: Path) -> None:
    gate = Gate()
    target = f"{MARK} " + "y" * 40_000  # past what is shown: its head is redacted as text
    async with _client(gate, (str,), tmp_path, confirm="elicit") as client:
        result = await _served_while_blocked(client, gate, "launch", {"target": target})
    assert _payload(result)["error"]["code"] == "PERMISSION_DENIED"


@pytest.mark.parametrize("name", ["search_tools", "approve_call"])
async def test_a_server_answer_in_redaction_stalls_no_request(tmp_path: Path, name: str) -> None:
    from tooldeck_hookspecs import ToolResult

    gate = Gate()
    # A result that quotes the model's words: an unknown parameter, an unknown approval id.
    arguments = (
        {"task": "echo", f"{MARK}_key": 1} if name == "search_tools"
        else {"approval_id": f"{MARK}-no-such-id"}
    )
    async with _client(gate, (ToolResult,), tmp_path, allow_approvals=True) as client:
        result = await _served_while_blocked(client, gate, name, arguments)
    assert result.is_error
