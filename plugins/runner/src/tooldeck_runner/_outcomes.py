"""Turning what a tool did (a value, an exception, a signal) into a :class:`ToolResult`.

Shared by the in-process path and the sandbox worker, which loads this file by path; so it
imports nothing but the standard library and the contract.
"""

from __future__ import annotations

import errno
import math
import signal
import types
from collections.abc import Mapping
from typing import Any

import attrs

from tooldeck_hookspecs import ErrorCode, ToolError, ToolFailure, ToolResult, shorten

__all__ = [
    "HOST_METADATA",
    "NOT_VALUES",
    "as_result",
    "host_owned",
    "consistent",
    "generator_result",
    "not_a_value_result",
    "failure_result",
    "exception_result",
    "exception_text",
    "prerender",
    "rendered_traceback",
    "signal_result",
    "memory_result",
]

_MEMORY_HINTS = ("MemoryError", "Cannot allocate memory", "out of memory", "std::bad_alloc")
#: An exception's message is quoted up to this many characters (the rest is counted, not sent):
#: a tool raising with a 10 MB message must not put 10 MB in front of the model.
MAX_EXCEPTION_MESSAGE = 2000


#: What a tool's function returns when its body did not run (generators) or its result was never
#: awaited (a coroutine): never a value. Exact types (none of them can be subclassed).
NOT_VALUES = frozenset({types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType})


#: Result metadata the host owns (the executor, the sandbox pool, the deck): a tool's own value
#: for one of these keys is dropped wherever the tool ran. ``cached`` would pass for a cache hit,
#: ``committed_late`` for a commit the runner waited for, ``isolation``, ``warm`` and ``limits``
#: for a sandbox (and limits) that may not exist; the rest are measured by the host.
HOST_METADATA = frozenset(
    {"cached", "committed_late", "isolation", "warm", "limits", "attempts", "duration_s"}
)


def host_owned(result: ToolResult, keys: frozenset[str] = HOST_METADATA) -> ToolResult:
    """``result`` without the metadata ``keys`` the host owns (see :data:`HOST_METADATA`)."""
    metadata = result.metadata
    if not metadata or keys.isdisjoint(metadata):
        return result
    return attrs.evolve(result, metadata={k: v for k, v in metadata.items() if k not in keys})


def as_result(value: Any) -> ToolResult:
    """A tool's return value as a result: a ToolResult as is, anything else as its data
    (a generator or a coroutine is refused: see :func:`not_a_value_result`)."""
    if isinstance(value, ToolResult):
        return consistent(value)
    if type(value) in NOT_VALUES:
        return not_a_value_result(value)
    return ToolResult.ok(value)


def not_a_value_result(value: Any) -> ToolResult:
    """The failure of a tool whose result is one of :data:`NOT_VALUES` (or, in a sandbox worker,
    any other awaitable): :func:`generator_result` for a generator, else the coroutine or
    awaitable it handed back unawaited, closed (no "never awaited" warning), never run."""
    if isinstance(value, types.GeneratorType | types.AsyncGeneratorType):
        return generator_result(value)
    if type(value) is types.CoroutineType:
        kind = f"a coroutine ({shorten(_text(value.__qualname__), 200)})"
        value.close()  # never started: closing runs nothing, and no "never awaited" warning
    else:
        kind = f"an awaitable ({shorten(type(value).__name__, 200)})"
    return ToolResult.fail(
        ErrorCode.EXECUTION_ERROR,
        f"the tool returned {kind} instead of a value: it was never awaited, so what it does "
        "never ran",
        suggestion="The tool is broken (it forgot an `await`); use another tool and tell the "
        "user.",
        details={"returned": type(value).__name__},
    )


