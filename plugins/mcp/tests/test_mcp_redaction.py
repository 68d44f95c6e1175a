"""What the MCP server sends its client never quotes a secret the model or a tool wrote.

An audit found secrets going out as written in: the ``TOOL_NOT_FOUND`` answer to a made-up tool
name, ``search_tools``' echo of its task (and a filter's reason quoting it), ``approve_call``'s
refusal of an unknown approval id, and the approval question (elicitation) quoting a call's
arguments; a tool's own sampling prompt or question to the client went out unredacted too. The
deck's outward redaction (``Deck.redact``, the policy plugin's ``tooldeck_redact``) now covers
them; progress notifications pass the result processors. The real server, in process, with the
official client.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, types
from tooldeck_mcp.server import DeckMcpServer, current_client

from tooldeck import ToolContext, tool
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck
from tooldeck_hookspecs import Exclusion


def _token(prefix: str, n: int, seed: int) -> str:
    # Built at run time: no realistic-looking token is committed.
    rng = random.Random(seed)
    return prefix + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


# The in-process client speaks the handshake era, where a tool may still sample (deprecated).
pytestmark = pytest.mark.filterwarnings("ignore:The sampling capability is deprecated")

KNOWN = _token("", 26, 21)
# (what the model or a tool writes, the part that must never reach the client)
SECRETS = {
    "aws-access-key-id": ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),  # AWS's documented one
    "github-pat": (_token("ghp_", 36, 1), _token("ghp_", 36, 1)),
    "slack-token": ("xoxb-1234567890-" + _token("", 24, 2), _token("", 24, 2)),
    "url-credentials": (f"https://ci:{_token('', 20, 3)}@example.com/x", _token("", 20, 3)),
    "known-secret": (KNOWN, KNOWN),
}
KINDS = sorted(SECRETS)


@pytest.fixture(autouse=True)
def fresh_known():
    from tooldeck_policy import redact

    saved = redact._known
    redact._known = redact._KnownSecrets()
    yield
    redact._known = saved
    redact._clean.clear()


@tool(category="files", security={"level": "dangerous"})
def wipe(target: str) -> str:
    """Wipe a target file.

    Args:
        target: the file to wipe
    """
    return "wiped"


@tool(category="files")
async def upload(text: str, context: ToolContext) -> str:
    """Upload a text file, reporting progress and asking the client about it.

    Args:
        text: the text to upload
    """
    context.emit({"progress": 1, "total": 2, "message": f"uploading {text}"})
    client = current_client()
    assert client is not None
    summary = await client.sample(f"Summarize this before upload: {text}",
                                  system_prompt=f"You check uploads such as {text}")
    action, _ = await client.elicit(f"Upload {text}?", {"type": "object", "properties": {}})
    context.emit({"progress": 2, "total": 2, "message": f"sent {text}"})
    return f"{action}: {summary}"


def _deck() -> Any:
    def tooldeck_filter_tools(query: str, candidates: Any, session: Any) -> list[Any]:
        # A filter quoting the task it refused a tool for (a call with no task is let be).
        return [Exclusion(name=t.name, reason=f"not for {query!r}") for t in candidates
                if t.name == "wipe" and query]

    return make_deck(
        inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(), name="keywords"),
        inline_plugin(tooldeck_filter_tools, name="quoting-filter"),
        load_entry_points=["schema", "runner", "policy"],
        tools=[wipe, upload],
        config={
            "mcp": {"confirm": "elicit", "allow_approvals": True},
            "session": {"grants": ["files"]},
            "policy": {"secrets": [KNOWN]},
        },
    )


class ClientSide:
    """Everything the client receives: answers, questions, prompts, progress."""

    def __init__(self) -> None:
        self.received: list[Any] = []
        self.questions: list[str] = []

    async def on_elicit(self, context: Any, params: types.ElicitRequestParams) -> Any:
        self.questions.append(params.message)
        self.received.append(params.model_dump())
        return types.ElicitResult(action="decline")

    async def on_sample(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        self.received.append(params.model_dump())
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="fine"), model="m"
        )

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.received.append(message)

    def text(self) -> str:
        return json.dumps(self.received, default=repr)


async def _client_session(server: DeckMcpServer, side: ClientSide) -> Any:
    return Client(server.server, mode="legacy", elicitation_callback=side.on_elicit,
                  sampling_callback=side.on_sample)


def _answer(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return result.structured_content


@pytest.mark.parametrize("kind", KINDS)
async def test_answers_to_the_model_never_quote_its_secrets(kind: str, tmp_path: Path) -> None:
    text, secret = SECRETS[kind]
    side = ClientSide()
    async with _deck() as deck:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        async with await _client_session(server, side) as client:
            invented = await client.call_tool(f"get_{text}", {})
            searched = await client.call_tool("search_tools", {"task": f"upload a file {text}"})
            approved = await client.call_tool("approve_call", {"approval_id": text})
    for result in (invented, searched, approved):
        side.received.append(result.model_dump())
    assert _answer(invented)["error"]["code"] == "TOOL_NOT_FOUND"
    found = _answer(searched)["data"]
    assert [t["name"] for t in found["tools"]] == ["upload"]
    assert found["task"].startswith("upload a file ") and "[REDACTED:" in found["task"]
    assert found["excluded"][0]["name"] == "wipe"
    assert "[REDACTED:" in found["excluded"][0]["reason"]
    assert _answer(approved)["error"]["code"] == "PERMISSION_DENIED"
    assert secret not in side.text()


@pytest.mark.parametrize("kind", KINDS)
async def test_the_approval_question_shows_the_arguments_redacted(
    kind: str, tmp_path: Path
) -> None:
    text, secret = SECRETS[kind]
    side = ClientSide()
    async with _deck() as deck:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        async with await _client_session(server, side) as client:
            short = await client.call_tool("wipe", {"target": f"backup with {text}"})
            # Long arguments are cut to their start and end: redacted before the cut.
            padded = await client.call_tool(
                "wipe", {"target": "x" * 1480 + f" {text} " + "y" * 600}
            )
    assert _answer(short)["error"]["code"] == "PERMISSION_DENIED"  # the user declined
    assert _answer(padded)["error"]["code"] == "PERMISSION_DENIED"
    assert len(side.questions) == 2
    assert "backup with " in side.questions[0] and "[REDACTED:" in side.questions[0]
    assert "NOT shown" in side.questions[1]
    assert secret not in side.text()
    # Nothing of the secret survives the cut either (a half token is still a secret).
    assert secret[: len(secret) // 2] not in side.questions[1]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_tools_progress_prompts_and_questions_reach_the_client_redacted(
    kind: str, tmp_path: Path
) -> None:
    text, secret = SECRETS[kind]
    side = ClientSide()
    async with _deck() as deck:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        async with await _client_session(server, side) as client:
            result = await client.call_tool("upload", {"text": f"report.txt {text}"},
                                            progress_callback=side.on_progress)
            await trio.sleep(0.05)
    answer = _answer(result)
    assert answer["ok"] is True and answer["data"] == "decline: fine"
    progress = [m for m in side.received if isinstance(m, str)]
    assert len(progress) == 2 and all("[REDACTED:" in m for m in progress)
    assert len(side.questions) == 1 and "[REDACTED:" in side.questions[0]
    assert secret not in side.text() + json.dumps(result.model_dump(), default=repr)
