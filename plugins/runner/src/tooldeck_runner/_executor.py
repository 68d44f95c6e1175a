"""The executor: per-category queues, timeouts, cancellation, retries, in-process or sandboxed.

Timeouts. ``tool.execution.timeout_s`` bounds each attempt, and an attempt starts when the call
joins its category's queue: time spent waiting for a slot counts. A call that times out while
queued never starts (``TIMEOUT``, "while queued"). Retries (only for tools with
``execution.retryable`` and a retryable error) get a fresh timeout per attempt and give their
slot back while backing off, so the worst case is ``(max_retries + 1) * timeout_s`` plus the
backoffs (1 s, 2 s, 4 s, ... with jitter, capped at ``runner.retry_max_s``).

Cancellation. If the caller's cancel scope is cancelled, the call stops where it is (queued,
running, or backing off; a sandboxed call has its process tree killed) and ``trio.Cancelled``
propagates, as trio requires. :meth:`RunnerExecutor.cancel_session` and
:meth:`RunnerExecutor.cancel_call` cancel calls from outside; those calls return ``CANCELLED``.

Inline calls. An in-process ``async def`` tool whose body has no ``await``, ``async for`` or
``async with`` (see :func:`never_suspends`) cannot yield to trio: no timeout or cancellation could
ever interrupt it, and it holds a category slot for no scheduler tick. When its category has a
free slot and it is not retryable, such a call is run to completion at once, without a cancel
scope, a deadline or a limiter round trip (about 15 µs of trio machinery saved per call).
The same holds for a plain ``def`` tool whose function is marked
:func:`tooldeck_hookspecs.nonblocking` (it computes and returns, no I/O, no locks, no sleeps):
it runs on the event loop, without a worker thread (about 15 µs instead of a thread hand-off).
The observable behaviour is the same as on the queued path; a full category still queues it.
Such a call is not a trio checkpoint by itself: the deck makes every call one (and yields to the
scheduler every few calls), so code driving this executor directly should do the same.

Sync tools. Every other plain ``def`` tool runs in a persistent worker thread of its own pool
(one hand-off each way, about half of what ``trio.to_thread`` costs), in a copy of the caller's
context. The pool holds up to the category's limit of threads; an idle thread ends after 30 s.
A call that times out or is cancelled abandons its thread (counted in ``abandoned_threads``
until the function really returns); one given up on before its thread started never runs.
When the loop has nothing else to run, it waits for the thread on a lock for up to 100 µs
(what a quick tool takes) instead of sleeping in its I/O wait until the thread wakes it; a tool
that outlasts that wait is then waited for through trio, and not directly for its next 32
calls, so a slow tool costs the loop at most 100 µs now and then. A single-attempt call whose
category and pool have room is handed over and waited for that way *before* the queued path's
machinery (cancel scope and deadline, category slot, in-flight record): nothing else runs on the
loop meanwhile, so none of it can be observed, and a call still running after the wait goes on
under all of it, its timeout counted from the hand-over (``RunnerExecutor._run_direct``).
On Linux, a worker the loop waits for that way runs on the loop's CPU (``[runner]
pin_sync_threads``): on a virtual machine, waking a thread parked on an idle CPU costs tens of
µs, and the GIL lets only one of the two threads run Python at a time anyway. A wait that
runs out unpins the worker at once, and calls the loop does not wait for directly run unpinned,
so slow tools keep every core. Once the loop is seen on another CPU than at its previous such
wait (the kernel tends to wake it on the idle CPU while the worker is still going back to
sleep, and the next call then moves the worker after it), the loop's own thread is held on the
worker's CPU during its next 64 waits, and given all of its CPUs back after each (see
``_acquire_on_cpu``). A Ctrl-C during a direct wait gives its job up like a cancelled call.
That thread is not a ``trio.to_thread`` thread: a tool that calls back into trio passes
``trio_token`` to ``trio.from_thread``.

Tools that block the loop. Each step of a tool's own code on the loop is marked for a watchdog
thread (see ``_watchdog``); a tool seen holding the loop ``[runner] loop_block_warn_s`` is
logged once, and with ``contain_loop_blockers`` its later calls run off the loop: an ``async
def`` in a thread of its own pool under a ``trio.run`` of its own (:class:`_OffLoopRun`), a
``@nonblocking`` function as a plain sync tool. See the README for the semantics.
"""

from __future__ import annotations

import collections
import contextvars
import inspect
import json
import logging
import math
import os
import select
import threading
import time
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import outcome
import trio

from tooldeck_hookspecs import (
    RETRYABLE_CODES,
    CallAbandoned,
    CallControl,
    ErrorCode,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    call_tool_function,
    is_nonblocking,
    never_suspends,
    shorten,
)

from ._config import RunnerSettings
from ._isolation import resolve_isolation, warn_isolation
from ._outcomes import (
    NOT_VALUES,
    as_result,
    consistent,
    exception_result,
    failure_result,
    host_owned,
    not_a_value_result,
    prerender,
    rendered_traceback,
)
from ._unwind import bounded, holds, passes_for_the_callers
from ._watchdog import LoopWatch, LoopWatchdog

if TYPE_CHECKING:
    from ._sandbox import SandboxPool, SandboxStatistics

__all__ = [
    "RunnerExecutor",
    "CategoryStatistics",
    "ExecutorStatistics",
    "ISOLATION_IN_PROCESS",
    "never_suspends",
]

ISOLATION_IN_PROCESS = "in-process"


@attrs.frozen(kw_only=True)
class CategoryStatistics:
    """One category's queue: its ``limit``, calls ``in_flight`` and ``waiting`` now, the highest
    number ever in flight at once (``max_in_flight``), and calls ``completed`` so far."""

    limit: int
    in_flight: int
    waiting: int
    max_in_flight: int
    completed: int
    #: Threads of this category's sync tools that are still running after their call timed out
    #: or was cancelled (a thread cannot be killed). They count against their own tool only.
    abandoned_threads: int = 0


@attrs.frozen(kw_only=True)
class ExecutorStatistics:
    """A snapshot of the executor: per-category queues and the sandbox pool (None if unused)."""

    categories: Mapping[str, CategoryStatistics]
    sandbox: SandboxStatistics | None = None
    #: Tools seen holding the event loop (see the README, "Tools that block the event loop"):
    #: name -> the longest hold the watchdog saw, in seconds (a lower bound).
    loop_blockers: Mapping[str, float] = attrs.field(factory=dict)

    def __getitem__(self, category: str) -> CategoryStatistics:
        return self.categories[category]


@attrs.define(eq=False)
class _Queue:
    limiter: trio.CapacityLimiter
    in_flight: int = 0
    waiting: int = 0
    max_in_flight: int = 0
    completed: int = 0


class _RetryableResult(Exception):
    """Raised inside a stamina attempt to ask for another one."""

    def __init__(self, result: ToolResult) -> None:
        super().__init__(result.error.message if result.error else "retry")
        self.result = result


def _backoff_hook(longest: float) -> Callable[[Exception], bool | float]:
    """stamina's hook: retry our own marker; wait at least what the tool was told to wait, up
    to ``longest`` seconds.

    The wait comes from the tool (often a server's ``Retry-After``, relayed as is): a NaN or a
    negative one used to fail the call as the executor's error, and ``inf`` or a day made the
    call sleep that long. A wait that is not a positive number is ignored (the exponential
    guess applies); one longer than ``longest`` (or infinite) is not waited for: the result,
    ``retry_after_s`` included, goes back to the caller, whose decision it is.
    """

    def hook(exc: Exception) -> bool | float:
        if not isinstance(exc, _RetryableResult):
            return False
        error = exc.result.error
        wait = error.retry_after_s if error is not None else None
        if wait is None or not _is_number(wait) or wait <= 0:
            return True
        if wait > longest:
            return False
        # A server's Retry-After beats our exponential guess (stamina uses the float as is).
        return float(wait)

    return hook


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not (
        isinstance(value, float) and math.isnan(value)
    )


