"""The error text of a remote tool is bounded and free of terminal control sequences."""

from __future__ import annotations

from mcp import types
from tooldeck_mcp import convert_result
from tooldeck_mcp._bridge import MAX_ERROR_CHARS


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def test_a_huge_error_text_is_cut() -> None:
    result = convert_result("srv", "tool", _error("x" * 3_000_000))
    assert result.error is not None
    assert len(result.error.message) < MAX_ERROR_CHARS + 200
    assert result.error.message.endswith("[... cut by tooldeck]")


def test_ansi_and_control_characters_are_removed() -> None:
    result = convert_result("srv", "tool", _error("bad\x1b[2J\x1b[31mred\rover\x00\nline\ttab"))
    assert result.error is not None
    message = result.error.message
    assert "\x1b" not in message and "\r" not in message and "\x00" not in message
    assert "bad[2J[31mredover\nline\ttab" in message
