"""The ``@tool`` decorator: marks a function as a tool, without importing the core."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

__all__ = ["tool", "TOOL_OPTIONS_ATTR"]

F = TypeVar("F", bound=Callable[..., Any])

#: Attribute where ``@tool`` stores its options; the core's ``register`` reads it.
TOOL_OPTIONS_ATTR = "__tooldeck_tool__"


@overload
def tool(func: F, /) -> F: ...


@overload
def tool(func: None = None, /, **options: Any) -> Callable[[F], F]: ...


def tool(func: F | None = None, /, **options: Any) -> F | Callable[[F], F]:
    """Mark ``func`` as a tool; ``options`` are those of ``register`` (category, security, ...).

    The function is returned unchanged, so it stays importable by reference (sandbox workers
    import it) and callable directly in tests::

        @tool(category="text")
        def word_count(text: str) -> int:
            "Count the words in a text."
            return len(text.split())

        @hookimpl
        def tooldeck_register_tools(register):
            register(word_count)
    """

    def mark(f: F) -> F:
        setattr(f, TOOL_OPTIONS_ATTR, dict(options))
        return f

    return mark(func) if func is not None else mark
