"""Hook implementations of the browser tool pack (entry point ``browser``)."""

from __future__ import annotations

from tooldeck_hookspecs import Decision, RegisterFn, SessionInfo, ToolCall, ToolDefinition, hookimpl

from ._definitions import definitions
from ._guard import remember_session_allow


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register the five ``browser_*`` tools."""
    for tool in definitions():
        register(tool)


@hookimpl
def tooldeck_authorize_call(
    call: ToolCall, tool: ToolDefinition, session: SessionInfo
) -> Decision | None:
    """No opinion; remembers the session's ``url_allow`` attribute for the browser's proxy.

    The tool's context carries no session attributes, and the proxy must honour the same
    allow-list as the policy's URL check, so the pack notes it here, where the session is seen
    just before the call runs.
    """
    if tool.plugin == "browser" or tool.name.startswith("browser_"):
        remember_session_allow(session.session_id, (session.attributes or {}).get("url_allow"))
    return None
