"""Hook implementations of the code tool pack (entry point ``code``)."""

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

from ._definitions import CODE_EXECUTE, definitions


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register ``code_execute``."""
    for tool in definitions():
        register(tool)


@hookimpl
@nonblocking  # two comparisons for every other result
def tooldeck_process_result(
    call: ToolCall, tool: ToolDefinition, result: ToolResult
) -> ToolResult | None:
    """Say, when a ``code_execute`` result was dropped for its size, that the program ran.

    The sandbox replaces a result over the tool's ``execution.max_output_bytes`` with
    ``OUTPUT_TRUNCATED``, exit code and all; the model is told that the program was probably
    run and how to get a result that fits.
    """
    if tool.entrypoint != CODE_EXECUTE.entrypoint:
        return None
    limit = tool.execution.max_output_bytes
    return dropped_but_ran(
        result,
        flag="program_may_have_run",
        limit=limit,
        ran=(
            "The program was probably run: only its result "
            "(exit code, output and the files it wrote) was dropped for being larger than "
            "code_execute's result limit"
        ),
        suggestion=(
            "Print less (a summary, counts, the first and last lines) and write fewer or "
            f"smaller files, so that the whole result fits in {limit} bytes."
        ),
    )
