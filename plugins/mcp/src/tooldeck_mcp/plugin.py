"""The ``mcp`` entry point: the tools of the MCP servers in ``[tool.tooldeck.mcp.servers]``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import RegisterFn, hookimpl

from ._bridge import McpBridge

#: The bridge this entry point drives, configured from each deck's settings as it loads.
bridge = McpBridge()


@hookimpl
def tooldeck_register_tools(register: RegisterFn, settings: Mapping[str, Any]) -> None:
    """Connect to every configured MCP server and register its tools as ``<server>__<tool>``."""
    bridge.configure(settings)
    bridge.register_tools(register)
