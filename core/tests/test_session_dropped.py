"""A session its owner drops without ``aclose()`` still ends.

Framework glue often opens a session per request and never closes it. Observers release
per-session resources on ``session.closed`` (the runner's zygotes, the browser's context), so
without that event they stayed until eviction pushed them out. A dropped session now announces
its end when it is garbage-collected, once, from the deck's loop.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable

import trio

from tooldeck import observes
from tooldeck.testing import inline_plugin, make_deck

STAGES = ["schema", "policy", "cache", "runner"]


def _recording_deck(seen: list[tuple[str | None, dict]]):
    @observes("session.closed")
    def tooldeck_event(event):
        seen.append((event.session_id, dict(event.data)))

    return make_deck(inline_plugin(tooldeck_event, name="closed"), load_entry_points=STAGES)


async def _settle(until: Callable[[], bool] | None = None) -> None:
    # The finalizer queues the announcement on the loop: collect, then let the loop run it.
    for _ in range(3):
        gc.collect()
        await trio.sleep(0)
    if until is not None:
        # Observers run on the deck's event thread: a loaded machine (a parallel test run)
        # delivers a moment later. Bounded: a missing event still fails the test.
        with trio.fail_after(10):
            while not until():
                gc.collect()
                await trio.sleep(0.01)


async def test_a_dropped_session_is_announced_closed_once() -> None:
    seen: list[tuple[str | None, dict]] = []
    async with _recording_deck(seen) as deck:
        session = deck.session()
        await session.call("no_such_tool", {})  # the session was used, then forgotten
        dropped_id = session.id
        del session
        await _settle(until=lambda: bool(seen))
        assert seen == [(dropped_id, {"dropped": True})]
        await _settle()
        assert len(seen) == 1


async def test_a_closed_session_is_not_announced_again_when_collected() -> None:
    seen: list[tuple[str | None, dict]] = []
    async with _recording_deck(seen) as deck:
        session = deck.session()
        await session.aclose()
        closed_id = session.id
        del session
        await _settle()
    assert seen == [(closed_id, {})]


async def test_many_dropped_sessions_each_end() -> None:
    seen: list[tuple[str | None, dict]] = []
    async with _recording_deck(seen) as deck:
        ids = []
        for _ in range(50):
            session = deck.session()
            ids.append(session.id)
        del session
        await _settle()
    assert sorted(sid for sid, _ in seen) == sorted(ids)


def test_a_session_outliving_its_decks_loop_is_collected_quietly() -> None:
    # Collected after trio.run returned: nothing to announce to, and nothing may be raised
    # from the collector (it would be printed as an unraisable exception).
    seen: list[tuple[str | None, dict]] = []
    unraisable: list[object] = []
    kept: list[object] = []

    async def main() -> None:
        async with _recording_deck(seen) as deck:
            kept.append(deck.session())

    trio.run(main)
    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        kept.clear()
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert unraisable == []
    assert seen == []


def test_a_session_made_outside_the_loop_has_no_finalizer() -> None:
    seen: list[tuple[str | None, dict]] = []
    deck = _recording_deck(seen)
    session = deck.session()  # no trio run here: only aclose() can end it
    assert session._dropped is None
    del session
    gc.collect()
    assert seen == []


async def test_a_dropped_session_does_not_end_a_live_one_with_the_same_id() -> None:
    # An app may open a Session per request with the conversation's id and never close it:
    # dropping the old object must not release what the new one of that id still uses.
    seen: list[tuple[str | None, dict]] = []
    async with _recording_deck(seen) as deck:
        old = deck.session(session_id="conversation-1")
        live = deck.session(session_id="conversation-1")
        del old
        await _settle()
        assert seen == []
        assert deck._live_sessions == {"conversation-1": 1}
        del live
        await _settle(until=lambda: bool(seen))
        assert seen == [("conversation-1", {"dropped": True})]
        assert deck._live_sessions == {}
        # aclose() of one of two keeps the count right for the other's collection.
        first = deck.session(session_id="conversation-2")
        second = deck.session(session_id="conversation-2")
        await first.aclose()
        await first.aclose()  # a second aclose() changes nothing
        assert deck._live_sessions == {"conversation-2": 1}
        del second
        await _settle(until=lambda: len(seen) > 1)
        assert seen[-1] == ("conversation-2", {"dropped": True})
        assert deck._live_sessions == {}
