"""The executor's side of one running call: its deadline, whether the executor gave up on it,
and the commit a tool makes right before its irreversible step.

A tool reads it through :class:`~tooldeck_hookspecs.ToolContext` (``deadline``,
``seconds_left()``, ``cancelled()``, ``commit()``); an executor builds one per attempt and hands
the tool ``context.with_control(control)``. The shape follows ``concurrent.futures``'
``Future.set_running_or_notify_cancel()``: the executor's "give up" and the tool's "commit" are
decided under one lock, so exactly one of them wins.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .exceptions import CallAbandoned

__all__ = ["CallControl"]

_RUNNING, _COMMITTING, _ABANDONED = 0, 1, 2


class CallControl:
    """One attempt of one call, as its executor sees it.

    :param deadline: ``time.monotonic()`` instant by which the executor stops waiting for the
        attempt (its ``execution.timeout_s``, time in the queue included), or None.
    :param probe: for tools that run on the executor's event loop: returns True once the
        attempt's cancel scope was cancelled (their cancellation otherwise only shows as
        ``trio.Cancelled`` at the next checkpoint). Called by :meth:`cancelled` and
        :meth:`commit`.

    Thread-safe: the tool calls :meth:`cancelled` and :meth:`commit` from its own thread while
    the executor calls :meth:`abandon` from the event loop.
    """

    __slots__ = ("deadline", "_probe", "_lock", "_state", "_late")

    def __init__(
        self, *, deadline: float | None = None, probe: Callable[[], bool] | None = None
    ) -> None:
        self.deadline = deadline
        self._probe = probe
        self._lock = threading.Lock()
        self._state = _RUNNING
        #: The executor gave up while a commit was under way (it waits a grace for it).
        self._late = False

    def seconds_left(self) -> float | None:
        """Seconds until :attr:`deadline` (negative once passed), or None without one."""
        deadline = self.deadline
        return None if deadline is None else deadline - time.monotonic()

    def cancelled(self) -> bool:
        """True once the executor gave up on the attempt (timed out, cancelled): its result will
        not be read, unless a :meth:`commit` was already under way."""
        if self._state == _ABANDONED or self._late:
            return True
        return self._probe is not None and self._probe()

    def commit(self) -> None:
        """The tool is about to do its irreversible step (a rename into place, a request that
        changes something): raises :class:`CallAbandoned` when the executor gave up on the
        attempt, else marks it as committing, after which the executor no longer reports a plain
        failure for it (see :meth:`abandon`). Calling it again is a no-op."""
        if self._probe is not None and self._probe():
            with self._lock:
                if self._state == _RUNNING:
                    self._state = _ABANDONED
        with self._lock:
            if self._state == _ABANDONED:
                raise CallAbandoned()
            self._state = _COMMITTING

    @property
    def committing(self) -> bool:
        """True once the tool called :meth:`commit` (and it was not refused)."""
        return self._state == _COMMITTING

    def abandon(self) -> bool:
        """The executor's side: give up on the attempt. True when it is abandoned (a later
        :meth:`commit` raises, :meth:`cancelled` is True); False when a commit already started:
        the change may be landing, so the executor should wait for the tool (for a bounded
        grace) and report what really happened."""
        with self._lock:
            if self._state == _COMMITTING:
                self._late = True
                return False
            self._state = _ABANDONED
            return True
