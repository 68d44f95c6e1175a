"""The ``mcp`` entry point: the tools of the MCP servers in ``[tool.tooldeck.mcp.servers]``, and
the ``tooldeck serve mcp`` command (the deck as an MCP server, :mod:`tooldeck_mcp.server`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import RegisterFn, hookimpl

from ._bridge import McpBridge
from ._command import add_serve_mcp

#: The bridge this entry point drives, configured from each deck's settings as it loads.
bridge = McpBridge()


@hookimpl
def tooldeck_register_tools(register: RegisterFn, settings: Mapping[str, Any]) -> None:
    """Connect to every configured MCP server and register its tools as ``<server>__<tool>``."""
    bridge.configure(settings)
    bridge.register_tools(register)


@hookimpl
def tooldeck_register_commands(subparsers: Any) -> None:
    """``tooldeck serve mcp``: serve the deck to MCP clients (stdio or streamable HTTP)."""
    add_serve_mcp(subparsers)
