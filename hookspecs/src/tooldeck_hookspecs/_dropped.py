"""What a tool pack says when a result of its tool was dropped for its size, though it ran."""

from __future__ import annotations

from .errors import ErrorCode
from .model import ToolError, ToolResult

__all__ = ["dropped_but_ran"]


def dropped_but_ran(
    result: ToolResult, *, flag: str, ran: str, suggestion: str, limit: int
) -> ToolResult | None:
    """``result`` said again when it is an ``OUTPUT_TRUNCATED`` not said so yet (``flag`` in
    its details marks it), else None.

    The executor replaces a result over ``execution.max_output_bytes`` with
    ``OUTPUT_TRUNCATED``, exit code and all: a model told only that would run a command that
    changed files (a migration, a ``git commit``) again. ``ran`` follows the executor's own
    message ("The command was probably run ..."), ``suggestion`` replaces its suggestion, and
    ``flag`` (``command_may_have_run``) and ``max_output_bytes`` go into the details.
    """
    error = result.error
    if error is None or error.code != ErrorCode.OUTPUT_TRUNCATED or error.details.get(flag):
        return None
    return ToolResult(
        success=False,
        data=result.data,
        metadata=result.metadata,
        error=ToolError(
            code=error.code,
            message=f"{error.message.rstrip('. ')}. {ran}",
            retryable=False,
            suggestion=suggestion,
            details={**error.details, flag: True, "max_output_bytes": limit},
            plugin=error.plugin,
        ),
    )
