"""Hook implementations of the search tool pack (entry point ``search``)."""

from __future__ import annotations

from tooldeck_hookspecs import RegisterFn, hookimpl

from ._definitions import definitions


@hookimpl
def tooldeck_register_tools(register: RegisterFn) -> None:
    """Register ``web_search``."""
    for tool in definitions():
        register(tool)
