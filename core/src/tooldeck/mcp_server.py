"""Deprecated: the MCP server moved to ``tooldeck-mcp``, as :mod:`tooldeck_mcp.server`.

``tooldeck serve mcp`` is added by that distribution's plugin (``tooldeck_register_commands``);
the core imports no plugin. This module stays so that code written against
``tooldeck.mcp_server`` (``current_client()`` in a tool, ``DeckMcpServer`` in a test) keeps
working: each public name is looked up in the server module that ``tooldeck-mcp`` declares
under the ``tooldeck.mcp_server`` entry-point group, with a :class:`DeprecationWarning`.
Import :mod:`tooldeck_mcp.server` instead.
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

__all__: list[str] = []  # every name resolves lazily from tooldeck_mcp.server

#: The entry-point group (and name) under which a distribution offers the MCP server module.
ENTRY_POINT_GROUP = "tooldeck.mcp_server"


def _server() -> ModuleType:
    found = list(entry_points(group=ENTRY_POINT_GROUP, name="server"))
    if not found:
        raise ImportError(
            "the MCP server is part of tooldeck-mcp: pip install tooldeck-mcp "
            '(or pip install "tooldeck[mcp]")',
            name="tooldeck_mcp",
        )
    module = found[0].load()
    assert isinstance(module, ModuleType), found[0]
    return module


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # import machinery probes (__path__, __file__ lookups, ...)
        raise AttributeError(name)
    module = _server()
    if name not in module.__all__:
        raise AttributeError(f"module 'tooldeck.mcp_server' has no attribute {name!r}")
    warnings.warn(
        f"tooldeck.mcp_server.{name} moved to {module.__name__}.{name} (tooldeck-mcp); "
        "tooldeck.mcp_server will be removed",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(module, name)
