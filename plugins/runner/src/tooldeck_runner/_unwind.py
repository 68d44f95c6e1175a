"""Driving an in-process ``async def`` tool so that its call ends when its deadline does, even
when the tool swallows its cancellation.

trio stops a task by raising ``trio.Cancelled`` at its next checkpoint; a tool that catches it
(``except trio.Cancelled``, ``except BaseException``) and keeps going, returns a value or raises
something else instead used to win: the call went on past its timeout (for ever, for a tool that
loops catching it) or came back as a success long after the caller was told the call timed out.

:func:`bounded` wraps the tool's coroutine in a driver that forwards every step to trio as is
(one generator step per suspension of the tool: under 1 µs per call) and only looks at what
trio sends back. Once the call is cancelled (its timeout, ``cancel_call``, the caller's scope)
and a ``Cancelled`` reached the tool:

- the tool ending in any other way (a value, another exception) is not its answer: the call is
  cancelled as trio cancelled it, so the executor reports ``TIMEOUT`` (or ``CANCELLED``). A
  tool that had committed (``ToolContext.commit``) gets the commit's treatment instead: its
  outcome is kept for the executor (``committed_late``);
- a tool still taking ``Cancelled`` after :data:`UNWIND_GRACE_S` (real time; a tool that unwinds
  does so in microseconds) is closed: ``GeneratorExit`` is thrown into it, and if it ignores that
  too it is abandoned: never resumed again, the cancel scopes it left open exited, and kept
  referenced (see :data:`_ABANDONED`) so that the garbage collector never runs its code again.

Not bounded: a tool that shields itself (``trio.CancelScope(shield=True)``, trio's own way out
of a cancellation), blocks the event loop without ever yielding, or ignores ``GeneratorExit``
while it holds a nursery of its own (giving that up from outside would corrupt trio's state:
it is run on, and logged).
"""

from __future__ import annotations

import logging
import time
import types
from collections.abc import Generator
from typing import Any

import outcome
import trio

__all__ = ["UNWIND_GRACE_S", "bounded", "holds", "passes_for_the_callers"]

log = logging.getLogger("tooldeck.runner")

#: How long a tool that was cancelled may go on taking ``Cancelled`` before it is closed.
UNWIND_GRACE_S = 0.25
#: Steps a closed tool (``GeneratorExit`` thrown in) may take to finish before it is abandoned.
_CLOSE_STEPS = 8
#: Coroutines abandoned because they ignored both ``Cancelled`` and ``GeneratorExit`` (see
#: :func:`_keep`). Bounded by the tools that misbehave so; each holds its frames only.
_ABANDONED: list[types.CoroutineType[Any, Any, Any]] = []


def _keep(coro: types.CoroutineType[Any, Any, Any]) -> None:
    """Keep an abandoned coroutine from ever being finalized: finalizing closes it, which runs
    the tool's code again, inside whichever task happens to be current or, at interpreter exit,
    outside trio, where a tool catching ``BaseException`` in a loop spins for ever (measured:
    the process never exited). So it gets a reference no one releases, not even the clearing
    of this module's globals at exit."""
    _ABANDONED.append(coro)
    try:
        import ctypes

        ctypes.pythonapi.Py_IncRef(ctypes.py_object(coro))
    except (ImportError, AttributeError):  # not CPython: the list's reference only
        pass


def bounded(awaitable: Any, control: Any, watch: Any = None, tool: Any = None) -> Any:
    """``awaitable`` (a tool's coroutine) driven as the module docstring says; anything that is
    not a coroutine object is returned as it is. ``watch``: a ``LoopWatch`` on which each step
    of the tool's own code is marked as ``tool``'s (see ``_watchdog``)."""
    if type(awaitable) is types.CoroutineType:
        return _drive(awaitable, control, watch, tool)
    return awaitable


def holds(
    exc: BaseException, kinds: type[BaseException] | tuple[type[BaseException], ...]
) -> bool:
    """Whether ``exc`` is one of ``kinds``, or an exception group holding one (at any depth)."""
    if isinstance(exc, kinds):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(holds(e, kinds) for e in exc.exceptions)
    return False


def passes_for_the_callers(exc: BaseException) -> bool:
    """Whether ``exc`` would be taken for the caller's own Ctrl-C or cancellation: a
    ``KeyboardInterrupt`` or ``trio.Cancelled``, or an exception group holding one. Raised by
    a tool, it is replaced by the tool's failure; raised by trio or the user, it goes on."""
    return holds(exc, (KeyboardInterrupt, trio.Cancelled))


def _cancel_status(task: Any) -> Any:
    # trio keeps no public handle on a task's cancel scope stack; without it (another trio) the
    # driver still bounds a tool that ends, but never abandons one (see _tool_scopes).
    return getattr(task, "_cancel_status", None)


def _cancelled(status: Any, control: Any) -> bool:
    """Is the call cancelled (its attempt's scope or any scope around it)?"""
    if status is not None:
        try:
            return bool(status.effectively_cancelled)
        except AttributeError:
            pass
    return control is not None and control.cancelled()


