"""tooldeck's code tool pack: ``code_execute``.

``code_execute`` runs a Python snippet (or JavaScript, when ``node`` is installed) as a child of
the runner's sandbox worker: no network, a private temporary working directory whose files come
back in the result, the session's workdir read-only, memory and time caps. It is ``moderate``: a
session needs the ``code`` grant.
"""

from __future__ import annotations

from ._definitions import CODE_EXECUTE, MEMORY_MB, build_definition, definitions
from .tools import (
    DEFAULT_TIMEOUT_S,
    LANGUAGES,
    MAX_CODE_CHARS,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_FILES_TOTAL_BYTES,
    MAX_STDIN_BYTES,
    MAX_TIMEOUT_S,
    NODE_HEAP_MB,
    NODE_MEMORY_MB,
    NODE_RESERVED_MB,
    PYTHON_ADDRESS_SPACE_MB,
    PYTHON_MEMORY_MB,
    STDERR_CAP_BYTES,
    STDOUT_CAP_BYTES,
    code_execute,
    collect_files,
    node_path,
)

__all__ = [
    "CODE_EXECUTE",
    "DEFAULT_TIMEOUT_S",
    "LANGUAGES",
    "MAX_CODE_CHARS",
    "MAX_FILES",
    "MAX_FILES_TOTAL_BYTES",
    "MAX_FILE_BYTES",
    "MAX_STDIN_BYTES",
    "MAX_TIMEOUT_S",
    "MEMORY_MB",
    "NODE_HEAP_MB",
    "NODE_MEMORY_MB",
    "NODE_RESERVED_MB",
    "PYTHON_ADDRESS_SPACE_MB",
    "PYTHON_MEMORY_MB",
    "STDERR_CAP_BYTES",
    "STDOUT_CAP_BYTES",
    "build_definition",
    "code_execute",
    "collect_files",
    "definitions",
    "node_path",
]
