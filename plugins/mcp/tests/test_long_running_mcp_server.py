"""An MCP server serving thousands of MCP sessions keeps per-session state only for live ones.

``logging/setLevel`` recorded the level per MCP session id. It was dropped when the session's
deck session was closed, but not when the MCP session had none (the client set its level and
left without a call) or when its deck session had been evicted (idle, beyond
``max_sessions``): one entry per such MCP session, for the life of the server.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")
server_module = pytest.importorskip("tooldeck_mcp.server")

from tooldeck_hookspecs import SecurityConfig, SecurityLevel, ToolDefinition  # noqa: E402

_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def _ctx(session_id: str, stack: contextlib.AsyncExitStack) -> Any:
    """A request context as the SDK builds it for a streamable HTTP connection."""
    connection = SimpleNamespace(exit_stack=stack)
    return SimpleNamespace(
        request=SimpleNamespace(headers={"mcp-session-id": session_id}),
        request_id=1,
        session=SimpleNamespace(_connection=connection),
        meta=None,
    )


async def test_ended_mcp_sessions_leave_no_state_behind(tmp_path):
    ping = ToolDefinition(
        name="ping", description="Answers at once.", category="demo", parameters=_NO_ARGS,
        execute=lambda arguments, context: {"pong": True},
        security=SecurityConfig(level=SecurityLevel.SAFE),
    )
    deck = tooldeck_testing.make_deck(load_entry_points=["schema", "runner"], tools=[ping])
    level = SimpleNamespace(level="warning")
    async with deck:
        server = server_module.DeckMcpServer(
            deck, workdir=str(tmp_path),
            settings=server_module.McpServerSettings(max_sessions=4),
        )
        open_connections: list[contextlib.AsyncExitStack] = []
        for n in range(300):
            stack = contextlib.AsyncExitStack()
            ctx = _ctx(f"mcp-{n}", stack)
            await server._on_set_logging_level(ctx, level)
            if n % 3:  # the others set their level and leave without a call
                result = await server.call_tool("ping", {}, ctx)
                assert not result.is_error
            if n % 5 == 0:
                open_connections.append(stack)  # ends later: its deck session gets evicted
            else:
                await stack.aclose()  # the MCP session ends (DELETE, idle timeout)
            assert len(server._log_levels) <= len(open_connections) + 1
        for stack in open_connections:
            await stack.aclose()
        assert server._log_levels == {}
        assert dict(server.sessions) == {}
        assert server._busy == {}
        await server.aclose()