def _execution_problem(tool: ToolDefinition) -> ToolResult | None:
    """The refusal of a tool whose own limits cannot be applied as configured, else None.

    The schema plugin refuses such definitions at registration; without it (a stage swapped
    out, the executor driven directly, a ``[tools.NAME]`` override) a timeout of 0 used to read
    as "timed out while queued", ``nan`` or a string raised out of :meth:`RunnerExecutor.run`,
    and a negative ``memory_mb`` ran the tool with no memory limit at all. A limit is never
    silently dropped: the call is refused, naming the field. Huge values (``inf`` included)
    are valid and honoured.
    """
    execution = tool.execution
    field = value = None
    rule = ""
    if not _is_number(execution.timeout_s) or execution.timeout_s <= 0:
        field, value, rule = "timeout_s", execution.timeout_s, "a number of seconds > 0"
    elif execution.retryable and (
        not isinstance(execution.max_retries, int)
        or isinstance(execution.max_retries, bool)
        or execution.max_retries < 0
    ):
        field, value, rule = "max_retries", execution.max_retries, "an integer >= 0"
    elif tool.security.sandbox:
        for name, low in (("memory_mb", 1), ("max_output_bytes", 0)):
            number = getattr(execution, name)
            if not isinstance(number, int) or isinstance(number, bool) or number < low:
                field, value, rule = name, number, f"an integer >= {low}"
                break
    if field is None:
        return None
    return ToolResult.fail(
        ErrorCode.EXECUTION_ERROR,
        f"{tool.name!r} cannot run: its execution.{field} is {value!r}, which must be {rule}; "
        "nothing was run",
        suggestion=f"{tool.name} is misconfigured (not the call's fault): use another tool "
        "and tell the user.",
        details={"field": f"execution.{field}", "value": repr(value)},
        plugin="runner",
    )


def _should_retry(result: ToolResult) -> bool:
    error = result.error
    return (
        not result.success
        and error is not None
        and (error.retryable or error.code in RETRYABLE_CODES)
        # A change that may have landed is not made twice.
        and not error.details.get("may_have_landed")
    )


class _AttemptControl(CallControl):
    """The tool's :class:`CallControl` for one attempt, plus what the runner learnt when it gave
    up on the attempt during a commit: the tool's outcome (``late``) when the commit finished
    within the grace, or ``overran`` when it did not."""

    __slots__ = ("late", "overran", "off_loop")

    def __init__(
        self, *, deadline: float | None = None, probe: Callable[[], bool] | None = None
    ) -> None:
        super().__init__(deadline=deadline, probe=probe)
        self.late: outcome.Outcome[Any] | None = None
        self.overran = False
        #: The attempt ran off the loop: an async tool seen blocking it (see _OffLoopRun).
        self.off_loop = False

    @property
    def gave_up_while_committing(self) -> bool:
        return self.late is not None or self.overran


def _scope_probe(scopes: tuple[trio.CancelScope, ...]) -> Callable[[], bool]:
    """``CallControl``'s probe for a tool running on the loop: was the attempt's scope (or the
    call's) cancelled? Also usable from the tool's own ``trio.to_thread`` threads."""
    token = trio.lowlevel.current_trio_token()

    def probe() -> bool:
        return any(scope.cancel_called for scope in scopes)

    def probe_anywhere() -> bool:
        try:
            return probe()
        except RuntimeError:  # not on the loop's thread (reading a deadline needs the loop)
            try:
                return trio.from_thread.run_sync(probe, trio_token=token)
            except trio.RunFinishedError:
                return True

    return probe_anywhere


def _late_result(
    tool: ToolDefinition, control: _AttemptControl, *, cancelled: bool, grace: float
) -> ToolResult:
    """The answer of an attempt given up on while its tool was committing (see
    ``ToolContext.commit``): the tool's own result when the commit finished within the grace,
    else a failure that says the change may have landed."""
    timeout = tool.execution.timeout_s
    reason = "cancelled" if cancelled else "timeout"
    late = control.late
    if late is not None:
        # Read, not unwrapped: an outcome unwraps once, and this may be asked twice.
        if isinstance(late, outcome.Value):
            result = _tool_result(tool, late.value)  # as _invoke makes one in time
        elif isinstance(late.error, ToolFailure):
            result = _bounded(tool, failure_result(late.error))
        else:
            result = exception_result(late.error)
        return result.with_metadata(committed_late=reason)
    how = "was cancelled" if cancelled else f"did not finish within {timeout:g}s"
    return ToolResult.fail(
        ErrorCode.CANCELLED if cancelled else ErrorCode.TIMEOUT,
        f"{tool.name!r} {how} while committing its change, and the commit did not finish within "
        f"the {grace:g} s grace: the change may have landed (or may still land)",
        suggestion="Check the current state (read the file, list the folder) before calling "
        "again: the change may have been made.",
        details={
            "queued": False,
            "timeout_s": timeout,
            "commit_started": True,
            "may_have_landed": True,
            "commit_grace_s": grace,
        },
    )


logger = logging.getLogger("tooldeck.runner")

#: A worker thread with nothing to do for this long ends (a tool used once keeps no threads).
_IDLE_THREAD_S = 30.0
_IDLE_THREAD_MS = int(_IDLE_THREAD_S * 1000)
#: Execute functions whose verdict "may run inline" is remembered; past it they are judged
#: again (a bytecode scan each). Tools registered at run time bring new functions for weeks.
_MAX_JUDGED = 4096
#: RunnerExecutor._kind's answers; below _AWAITED: candidates for the quick paths.
#: _OFF_LOOP: an async tool seen holding the event loop, run in a worker thread (_OffLoopRun).
_INLINE, _THREAD, _AWAITED, _OFF_LOOP = 1, 2, 3, 4
#: Per-tool thread pools kept; past it, pools with no thread and no call are dropped when a new
#: one is made (a pool is made again at its tool's next call).
_MAX_POOLS = 256
#: At most this long the idle event loop waits on a lock for a sync tool's result (quick tools
#: take a few tens of µs) before waiting through trio; a tool that ran out of it is not waited
#: for directly for its next _DIRECT_SKIP_CALLS calls.
_DIRECT_WAIT_S = 100e-6
#: Direct waits for which the loop's own thread is held on the worker's CPU once the loop was
#: seen on another CPU than at its previous direct wait (see _acquire_on_cpu).
_HOLD_LOOP_WAITS = 64
_DIRECT_SKIP_CALLS = 32


def _trio_run_queue() -> Callable[[], int] | None:
    """The length of trio's run queue, read directly: ``current_statistics()`` (the public way)
    also computes the next deadline and the I/O backend's figures, ~4.5 µs per sync call. None
    when this trio's internals differ; callers then use the public way."""
    try:
        from trio._core._run import GLOBAL_RUN_CONTEXT

        def runnable() -> int:
            return len(GLOBAL_RUN_CONTEXT.runner.runq)

        return runnable
    except ImportError:
        return None


_runnable = _trio_run_queue()


#: ``sched_getcpu`` of the C library, once a pool first pins a thread (ctypes is imported
#: then, not at load: ``tooldeck call`` runs one call and pins nothing). False: unavailable.
_getcpu: Callable[[], int] | None | bool = None if hasattr(os, "sched_setaffinity") else False


def _loop_cpu() -> int:
    """The CPU the calling thread runs on (read through the vDSO, ~0.2 µs), or -1 where that or
    per-thread affinity is unavailable."""
    global _getcpu
    if _getcpu is None:
        try:
            import ctypes

            # dlopen(NULL): the process's own symbols, libc's among them. find_library would
            # run ldconfig (26 ms).
            getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
            getcpu.restype = ctypes.c_int
            getcpu.argtypes = []
            _getcpu = getcpu if getcpu() >= 0 else False
        except (OSError, AttributeError):
            _getcpu = False
    if _getcpu is False:
        return -1
    return _getcpu()  # type: ignore[operator]


#: False once the system refused to hold the loop's thread on one CPU (see _acquire_on_cpu).
_hold_loop = True


def _acquire_on_cpu(lock: threading.Lock, cpu: int) -> bool:
    """``lock.acquire(timeout=_DIRECT_WAIT_S)`` with the calling thread (the loop's) held on
    ``cpu``, its worker's, meanwhile; its own CPUs are back before this returns.

    Woken while the worker still runs on their shared CPU (it has released the lock, not yet
    gone back to sleep), the loop is often placed on the idle CPU instead, and the next call
    then moves the worker after it: a plain ``def`` tool measured 37 µs per call while the
    loop stayed put and 110 µs while it moved, against 46 µs with this hold (two system
    calls, ~1 µs each, when the loop is on ``cpu`` already)."""
    global _hold_loop
    mask: Any = None
    try:
        mask = os.sched_getaffinity(0)
        # Inside the try whose finally restores: a Ctrl-C raised as this call returns must not
        # leave the loop's thread on one CPU.
        os.sched_setaffinity(0, (cpu,))
        return lock.acquire(timeout=_DIRECT_WAIT_S)
    except OSError as exc:
        logger.debug("the loop is not held on its worker's CPU: sched_setaffinity: %s", exc)
        _hold_loop = False
        mask = None  # nothing was changed
        return lock.acquire(timeout=_DIRECT_WAIT_S)
    finally:
        if mask is not None:
            _restore_cpus(mask, cpu)


