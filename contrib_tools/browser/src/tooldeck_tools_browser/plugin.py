"""Hook implementations of the browser tool pack (entry point ``browser``)."""

from __future__ import annotations

from tooldeck_hookspecs import Event, RegisterFn, hookimpl, observes

from ._definitions import definitions
from ._engine import release_session


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register the five ``browser_*`` tools."""
    for tool in definitions():
        register(tool)


@hookimpl
@observes("session.closed")
def tooldeck_event(event: Event) -> None:
    """Close a session's pages and browser context when the deck closes the session."""
    if event.kind == "session.closed" and event.session_id:
        release_session(event.session_id)
