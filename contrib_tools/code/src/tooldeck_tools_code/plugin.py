"""Hook implementations of the code tool pack (entry point ``code``)."""

from __future__ import annotations

from tooldeck_hookspecs import RegisterFn, hookimpl

from ._definitions import definitions


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register ``code_execute``."""
    for tool in definitions():
        register(tool)
