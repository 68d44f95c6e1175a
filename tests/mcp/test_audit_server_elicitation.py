"""What the user is asked to approve over MCP elicitation is what would run.

The model writes the arguments of a dangerous call; the question the server asks the user
(``confirm = "elicit"``) must not let those arguments hide or reorder text (a right-to-left
override, zero-width characters), nor push their end out of sight with padding unnoticed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import types

CONFIG = """
[session]
grants = ["filesystem"]

[tools.file_write.security]
level = "dangerous"

[mcp]
confirm = "elicit"
"""


async def test_the_approval_question_shows_hidden_characters_and_the_end_of_long_arguments(
    workdir: Path, open_stdio: Any, mcp_payload: Any
) -> None:
    asked: list[str] = []

    async def user(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    async with open_stdio(workdir, config=CONFIG, elicitation_callback=user) as session:
        # Reads "notes_backup.txt" once rendered: the override reverses what follows it.
        spoofed = await session.call_tool(
            "file_write", {"path": "notes_\u202etxt.exe", "content": "x\u200b"}
        )
        assert mcp_payload(spoofed)["error"]["code"] == "PERMISSION_DENIED"
        padded = await session.call_tool(
            "file_write", {"path": "out.txt", "content": "harmless" + " " * 5000 + "PAYLOAD"}
        )
        assert mcp_payload(padded)["error"]["code"] == "PERMISSION_DENIED"

    assert len(asked) == 2
    assert "\u202e" not in asked[0] and "\u200b" not in asked[0]
    assert "\\u202e" in asked[0] and "\\u200b" in asked[0]
    # The end of long arguments is shown, and the question says how much is not.
    assert "PAYLOAD" in asked[1]
    assert "characters of the arguments are NOT shown" in asked[1]
    assert not (workdir / "out.txt").exists()
