"""Judging callables without running them: can this coroutine suspend, may this hook block?"""

from __future__ import annotations

import dis
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["NONBLOCKING_ATTR", "never_suspends", "nonblocking", "is_nonblocking"]

# Every way a native coroutine can give control back to the event loop goes through one of these
# instructions (await, async for, async with; YIELD_VALUE also covers what later versions emit).
_SUSPENDING_OPCODES = frozenset(
    dis.opmap[name]
    for name in (
        "GET_AWAITABLE",
        "GET_AITER",
        "GET_ANEXT",
        "BEFORE_ASYNC_WITH",
        "END_ASYNC_FOR",
        "SEND",
        "YIELD_VALUE",
    )
    if name in dis.opmap
)

#: The attribute :func:`nonblocking` sets on a hook implementation.
NONBLOCKING_ATTR = "tooldeck_nonblocking"

_F = TypeVar("_F", bound=Callable[..., object])


def never_suspends(function: Callable[..., Any] | None) -> bool:
    """True when ``function`` is an ``async def`` whose own body contains no suspension point.

    Such a coroutine runs from its first step to its return without ever yielding to the event
    loop. Anything else (a sync function, a callable object, a wrapper, a body with ``await``)
    gives False: the answer only has to be right when it is True.
    """
    if inspect.ismethod(function):
        function = function.__func__
    code = getattr(function, "__code__", None)
    if code is None or not code.co_flags & inspect.CO_COROUTINE:
        return False
    return not any(
        instruction.opcode in _SUSPENDING_OPCODES for instruction in dis.get_instructions(code)
    )


def nonblocking(function: _F) -> _F:
    """Declare a policy hook cheap: it computes, never waits (no I/O, no locks, no sleeps).

    The deck calls such a ``tooldeck_authorize_call`` directly on the event loop (about 1 µs).
    A hook without the mark runs in a worker thread under the call's deadline instead, so a slow
    or hung one costs only its own calls (a fail-closed ``PLUGIN_ERROR`` naming the plugin) and
    never stalls the other sessions. The same holds for ``tooldeck_filter_tools`` (an unmarked
    filter runs in a thread and is left out of a selection it does not answer in time). Use it
    next to ``@hookimpl``, in either order.
    """
    setattr(function, NONBLOCKING_ATTR, True)
    return function


def is_nonblocking(function: object) -> bool:
    """Whether :func:`nonblocking` marked ``function`` (or the function of a bound method)."""
    target = getattr(function, "__func__", function)
    return bool(getattr(target, NONBLOCKING_ATTR, False))
