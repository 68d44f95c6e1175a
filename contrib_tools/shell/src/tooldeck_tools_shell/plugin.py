"""Hook implementations of the shell tool pack (entry point ``shell``)."""

from __future__ import annotations

from tooldeck_hookspecs import (
    RegisterFn,
    ToolCall,
    ToolDefinition,
    ToolResult,
    dropped_but_ran,
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
    if tool.entrypoint != SHELL_EXEC.entrypoint:
        return None
    limit = tool.execution.max_output_bytes
    return dropped_but_ran(
        result,
        flag="command_may_have_run",
        limit=limit,
        ran=(
            "The command was probably run, and may have "
            "changed files: only its result (exit code, stdout and stderr) was dropped for "
            "being larger than shell_exec's result limit"
        ),
        suggestion=(
            "Do not simply run it again: first check what it did (git status, ls, or a "
            "command that reads its effect), then, if you need its output, run a command "
            "whose output is small (grep, head -n 50, tail -n 50, wc -l, a --quiet option) "
            f"so that the whole result fits in {limit} bytes."
        ),
    )