def _restore_cpus(mask: Any, cpu: int) -> None:
    """Give the loop's thread its CPUs back after :func:`_acquire_on_cpu`."""
    global _hold_loop
    try:
        os.sched_setaffinity(0, mask)
    except OSError:
        # The allowed CPUs changed meanwhile: every CPU the system still allows.
        _hold_loop = False
        try:
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
        except OSError as exc:
            logger.warning("tooldeck-runner: the event loop's thread stays on CPU %d: "
                           "sched_setaffinity: %s", cpu, exc)


def _set_affinity(tid: int, cpus: Any) -> bool:
    """Set thread ``tid``'s CPUs (0: the calling thread); False (and pinning off for good) when
    the system refuses, e.g. a cpuset changed under the process."""
    global _getcpu
    try:
        os.sched_setaffinity(tid, cpus)
    except OSError as exc:
        logger.debug("sync tool threads are not pinned: sched_setaffinity: %s", exc)
        _getcpu = False
        return False
    return True


def _nothing_runnable() -> bool:
    """In trio: does no other task wait to run (so the loop would only sleep)?"""
    if _runnable is not None:
        try:
            return _runnable() == 0
        except AttributeError:
            pass
    return trio.lowlevel.current_statistics().tasks_runnable == 0


class _Job:
    """One sync call handed to a worker thread; ``abandoned`` and ``finished`` are decided under
    the pool's lock, so exactly one of "the caller gave up" and "the result is delivered" wins."""

    __slots__ = (
        "function",
        "context",
        "task",
        "token",
        "abandoned",
        "finished",
        "direct",
        "result",
        "late",
        "done",
        "cpu",
        "worker",
    )

    def __init__(
        self,
        function: Callable[[], Any],
        context: contextvars.Context,
        task: trio.lowlevel.Task,
        token: trio.lowlevel.TrioToken,
    ) -> None:
        self.function = function
        self.context = context
        self.task = task
        self.token = token
        self.abandoned = False
        self.finished = False
        #: The caller gave up while the tool was committing: the result goes to ``done``.
        self.late = False
        self.done: trio.Event | None = None
        #: Held while the loop waits for this job directly (see _ToolThreads.run); None once it
        #: waits through trio instead.
        self.direct: threading.Lock | None = None
        self.result: outcome.Outcome[Any] | None = None
        #: The CPU its worker runs it on: the waiting loop's (a direct wait), or -1: any.
        self.cpu = -1
        #: The thread it was handed to.
        self.worker: _Worker | None = None


class _ToolThreads:
    """The persistent worker threads of one sync tool: its own pool, and those it abandoned.

    trio's ``to_thread.run_sync`` costs two event-loop wake-ups and a thread-cache round per call
    (~110 µs here); a worker parked on its own ``SimpleQueue`` costs one hand-off each way. The
    pool holds at most ``size`` threads (the category's limit): an abandoned thread (its call
    timed out or was cancelled, a thread cannot be killed) keeps its slot until its function
    really returns, so a stuck tool starves only itself.

    The slots are a counter and a FIFO ``ParkingLot`` rather than a ``trio.CapacityLimiter``:
    every slot is taken and given back on the loop's thread, and the limiter's borrower
    bookkeeping cost ~3 µs of a ~20 µs hand-off. A freed slot goes straight to the first parked
    caller, so the pool stays first come, first served.
    """

    def __init__(
        self, name: str, size: float, category: str, grace: float = 5.0, pin: bool = True
    ) -> None:
        self.name = name
        #: Run a job the loop waits for directly on the loop's CPU (see the module docstring).
        self.pin = pin
        self.size = size
        #: How long a call given up on during its tool's commit waits for the tool.
        self.grace = grace
        #: Slots taken: calls handed to a thread (or about to be) and abandoned threads.
        self.busy = 0
        self._parked = trio.lowlevel.ParkingLot()
        self.category = category
        self.abandoned = 0
        self.threads = 0
        #: Calls left before this tool's thread is waited for directly again.
        self.skip_direct = 0
        #: The loop's CPU at its last pinned direct wait, and how many more of those waits
        #: hold the loop on its worker's CPU (see _acquire_on_cpu).
        self.loop_cpu = -1
        self.hold_loop = 0
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        #: Set by close(): a busy thread ends when its function returns instead of idling.
        self.closed = False

    async def run(
        self,
        function: Callable[[], Any],
        waiting: list[int],
        control: _AttemptControl | None = None,
        job: _Job | None = None,
    ) -> Any:
        """Run ``function`` in one of the pool's threads and return (or raise) its outcome.

        ``control`` is the attempt's (the tool's ``context.control``): giving up abandons it
        under the pool's lock, unless the tool already committed; then the thread is waited for
        ``grace`` seconds more and the outcome stored on ``control`` (``late``, or ``overran``)
        before the cancellation goes on. ``job``: one :meth:`start_direct` handed over already
        (its slot taken); its outcome is returned, or waited for through trio."""
        if job is None:
            if self.busy < self.size and not self._parked:
                self.busy += 1
            else:
                # Every thread is busy: say how many of them are abandoned, should we time out.
                waiting.append(self.abandoned)
                await self._parked.park()  # woken by _release, which hands us its slot
                waiting.clear()
            # Nothing else for the loop to run right now: it would only sleep in its I/O wait
            # until the worker wakes it. Waiting on a lock instead, for a bounded moment, saves
            # that wake-up path (about half of a quick tool's hand-off). A tool whose direct
            # waits run out is slow: it is not waited for directly again for a while.
            direct = self.skip_direct <= 0 and _nothing_runnable()
            if not direct and self.skip_direct > 0:
                self.skip_direct -= 1
            job = self._hand(function, direct)
            if direct and self._wait_directly(job):
                assert job.result is not None
                return job.result.unwrap()
        elif job.direct is not None:  # start_direct's wait saw it finish
            assert job.result is not None
            return job.result.unwrap()

        def abort(_: Any) -> trio.lowlevel.Abort:
            with self._lock:
                if job.finished:
                    # The result is on its way (_deliver is scheduled): take it instead.
                    return trio.lowlevel.Abort.FAILED
                if control is not None and not control.abandon():
                    # The tool is committing: its change may be landing. Waited for below.
                    job.late = True
                else:
                    job.abandoned = True
            if job.late:
                job.done = trio.Event()
            else:
                self.abandoned += 1
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            # trio unwraps the outcome _deliver reschedules us with: the value, or its exception.
            return await trio.lowlevel.wait_task_rescheduled(abort)
        except trio.Cancelled:
            if job.late and control is not None:
                await self._wait_commit(job, control)
            raise

    def start_direct(self, function: Callable[[], Any]) -> _Job | None:
        """The executor's quick path, on the loop's thread: when a thread is free and the loop
        has nothing else to run, hand ``function`` over and wait for it directly (up to
        ``_DIRECT_WAIT_S``). Returns the job: finished (its ``direct`` lock is still set and
        its slot given back) or still running (``direct`` is None; :meth:`run` with ``job``
        waits for it through trio, and gives the slot back). None: not now (nothing was
        started; :meth:`run` decides as usual)."""
        if self.skip_direct > 0 or self.busy >= self.size or self._parked:
            return None
        if not _nothing_runnable():
            return None
        self.busy += 1
        job = self._hand(function, True)
        self._wait_directly(job)
        return job

    def _hand(self, function: Callable[[], Any], direct: bool) -> _Job:
        """Give ``function`` to an idle worker (or a new one), the pool's slot already taken;
        ``direct``: the loop will wait for it on the job's lock (see :meth:`_wait_directly`)."""
        job = _Job(
            function,
            # The caller's context, as trio.to_thread gives it (CALL_DEADLINE and friends).
            contextvars.copy_context(),
            trio.lowlevel.current_task(),
            trio.lowlevel.current_trio_token(),
        )
        if direct:
            job.direct = threading.Lock()
            job.direct.acquire()
        try:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is None:
                worker = _Worker(self)
                self.threads += 1
            elif direct and self.pin and _getcpu is not False:
                # A thread that already ran (a new one pays its start anyway; a one-call
                # process pins nothing).
                cpu = job.cpu = _loop_cpu()
                if cpu != self.loop_cpu:
                    if self.loop_cpu >= 0:  # the loop moved: hold it for the next waits
                        self.hold_loop = _HOLD_LOOP_WAITS
                    self.loop_cpu = cpu
            job.worker = worker
            worker.send(job)
        except BaseException:
            self._release()
            raise
        return job

    def _wait_directly(self, job: _Job) -> bool:
        """Block the loop up to ``_DIRECT_WAIT_S`` for ``job``: True when it finished (its
        result is set and the slot given back), False when it goes on (it delivers through
        trio now, runs on every CPU, and the next calls are not waited for directly)."""
        assert job.direct is not None
        try:
            if self.hold_loop > 0 and job.cpu >= 0 and _hold_loop:
                self.hold_loop -= 1
                done = _acquire_on_cpu(job.direct, job.cpu)
            else:
                done = job.direct.acquire(timeout=_DIRECT_WAIT_S)
        except BaseException:
            # A KeyboardInterrupt (Ctrl-C) in the wait, which an application may catch and go
            # on: the job is given up like a cancelled call, so its slot comes back when the
            # function really returns. Left taken, each Ctrl-C would cost the tool a thread
            # for good, until every call of it waited forever for one.
            self._give_up_direct(job)
            raise
        if not done:
            with self._lock:
                # The worker decides under this lock: finished means it released.
                done = job.finished
                if not done:
                    job.direct = None  # it delivers through trio now
                    # A slow tool: it gets every core (the worker pins under this lock).
                    job.cpu = -1
                    assert job.worker is not None
                    job.worker.unpin()
            if not done:
                self.skip_direct = _DIRECT_SKIP_CALLS
                return False
        self._release()
        return True

    def _give_up_direct(self, job: _Job) -> None:
        """On the loop's thread: drop a job the loop stopped waiting for directly. Finished: its
        slot is free now. Running: it is abandoned, and its slot comes back when it ends."""
        with self._lock:
            finished = job.finished
            if not finished:
                job.direct = None
                job.abandoned = True
                job.cpu = -1
                if job.worker is not None:
                    job.worker.unpin()
        if finished:
            self._release()
        else:
            self.abandoned += 1

    async def _wait_commit(self, job: _Job, control: _AttemptControl) -> None:
        """After giving up during a commit: wait ``grace`` for the thread (shielded: the commit
        is waited for even when the caller's scope is cancelled too), then record its outcome
        on ``control``, or abandon the thread."""
        assert job.done is not None
        with trio.move_on_after(self.grace, shield=True):
            await job.done.wait()
        if job.result is None:
            with self._lock:
                overran = not job.finished
                if overran:
                    job.abandoned = True  # the worker drops its result and frees the slot
            if overran:
                self.abandoned += 1
                control.overran = True
                return
            with trio.CancelScope(shield=True):  # finished just now: its delivery is queued
                await job.done.wait()
        control.late = job.result

    def finished(self, worker: _Worker, job: _Job, result: outcome.Outcome[Any]) -> bool:
        """In the worker's thread, after ``job`` ran: hand the result back to trio. False: the
        pool was closed meanwhile, and the thread ends."""
        with self._lock:
            job.finished = True
            abandoned = job.abandoned
            keep = not self.closed
            if keep:
                # Idle before the caller wakes, so its next call finds this thread ready.
                self._idle.append(worker)
            else:
                self.threads -= 1
            if job.direct is not None:
                # The loop is waiting on this lock (or about to look, under this lock).
                job.result = result
                job.direct.release()
                return keep
        try:
            job.token.run_sync_soon(self._deliver, job, None if abandoned else result)
        except trio.RunFinishedError:
            pass  # the deck's loop is gone; nothing left to account for
        return keep

    def _deliver(self, job: _Job, result: outcome.Outcome[Any] | None) -> None:
        if result is None:
            self.abandoned -= 1
        elif job.late:
            assert job.done is not None
            job.result = result
            job.done.set()
        else:
            trio.lowlevel.reschedule(job.task, result)
        self._release()

    def _release(self) -> None:
        """On the loop's thread: give a slot back, to the first parked caller if there is one."""
        if self._parked:
            self._parked.unpark()  # the slot changes hands: busy stays as it is
        else:
            self.busy -= 1

    def waiting(self) -> bool:
        """Whether callers are parked for a slot."""
        return bool(self._parked)

    def retire(self, worker: _Worker) -> bool:
        """In an idle worker's thread: may it end? False when a job was just handed to it."""
        with self._lock:
            if worker not in self._idle:
                return False
            self._idle.remove(worker)
            self.threads -= 1
            return True

    def close(self) -> None:
        """Let the idle threads end (busy ones end when their function returns)."""
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
            self.threads -= len(idle)
        for worker in idle:
            worker.send(None)


