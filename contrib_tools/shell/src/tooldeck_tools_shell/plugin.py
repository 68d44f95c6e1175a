"""Hook implementations of the shell tool pack (entry point ``shell``)."""

from __future__ import annotations

from tooldeck_hookspecs import (
    ErrorCode,
    RegisterFn,
    ToolCall,
    ToolDefinition,
    ToolError,
    ToolResult,
    hookimpl,
    nonblocking,
)

from ._definitions import SHELL_EXEC, definitions


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register ``shell_exec``."""
    for tool in definitions():
        register(tool)


@hookimpl
@nonblocking  # two comparisons for every other result
def tooldeck_process_result(
    call: ToolCall, tool: ToolDefinition, result: ToolResult
) -> ToolResult | None:
    """Say, when a ``shell_exec`` result was dropped for its size, that the command may have run.

    The sandbox (and the deck, in-process) replaces a result over the tool's
    ``execution.max_output_bytes`` with ``OUTPUT_TRUNCATED``, exit code and all: a model told only
    that would run a command that changed files (a migration, a ``git commit``) again.
    """
    error = result.error
    if (
        error is None
        or error.code != ErrorCode.OUTPUT_TRUNCATED
        or tool.entrypoint != SHELL_EXEC.entrypoint
        or error.details.get("command_may_have_run")
    ):
        return None
    limit = tool.execution.max_output_bytes
    return ToolResult(
        success=False,
        data=result.data,
        metadata=result.metadata,
        error=ToolError(
            code=error.code,
            message=(
                f"{error.message.rstrip('. ')}. The command was probably run, and may have "
                "changed files: only its result (exit code, stdout and stderr) was dropped for "
                "being larger than shell_exec's result limit"
            ),
            retryable=False,
            suggestion=(
                "Do not simply run it again: first check what it did (git status, ls, or a "
                "command that reads its effect), then, if you need its output, run a command "
                "whose output is small (grep, head -n 50, tail -n 50, wc -l, a --quiet option) "
                f"so that the whole result fits in {limit} bytes."
            ),
            details={**error.details, "command_may_have_run": True, "max_output_bytes": limit},
            plugin=error.plugin,
        ),
    )
