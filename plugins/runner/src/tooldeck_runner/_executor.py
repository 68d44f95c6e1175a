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
The observable behaviour is the same as on the queued path; a full category still queues it.
Such a call is not a trio checkpoint by itself: the deck makes every call one (and yields to the
scheduler every few calls), so code driving this executor directly should do the same.
"""

from __future__ import annotations

import inspect
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs
import stamina
import trio

from tooldeck_hookspecs import (
    RETRYABLE_CODES,
    ErrorCode,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    call_tool_function,
    never_suspends,
)

from ._config import RunnerSettings
from ._outcomes import as_result, exception_result, failure_result
from ._sandbox import SandboxPool, SandboxStatistics, resolve_isolation

__all__ = [
    "RunnerExecutor",
    "CategoryStatistics",
    "ExecutorStatistics",
    "ISOLATION_IN_PROCESS",
    "never_suspends",
]

ISOLATION_IN_PROCESS = "in-process"
# The tools' own pools bound the threads; trio's to_thread needs a limiter, and this one never
# makes a call wait.
_UNLIMITED_THREADS = trio.CapacityLimiter(math.inf)

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


def _backoff_hook(exc: Exception) -> bool | float:
    """stamina's hook: retry our own marker; wait at least what the tool was told to wait."""
    if not isinstance(exc, _RetryableResult):
        return False
    error = exc.result.error
    if error is not None and error.retry_after_s:
        # A server's Retry-After beats our exponential guess (stamina uses the float as is).
        return float(error.retry_after_s)
    return True


def _should_retry(result: ToolResult) -> bool:
    error = result.error
    return (
        not result.success
        and error is not None
        and (error.retryable or error.code in RETRYABLE_CODES)
    )


@attrs.define(eq=False)
class _ToolThreads:
    """The worker threads of one sync tool: its own pool, and the threads it abandoned."""

    limiter: trio.CapacityLimiter
    category: str
    abandoned: int = 0


