"""Findings of an operator's audit (plugins that misbehave), through the real deck: one
session's hung policy hooks do not lock the other sessions out, and a plugin's exception text
is redacted before the model sees it."""

from __future__ import annotations

import threading
import types

import trio

from tooldeck import tool
from tooldeck.testing import inline_plugin, make_deck
from tooldeck_hookspecs import hookimpl


@tool(category="work", execution={"timeout_s": 0.5})
def echo(value: int) -> int:
    """Echo a number.

    Args:
        value: the number
    """
    return value


async def test_one_sessions_hung_policy_hooks_leave_the_others_served() -> None:
    """A blocking policy hook that hangs only for one user's calls: once its abandoned threads
    filled the deck's shared pool, every session's call waited for a thread and failed."""
    release = threading.Event()

    def tooldeck_authorize_call(call, tool, session):
        if session.attributes.get("user") == "mallory":
            release.wait(30)
        return None

    results: list = []
    try:
        async with make_deck(inline_plugin(tooldeck_authorize_call, name="lookup"),
                             load_entry_points=["schema", "runner"], tools=[echo]) as deck:
            mallory = deck.session(attributes={"user": "mallory"})
            alice = deck.session(attributes={"user": "alice"})

            async def hung(i: int) -> None:
                results.append(await mallory.call("echo", {"value": i}))

            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    for i in range(40):  # more than any pool (the deck-wide one held 32)
                        nursery.start_soon(hung, i)
                # Every one of mallory's threads is still stuck in the hook.
                for i in range(3):
                    answer = await alice.call("echo", {"value": i})
                    assert answer.success and answer.data == i
    finally:
        release.set()
    assert len(results) == 40
    assert all(r.error is not None and r.error.code == "PLUGIN_ERROR" for r in results)
    # Those that got a thread blame the hook; the rest say why no check could start.
    assert any("'lookup' did not answer" in r.error.message for r in results)
    assert any("threads are still busy" in r.error.message for r in results)


async def test_a_plugins_exception_text_is_redacted_before_the_model_sees_it() -> None:
    password = "Hx7" + "q9Zk2" * 3

    def tooldeck_argument_validator(tool):
        def validate(arguments):
            raise RuntimeError(f"validator down: postgres://admin:{password}@db.internal/prod")

        return validate

    broken = types.SimpleNamespace(
        __tooldeck_name__="badval",
        tooldeck_argument_validator=hookimpl(tryfirst=True)(tooldeck_argument_validator),
    )
    async with make_deck(broken, load_entry_points=["schema", "runner", "policy"],
                         tools=[echo]) as deck:
        result = await deck.session().call("echo", {"value": 1})
    assert result.error is not None and result.error.code == "PLUGIN_ERROR"
    assert "argument validator failed" in result.error.message
    assert password not in repr(result) and "[REDACTED:" in result.error.message
