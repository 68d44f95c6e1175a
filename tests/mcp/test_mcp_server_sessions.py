"""Deck sessions per MCP session: keyed by ``mcp-session-id``, bounded, closed when dropped."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tooldeck_mcp.server import DeckMcpServer, McpServerSettings

from tooldeck import Deck


def _ctx(session_id: str | None) -> Any:
    headers = {"mcp-session-id": session_id} if session_id else {}
    return SimpleNamespace(request=SimpleNamespace(headers=headers), request_id=1)


async def test_least_recently_used_session_is_closed_beyond_the_bound(
    workdir: Path, closed_sessions: tuple[Deck, list[str | None]]
) -> None:
    deck, closed = closed_sessions
    async with deck:
        server = DeckMcpServer(
            deck, workdir=str(workdir), settings=McpServerSettings(max_sessions=2)
        )
        first = server.session_for(_ctx("a"))
        assert server.session_for(_ctx("a")) is first
        second = server.session_for(_ctx("b"))
        assert second is not first and first.workdir == str(workdir)
        server.session_for(_ctx("a"))  # "a" is now the most recently used
        await server.call_tool("list_dir", {"path": "."}, _ctx("c"))
        assert set(server.sessions) == {"a", "c"}
        assert closed == [second.id]
        # No transport session id (stdio, stateless HTTP): the shared default session.
        assert server.session_for(_ctx(None)) is server.session_for(None)
        await server.aclose()
        assert not server.sessions
        assert first.id in closed