def _tool_scopes(task: Any, start: Any) -> list[Any] | None:
    """The cancel scopes the tool has open in ``task``, innermost first (those entered since
    ``start``, the status the driver began in); None when they cannot be told apart safely:
    trio's internals differ, or the tool holds a nursery (its children and its place in the
    task's nursery stack cannot be given up from outside without corrupting trio's state)."""
    if start is None:
        return None
    scopes: list[Any] = []
    status = _cancel_status(task)
    while status is not start:
        scope = getattr(status, "_scope", None)
        if status is None or scope is None:
            return None
        scopes.append(scope)
        status = getattr(status, "parent", None)
    nurseries = getattr(task, "child_nurseries", ())
    if any(any(n.cancel_scope is scope for scope in scopes) for n in nurseries):
        return None
    return scopes


def _close_scopes(scopes: list[Any]) -> bool:
    """Exit the cancel scopes an abandoned tool left open (see :func:`_tool_scopes`), innermost
    first, as its ``with`` blocks would have."""
    for scope in scopes:
        try:
            scope.__exit__(None, None, None)
        except Exception:  # pragma: no cover - trio refused: leave the rest to trio
            return False
    return True


@types.coroutine
def _drive(
    coro: types.CoroutineType[Any, Any, Any], control: Any, watch: Any = None, tool: Any = None
) -> Generator[Any, Any, Any]:
    """Run ``coro`` (the tool's), forwarding each of its steps to trio (see the module
    docstring). A generator rather than an object with ``__await__``: ~0.4 µs less per call.
    Each step (the tool's code between two suspensions) is marked on ``watch``; the holder
    before it (a tool that called another one in process) is put back after it."""
    send = coro.send
    outer: Any = None
    task = trio.lowlevel.current_task()
    start = _cancel_status(task)
    got: Any = None
    thrown: BaseException | None = None
    #: When (time.monotonic) a Cancelled of the call first reached the tool.
    since: float | None = None
    while True:
        if watch is not None:
            watch.seq += 1
            outer = watch.holder
            watch.holder = tool
        try:
            message = send(got) if thrown is None else coro.throw(thrown)
        except StopIteration as stop:
            if watch is not None:
                watch.holder = outer
            if since is None:
                return stop.value
            ended: outcome.Outcome[Any] = outcome.Value(stop.value)
        except BaseException as exc:
            if watch is not None:
                watch.holder = outer
            if since is None or passes_for_the_callers(exc):
                raise
            ended = outcome.Error(exc)
        else:
            if watch is not None:
                watch.holder = outer
            thrown = None
            try:
                got = yield message
            except GeneratorExit:  # this driver is closed (its task's coroutine was)
                coro.close()
                raise
            except BaseException as exc:  # trio throws in what a foreign yield gets
                got, thrown = None, exc
                continue
            if (
                type(got) is outcome.Error
                and isinstance(got.error, trio.Cancelled)
                and _cancelled(start, control)
            ):
                now = time.monotonic()
                if since is None:
                    since = now
                elif now - since > UNWIND_GRACE_S:
                    yield from _close(coro, control, task, start)
            continue
        yield from _ended(ended, control)  # raises the call's Cancelled


def _committing(control: Any) -> bool:
    return control is not None and bool(getattr(control, "committing", False))


def _ended(result: outcome.Outcome[Any], control: Any) -> Generator[Any, Any, None]:
    """The tool ended after a cancellation of its call reached it: its outcome is not the
    call's answer (kept for the executor when the tool had committed, see ``_late_result``)."""
    if _committing(control):
        control.late = result
    elif isinstance(result, outcome.Value) and type(result.value) is types.CoroutineType:
        result.value.close()  # never awaited: no warning about it
    yield from _cancel()


def _close(
    coro: types.CoroutineType[Any, Any, Any], control: Any, task: Any, start: Any
) -> Generator[Any, Any, None]:
    """Throw ``GeneratorExit`` into a tool that keeps taking ``Cancelled``; abandon it if it
    does not end within a few steps. Either way the call then ends cancelled.

    A tool that cannot be abandoned safely (it holds a nursery: see :func:`_tool_scopes`) is
    driven on, as trio would run it: its call ends when it does (logged)."""
    thrown: BaseException | None = GeneratorExit()
    got: Any = None
    steps = 0
    stuck = False
    while True:
        try:
            message = coro.send(got) if thrown is None else coro.throw(thrown)
        except BaseException:  # StopIteration, GeneratorExit or anything else: it ended
            if _committing(control):
                control.overran = True
            yield from _cancel()
            return
        thrown = None
        try:
            # Forwarded: trio clears what the tool waits on (at once, the call being
            # cancelled), so nothing of an abandoned tool is left registered with trio.
            got = yield message
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            got, thrown = None, exc
            continue
        steps += 1
        if steps < _CLOSE_STEPS:
            continue
        scopes = _tool_scopes(task, start)
        if scopes is not None and _close_scopes(scopes):
            break
        if not stuck:
            stuck = True
            log.error(
                "tool coroutine %s ignores its cancellation and GeneratorExit while it holds "
                "a nursery: it cannot be abandoned safely, and its call goes on",
                _name(coro),
            )
    _keep(coro)
    log.warning(
        "tool coroutine %s ignored its cancellation and GeneratorExit: abandoned", _name(coro)
    )
    if _committing(control):
        control.overran = True
    yield from _cancel()


def _name(coro: Any) -> str:
    return str(getattr(coro, "__qualname__", "?"))


def _cancel() -> Generator[Any, Any, None]:
    """Raise the call's own ``Cancelled`` (the call is cancelled: trio raises it here)."""
    yield from trio.lowlevel.checkpoint().__await__()
    raise RuntimeError("the tool ignored a cancellation that is no longer in effect")
