"""Noticing in-process tools that hold the event loop (``time.sleep`` in an ``async def``, a
synchronous HTTP client, a CPU loop, a blocking socket read).

Such a step freezes every session of the deck, and no timeout can fire while it runs: the loop
is the only thing that could fire it. Nothing on the loop can see it either, so the watch is
split in two:

- on the loop, the executor marks each step of a tool's own code (:class:`LoopWatch`: a
  counter and the tool, two attribute stores before the step and one after, ~0.1 µs; no clock
  read, no lock);
- a daemon thread (:class:`LoopWatchdog`) polls those marks every ``threshold`` seconds. The
  same step still marked at two polls in a row means the loop has run nothing else for at
  least ``threshold``: it reports the tool, with the loop thread's stack (the line that
  blocks), through a callback, once per step.

The thread needs the GIL to poll: a tool that blocks in C code holding it (a long regular
expression, a C extension that does not release it) is seen only when that call returns, and
a step that blocks less than ``threshold`` is never reported.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["LoopWatch", "LoopWatchdog"]


class LoopWatch:
    """What the event loop runs right now, as far as tools go: ``holder`` is the tool whose own
    code runs on the loop (None between steps), ``seq`` counts the steps so far. Written by the
    loop only; read by the watchdog."""

    __slots__ = ("holder", "seq")

    def __init__(self) -> None:
        self.holder: Any = None
        self.seq = 0


class LoopWatchdog:
    """The daemon thread that reads a :class:`LoopWatch` (see the module docstring).

    ``report(tool, seconds, stack)`` runs in the watchdog's thread, at most once per step that
    held the loop ``threshold`` seconds; it is held weakly (a bound method of the executor:
    the thread ends with it, or at :meth:`stop`)."""

    def __init__(
        self,
        watch: LoopWatch,
        threshold: float,
        report: Callable[[Any, float, str], None],
    ) -> None:
        self.watch = watch
        self.threshold = threshold
        self._report: Callable[[], Callable[[Any, float, str], None] | None]
        if hasattr(report, "__self__"):
            self._report = weakref.WeakMethod(report)  # type: ignore[arg-type]
        else:
            self._report = lambda: report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: The event loop's thread (whose stack a report shows).
        self.loop_thread = 0

    @property
    def running(self) -> bool:
        """Whether the thread was started and not stopped."""
        return self._thread is not None and not self._stop.is_set()

    def start(self) -> None:
        """Start the thread, from the event loop's thread (its stack is the one reported)."""
        self.loop_thread = threading.get_ident()
        if self._thread is not None:
            return
        thread = threading.Thread(target=self._run, name="tooldeck-loop-watchdog", daemon=True)
        self._thread = thread
        thread.start()

    def stop(self) -> None:
        """End the thread at its next poll."""
        self._stop.set()

    def _run(self) -> None:
        watch = self.watch
        # One poll per threshold: a step seen at two polls in a row held the loop at least that
        # long (reported between 1x and 2x the threshold). Polling more often cost the loop
        # measurably on a 2-vCPU VM: a thread waking every 0.1 s added ~15 µs to a ~60 µs
        # awaited call (every 0.25 s: ~7 µs), each wake taking the GIL from the loop.
        interval = max(self.threshold, 0.005)
        seen = -1  # the step (seq) seen holding the loop at the previous poll, -1: none
        since = 0.0
        reported = -1
        while not self._stop.wait(interval):
            if self._report() is None:
                return  # the executor is gone (dropped without aclose)
            # seq before holder: a step that ended and a new one that began between two polls
            # changed seq, so an unchanged seq with a holder is one step all along.
            seq = watch.seq
            holder = watch.holder
            if holder is None:
                seen = -1
                continue
            now = time.monotonic()
            if seq != seen:
                seen, since = seq, now
                continue
            if reported == seq:
                continue
            reported = seq
            report = self._report()
            if report is None:
                return
            try:
                # At least that long (polls are at least one interval apart, so it is at least
                # ``threshold``): the step began up to one interval before it was first seen.
                report(holder, now - since, self._stack())
            except Exception:  # a report that fails must not end the watch
                pass

    def _stack(self) -> str:
        """The loop thread's innermost frames now: where the tool blocks."""
        frame = sys._current_frames().get(self.loop_thread)
        if frame is None:
            return ""
        return "".join(traceback.format_stack(frame, limit=6))
