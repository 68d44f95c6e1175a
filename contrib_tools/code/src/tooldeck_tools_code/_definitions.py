"""The ToolDefinition of the code pack, with a description and schema written for a model."""

from __future__ import annotations

from tooldeck_hookspecs import ExecutionConfig, SecurityConfig, SecurityLevel, ToolDefinition

from . import tools
from .tools import (
    DEFAULT_TIMEOUT_S,
    EXECUTION_TIMEOUT_S,
    MAX_CODE_CHARS,
    MAX_FILES,
    MAX_STDIN_BYTES,
    MAX_TIMEOUT_S,
    PYTHON_MEMORY_MB,
    STDERR_CAP_BYTES,
    STDOUT_CAP_BYTES,
    node_path,
)

__all__ = ["CODE_EXECUTE", "definitions", "build_definition", "MEMORY_MB"]

#: Memory of the whole call: the sandbox worker, the snippet and every process it starts, together
#: (the runner's per-call cgroup). The snippet's process also gets its own address-space limit
#: (PYTHON_ADDRESS_SPACE_MB / NODE_MEMORY_MB, set by the tool) so that an absurd allocation fails
#: with MemoryError rather than being killed. Without a memory cgroup the runner falls back to
#: RLIMIT_AS of this size per process, where node (which reserves ~1 GiB of address space)
#: cannot start: its result's metadata["limits"]["memory"] says "rlimit" then.
MEMORY_MB = PYTHON_MEMORY_MB


def build_definition(javascript: bool) -> ToolDefinition:
    """``code_execute``, describing JavaScript as available or not (node found or not)."""
    languages = (
        "'python' (default) or 'javascript' (Node.js)"
        if javascript
        else "'python' (JavaScript is not available on this system: node is not installed)"
    )
    return ToolDefinition(
        name="code_execute",
        version="1.0.0",
        category="code",
        description=(
            "Run a short program and get its output: compute, test an idea, parse or transform "
            f"data, do math or statistics. Language: {languages}. The program runs in a fresh "
            "private directory (its working directory) with no network access; files it writes "
            f"there come back in the result (up to {MAX_FILES}, small ones with content). The "
            "session's working directory can be read (read-only) at the path in the WORKDIR "
            "environment variable. Print what you want to see. An exception is reported as "
            "exit_code 1 with the traceback in stderr. Limits: "
            f"{PYTHON_MEMORY_MB} MiB of memory, {DEFAULT_TIMEOUT_S:g} s by default "
            f"(timeout_s up to {MAX_TIMEOUT_S:g}), code up to {MAX_CODE_CHARS // 1024} KB, "
            f"output {STDOUT_CAP_BYTES // 1024} KiB."
        ),
        parameters={
            "type": "object",
            "properties": {
                "language": {
                    "type": "string",
                    "enum": ["python", "javascript"],
                    "default": "python",
                    "description": "Language of the program: " + languages + ".",
                },
                "code": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_CODE_CHARS,
                    "description": "The complete program (a script, not a notebook cell: "
                    "use print to show results).",
                },
                "stdin": {
                    "type": "string",
                    "maxLength": MAX_STDIN_BYTES,
                    "description": "Text given to the program on standard input.",
                },
                "timeout_s": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": MAX_TIMEOUT_S,
                    "default": DEFAULT_TIMEOUT_S,
                    "description": "Seconds before the program is killed "
                    f"(default {DEFAULT_TIMEOUT_S:g}, at most {MAX_TIMEOUT_S:g}).",
                },
            },
            "required": ["code"],
            "additionalProperties": False,
        },
        security=SecurityConfig(
            level=SecurityLevel.MODERATE,
            sandbox=True,
            network=False,
            # The snippet writes in its own temporary directory; the workdir is only read.
            writes_workdir=False,
        ),
        execution=ExecutionConfig(
            # The tool enforces the call's timeout_s itself; this bound adds room for the
            # sandbox's start and for collecting files.
            timeout_s=EXECUTION_TIMEOUT_S,
            retryable=False,
            cacheable=False,
            # With bubblewrap the workdir is read-only; in the runner's degraded mode (an
            # explicit opt-in) the snippet can write the host's files, the workdir's included,
            # and a cached file_read or listing of them would be stale.
            invalidates=("file_read", "list_dir"),
            memory_mb=MEMORY_MB,
            # Kept output and file contents, after JSON escaping and base64.
            max_output_bytes=6 * (STDOUT_CAP_BYTES + STDERR_CAP_BYTES) + 2 * 1024 * 1024,
        ),
        execute=tools.code_execute,
        entrypoint="tooldeck_tools_code.tools:code_execute",
        call_style="mapping",
        tags=("code", "python", "javascript", "run", "execute", "script", "compute",
              "calculate", "interpreter", "repl"),
    )


CODE_EXECUTE = build_definition(javascript=node_path() is not None)


def definitions() -> tuple[ToolDefinition, ...]:
    """The tools of the pack, in registration order."""
    return (CODE_EXECUTE,)
