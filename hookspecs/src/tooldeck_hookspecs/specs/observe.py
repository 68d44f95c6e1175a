"""Observers: logging, tracing and metrics."""

from __future__ import annotations

from .._markers import hookspec
from ..model import Event


@hookspec
def tooldeck_event(event: Event) -> None:
    """Observe something the deck did (``call.start``, ``call.end``, ``select``, ...).

    Called for every implementation; return values are ignored. An observer that raises is
    reported and skipped; it never fails the call. An implementation marked with
    :func:`~tooldeck_hookspecs.observes` gets only the kinds it names. One marked
    ``@nonblocking`` is called on the deck's event loop, as the event happens; any other gets
    its events on the deck's observer thread, in order (it may do I/O; a hung one delays only
    its own events, at most 10,000 queued, and closing the deck delivers what is queued for up
    to 5 s).

    :param event: what happened, with session id, call id, tool and data.
    """
