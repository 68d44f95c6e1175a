"""tooldeck's shell tool pack: ``shell_exec``.

``shell_exec`` runs one program with its arguments (an argv list, no shell) or one command line
(``/bin/sh -c``, single command: the policy plugin's shell guard refuses chaining, pipes,
redirections and substitutions) in the session's working directory, inside the runner's sandbox.
It is ``dangerous``: every call is confirmed by the user.
"""

from __future__ import annotations

from tooldeck_tools_process import Capture, Completed, decode_output, run_process

from ._definitions import MEMORY_MB, SHELL_EXEC, definitions
from .tools import (
    BASE_ENVIRONMENT,
    DEFAULT_TIMEOUT_S,
    MAX_ARGV_BYTES,
    MAX_ARGV_ITEMS,
    MAX_COMMAND_LINE_CHARS,
    MAX_ENV_VALUE_CHARS,
    MAX_ENV_VARS,
    MAX_STDIN_BYTES,
    MAX_TIMEOUT_S,
    REFUSED_ENV_NAMES,
    STDERR_CAP_BYTES,
    STDOUT_CAP_BYTES,
    command_environment,
    shell_exec,
)

__all__ = [
    "BASE_ENVIRONMENT",
    "DEFAULT_TIMEOUT_S",
    "MAX_ARGV_BYTES",
    "MAX_ARGV_ITEMS",
    "MAX_COMMAND_LINE_CHARS",
    "MAX_ENV_VALUE_CHARS",
    "MAX_ENV_VARS",
    "MAX_STDIN_BYTES",
    "MAX_TIMEOUT_S",
    "MEMORY_MB",
    "REFUSED_ENV_NAMES",
    "SHELL_EXEC",
    "STDERR_CAP_BYTES",
    "STDOUT_CAP_BYTES",
    "Capture",
    "Completed",
    "command_environment",
    "decode_output",
    "definitions",
    "run_process",
    "shell_exec",
]
