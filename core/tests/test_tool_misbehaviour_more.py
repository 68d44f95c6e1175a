"""More tools that misbehave, in process, through the whole call path (Deck -> Session.call ->
executor): an ``async def`` whose result is an un-awaited coroutine, and one that swallows its
cancellation. The caller gets a structured error in time, and the next call works.

Complements ``test_tool_misbehaviour.py``.
"""

from __future__ import annotations

import gc
import time
import warnings
from typing import Any

import trio

from tooldeck import ErrorCode, tool
from tooldeck.testing import make_deck

STAGES = ["schema", "runner", "cache"]


@tool(category="demo")
def ping() -> str:
    """Answer pong."""
    return "pong"


async def _later() -> str:
    await trio.sleep(0)
    return "awaited"


@tool(category="demo")
async def forgetful() -> Any:
    """Return a coroutine instead of awaiting it."""
    await trio.sleep(0)
    return _later()


@tool(category="demo", execution={"timeout_s": 0.3})
async def stubborn() -> None:
    """Catch every cancellation, for ever."""
    while True:
        try:
            await trio.sleep(0.01)
        except trio.Cancelled:
            pass


async def _call_then_ping(name: str) -> Any:
    async with make_deck(load_entry_points=STAGES, tools=[ping, forgetful, stubborn]) as deck:
        session = deck.session()
        with trio.fail_after(30):  # a hang fails the test instead of blocking the run
            result = await session.call(name, {})
            assert (await session.call("ping", {})).data == "pong"
    return result


async def test_an_async_tool_returning_a_coroutine_is_an_execution_error() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = await _call_then_ping("forgetful")
        gc.collect()
    # Before: success, data "<coroutine object _later at 0x...>", and a "never awaited" warning.
    assert result.error is not None and result.error.code is ErrorCode.EXECUTION_ERROR
    assert "coroutine" in result.error.message
    assert not [w for w in caught if "never awaited" in str(w.message)]


async def test_an_async_tool_swallowing_its_cancellation_times_out() -> None:
    started = time.monotonic()
    result = await _call_then_ping("stubborn")
    # Before: the call never returned.
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert time.monotonic() - started < 5
