"""Hook implementations of the shell tool pack (entry point ``shell``)."""

from __future__ import annotations

from tooldeck_hookspecs import RegisterFn, hookimpl

from ._definitions import definitions


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register ``shell_exec``."""
    for tool in definitions():
        register(tool)
