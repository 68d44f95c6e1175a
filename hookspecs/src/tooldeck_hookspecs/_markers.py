"""The pluggy markers, and ``observes``. Plugin authors import them from ``tooldeck_hookspecs``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pluggy

PROJECT_NAME = "tooldeck"

#: Marks a hook specification (used only in this package and by plugins that add hooks).
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marks a hook implementation in a plugin.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

#: The attribute :func:`observes` sets on an observer.
EVENT_KINDS_ATTR = f"{PROJECT_NAME}_event_kinds"

_F = TypeVar("_F", bound=Callable[..., object])


def observes(*kinds: str) -> Callable[[_F], _F]:
    """Deliver only these event kinds to a ``tooldeck_event`` implementation.

    The deck builds an event only when some observer wants its kind, so an observer that cares
    about ``session.closed`` alone should say so instead of filtering ``event.kind`` itself:
    the per-call ``call.end`` event then costs nothing. Without it, an observer gets every event.

    Use it next to ``@hookimpl``, in either order::

        @hookimpl
        @observes("session.closed")
        def tooldeck_event(event: Event) -> None: ...
    """
    if not kinds or not all(isinstance(kind, str) and kind for kind in kinds):
        raise TypeError("observes() needs one or more event kinds, such as 'session.closed'")

    def mark(function: _F) -> _F:
        setattr(function, EVENT_KINDS_ATTR, frozenset(kinds))
        return function

    return mark