def consistent(result: ToolResult) -> ToolResult:
    """A :class:`ToolResult` a tool built itself, made one that the pipeline and every consumer
    can read: ``success`` a bool that agrees with ``error`` (a failure without an error used to
    crash ``result_messages()``; an error wins over ``success=True``), an error's message and
    suggestion text, its ``retry_after_s`` a finite number >= 0 or None, its details and the
    metadata mappings. What was changed is said in the error's message or ``details``."""
    error, success, metadata = result.error, result.success, result.metadata
    if error is None and success is True and type(metadata) is dict:
        return result  # the common case: ToolResult.ok(...)
    changes: dict[str, Any] = {}
    if not isinstance(metadata, Mapping):
        changes["metadata"] = {"dropped_metadata": type(metadata).__name__}
    if error is not None and not isinstance(error, ToolError):
        error = ToolError.of(
            ErrorCode.EXECUTION_ERROR,
            f"the tool returned a result whose error is a {type(error).__name__}, not a "
            "ToolError",
        )
    elif error is None and not success:
        error = ToolError.of(
            ErrorCode.EXECUTION_ERROR, "the tool reported a failure without saying why"
        )
    if error is not None:
        error = _readable(error)
        if error is not result.error:
            changes["error"] = error
        if success is not False:
            changes["success"] = False
    elif success is not True:
        changes["success"] = True  # a truthy non-bool (1, "yes") without an error
    return attrs.evolve(result, **changes) if changes else result


def _readable(error: ToolError) -> ToolError:
    """``error`` with text where text belongs, and a usable ``retry_after_s``."""
    changes: dict[str, Any] = {}
    if not isinstance(error.message, str):
        changes["message"] = _text(error.message)
    if error.suggestion is not None and not isinstance(error.suggestion, str):
        changes["suggestion"] = _text(error.suggestion)
    wait = error.retry_after_s
    if wait is not None and not (
        isinstance(wait, int | float) and not isinstance(wait, bool)
        and math.isfinite(wait) and wait >= 0
    ):
        # NaN, inf, a negative or a string: no wait anyone can honour. Kept as text, aside.
        changes["retry_after_s"] = None
        changes["details"] = {**_mapping(error.details), "retry_after_s": _text(wait)}
    elif not isinstance(error.details, Mapping):
        changes["details"] = _mapping(error.details)
    if not isinstance(error.retryable, bool):
        changes["retryable"] = bool(error.retryable)
    return attrs.evolve(error, **changes) if changes else error


def _mapping(details: Any) -> Mapping[str, Any]:
    return details if isinstance(details, Mapping) else {"details": _text(details)}


def _text(value: object) -> str:
    try:
        text = str(value)
    except KeyboardInterrupt:
        raise
    except BaseException:
        return f"<unprintable {type(value).__name__}>"
    return text if isinstance(text, str) else f"<unprintable {type(value).__name__}>"


def generator_result(
    value: types.GeneratorType[Any, Any, Any] | types.AsyncGeneratorType[Any, Any],
) -> ToolResult:
    """The failure of a tool that returned a generator (its function has a ``yield``): the
    generator's body never ran, so its ``str()`` as a success would tell the model the tool
    worked when it did nothing at all."""
    kind = "an async generator" if isinstance(value, types.AsyncGeneratorType) else "a generator"
    if isinstance(value, types.GeneratorType):
        value.close()  # never started: closing runs nothing, and frees it now
    return ToolResult.fail(
        ErrorCode.EXECUTION_ERROR,
        f"the tool returned {kind} instead of a value; nothing of it ran",
        suggestion="The tool is broken (its function yields instead of returning); use "
        "another tool and tell the user.",
        details={"returned": type(value).__name__},
    )


def failure_result(exc: ToolFailure) -> ToolResult:
    """The structured error a tool asked for by raising :class:`ToolFailure`."""
    details = exc.details
    return ToolResult(
        success=False,
        # _readable: the exception's attributes are the tool's to set (after __init__ too).
        error=_readable(
            ToolError.of(
                exc.code,
                exc.message,
                retryable=exc.retryable,
                suggestion=exc.suggestion,
                retry_after_s=exc.retry_after_s,
                details=dict(details) if isinstance(details, Mapping) else _mapping(details),
            )
        ),
    )


def memory_result(memory_mb: int | None, detail: str = "") -> ToolResult:
    """``SANDBOX_MEMORY_LIMIT`` for a call that ran out of its address space."""
    limit = f" of {memory_mb} MiB" if memory_mb else ""
    return ToolResult.fail(
        ErrorCode.SANDBOX_MEMORY_LIMIT,
        f"the tool exceeded its memory limit{limit}" + (f" ({detail})" if detail else ""),
        suggestion=(
            "The code used too much memory; process less data at once. (Tool authors: raise "
            "execution.memory_mb if the tool legitimately needs more.)"
        ),
        details={"memory_mb": memory_mb} if memory_mb else {},
    )


