"""Turning what a tool did (a value, an exception, a signal) into a :class:`ToolResult`.

Shared by the in-process path and the sandbox worker, which loads this file by path; so it
imports nothing but the standard library and the contract.
"""

from __future__ import annotations

import errno
import signal
from typing import Any

from tooldeck_hookspecs import ErrorCode, ToolError, ToolFailure, ToolResult

__all__ = [
    "as_result",
    "failure_result",
    "exception_result",
    "signal_result",
    "memory_result",
]

_MEMORY_HINTS = ("MemoryError", "Cannot allocate memory", "out of memory", "std::bad_alloc")


def as_result(value: Any) -> ToolResult:
    """A tool's return value as a result: a ToolResult as is, anything else as its data."""
    if isinstance(value, ToolResult):
        return value
    return ToolResult.ok(value)


def failure_result(exc: ToolFailure) -> ToolResult:
    """The structured error a tool asked for by raising :class:`ToolFailure`."""
    return ToolResult(
        success=False,
        error=ToolError.of(
            exc.code,
            exc.message,
            retryable=exc.retryable,
            suggestion=exc.suggestion,
            retry_after_s=exc.retry_after_s,
            details=dict(exc.details),
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
            f"the tool hit the file size limit: {exc}",
            suggestion="The tool tried to write a file larger than allowed; write less data.",
        )
    message = str(exc) or "(no message)"
    return ToolResult.fail(
        ErrorCode.EXECUTION_ERROR,
        f"{type(exc).__name__}: {message}",
        details={"exception": type(exc).__name__},
    )


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
