"""Operator audit (plugins misbehave): a third-party hook that blocks never stalls the loop.

Before, ``tooldeck_redact`` (a name no tool has, a hand's texts, a call id) and the hooks
``add_tools`` / ``remove_tools`` call (``tooldeck_validate_tool``,
``tooldeck_argument_validator``, ``tooldeck_catalog_ready``) ran on the deck's trio loop: one
that blocked for 30 s stalled every session for 30 s, and one that never returned hung the deck.
Now unmarked redactors run in a worker thread under a deadline (the value is withheld past it),
and the registration hooks of ``add_tools`` run in a worker thread.

The property checked is structural: the other session's call completed while the hook was
still blocked (a threading.Event the hook holds); the events only bound the test's run time.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

import tooldeck._deck as deck_module
from tooldeck import tool
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck

MARK = "ZQXJ"
GUARD_S = 20.0  # how long a blocked hook waits at most (a test without the fix ends, failing)


@tool(category="work", execution={"timeout_s": 5.0})
def echo(value: int) -> int:
    """Echo a number.

    Args:
        value: the number
    """
    return value


def late_tool(value: int) -> int:
    """A tool added at run time.

    Args:
        value: the number
    """
    return value


class Gate:
    """What a blocking hook holds: ``entered`` when it blocks, ``left`` once it returns."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.left = threading.Event()

    def block(self) -> None:
        self.entered.set()
        try:
            self.release.wait(GUARD_S)
        finally:
            self.left.set()


def _redactor(gate: Gate) -> object:
    def tooldeck_redact(value: Any) -> Any:
        if MARK in repr(value):
            gate.block()
        return None

    return inline_plugin(tooldeck_redact=tooldeck_redact, name="slow-redactor")


async def _other_session_served_while_blocked(
    deck: Any, gate: Gate, hit: Callable[[], Awaitable[Any]]
) -> Any:
    """Run ``hit`` (which makes a hook block); once the hook blocks, another session calls a
    tool. Returns ``hit``'s answer; asserts the other call completed while the hook held."""
    other = deck.session(session_id="other")
    assert (await other.call("echo", {"value": 0})).success
    answer: list[Any] = []
    served_while_blocked: list[bool] = []

    async def run_hit() -> None:
        answer.append(await hit())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_hit)
        await trio.to_thread.run_sync(gate.entered.wait, GUARD_S)
        assert gate.entered.is_set()
        result = await other.call("echo", {"value": 7})
        served_while_blocked.append(result.success and not gate.left.is_set())
        gate.release.set()
    assert served_while_blocked == [True]
    return answer[0]


@pytest.mark.parametrize("where", ["unknown tool name", "select", "call id"])
async def test_a_blocking_redactor_stalls_no_other_session(where: str) -> None:
    gate = Gate()
    retriever = inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever())
    deck = make_deck(
        _redactor(gate), retriever, load_entry_points=["schema", "runner"], tools=[echo]
    )
    async with deck:
        session = deck.session(session_id="hit")

        async def hit() -> Any:
            if where == "unknown tool name":
                return await session.call(f"{MARK}_no_such_tool", {})
            if where == "select":
                return await session.select(f"echo a number {MARK}")
            return await session.call("echo", {"value": 1}, call_id=f"id {MARK}")

        answer = await _other_session_served_while_blocked(deck, gate, hit)
    if where == "select":
        assert answer.query.endswith(MARK)  # released in time: its answer counts
    elif where == "call id":
        # Released in time: the id as the redactor left it (bounded and printable).
        assert answer.success and MARK in answer.metadata["call_id"]
    else:
        assert answer.error.code == "TOOL_NOT_FOUND"


async def test_a_hung_redactor_withholds_past_its_deadline_naming_the_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deck_module, "REDACT_TIMEOUT_S", 0.2)
    gate = Gate()
    deck = make_deck(_redactor(gate), load_entry_points=["schema", "runner"], tools=[echo])
    try:
        async with deck:
            session = deck.session()
            result = await session.call(f"{MARK}_no_such_tool", {})
            # Nothing of the value went out unredacted: the result and the name are withheld.
            assert result.error.code == "PLUGIN_ERROR"
            assert "slow-redactor" in result.error.message
            assert "did not answer within" in result.error.message
            assert MARK not in repr(result)
            assert (await session.call("echo", {"value": 3})).data == 3
    finally:
        gate.release.set()


@pytest.mark.parametrize(
    "hook", ["tooldeck_validate_tool", "tooldeck_argument_validator", "tooldeck_catalog_ready"]
)
async def test_a_blocking_registration_hook_in_add_tools_stalls_no_session(hook: str) -> None:
    gate = Gate()
    armed = threading.Event()  # start-up registers tools too: only add_tools' call blocks

    def blocking(*args: Any, **kwargs: Any) -> None:
        if armed.is_set():
            gate.block()
        return None

    plugin = inline_plugin(name="slow-registrar", **{hook: blocking})
    deck = make_deck(plugin, load_entry_points=["schema", "runner"], tools=[echo])
    async with deck:
        armed.set()
        added = await _other_session_served_while_blocked(
            deck, gate, lambda: deck.add_tools([late_tool])
        )
        assert [t.name for t in added] == ["late_tool"]
        assert (await deck.session().call("late_tool", {"value": 5})).data == 5
