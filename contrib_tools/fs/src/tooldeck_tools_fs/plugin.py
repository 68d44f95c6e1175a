"""Hook implementations of the fs tool pack (entry point ``fs``)."""

from __future__ import annotations

from tooldeck_hookspecs import RegisterFn, hookimpl

from ._definitions import definitions


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register ``file_read``, ``file_write`` and ``list_dir``."""
    for tool in definitions():
        register(tool)