class _Worker:
    """One persistent thread of a :class:`_ToolThreads` pool.

    It sleeps in ``poll`` on a pipe of its own, and :meth:`send` wakes it with ``os.write``,
    which releases the GIL around the system call. Woken through a lock or a ``SimpleQueue``
    instead, the worker preempts the loop while the loop still holds the GIL, finds the GIL
    taken and sleeps again: about six context switches per call instead of two or three.
    """

    __slots__ = ("pool", "jobs", "_wake_r", "_wake_w", "tid", "pinned", "_cpus")

    def __init__(self, pool: _ToolThreads) -> None:
        self.pool = pool
        #: The thread's native id (set when it starts), the CPU it is pinned to (-1: none) and
        #: the CPUs it may use otherwise; ``pinned`` changes under the pool's lock.
        self.tid = 0
        self.pinned = -1
        self._cpus: Any = ()
        #: One job (or the None that ends the thread) per byte written to the pipe.
        self.jobs: collections.deque[_Job | None] = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        try:
            # daemon: an abandoned thread stuck in a blocking call must not keep the process
            # alive.
            threading.Thread(
                target=self._loop, name=f"tooldeck-tool-{pool.name}", daemon=True
            ).start()
        except BaseException:
            os.close(self._wake_r)
            os.close(self._wake_w)
            raise

    def send(self, job: _Job | None) -> None:
        """Hand ``job`` (None: end) to this thread."""
        self.jobs.append(job)
        os.write(self._wake_w, b"\0")

    def _place(self, job: _Job) -> None:
        """Before running ``job``: move to its CPU, or back to every CPU (under the pool's
        lock, so that an unpin by the loop cannot be undone by a pin decided before it)."""
        with self.pool._lock:
            want = job.cpu
            if want == self.pinned:
                return  # the loop unpinned us (and the job) meanwhile
            if not self._cpus:  # first pin: this thread still has the process's CPUs
                self._cpus = os.sched_getaffinity(0)
            if _set_affinity(0, self._cpus if want < 0 else (want,)):
                self.pinned = want

    def unpin(self) -> None:
        """On the loop's thread, under the pool's lock: let this thread use every CPU again."""
        if self.pinned >= 0 and self.tid and _set_affinity(self.tid, self._cpus):
            self.pinned = -1

    def _loop(self) -> None:
        pool, jobs, wake = self.pool, self.jobs, self._wake_r
        self.tid = threading.get_native_id()
        poller = select.poll()
        poller.register(wake, select.POLLIN)
        try:
            while True:
                if not poller.poll(_IDLE_THREAD_MS):
                    if pool.retire(self):
                        return
                    continue
                os.read(wake, 1)
                job = jobs.popleft()
                if job is None:
                    return
                if job.cpu != self.pinned:
                    self._place(job)
                if job.abandoned:
                    # Given up on before this thread picked it up: it never runs.
                    result: outcome.Outcome[Any] = outcome.Value(None)
                else:
                    result = outcome.capture(job.context.run, job.function)
                    if isinstance(result, outcome.Error) and passes_for_the_callers(
                        result.error
                    ):
                        # Ctrl-C reaches the main thread only, and trio never cancels code in
                        # this thread: a KeyboardInterrupt or trio.Cancelled here (alone or in
                        # an exception group) is the tool's own raise. Unwrapped as is in the
                        # caller it would pass for the user's interrupt or the caller's
                        # cancellation and take the host down. It is the tool's failure.
                        error = RuntimeError(
                            f"the tool raised {type(result.error).__name__}"
                        )
                        error.__cause__ = result.error
                        result = outcome.Error(error)
                    if isinstance(result, outcome.Error):
                        # Its text is the tool's code: written here, not on the event loop.
                        prerender(result.error)
                if not pool.finished(self, job, result):
                    return  # the executor closed while it ran: nothing will call it again
                del job, result  # drop the references while parked
        finally:
            os.close(wake)
            os.close(self._wake_w)


