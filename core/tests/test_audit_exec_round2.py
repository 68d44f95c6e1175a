"""Execution against a second audit round: the tool's own code turned into text on the event
loop, values that cannot be converted, and the integrations' blocking calls.

- A sync tool whose exception (or returned object) had a ``__str__`` that never returned froze
  the deck: it was turned into text on the event loop, so the call's timeout never fired and
  every other session stopped. Now that text is written in the tool's own thread (exceptions)
  or the result is made plain JSON in a worker thread (objects of the tool's own types).
- A returned object whose ``__getattr__`` or ``__iter__`` raised was reported as a failure of
  the pipeline (PLUGIN_ERROR).
- LangChain's synchronous ``invoke`` on the asyncio loop that a session's confirm callback
  needs waited for the confirm timeout instead of refusing, as ``PortalSession.call`` does.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import trio

from tooldeck import ExecutionConfig, SecurityConfig, ToolDefinition
from tooldeck.testing import make_deck

RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def _release_hung_tools() -> Any:
    RELEASE.clear()
    yield
    RELEASE.set()  # the abandoned threads end with the test


class _Hangs:
    def __str__(self) -> str:
        RELEASE.wait()
        return "released"

    __repr__ = __str__


class _HangingError(Exception):
    def __str__(self) -> str:
        RELEASE.wait()
        return "released"


def _raises(arguments: Any, context: Any) -> None:
    raise _HangingError()


def _returns(arguments: Any, context: Any) -> Any:
    return {"value": _Hangs()}


def _returns_key(arguments: Any, context: Any) -> Any:
    return {_Hangs(): 1}


def _ping(arguments: Any, context: Any) -> str:
    return "pong"


def _tool(function: Any, name: str, **security: Any) -> ToolDefinition:
    return ToolDefinition(
        name=name, description=f"test tool {name}", category="demo", execute=function,
        parameters={"type": "object", "properties": {}},
        execution=ExecutionConfig(timeout_s=1.0), security=SecurityConfig(**security),
    )


@pytest.mark.parametrize("name", ["raises", "returns", "returns_key"])
async def test_a_tool_whose_text_never_comes_times_out_and_stops_nobody(name: str) -> None:
    tools = [_tool(_raises, "raises"), _tool(_returns, "returns"),
             _tool(_returns_key, "returns_key"), _tool(_ping, "ping")]
    order: list[str] = []
    async with make_deck(load_entry_points=["schema", "runner", "policy"], tools=tools) as deck:
        hung, other = deck.session(), deck.session()

        async def call_hung() -> None:
            result = await hung.call(name, {})
            order.append(f"hung:{result.error.code if result.error else 'ok'}")

        async def call_ping() -> None:
            await trio.sleep(0.2)  # while the hung call is in flight
            result = await other.call("ping", {})
            order.append(f"ping:{result.data}")

        with trio.fail_after(30):  # not a timing figure: the call's own timeout is 1 s
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call_hung)
                nursery.start_soon(call_ping)
    assert order == ["ping:pong", "hung:TIMEOUT"], order


class _Boom:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("getattr")


class _BadList(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        raise RuntimeError("iter")


@pytest.mark.parametrize(
    "make",
    [_Boom, lambda: _BadList([1]), lambda: {"nested": _BadList([2])}],
    ids=["getattr-raises", "iter-raises", "nested-iter-raises"],
)
async def test_a_value_that_cannot_be_converted_is_the_tools_not_the_pipelines(
    make: Any,
) -> None:
    tool = _tool(lambda arguments, context: make(), "odd")
    async with make_deck(load_entry_points=["schema", "runner", "policy"], tools=[tool]) as deck:
        result = await deck.session().call("odd", {})
    assert result.error is None or result.error.code != "PLUGIN_ERROR", result


def test_langchain_invoke_on_the_confirm_callbacks_loop_is_refused() -> None:
    pytest.importorskip("langchain_core")
    from tooldeck.integrations.langchain import to_langchain_tools
    from tooldeck.portal import DeckPortal

    ran: list[str] = []
    wipe = ToolDefinition(
        name="wipe_notes", description="wipe the notes", category="notes",
        parameters={"type": "object", "properties": {}},
        security=SecurityConfig(level="dangerous"),
        execute=lambda arguments, context: ran.append("wipe") or "wiped",
    )
    portal = DeckPortal(make_deck(load_entry_points=["schema", "runner", "policy"],
                                  tools=[wipe], config={"approvals": {"confirm_timeout_s": 60}}))

    async def confirm(request: Any) -> bool:
        return True

    async def main() -> None:
        session = portal.session(grants={"notes"}, confirm=confirm)
        (tool,) = to_langchain_tools(session, ["wipe_notes"])
        with pytest.raises(RuntimeError, match="awaitable method"):
            tool.invoke({})
        assert "wiped" in str(await tool.ainvoke({}))

    try:
        asyncio.run(main())
    finally:
        portal.close()
    assert ran == ["wipe"]
