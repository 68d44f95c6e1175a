"""tooldeck's filesystem tool pack: ``file_read``, ``file_write`` and ``list_dir``.

Every path is resolved under the session's allowed roots (the working directory by default) with
``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`` where the kernel has it, or a component by
component walk with ``O_NOFOLLOW`` where it does not: ``..``, absolute paths elsewhere, ``/proc``
and symlinks that point outside are refused with ``PATH_NOT_ALLOWED`` before any I/O on them.
``file_write`` never creates or changes a protected path (``context.protected_paths``), checked
on the resolved location of the write.
"""

from __future__ import annotations

from ._definitions import FILE_READ, FILE_WRITE, LIST_DIR, definitions
from ._safepath import Target, locate, open_beneath, open_parent, openat2_available
from .tools import (
    DEFAULT_LIST_DEPTH,
    DEFAULT_LIST_ENTRIES,
    DEFAULT_READ_BYTES,
    MAX_LIST_DEPTH,
    MAX_LIST_ENTRIES,
    MAX_READ_BYTES,
    MAX_WRITE_BYTES,
    file_read,
    file_write,
    list_dir,
)

__all__ = [
    "DEFAULT_LIST_DEPTH",
    "DEFAULT_LIST_ENTRIES",
    "DEFAULT_READ_BYTES",
    "FILE_READ",
    "FILE_WRITE",
    "LIST_DIR",
    "MAX_LIST_DEPTH",
    "MAX_LIST_ENTRIES",
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "Target",
    "definitions",
    "file_read",
    "file_write",
    "list_dir",
    "locate",
    "open_beneath",
    "open_parent",
    "openat2_available",
]