@attrs.define(eq=False)
class _InFlight:
    session_id: str
    call_id: str
    scope: trio.CancelScope
    #: Set when cancel_session / cancel_call / aclose cancelled the call (not its deadline).
    requested: bool = False

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
    _closed: bool = attrs.field(default=False, init=False)
    # Per execute function: may it run inline (see the module docstring)? Keyed by the function,
    # so a tool registered again with another implementation is judged again.
    _inline: dict[Any, bool] = attrs.field(factory=dict, init=False)
    # Per sync tool (by name): its thread pool. trio's shared default pool (40 threads) would let
    # one tool's abandoned threads (timed out, still sleeping) starve every other sync tool.
    _threads: dict[str, _ToolThreads] = attrs.field(factory=dict, init=False)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None = None) -> RunnerExecutor:
        """Build from the whole tooldeck configuration (reads its ``runner`` table)."""
        runner = RunnerSettings.from_settings(settings)
        # At start-up, not at the first sandboxed call: fail when bubblewrap is demanded but
        # absent, and warn (once) when sandboxed tools would get degraded isolation.
        resolve_isolation(runner.sandbox, runner.allow_degraded)
        executor = cls(settings=runner)
        executor.sandbox_pool()
        return executor

    # -- public -------------------------------------------------------------------------------

    async def run(self, tool: ToolDefinition, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run ``call``: queue, timeout, retries, in process or sandboxed. Never raises for the
        tool's failure; ``trio.Cancelled`` from the caller's scope propagates."""
        try:
            inline = self._inline.get(tool.execute)
            if inline is None:
                inline = self._inline[tool.execute] = self._can_inline(tool)
        except TypeError:  # an unhashable callable object: not judged, so never inline
            inline = False
        if inline and not self._closed:
            queue = self._queues.get(tool.category) or self._queue(tool.category)
            if queue.limiter.available_tokens >= 1:
                return await self._run_inline(tool, call, context, queue)
        return await self._run_queued(tool, call, context)

    async def _run_queued(
        self, tool: ToolDefinition, call: ToolCall, context: ToolContext
    ) -> ToolResult:
        started = time.perf_counter()
        isolation = self._isolation(tool)
        if self._closed:
            return ToolResult.fail(
                ErrorCode.EXECUTION_ERROR, "the executor is closed", plugin="runner"
            ).with_metadata(duration_s=0.0, attempts=0, isolation=isolation)
        execution = tool.execution
        single = not execution.retryable or execution.max_retries <= 0
        # A single attempt needs one cancel scope, not two: its deadline is the call's timeout
        # and cancel_session() cancels the same scope (``requested`` tells the two apart).
        scope = (
            trio.CancelScope(deadline=trio.current_time() + execution.timeout_s)
            if single
            else trio.CancelScope()
        )
        entry = _InFlight(context.session_id, context.call_id or call.id, scope)
        self._in_flight.setdefault(entry.session_id, set()).add(entry)
        attempts = [0]
        try:
            if single:
                attempts[0] = 1
                result = await self._attempt(tool, call, context, entry)
            else:
                with entry.scope:
                    result = await self._run_with_retries(tool, call, context, attempts)
        finally:
            calls = self._in_flight.get(entry.session_id)
            if calls is not None:
                calls.discard(entry)
                if not calls:
                    del self._in_flight[entry.session_id]
        if entry.requested and entry.scope.cancelled_caught:
            result = ToolResult.fail(
                ErrorCode.CANCELLED,
                f"the call to {tool.name!r} was cancelled before it finished",
            )
        return result.with_metadata(
            duration_s=time.perf_counter() - started,
            attempts=attempts[0],
            isolation=result.metadata.get("isolation", isolation),
        )

    def cancel_session(self, session_id: str) -> int:
        """Cancel every queued or running call of a session; they return ``CANCELLED``.

        Returns the number of calls cancelled.
        """
        calls = list(self._in_flight.get(session_id, ()))
        for entry in calls:
            entry.cancel()
        return len(calls)

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
        )

    def sandbox_pool(self) -> SandboxPool:
        """The pool of sandbox workers (created on first use)."""
        if self._sandbox is None:
            self._sandbox = SandboxPool(self.settings)
        return self._sandbox

    async def aclose(self) -> None:
        """Cancel running calls and kill the sandbox's idle workers."""
        self._closed = True
        for calls in list(self._in_flight.values()):
            for entry in list(calls):
                entry.cancel()
        if self._sandbox is not None:
            await self._sandbox.aclose()

    # -- internals ----------------------------------------------------------------------------

    def _isolation(self, tool: ToolDefinition) -> str:
        if tool.security.sandbox:
            return self.sandbox_pool().isolation
        return ISOLATION_IN_PROCESS

    @staticmethod
    def _can_inline(tool: ToolDefinition) -> bool:
        execution = tool.execution
        return (
            not tool.security.sandbox
            and not (execution.retryable and execution.max_retries > 0)
            and never_suspends(tool.execute)
        )

    async def _run_inline(
        self, tool: ToolDefinition, call: ToolCall, context: ToolContext, queue: _Queue
    ) -> ToolResult:
        """Run a never-suspending coroutine to completion (see the module docstring): the
        ``await`` below returns without ever yielding to trio."""
        started = time.perf_counter()
        queue.in_flight += 1
        if queue.in_flight > queue.max_in_flight:
            queue.max_in_flight = queue.in_flight
        try:
            value = await call_tool_function(tool, call.arguments, context)
        except ToolFailure as exc:
            result = failure_result(exc)
        except (Exception, SystemExit) as exc:
            if context.logger is not None:
                context.logger.warning("tool %r raised", tool.name, exc_info=exc)
            result = exception_result(exc)
        else:
            if not isinstance(value, ToolResult):
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
            result = value
        finally:
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
        self, tool: ToolDefinition, call: ToolCall, context: ToolContext, attempts: list[int]
    ) -> ToolResult:
        execution = tool.execution
        if not execution.retryable or execution.max_retries <= 0:
            attempts[0] = 1
            return await self._attempt(tool, call, context)
        settings = self.settings
        try:
            async for attempt in stamina.retry_context(
                on=_backoff_hook,
                attempts=execution.max_retries + 1,
                timeout=None,
                wait_initial=settings.retry_initial_s,
                wait_max=settings.retry_max_s,
                wait_jitter=settings.retry_jitter_s,
                wait_exp_base=2,
            ):
                with attempt:
                    attempts[0] += 1
                    result = await self._attempt(tool, call, context)
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
    ) -> ToolResult:
        """One attempt under the tool's timeout: in ``entry``'s scope (whose deadline is the
        timeout) for a single-attempt call, else in a fresh scope of its own."""
        queue = self._queue(tool.category)
        timeout = tool.execution.timeout_s
        # A fresh borrower per call: the same task may hold slots for nested calls.
        token = object()
        started = False
        ahead = 0
        # Filled by _invoke while a sync tool waits for a thread of its own pool.
        waiting: list[int] = []
        scope = entry.scope if entry is not None else trio.move_on_after(timeout)
        with scope:
            ahead = queue.waiting
            try:
                # A free slot is taken at once (WouldBlock also when others wait, so the queue
                # stays first come, first served); the call is still a cancellation point.
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
                return await self._invoke(tool, call, context, waiting)
            finally:
                queue.in_flight -= 1
                queue.completed += 1
                queue.limiter.release_on_behalf_of(token)
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
            size = self._queue(tool.category).limiter.total_tokens
            threads = self._threads[tool.name] = _ToolThreads(
                trio.CapacityLimiter(size), tool.category
            )
        return threads

    async def _in_thread(
        self, tool: ToolDefinition, call: ToolCall, context: ToolContext, waiting: list[int]
    ) -> Any:
        """Run a sync tool in a thread of its own pool; on timeout or cancellation the thread is
        abandoned (it cannot be killed) and keeps its pool slot until it really ends."""
        threads = self._tool_threads(tool)
        token = object()
        if threads.limiter.available_tokens < 1:
            waiting.append(threads.abandoned)
        await threads.limiter.acquire_on_behalf_of(token)
        waiting.clear()
        trio_token = trio.lowlevel.current_trio_token()
        state = {"abandoned": False, "done": False}
        lock = threading.Lock()

        def release() -> None:
            if state["abandoned"]:
                threads.abandoned -= 1
            threads.limiter.release_on_behalf_of(token)

        def work() -> Any:
            try:
                return call_tool_function(tool, call.arguments, context)
            finally:
                with lock:
                    state["done"] = True
                try:
                    trio_token.run_sync_soon(release)
                except trio.RunFinishedError:
                    pass  # the deck's loop is gone; nothing left to account for

        try:
            return await trio.to_thread.run_sync(
                work, abandon_on_cancel=True, limiter=_UNLIMITED_THREADS
            )
        except BaseException:
            with lock:
                if not state["done"]:
                    state["abandoned"] = True
                    threads.abandoned += 1
            # A thread that finished meanwhile was not abandoned: its release() is scheduled.
            raise

    async def _invoke(
        self,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        waiting: list[int] | None = None,
    ) -> ToolResult:
        if tool.security.sandbox:
            return await self.sandbox_pool().run(tool, call, context)
        try:
            if tool.is_async:
                value = await call_tool_function(tool, call.arguments, context)
            else:
                value = await self._in_thread(
                    tool, call, context, waiting if waiting is not None else []
                )
                if inspect.isawaitable(value):
                    value = await value
        except ToolFailure as exc:
            return failure_result(exc)
        except (Exception, SystemExit) as exc:
            # Any bug of the tool is a structured result; SystemExit too, since a tool calling
            # sys.exit() must not stop the deck.
            if context.logger is not None:
                context.logger.warning("tool %r raised", tool.name, exc_info=exc)
            return exception_result(exc)
        return as_result(value)
