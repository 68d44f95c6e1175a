"""Hook implementations of the browser tool pack (entry point ``browser``)."""

from __future__ import annotations

import sys
from typing import Any

from tooldeck_hookspecs import Event, RegisterFn, hookimpl, nonblocking, observes

from ._definitions import definitions
from ._guard import forget_session_allow
from ._limits import SANDBOX_MODES


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register the five ``browser_*`` tools."""
    for tool in definitions():
        register(tool)


@hookimpl
@nonblocking  # hands the session's pages to the engine to close; returns at once
@observes("session.closed")
def tooldeck_event(event: Event) -> None:
    """Close a session's pages and browser context when the deck closes the session."""
    if event.kind == "session.closed" and event.session_id:
        forget_session_allow(event.session_id)
        # The engine is imported by a browser call: not imported, no session has pages.
        engine_module = sys.modules.get(f"{__package__}._engine")
        if engine_module is not None:
            engine_module.release_session(event.session_id)


@hookimpl
def tooldeck_config_schema() -> dict[str, Any]:
    """The ``[browser]`` table: the sandbox mode, the uid Chromium runs as and the memory cap
    of its processes in MiB (see :mod:`tooldeck_tools_browser._sandbox`), checked by the core
    at start-up."""
    return {
        "browser": {
            "type": "object",
            "properties": {
                "sandbox": {"type": "string", "enum": list(SANDBOX_MODES)},
                # Not root (0), not (uid_t) -1.
                "uid": {"type": "integer", "minimum": 1, "maximum": 2**32 - 2},
                # 0: no cap; above 1 TiB it is a typo, not a cap.
                "memory_mb": {"type": "integer", "minimum": 0, "maximum": 1 << 20},
            },
            "additionalProperties": False,
        }
    }