def _bounded(tool: ToolDefinition, result: ToolResult) -> ToolResult:
    """A result an in-process tool built itself, within what the sandbox's wire would let
    through: its error's message and suggestion at most ``execution.max_output_bytes``
    characters (cut with a marker: a 5 MB message used to go out whole, past the cap that
    binds the data), and metadata that is plain JSON without the keys the pipeline owns
    (``HOST_METADATA``: a tool's own ``cached`` would pass for a cache hit)."""
    error, metadata = result.error, result.metadata
    if error is None and not metadata:
        return result  # the common case: ToolResult.ok(...)
    changes: dict[str, Any] = {}
    if metadata:
        from ._wire import plain  # the sandbox's own conversion (cattrs: imported when needed)

        safe = plain(host_owned(result).metadata)
        if safe is not metadata:
            changes["metadata"] = safe
    if error is not None:
        cap = tool.execution.max_output_bytes
        fixed: dict[str, Any] = {}
        if len(error.message) > cap or len(error.suggestion or "") > cap:
            fixed["message"] = shorten(error.message, cap)
            fixed["suggestion"] = shorten(error.suggestion, cap) if error.suggestion else None
        if error.details:
            from ._wire import plain

            details = plain(error.details)
            size = len(json.dumps(details, ensure_ascii=False))
            if size > cap:
                fixed["details"] = {"dropped_details_bytes": size, "max_output_bytes": cap}
            elif details is not error.details:
                fixed["details"] = details
        if fixed:
            changes["error"] = attrs.evolve(error, **fixed)
    return attrs.evolve(result, **changes) if changes else result


def _tool_result(tool: ToolDefinition, value: Any) -> ToolResult:
    """What an in-process tool returned, as its result: a value as the data, a
    :class:`ToolResult` it built made consistent and :func:`_bounded`."""
    result = as_result(value)
    return _bounded(tool, result) if isinstance(value, ToolResult) else result


def _log_raised(logger: logging.Logger | None, tool: ToolDefinition, exc: BaseException) -> None:
    """Log a tool's exception: by the traceback its thread wrote (:func:`prerender`) when it
    ran in one, since formatting it here would run the tool's ``__str__`` on the event loop."""
    if logger is None:
        return
    rendered = rendered_traceback(exc)
    if rendered is not None:
        logger.warning("tool %r raised\n%s", tool.name, rendered)
    else:
        logger.warning("tool %r raised", tool.name, exc_info=exc)


def _forged_cancellation(tool: ToolDefinition, exc: BaseException) -> ToolResult:
    """The result of a tool that raised ``trio.Cancelled`` (or a group holding one) when
    nothing cancelled it: its own raise, which must not reach a caller that was not
    cancelled (trio would take it for a cancellation that belongs to no scope)."""
    return ToolResult.fail(
        ErrorCode.EXECUTION_ERROR,
        f"{tool.name!r} raised {type(exc).__name__} although nothing cancelled it",
        suggestion="The tool failed; report it to the user or try another approach.",
        details={"exception": type(exc).__name__},
    )


class _OffLoopRun:
    """One call of an async tool run off the deck's loop: in a worker thread, under a
    ``trio.run`` of its own (see the README, "Tools that block the event loop").

    The thread runs the tool in a copy of the caller's context (as for sync tools). The inner
    run's scope has the attempt's deadline (plus a margin: the deck's own timeout answers
    first) and is cancelled when the call ends any other way (:meth:`cancel`, from the deck's
    loop), so a tool that awaits again stops there instead of running on, abandoned."""

    __slots__ = ("tool", "arguments", "context", "_lock", "_state", "_token", "_scope")

    #: Past its deadline the deck answers TIMEOUT; the inner run ends a moment after.
    MARGIN_S = 0.1

    def __init__(self, tool: ToolDefinition, arguments: Mapping[str, Any], context: ToolContext):
        self.tool = tool
        self.arguments = arguments
        self.context = context
        self._lock = threading.Lock()
        #: 0: not started, 1: running (token and scope set), 2: over or cancelled.
        self._state = 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None

    def run(self) -> Any:
        """In the worker thread: the tool's outcome."""
        return trio.run(self._main)

    async def _main(self) -> Any:
        control = self.context.control
        deadline = control.deadline if control is not None else None
        with trio.CancelScope() as scope:
            if deadline is not None:
                scope.deadline = trio.current_time() + (
                    deadline - time.monotonic() + self.MARGIN_S
                )
            with self._lock:
                if self._state == 2:
                    scope.cancel()
                else:
                    self._state = 1
                    self._token = trio.lowlevel.current_trio_token()
                    self._scope = scope
            try:
                value = call_tool_function(self.tool, self.arguments, self.context)
                if inspect.isawaitable(value):
                    value = await bounded(value, control)
                return value
            finally:
                with self._lock:
                    self._state = 2
        # Read only when the deck's own loop was held past the deadline (else it answered and
        # dropped this thread's result first).
        raise ToolFailure(
            ErrorCode.TIMEOUT,
            f"{self.tool.name!r} did not finish within {self.tool.execution.timeout_s:g}s "
            "(run off the event loop) and was stopped",
            details={"queued": False, "timeout_s": self.tool.execution.timeout_s},
        )

    def cancel(self) -> None:
        """On the deck's loop, once the call is over: cancel the inner run if it still goes
        on (the caller gave up), or keep it from starting."""
        with self._lock:
            state, self._state = self._state, 2
            token, scope = self._token, self._scope
        if state == 1 and token is not None and scope is not None:
            try:
                token.run_sync_soon(scope.cancel)
            except trio.RunFinishedError:
                pass  # it has just ended


@attrs.frozen
class _Started:
    """A sync call :meth:`RunnerExecutor._run_direct` handed to a thread that outlasted the
    direct wait: its job, the attempt's control and context (the tool holds both), and when
    the call began (``perf_counter``)."""

    job: _Job
    control: _AttemptControl
    context: ToolContext
    started: float


@attrs.define(eq=False)
class _InFlight:
    session_id: str
    call_id: str
    scope: trio.CancelScope
    #: Set when cancel_session / cancel_call / aclose cancelled the call (not its deadline).
    requested: bool = False
    #: The latest attempt's control (what the tool committed, when it was given up on).
    control: _AttemptControl | None = None

    def cancel(self) -> None:
        self.requested = True
        self.scope.cancel()


