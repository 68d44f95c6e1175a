"""tooldeck-mcp: the tools of MCP servers (stdio or streamable HTTP) as deck tools.

Configure servers in ``[tool.tooldeck.mcp.servers.NAME]``; each remote tool registers as
``<name>__<tool>`` and every call runs through the deck's whole pipeline before it is forwarded.
For programmatic use or tests, pass ``McpBridge([McpServerConfig(...)])`` as a plugin object.
"""

from __future__ import annotations

from typing import Any

from ._bridge import McpBridge, convert_result, definitions_for
from ._config import NEUTRAL_CWD, McpServerConfig, parse_servers, slug, tool_name

__all__ = [
    "NEUTRAL_CWD",
    "McpBridge",
    "McpServerConfig",
    "RemoteServer",
    "ServerStatistics",
    "convert_result",
    "definitions_for",
    "parse_servers",
    "remote_server",
    "shutdown",
    "slug",
    "tool_name",
]

_LAZY = {"RemoteServer", "ServerStatistics", "remote_server", "shutdown"}


def __getattr__(name: str) -> Any:
    # The connection layer imports the MCP SDK: only when it is asked for.
    if name in _LAZY:
        from . import _client

        return getattr(_client, name)
    raise AttributeError(f"module 'tooldeck_mcp' has no attribute {name!r}")
