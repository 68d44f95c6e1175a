"""Audit of the approvals flow: one approval runs one call, the call that runs is the one shown,
only a yes approves, and hashing a call for its approval never holds the event loop.

Each test fails without its fix:

- a resumed call that ran without using its approval (always-allowed meanwhile) left the
  approval given in the store: a later call with its id ran the same call a second time;
- the framework bridge matched a re-run to its pending approval with ``==`` (1 == 1.0 == True),
  so the pending call ran instead of the one the user was shown;
- llm's inline ``confirm=`` took any truthy answer ("no", the text of a prompt) as a yes;
- the approval hash of megabytes of arguments was computed on the trio loop, twice per call.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

import tooldeck._deck as deck_module
from tooldeck import ErrorCode, ToolCall, tool
from tooldeck.integrations._bridge import ApprovalBook, answer_flow
from tooldeck.testing import make_deck

STAGES = ["schema", "runner", "policy"]
RUNS: list[Any] = []


@tool(category="shell", security={"level": "dangerous"}, execution={"cacheable": False})
def wipe(target: str) -> str:
    """Wipe a target.

    Args:
        target: what to wipe
    """
    RUNS.append(target)
    return "wiped"


@tool(category="shell", security={"level": "dangerous"}, execution={"cacheable": False})
def tune(level: float) -> str:
    """Set the level of a machine.

    Args:
        level: the new level
    """
    RUNS.append(level)
    return "tuned"


@pytest.fixture(autouse=True)
def _runs() -> None:
    RUNS.clear()


def _deck() -> Any:
    return make_deck(load_entry_points=STAGES, tools=[wipe, tune])


async def test_an_approval_a_resume_did_not_use_cannot_run_the_call_again() -> None:
    async with _deck() as deck:
        session = deck.session()
        asked = await session.call("wipe", {"target": "once"})
        approval = asked.error.details["approval_id"]
        session.always_allow("wipe")  # the resumed call no longer needs the approval
        assert (await session.resume(approval)).success
        session.always_allowed.discard("wipe")
        again = await session.call("wipe", {"target": "once"}, approval_id=approval)
    assert again.error is not None and again.error.code is ErrorCode.PERMISSION_DENIED
    assert RUNS == ["once"]


async def test_an_approval_whose_resume_was_refused_is_retired_too() -> None:
    """Refused before its approval was checked (the session's maximum level went down): the
    pending call is used up, and so is the approval in the store."""
    async with _deck() as deck:
        session = deck.session()
        asked = await session.call("wipe", {"target": "t"})
        approval = asked.error.details["approval_id"]
        session.max_level = "moderate"
        refused = await session.resume(approval)
        assert refused.error is not None and refused.error.code is ErrorCode.PERMISSION_DENIED
        session.max_level = "dangerous"
        again = await session.call("wipe", {"target": "t"}, approval_id=approval)
    assert again.error is not None and again.error.code is ErrorCode.PERMISSION_DENIED
    assert RUNS == []


async def test_a_used_approval_is_not_asked_back_from_the_store() -> None:
    """The usual resume: the approval was used by the call; nothing more to take back."""
    async with _deck() as deck:
        session = deck.session()
        asked = await session.call("wipe", {"target": "t"})
        approval = asked.error.details["approval_id"]
        resolved: list[bool] = []
        store = deck._approvals
        real = store.resolve

        async def resolve(approval_id: str, approved: bool, **kw: Any) -> bool:
            resolved.append(approved)
            return await real(approval_id, approved, **kw)

        store.resolve = resolve
        assert (await session.resume(approval)).success
    assert resolved == [True] and RUNS == ["t"]


@pytest.mark.parametrize("shown", [1.0, True])
async def test_a_framework_rerun_runs_the_arguments_shown_not_an_equal_looking_pending_call(
    shown: Any,
) -> None:
    """A call id seen before with ``level: 1`` and re-run (as the user was shown it) with 1.0 or
    true: Python finds them equal, the deck's hash does not; the call shown is the one that runs
    (after its own approval; true is no number, refused), never the other one."""
    async with _deck() as deck:
        session = deck.session()
        book = ApprovalBook()
        earlier = await session.call(ToolCall(name="tune", arguments={"level": 1}, id="c1"))
        assert earlier.error is not None
        book.remember("c1", earlier.error.details["approval_id"])
        call = ToolCall(name="tune", arguments={"level": shown}, id="c1")
        await answer_flow(session, book, call, True)
    if shown is True:
        assert RUNS == []
    else:
        assert RUNS == [shown] and type(RUNS[0]) is float


def test_llm_inline_confirm_approves_only_on_true() -> None:
    llm = pytest.importorskip("llm")
    from tooldeck.integrations.llm import to_llm_tools
    from tooldeck.portal import DeckPortal

    answers: list[Any] = ["no", {"approved": False}, 1, True]
    with DeckPortal(_deck()) as portal:
        session = portal.session()
        (tool_,) = to_llm_tools(session, ["wipe"], confirm=lambda name, args: answers.pop(0))
        outputs = []
        for n in range(4):
            sent = llm.ToolCall(name="wipe", arguments={"target": f"t{n}"}, tool_call_id=f"c{n}")
            outputs.append(tool_.implementation(llm_tool_call=sent, target=f"t{n}"))
    assert ['"ok": true' in out for out in outputs] == [False, False, False, True]
    assert RUNS == ["t3"]


@pytest.mark.parametrize("big", [False, True])
async def test_the_approval_hash_of_big_arguments_is_computed_off_the_loop(
    monkeypatch: pytest.MonkeyPatch, big: bool
) -> None:
    """Megabytes of arguments (lone surrogates go through json's slow path: ~0.6 s for 16 MiB)
    are hashed for their approval in a worker thread, like their other checks; small ones on
    the loop, where a thread would cost more than the hash."""
    threads: list[bool] = []
    real = deck_module._approval_hash

    def watched(*args: Any) -> str:
        threads.append(threading.current_thread() is threading.main_thread())
        return real(*args)

    monkeypatch.setattr(deck_module, "_approval_hash", watched)
    target = "\ud800" * (70 * 1024) if big else "small"
    async with _deck() as deck:
        session = deck.session()
        asked = await session.call("wipe", {"target": target})
        approval = asked.error.details["approval_id"]
        result = await session.resume(approval)
    assert result.success and RUNS == [target]
    assert threads == ([False, False] if big else [True, True])


async def test_a_call_cancelled_while_its_arguments_are_hashed_does_not_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    started = trio.Event()
    token: list[Any] = []
    real = deck_module._approval_hash

    def slow(*args: Any) -> str:
        token[0].run_sync_soon(started.set)
        release.wait(10)
        return real(*args)

    async with _deck() as deck:
        session = deck.session()
        asked = await session.call("wipe", {"target": "x" * (70 * 1024)})
        approval = asked.error.details["approval_id"]
        token.append(trio.lowlevel.current_trio_token())
        monkeypatch.setattr(deck_module, "_approval_hash", slow)
        results: list[Any] = []

        async def resume() -> None:
            results.append(await session.resume(approval))

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(resume)
                await started.wait()
                session.cancel()
        finally:
            release.set()
    (result,) = results
    assert result.error is not None and result.error.code is ErrorCode.CANCELLED
    assert RUNS == []
