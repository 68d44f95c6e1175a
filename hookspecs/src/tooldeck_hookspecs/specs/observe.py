"""Observers: logging, tracing and metrics."""

from __future__ import annotations

from .._markers import hookspec
from ..model import Event


@hookspec
def tooldeck_event(event: Event) -> None:
    """Observe something the deck did (``call.start``, ``call.end``, ``select``, ...).

    Called for every implementation; return values are ignored. An observer that raises is
    reported and skipped; it never fails the call. An implementation marked with
    :func:`~tooldeck_hookspecs.observes` gets only the kinds it names.

    :param event: what happened, with session id, call id, tool and data.
    """
