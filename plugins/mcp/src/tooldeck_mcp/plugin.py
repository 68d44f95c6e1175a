"""The ``mcp`` entry point: the tools of the MCP servers in ``[tool.tooldeck.mcp.servers]``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import RegisterFn, hookimpl

from ._bridge import McpBridge

#: The bridge this entry point drives, configured from each deck's settings as it loads.
bridge = McpBridge()


# tryfirst: see McpBridge.tooldeck_executor (reads the settings, provides nothing).
@hookimpl(tryfirst=True)
def tooldeck_executor(settings: Mapping[str, Any]) -> None:
    """Read ``mcp.servers``; provide no executor."""
    bridge.configure(settings)
    return None


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Connect to every configured MCP server and register its tools as ``<server>__<tool>``."""
    bridge.register_tools(register)
