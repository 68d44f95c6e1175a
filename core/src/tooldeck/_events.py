"""Delivery of events to observers (``tooldeck_event``) that may block.

An observer marked ``@nonblocking`` is called on the deck's event loop, in the call's path (about
a microsecond for a cheap one). Any other observer may do I/O (post to a webhook, write a log
file), so its events go through a queue to one worker thread per deck, in order: a slow or hung
observer delays only the events behind it, never a call or another session.

The queue is bounded (:data:`MAX_PENDING` events); past that, events are dropped and counted
(logged once per thousand), so a hung observer cannot grow the host's memory without bound. The
deck drains the queue when it closes, for up to :data:`DRAIN_TIMEOUT_S` seconds; the thread is a
daemon, so an observer that never returns cannot keep the process alive.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from typing import Any

import trio

from tooldeck_hookspecs import Event

__all__ = ["DRAIN_TIMEOUT_S", "MAX_PENDING", "EventPump"]

log = logging.getLogger("tooldeck")

#: Events waiting for the observer thread at most; more are dropped (and counted).
MAX_PENDING = 10_000
#: How long closing the deck waits for queued events to be delivered.
DRAIN_TIMEOUT_S = 5.0


class EventPump:
    """One deck's observer thread and its bounded queue."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Sequence[Any], Event] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pending = 0
        self._idle = threading.Event()
        self._idle.set()
        #: Events dropped because the queue was full (a hung or very slow observer).
        self.dropped = 0

    def post(self, impls: Sequence[Any], event: Event) -> None:
        """Queue ``event`` for ``impls`` (called in order on the observer thread)."""
        with self._lock:
            if self._pending >= MAX_PENDING:
                self.dropped += 1
                dropped = self.dropped
            else:
                dropped = 0
                self._pending += 1
                self._idle.clear()
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="tooldeck-events", daemon=True
                    )
                    self._thread.start()
        if dropped:
            if dropped % 1000 == 1:
                log.error(
                    "event observers are %d events behind (one is slow or hung): %d event(s) "
                    "dropped so far", MAX_PENDING, dropped,
                )
            return
        self._queue.put((impls, event))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            impls, event = item
            for impl in impls:
                try:
                    impl(event=event)
                except BaseException:
                    # Anything (a SystemExit, a GeneratorExit): this thread serves every
                    # observer of the deck, and one that ended it left the others without
                    # events and the queue growing. Nothing up this thread to hand it to.
                    log.exception("plugin %r: tooldeck_event raised", impl.plugin)
            with self._lock:
                self._pending -= 1
                if not self._pending:
                    self._idle.set()

    async def aclose(self, timeout: float = DRAIN_TIMEOUT_S) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), then stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        with trio.move_on_after(timeout) as late:
            await trio.to_thread.run_sync(self._idle.wait, abandon_on_cancel=True)
        if late.cancelled_caught:
            log.error("event observers did not finish within %g s of the deck closing; "
                      "%d event(s) undelivered", timeout, self._pending)
        self._queue.put(None)