@attrs.define(eq=False)
class RunnerExecutor:
    """The default executor (see the module docstring). Build it with :meth:`from_settings`."""

    settings: RunnerSettings = attrs.field(factory=RunnerSettings)
    _queues: dict[str, _Queue] = attrs.field(factory=dict, init=False)
    _in_flight: dict[str, set[_InFlight]] = attrs.field(factory=dict, init=False)
    _sandbox: SandboxPool | None = attrs.field(default=None, init=False)
    # What from_settings found at start-up: the pool, built at the first sandboxed call, keeps
    # that decision ("" = decide then).
    _isolation_at_start: str = attrs.field(default="", init=False)
    _closed: bool = attrs.field(default=False, init=False)
    # Per execute function: how it runs in process (_INLINE, _THREAD or _AWAITED, see _kind).
    # Keyed by the function, so a tool registered again with another implementation is judged
    # again; what the definition says (sandbox, retries) is checked per call.
    _inline: dict[Any, int] = attrs.field(factory=dict, init=False)
    # Per sync tool (by name): its thread pool. trio's shared default pool (40 threads) would let
    # one tool's abandoned threads (timed out, still sleeping) starve every other sync tool.
    _threads: dict[str, _ToolThreads] = attrs.field(factory=dict, init=False)
    # The loop the sandbox pool lives on (its processes and sockets are that loop's): where
    # session_closed, called from any thread, hands its work.
    _token: trio.lowlevel.TrioToken | None = attrs.field(default=None, init=False)
    # What runs on the loop now, for the watchdog (see _watchdog), and the watchdog itself
    # (started at the first call of a tool whose code can run on the loop).
    _watch: LoopWatch = attrs.field(factory=LoopWatch, init=False)
    _watchdog: LoopWatchdog | None = attrs.field(default=None, init=False)
    # Execute functions seen holding the loop -> their tool's name: their calls run off it
    # (with contain_loop_blockers). Written by the watchdog's thread, read on the loop.
    _off_loop: dict[Any, str] = attrs.field(factory=dict, init=False)
    # Tool name -> the longest hold of the loop seen (statistics().loop_blockers).
    _blockers: dict[str, float] = attrs.field(factory=dict, init=False)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None = None) -> RunnerExecutor:
        """Build from the whole tooldeck configuration (reads its ``runner`` table)."""
        runner = RunnerSettings.from_settings(settings)
        # At start-up, not at the first sandboxed call: fail when bubblewrap is demanded but
        # absent, and warn (once) when sandboxed tools would get degraded isolation. The pool
        # itself (and the sandbox module, ~12 ms of imports) waits for the first sandboxed
        # call: a deck or a `tooldeck call` of in-process tools never needs it.
        executor = cls(settings=runner)
        executor._isolation_at_start = resolve_isolation(runner.sandbox, runner.allow_degraded)
        warn_isolation(executor._isolation_at_start)
        return executor

    # -- public -------------------------------------------------------------------------------

    async def run(self, tool: ToolDefinition, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run ``call``: queue, timeout, retries, in process or sandboxed. Never raises for the
        tool's failure; ``trio.Cancelled`` from the caller's scope propagates."""
        try:
            kind = self._inline.get(tool.execute)
            if kind is None:
                if len(self._inline) >= _MAX_JUDGED:
                    # Functions of tools since removed or registered again would stay here
                    # (and keep what their closures hold) for the life of the deck.
                    self._inline.clear()
                kind = self._inline[tool.execute] = self._kind(tool)
                if self._watchdog is None and kind != _THREAD:
                    self._start_watchdog()
        except TypeError:  # an unhashable callable object: not judged, so never inline
            kind = _AWAITED
            if self._watchdog is None:
                self._start_watchdog()
        if kind < _AWAITED and not self._closed:
            execution = tool.execution
            if (
                not tool.security.sandbox
                # First: a misconfigured tool is refused on the queued path, and its
                # max_retries may not even compare.
                and _execution_problem(tool) is None
                and not (execution.retryable and execution.max_retries > 0)
            ):
                if kind == _INLINE:
                    queue = self._queues.get(tool.category) or self._queue(tool.category)
                    if queue.limiter.available_tokens >= 1:
                        return await self._run_inline(tool, call, context, queue)
                else:
                    # A sync tool whose pool exists (its first call made it, queued).
                    threads = self._threads.get(tool.name)
                    queue = self._queues.get(tool.category)
                    if (
                        threads is not None
                        and queue is not None
                        and not queue.waiting
                        and queue.limiter.available_tokens >= 1
                    ):
                        return await self._run_direct(tool, call, context, queue, threads)
        return await self._run_queued(tool, call, context)

    async def _run_direct(
        self,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        queue: _Queue,
        threads: _ToolThreads,
    ) -> ToolResult:
        """A single-attempt sync tool whose pool and category have room: the quick path.

        When the loop has nothing else to run, the job is handed to a thread and waited for
        directly *before* any of the queued path's machinery (a cancel scope with a deadline, a
        category slot, the in-flight record: ~20 µs of a quick tool's ~45). Nothing can observe
        that none was taken: the loop runs nothing else meanwhile, so no other call, no
        cancel_session() and no deadline can come in between. A job still running after the
        wait goes on under exactly that machinery, as if it had been queued (its timeout counted
        from the start); one that finished is a result at once. A sync tool is always a thread
        call: its function was never run on the loop."""
        started = time.perf_counter()
        # What the queued path's first checkpoint does: a caller already cancelled gets its
        # Cancelled before anything runs.
        await trio.lowlevel.checkpoint_if_cancelled()
        control = _AttemptControl(deadline=time.monotonic() + tool.execution.timeout_s)
        bound = context.with_control(control)
        arguments = call.arguments
        try:
            job = threads.start_direct(lambda: call_tool_function(tool, arguments, bound))
        except Exception:
            # No thread could be started (EMFILE for its pipe, the system's thread limit):
            # nothing ran and the slot is back. The queued path tries again and answers with
            # its structured error, never a raise out of run().
            job = None
        if job is None:
            return await self._run_queued(tool, call, context)
        finished = job.direct is not None
        if finished and not (
            # A def that returned an awaitable: awaited under the call's timeout, below.
            isinstance(job.result, outcome.Value) and inspect.isawaitable(job.result.value)
        ):
            if queue.in_flight >= queue.max_in_flight:
                queue.max_in_flight = queue.in_flight + 1
            queue.completed += 1
            result = await self._invoke(tool, call, bound, None, job)
            return result.with_metadata(
                duration_s=time.perf_counter() - started,
                attempts=1,
                isolation=ISOLATION_IN_PROCESS,
            )
        return await self._run_queued(
            tool, call, context, _Started(job, control, bound, started)
        )

    async def _run_queued(
        self,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        handed: _Started | None = None,
    ) -> ToolResult:
        """The queued path: ``handed`` is a job :meth:`_run_direct` started (a single attempt,
        its checks passed), which goes on here from where it is."""
        isolation = self._isolation(tool)
        execution = tool.execution
        if handed is None:
            started = time.perf_counter()
            if self._closed:
                return ToolResult.fail(
                    ErrorCode.EXECUTION_ERROR, "the executor is closed", plugin="runner"
                ).with_metadata(duration_s=0.0, attempts=0, isolation=isolation)
            problem = _execution_problem(tool)
            if problem is not None:
                return problem.with_metadata(duration_s=0.0, attempts=0, isolation=isolation)
            single = not execution.retryable or execution.max_retries <= 0
            deadline = trio.current_time() + execution.timeout_s
        else:
            started = handed.started
            single = True
            assert handed.control.deadline is not None
            # The timeout counts from the hand-over, as on this path from joining the queue.
            deadline = trio.current_time() + (handed.control.deadline - time.monotonic())
        # A single attempt needs one cancel scope, not two: its deadline is the call's timeout
        # and cancel_session() cancels the same scope (``requested`` tells the two apart).
        scope = trio.CancelScope(deadline=deadline) if single else trio.CancelScope()
        entry = _InFlight(context.session_id, context.call_id or call.id, scope)
        self._in_flight.setdefault(entry.session_id, set()).add(entry)
        attempts = [0]
        try:
            if single:
                attempts[0] = 1
                result = await self._attempt(tool, call, context, entry, handed=handed)
            else:
                with entry.scope:
                    result = await self._run_with_retries(tool, call, context, attempts, entry)
        finally:
            calls = self._in_flight.get(entry.session_id)
            if calls is not None:
                calls.discard(entry)
                if not calls:
                    del self._in_flight[entry.session_id]
        if entry.requested and entry.scope.cancelled_caught:
            control = entry.control
            if control is not None and control.gave_up_while_committing:
                result = _late_result(
                    tool, control, cancelled=True, grace=self.settings.commit_grace_s
                )
            else:
                result = ToolResult.fail(
                    ErrorCode.CANCELLED,
                    f"the call to {tool.name!r} was cancelled before it finished",
                )
        if entry.control is not None and entry.control.off_loop:
            result = result.with_metadata(off_loop=True)
        return result.with_metadata(
            duration_s=time.perf_counter() - started,
            attempts=attempts[0],
            # The sandbox's own answer says which isolation it really applied; an in-process
            # tool's result claiming one (say "bubblewrap") says nothing true.
            isolation=result.metadata.get("isolation", isolation)
            if tool.security.sandbox
            else isolation,
        )

    def cancel_session(self, session_id: str) -> int:
        """Cancel every queued or running call of a session; they return ``CANCELLED``.

        Returns the number of calls cancelled.
        """
        calls = list(self._in_flight.get(session_id, ()))
        for entry in calls:
            entry.cancel()
        return len(calls)

    def session_closed(self, session_id: str) -> None:
        """The deck closed ``session_id``: release what the sandbox pool keeps for it (its
        zygotes). From any thread; the work is done on this executor's loop, in the background.
        """
        token = self._token
        if self._sandbox is None or token is None:
            return  # no sandboxed call ever ran: nothing kept per session
        try:
            token.run_sync_soon(self._release_session, session_id)
        except trio.RunFinishedError:
            pass  # the deck's loop is gone, and its pool with it

    def _release_session(self, session_id: str) -> None:
        pool = self._sandbox
        if pool is not None and not self._closed and pool.holds_session(session_id):
            trio.lowlevel.spawn_system_task(self._release_quietly, pool, session_id)

    @staticmethod
    async def _release_quietly(pool: SandboxPool, session_id: str) -> None:
        try:
            await pool.release_session(session_id)
        except Exception:  # a system task that raises would crash the deck's whole run
            logger.exception("tooldeck-runner: releasing session %s's zygotes failed", session_id)

    def cancel_call(self, session_id: str, call_id: str) -> bool:
        """Cancel one call (by the id in its context); it returns ``CANCELLED``."""
        for entry in list(self._in_flight.get(session_id, ())):
            if entry.call_id == call_id:
                entry.cancel()
                return True
        return False

    def statistics(self) -> ExecutorStatistics:
        """Per-category queue figures and the sandbox pool's counters, as a frozen snapshot."""
        return ExecutorStatistics(
            categories={
                name: CategoryStatistics(
                    limit=int(q.limiter.total_tokens),
                    in_flight=q.in_flight,
                    waiting=q.waiting,
                    max_in_flight=q.max_in_flight,
                    completed=q.completed,
                    abandoned_threads=sum(
                        t.abandoned for t in self._threads.values() if t.category == name
                    ),
                )
                for name, q in self._queues.items()
            },
            sandbox=self._sandbox.statistics() if self._sandbox is not None else None,
            loop_blockers=dict(self._blockers),
        )

    def sandbox_pool(self) -> SandboxPool:
        """The pool of sandbox workers (created on first use)."""
        if self._sandbox is None:
            from ._sandbox import SandboxPool

            self._sandbox = SandboxPool(self.settings, isolation=self._isolation_at_start)
        if self._token is None:
            try:
                self._token = trio.lowlevel.current_trio_token()
            except RuntimeError:
                pass  # outside trio (statistics, a test): recorded at the first call
        return self._sandbox

    async def aclose(self) -> None:
        """Cancel running calls and kill the sandbox's idle workers."""
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.stop()
        for threads in self._threads.values():
            threads.close()
        for calls in list(self._in_flight.values()):
            for entry in list(calls):
                entry.cancel()
        if self._sandbox is not None:
            await self._sandbox.aclose()

    # -- internals ----------------------------------------------------------------------------

    def _start_watchdog(self) -> None:
        """On the loop's thread, at the first call that may run a tool's code on the loop: start
        the thread that notices a tool holding it (none with ``loop_block_warn_s = 0``)."""
        threshold = self.settings.loop_block_warn_s
        watchdog = self._watchdog = LoopWatchdog(self._watch, threshold, self._loop_blocked)
        if threshold > 0 and math.isfinite(threshold):
            watchdog.start()

    def _loop_blocked(self, tool: ToolDefinition, seconds: float, stack: str) -> None:
        """In the watchdog's thread: ``tool``'s code has held the event loop ``seconds`` (at
        least) without yielding. Logged once per tool; with ``contain_loop_blockers`` its later
        calls run off the loop. The loop is still held: only dict stores here, each atomic
        under the GIL, which the loop reads at its next call."""
        name = tool.name
        first = name not in self._blockers
        self._blockers[name] = max(seconds, self._blockers.get(name, 0.0))
        contained = False
        if self.settings.contain_loop_blockers and not tool.security.sandbox:
            try:
                self._off_loop[tool.execute] = name
                # The verdict run() reads first: the next call takes the thread's path.
                self._inline[tool.execute] = _OFF_LOOP if tool.is_async else _THREAD
                contained = True
            except TypeError:  # an unhashable callable object: reported only
                pass
        if not first:
            return
        function = tool.execute
        where = (
            f"{getattr(function, '__module__', '?')}."
            f"{getattr(function, '__qualname__', type(function).__name__)}"
        )
        if tool.is_async:
            fix = (
                "Its async code blocks (time.sleep, a synchronous HTTP client or socket, "
                "CPU-bound work): await trio's equivalent (trio.sleep, an async client), move "
                "the blocking part into `await trio.to_thread.run_sync(...)`, or make the tool "
                "a plain `def` (run in a worker thread under its timeout)."
            )
        else:
            fix = "Its function is marked @nonblocking but blocks: remove the marker."
        then = (
            "Its later calls run in a worker thread, off the loop ([runner] "
            "contain_loop_blockers; metadata off_loop = true)."
            if contained
            else "Its later calls still run on the loop."
        )
        logger.warning(
            "tooldeck-runner: tool %r (plugin %r, %s) held the event loop for %.2f s without "
            "yielding: every session of this deck stalled meanwhile, and no timeout could fire "
            "(its own %g s included). %s %s Where the loop was:\n%s",
            name,
            tool.plugin,
            where,
            seconds,
            tool.execution.timeout_s,
            fix,
            then,
            stack.rstrip() or "(not available)",
        )

    def _runs_off_loop(self, tool: ToolDefinition) -> bool:
        """Was ``tool``'s function seen holding the loop (and contained)?"""
        try:
            return tool.execute in self._off_loop
        except TypeError:
            return False

    async def _call_off_loop(
        self, tool: ToolDefinition, call: ToolCall, context: ToolContext, waiting: list[int]
    ) -> Any:
        """Run an async tool seen holding the loop in a thread of its own pool, under a
        ``trio.run`` of its own (see :class:`_OffLoopRun`): the sync tools' machinery, so its
        timeout and cancellation are those of a sync tool (the thread is abandoned; the run
        inside it is cancelled too, which ends it at the tool's next checkpoint)."""
        control = context.control
        attempt = control if isinstance(control, _AttemptControl) else None
        if attempt is not None:
            attempt.off_loop = True
        run = _OffLoopRun(tool, call.arguments, context)
        threads = self._threads.get(tool.name) or self._tool_threads(tool)
        try:
            return await threads.run(run.run, waiting, attempt)
        finally:
            run.cancel()

    def _isolation(self, tool: ToolDefinition) -> str:
        if tool.security.sandbox:
            return self.sandbox_pool().isolation
        return ISOLATION_IN_PROCESS

    def _kind(self, tool: ToolDefinition) -> int:
        """How ``tool.execute`` runs in process: ``_INLINE`` (see the module docstring),
        ``_THREAD`` (a plain function: a worker thread), ``_AWAITED`` (a coroutine function
        that suspends: awaited under the call's scope) or ``_OFF_LOOP`` (a coroutine function
        seen holding the loop: see :class:`_OffLoopRun`)."""
        if self._off_loop and self._runs_off_loop(tool):
            return _OFF_LOOP if tool.is_async else _THREAD
        if never_suspends(tool.execute):
            return _INLINE
        if tool.is_async:
            return _AWAITED
        # A plain function its author marked @nonblocking: it computes and returns, so a
        # worker thread would only add two hand-offs.
        return _INLINE if is_nonblocking(tool.execute) else _THREAD

    async def _run_inline(
        self, tool: ToolDefinition, call: ToolCall, context: ToolContext, queue: _Queue
    ) -> ToolResult:
        """Run a never-suspending coroutine to completion (see the module docstring): the
        ``await`` below returns without ever yielding to trio."""
        started = time.perf_counter()
        queue.in_flight += 1
        if queue.in_flight > queue.max_in_flight:
            queue.max_in_flight = queue.in_flight
        # The whole call is one step of the tool's code on the loop (see _watchdog).
        watch = self._watch
        watch.seq += 1
        outer = watch.holder
        watch.holder = tool
        try:
            value = call_tool_function(tool, call.arguments, context)
            # An `async def`'s coroutine (exact type first: cheaper than isawaitable's checks).
            if type(value) is types.CoroutineType or inspect.isawaitable(value):
                value = await value
        except ToolFailure as exc:
            result = _bounded(tool, failure_result(exc))
        except (Exception, SystemExit) as exc:
            _log_raised(context.logger, tool, exc)
            result = exception_result(exc)
        except BaseException as exc:
            # Nothing here ever yields to trio: no real cancellation can arrive, so a Cancelled
            # (alone or in a group) is the tool's own raise. Anything else (a Ctrl-C, another
            # BaseException) goes on as on the queued path.
            if holds(exc, KeyboardInterrupt) or not holds(exc, trio.Cancelled):
                raise
            result = _forged_cancellation(tool, exc)
        else:
            if type(value) in NOT_VALUES:  # a `yield`, or a coroutine never awaited
                result = not_a_value_result(value)
            elif not isinstance(value, ToolResult):
                # The common case, built in one go (no intermediate result to merge).
                return ToolResult(
                    success=True,
                    data=value,
                    metadata={
                        "duration_s": time.perf_counter() - started,
                        "attempts": 1,
                        "isolation": ISOLATION_IN_PROCESS,
                    },
                )
            else:
                result = _bounded(tool, consistent(value))
        finally:
            watch.holder = outer
            queue.in_flight -= 1
            queue.completed += 1
        return result.with_metadata(
            duration_s=time.perf_counter() - started, attempts=1, isolation=ISOLATION_IN_PROCESS
        )

    def _queue(self, category: str) -> _Queue:
        queue = self._queues.get(category)
        if queue is None:
            limit = self.settings.concurrency.get(category, self.settings.default_limit)
            queue = self._queues[category] = _Queue(trio.CapacityLimiter(limit))
        return queue

    async def _run_with_retries(
        self,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        attempts: list[int],
        inflight: _InFlight | None = None,
    ) -> ToolResult:
        execution = tool.execution
        if not execution.retryable or execution.max_retries <= 0:
            attempts[0] = 1
            return await self._attempt(tool, call, context, inflight=inflight)
        # Imported here: stamina (and tenacity under it) cost a new process ~8 ms, and only
        # retryable tools need it (`tooldeck call` of a plain tool does not).
        import stamina

        settings = self.settings
        try:
            async for attempt in stamina.retry_context(
                # The longest Retry-After waited for: one attempt's time, or the longest
                # backoff when that is longer.
                on=_backoff_hook(max(settings.retry_max_s, execution.timeout_s)),
                attempts=execution.max_retries + 1,
                timeout=None,
                wait_initial=settings.retry_initial_s,
                wait_max=settings.retry_max_s,
                wait_jitter=settings.retry_jitter_s,
                wait_exp_base=2,
            ):
                with attempt:
                    attempts[0] += 1
                    result = await self._attempt(tool, call, context, inflight=inflight)
                    if _should_retry(result):
                        raise _RetryableResult(result)
                    return result
        except _RetryableResult as exc:
            return exc.result
        raise AssertionError("unreachable: stamina yields at least one attempt")

    async def _attempt(
        self,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        entry: _InFlight | None = None,
        *,
        inflight: _InFlight | None = None,
        handed: _Started | None = None,
    ) -> ToolResult:
        """One attempt under the tool's timeout: in ``entry``'s scope (whose deadline is the
        timeout) for a single-attempt call, else in a fresh scope of its own (``inflight``:
        the call's entry then, whose scope encloses the retries). ``handed``: the attempt's
        job is running already (see :meth:`_run_direct`)."""
        queue = self._queue(tool.category)
        timeout = tool.execution.timeout_s
        # A fresh borrower per call: the same task may hold slots for nested calls.
        token = object()
        started = False
        ahead = 0
        # Filled by _invoke while a sync tool waits for a thread of its own pool.
        waiting: list[int] = []
        scope = entry.scope if entry is not None else trio.move_on_after(timeout)
        owner = entry if entry is not None else inflight
        control: _AttemptControl | None = None
        with scope:
            ahead = queue.waiting
            if handed is not None:
                # Free when the job was handed over, and nothing ran since. No checkpoint here:
                # the running job is the thread wait's to abandon, should the scope be done.
                queue.limiter.acquire_on_behalf_of_nowait(token)
            else:
                try:
                    # A free slot is taken at once (WouldBlock also when others wait, so the
                    # queue stays first come, first served); the call is still a cancellation
                    # point.
                    queue.limiter.acquire_on_behalf_of_nowait(token)
                except trio.WouldBlock:
                    queue.waiting += 1
                    try:
                        await queue.limiter.acquire_on_behalf_of(token)
                    finally:
                        queue.waiting -= 1
                else:
                    try:
                        await trio.lowlevel.checkpoint_if_cancelled()
                    except BaseException:
                        queue.limiter.release_on_behalf_of(token)
                        raise
            started = True
            queue.in_flight += 1
            queue.max_in_flight = max(queue.max_in_flight, queue.in_flight)
            try:
                # The attempt's own control: its deadline (the timeout, queue time included),
                # whether it was given up on, and the tool's commit (see ToolContext).
                if handed is not None:
                    control = handed.control
                    if owner is not None:
                        owner.control = control
                    return await self._invoke(tool, call, handed.context, waiting, handed.job)
                deadline = scope.deadline
                control = _AttemptControl(
                    deadline=time.monotonic() + (deadline - trio.current_time())
                    if math.isfinite(deadline)
                    else None,
                    probe=_scope_probe(
                        (scope,) if owner is None or owner.scope is scope else (scope, owner.scope)
                    )
                    if tool.is_async
                    and not tool.security.sandbox
                    # Off the loop the tool reads what the runner decided under the pool's
                    # lock, as a sync tool does (its thread has a trio run of its own).
                    and not (self._off_loop and self._runs_off_loop(tool))
                    else None,
                )
                if owner is not None:
                    owner.control = control
                return await self._invoke(tool, call, context.with_control(control), waiting)
            finally:
                queue.in_flight -= 1
                queue.completed += 1
                queue.limiter.release_on_behalf_of(token)
        if control is not None and control.gave_up_while_committing:
            return _late_result(
                tool,
                control,
                cancelled=entry is not None and entry.requested,
                grace=self.settings.commit_grace_s,
            )
        if entry is not None and entry.requested:
            # Cancelled by cancel_session()/cancel_call(); the caller reports CANCELLED.
            return ToolResult.fail(ErrorCode.CANCELLED, "cancelled")
        if waiting:
            return ToolResult.fail(
                ErrorCode.TIMEOUT,
                f"{tool.name!r} timed out after {timeout:g}s before it started: all its worker "
                f"threads were busy, {waiting[0]} of them with earlier calls that timed out and "
                "are still running; it never started",
                retryable=True,
                suggestion=f"{tool.name} is stuck; use another tool or wait before calling it.",
                details={"queued": True, "timeout_s": timeout, "abandoned_threads": waiting[0]},
            )
        if not started:
            return ToolResult.fail(
                ErrorCode.TIMEOUT,
                f"{tool.name!r} timed out after {timeout:g}s while queued: all "
                f"{int(queue.limiter.total_tokens)} slots of category {tool.category!r} were "
                f"busy ({ahead} call(s) ahead of it); it never started",
                retryable=True,
                suggestion="The system is busy; wait a little and call again.",
                details={"queued": True, "timeout_s": timeout},
            )
        return ToolResult.fail(
            ErrorCode.TIMEOUT,
            f"{tool.name!r} did not finish within {timeout:g}s and was stopped",
            details={"queued": False, "timeout_s": timeout},
        )

    def _tool_threads(self, tool: ToolDefinition) -> _ToolThreads:
        threads = self._threads.get(tool.name)
        if threads is None:
            if len(self._threads) >= _MAX_POOLS:
                self._drop_idle_pools()
            size = self._queue(tool.category).limiter.total_tokens
            threads = self._threads[tool.name] = _ToolThreads(
                tool.name, size, tool.category, self.settings.commit_grace_s,
                pin=self.settings.pin_sync_threads,
            )
        return threads

    def _drop_idle_pools(self) -> None:
        """Forget the per-tool pools nobody uses: no thread (idle ones have ended), no call
        running or waiting, none abandoned. On the loop's thread, which alone hands out slots,
        so a pool found unused here has no caller holding it."""
        for name, pool in list(self._threads.items()):
            if not (pool.busy or pool.threads or pool.abandoned or pool.waiting()):
                del self._threads[name]

    async def _in_thread(
        self,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        waiting: list[int],
        job: _Job | None = None,
    ) -> Any:
        """Run a sync tool in a thread of its own pool (``job``: handed over already); on
        timeout or cancellation the thread is abandoned (it cannot be killed) and keeps its
        pool slot until it really ends."""
        threads = self._threads.get(tool.name) or self._tool_threads(tool)
        arguments = call.arguments
        control = context.control
        return await threads.run(
            lambda: call_tool_function(tool, arguments, context),
            waiting,
            control if isinstance(control, _AttemptControl) else None,
            job,
        )

    async def _invoke(
        self,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        waiting: list[int] | None = None,
        job: _Job | None = None,
    ) -> ToolResult:
        if tool.security.sandbox:
            return await self.sandbox_pool().run(tool, call, context)
        try:
            if tool.is_async:
                if self._off_loop and self._runs_off_loop(tool):
                    value = await self._call_off_loop(
                        tool, call, context, waiting if waiting is not None else []
                    )
                else:
                    # Driven (see _unwind): a tool swallowing its cancellation cannot outlive
                    # it; each step of its code is marked for the watchdog.
                    value = await bounded(
                        call_tool_function(tool, call.arguments, context),
                        context.control,
                        self._watch,
                        tool,
                    )
            else:
                value = await self._in_thread(
                    tool, call, context, waiting if waiting is not None else [], job
                )
                if inspect.isawaitable(value):
                    value = await bounded(value, context.control)
        except CallAbandoned as exc:
            # The tool saw (ToolContext.commit) that its call was given up on: let trio deliver
            # that cancellation, so the timeout or cancellation is reported as such.
            await trio.lowlevel.checkpoint()
            return failure_result(exc)
        except ToolFailure as exc:
            return _bounded(tool, failure_result(exc))
        except BaseException as exc:
            if isinstance(exc, Exception | SystemExit):
                pass
            elif holds(exc, trio.Cancelled) and not holds(exc, KeyboardInterrupt):
                # trio's own cancellation (the timeout, the caller's scope) raises again here
                # and goes on; a Cancelled the tool made up does not, and is its failure.
                await trio.lowlevel.checkpoint_if_cancelled()
                return _forged_cancellation(tool, exc)
            else:
                raise
            # Any bug of the tool is a structured result; SystemExit too, since a tool calling
            # sys.exit() must not stop the deck.
            _log_raised(context.logger, tool, exc)
            return exception_result(exc)
        return _tool_result(tool, value)