def exception_result(exc: BaseException, *, memory_mb: int | None = None) -> ToolResult:
    """An unexpected exception as a result: type and message, never a traceback."""
    if isinstance(exc, ToolFailure):
        return failure_result(exc)
    if isinstance(exc, MemoryError):
        return memory_result(memory_mb, "MemoryError")
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return ToolResult.fail(
            ErrorCode.TOO_LARGE,
            f"the tool hit the file size limit: {exception_text(exc)}",
            suggestion="The tool tried to write a file larger than allowed; write less data.",
        )
    message = exception_text(exc) or "(no message)"
    return ToolResult.fail(
        ErrorCode.EXECUTION_ERROR,
        f"{type(exc).__name__}: {message}",
        details={"exception": type(exc).__name__},
    )


#: Where :func:`prerender` leaves an exception's text and traceback (in its ``__dict__``).
_RENDERED = "_tooldeck_rendered"
#: The longest traceback :func:`prerender` keeps for the log.
_MAX_TRACEBACK = 20_000


def prerender(exc: BaseException) -> None:
    """Write ``exc``'s message and traceback as text now, in the tool's own thread.

    Both run the tool's code (its ``__str__``, its ``__repr__`` in a frame's locals): done on
    the event loop, one that never returns froze every session and no timeout could fire. In
    the tool's thread it only keeps that thread, which the call's timeout abandons.
    """
    import traceback

    try:
        text = exception_text(exc)
        tb = shorten("".join(traceback.format_exception(exc)), _MAX_TRACEBACK)
        object.__getattribute__(exc, "__dict__")[_RENDERED] = (text, tb)
    except KeyboardInterrupt:
        raise
    except BaseException:  # an exception without a __dict__, a traceback that cannot print
        pass


def _rendered(exc: BaseException) -> tuple[str, str] | None:
    # object.__getattribute__: the class's own __getattribute__ is the tool's code too.
    try:
        found = object.__getattribute__(exc, "__dict__").get(_RENDERED)
    except Exception:
        return None
    return found if isinstance(found, tuple) else None


def rendered_traceback(exc: BaseException) -> str | None:
    """The traceback :func:`prerender` wrote for ``exc``, or None (log it with ``exc_info``)."""
    found = _rendered(exc)
    return found[1] if found is not None else None


def exception_text(exc: BaseException, limit: int = MAX_EXCEPTION_MESSAGE) -> str:
    """``str(exc)`` shortened to about ``limit`` characters; never raises.

    The exception is the tool's: its ``__str__`` may raise (even ``SystemExit``), fail on an
    integer too long to print, or return megabytes. Each is the tool's failure, reported as
    such, never an executor's or a worker's crash. Text :func:`prerender` wrote is used as is.
    """
    found = _rendered(exc)
    if found is not None:
        return shorten(found[0], limit)
    try:
        text = str(exc)
    except KeyboardInterrupt:
        raise  # possibly the user's Ctrl-C landing here: theirs, not the tool's
    except BaseException as problem:
        text = f"<unprintable {type(exc).__name__}: its __str__ raised {type(problem).__name__}>"
    if not isinstance(text, str):  # a str subclass's __str__ may return anything
        text = f"<unprintable {type(exc).__name__}>"
    return shorten(text, limit)


def signal_name(signum: int) -> str:
    """``SIGSEGV`` for 11, ``signal 99`` for unknown numbers."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def signal_result(signum: int, output_tail: str, *, memory_mb: int | None) -> ToolResult:
    """The result of a worker killed by ``signum`` before it answered."""
    if signum == signal.SIGXCPU:
        return ToolResult.fail(
            ErrorCode.TIMEOUT,
            "the tool used up its CPU time limit (SIGXCPU)",
            retryable=True,
        )
    if signum == signal.SIGXFSZ:
        return ToolResult.fail(
            ErrorCode.TOO_LARGE,
            "the tool hit the file size limit (SIGXFSZ)",
            suggestion="The tool tried to write a file larger than allowed; write less data.",
        )
    # Under RLIMIT_AS a failed allocation in C code often ends in abort(); the message it printed
    # is the only way to tell that from a genuine crash.
    if any(hint in output_tail for hint in _MEMORY_HINTS):
        return memory_result(memory_mb, signal_name(signum))
    name = signal_name(signum)
    return ToolResult.fail(
        ErrorCode.SANDBOX_CRASHED,
        f"the tool's process crashed with {name}",
        details={"signal": name, "output_tail": output_tail[-2000:]},
    )
