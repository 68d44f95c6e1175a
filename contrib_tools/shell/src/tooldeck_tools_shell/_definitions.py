"""The ToolDefinition of the shell pack, with a description and schema written for a model."""

from __future__ import annotations

from tooldeck_hookspecs import ExecutionConfig, SecurityConfig, SecurityLevel, ToolDefinition

from . import tools
from .tools import (
    DEFAULT_TIMEOUT_S,
    EXECUTION_TIMEOUT_S,
    MAX_ARGV_ITEMS,
    MAX_COMMAND_LINE_CHARS,
    MAX_ENV_VALUE_CHARS,
    MAX_ENV_VARS,
    MAX_STDIN_BYTES,
    MAX_TIMEOUT_S,
    STDERR_CAP_BYTES,
    STDOUT_CAP_BYTES,
)

__all__ = ["SHELL_EXEC", "definitions", "MEMORY_MB"]

#: Memory of the whole call (the command and everything it starts, together: the runner's
#: per-call cgroup). Builds and test runners use several processes at once. Without a memory
#: cgroup the runner falls back to RLIMIT_AS of this size per process: compilers, node and test
#: runners reserve far more address space than they use, so it cannot be much smaller.
MEMORY_MB = 2048

SHELL_EXEC = ToolDefinition(
    name="shell_exec",
    version="1.0.0",
    category="shell",
    description=(
        "Run a command in the working directory and get its exit code, stdout and stderr: run "
        "tests, build, use git, grep, find, ls, python3 and other command-line programs. Pass "
        'command as a list: the program and its arguments, e.g. ["git", "status"] or '
        '["pytest", "-q", "tests/"]; no shell is involved, so quotes and spaces need no '
        "escaping. A single command line string (e.g. \"ls *.py\") is also accepted and run by "
        "/bin/sh for globbing and quoting, but chaining (;, &&), pipes, redirections and "
        "$(...) are refused: make one call per command. A non-zero exit code is reported, not "
        "an error. The user must approve each call. No network access; output is capped "
        f"(stdout {STDOUT_CAP_BYTES // 1024} KiB, stderr {STDERR_CAP_BYTES // 1024} KiB, "
        "beginning and end kept)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "command": {
                "anyOf": [
                    {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": MAX_ARGV_ITEMS,
                        "description": "Program and arguments, run without a shell "
                        "(recommended).",
                    },
                    {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_COMMAND_LINE_CHARS,
                        "description": "One command line run by /bin/sh -c: globs and quotes "
                        "work; ;, &&, |, >, $(...) are refused.",
                    },
                ],
                "description": 'The command: ["program", "arg", ...] (recommended) or one '
                "command line string.",
            },
            "cwd": {
                "type": "string",
                "default": ".",
                "description": "Directory to run in, relative to the working directory.",
            },
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_TIMEOUT_S,
                "default": DEFAULT_TIMEOUT_S,
                "description": "Seconds before the command is killed "
                f"(default {DEFAULT_TIMEOUT_S:g}, at most {MAX_TIMEOUT_S:g}).",
            },
            "env": {
                "type": "object",
                "maxProperties": MAX_ENV_VARS,
                "additionalProperties": {"type": "string", "maxLength": MAX_ENV_VALUE_CHARS},
                "description": "Extra environment variables, e.g. {\"CI\": \"1\"}. PATH, HOME, "
                "LD_*, GIT_CONFIG_*, *_ASKPASS, EDITOR, PAGER and other variables that choose "
                "which code runs or which configuration is read cannot be set; nothing is "
                "inherited from the host.",
            },
            "stdin": {
                "type": "string",
                "maxLength": MAX_STDIN_BYTES,
                "description": "Text sent to the command's standard input (none by default).",
            },
            "output_encoding": {
                "type": "string",
                "enum": ["text", "base64"],
                "default": "text",
                "description": "'text' (UTF-8; invalid bytes replaced and flagged) or 'base64' "
                "for binary stdout.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    security=SecurityConfig(
        level=SecurityLevel.DANGEROUS,
        sandbox=True,
        writes_workdir=True,
        network=False,
        command_params=("command",),
        # Pipes stay refused: a pipeline is several programs, and each should be seen (and
        # approved) as its own call.
        allow_pipes=False,
        path_params=("cwd",),
        allowed_paths=("{workdir}",),
    ),
    execution=ExecutionConfig(
        # The tool enforces the call's own timeout_s (and kills the process group); this outer
        # bound only catches a tool that failed to, and covers the sandbox's start.
        timeout_s=EXECUTION_TIMEOUT_S,
        retryable=False,
        cacheable=False,
        memory_mb=MEMORY_MB,
        # JSON escaping can grow kept bytes (control characters -> \u00XX); the timeout error
        # carries the partial output too.
        max_output_bytes=8 * (STDOUT_CAP_BYTES + STDERR_CAP_BYTES) + 65536,
        # A command may change anything in the workdir: cached file reads may be stale.
        invalidates=("file_read", "list_dir"),
    ),
    execute=tools.shell_exec,
    entrypoint="tooldeck_tools_shell.tools:shell_exec",
    call_style="mapping",
    tags=("shell", "terminal", "command", "bash", "run", "execute", "cli", "git", "make",
          "test", "build", "program"),
)


def definitions() -> tuple[ToolDefinition, ...]:
    """The tools of the pack, in registration order."""
    return (SHELL_EXEC,)
