"""The deadline of the call a hook works for, readable from inside the hook (and its threads)."""

from __future__ import annotations

import contextvars
import time

__all__ = ["CALL_DEADLINE", "call_deadline", "seconds_left"]

#: ``time.monotonic()`` instant by which the hook running now must be done, or None when the
#: core set no deadline. The core sets it around hooks it runs under a deadline (e.g.
#: ``tooldeck_process_result`` run in a worker thread for a big result); worker threads started
#: by ``trio.to_thread`` see it too, since they run in a copy of the caller's context.
CALL_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "tooldeck_call_deadline", default=None
)


def call_deadline() -> float | None:
    """The ``time.monotonic()`` deadline of the hook running now, or None.

    Long-running hooks (redaction of a large result) check it between units of work and stop
    once it passed: the core has given up waiting by then, so further work only burns CPU.
    """
    return CALL_DEADLINE.get()


def seconds_left() -> float | None:
    """Seconds until :func:`call_deadline` (negative once passed), or None without a deadline."""
    deadline = CALL_DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()
