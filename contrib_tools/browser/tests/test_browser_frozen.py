"""A browser that stops answering is stopped and replaced; a busy page is not taken for one.

Found by freezing Chromium (SIGSTOP on every process of the browser's cgroup, as a deadlock or
a starved host would): every later call of every session was held to the executor's limit
(20 s a call under a 20 s limit, with ``timeout_s`` 5) and answered with a TIMEOUT that named
nothing, for as long as the process lived. A call that times out now asks the browser process
for a trivial answer (2 s); when none comes, the browser and every process it runs are stopped,
the call says so, and the next call launches a new one.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from tooldeck_tools_browser._engine import engine

from tooldeck.testing import make_deck, marked_pids

pytestmark = pytest.mark.chromium

PACKS = ["schema", "runner", "policy", "browser"]


def _browser_pids() -> list[int]:
    """Every process of the running browser (its memory cgroup holds them all)."""
    sandbox = engine().sandbox
    assert sandbox is not None
    if sandbox.cgroup is None:
        pytest.skip("no memory cgroup here: the browser's processes cannot all be found to "
                    "freeze them")
    pids: set[int] = set()
    for path in sandbox.cgroup.procs_files():
        with open(path) as handle:
            pids.update(int(line) for line in handle.read().split())
    return sorted(pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def frozen() -> Iterator[Any]:
    """``freeze()`` stops every process of the running browser; whatever is left is killed
    at the end (a failing test must not leave stopped processes behind)."""
    stopped: list[int] = []

    def freeze() -> list[int]:
        pids = _browser_pids()
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        stopped.extend(pids)
        return pids

    yield freeze
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


async def _open(session: Any, site: Any) -> str:
    opened = await session.call("browser_navigate", {"url": site.url("/form")})
    assert opened.success, opened.error
    return str(opened.data["page_id"])


@pytest.mark.parametrize("on", ["a new page", "an open page"])
async def test_a_frozen_browser_is_stopped_and_the_next_call_gets_a_new_one(
    site: Any, frozen: Any, limited_deck: Any, monkeypatch: pytest.MonkeyPatch, on: str
) -> None:
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    async with limited_deck({"browser_navigate": 30}) as deck:
        session = deck.session(max_level="moderate", grants={"browser"})
        other = deck.session(max_level="moderate", grants={"browser"})
        page_id = await _open(session, site)
        await _open(other, site)
        restarts = engine().restarts
        pids = frozen()
        arguments: dict[str, Any] = {"url": site.url("/form"), "timeout_s": 3}
        if on == "an open page":
            arguments["page_id"] = page_id
        with trio.fail_after(25):  # not a timing figure: before, the call took the limit, 30 s
            stuck = await session.call("browser_navigate", arguments)
        assert stuck.error is not None and stuck.error.code == "TIMEOUT", stuck
        assert "the browser itself had stopped answering" in stuck.error.message, stuck.error
        assert stuck.error.details.get("browser_restarted") is True
        assert engine().restarts == restarts + 1
        # Every process of the frozen browser is gone, not left stopped.
        assert not [pid for pid in pids if _alive(pid)]
        # Both sessions go on with a new browser; the old page ids say they are gone.
        with trio.fail_after(60):
            again = await session.call("browser_navigate", {"url": site.url("/form")})
            theirs = await other.call("browser_navigate", {"url": site.url("/form")})
            old = await session.call("browser_navigate",
                                     {"url": site.url("/form"), "page_id": page_id})
        assert again.success, again.error
        assert theirs.success, theirs.error
        assert old.error is not None and "no open page" in old.error.message, old


async def test_a_page_whose_script_holds_it_is_not_taken_for_a_frozen_browser(
    site: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe asks the browser process, which answers whatever a page's script does: a
    looping page times out alone, and the session's other page stays open."""
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    async with make_deck(load_entry_points=PACKS) as deck:
        session = deck.session(max_level="moderate", grants={"browser"})
        kept = await _open(session, site)
        restarts, launches = engine().restarts, engine().launches
        with trio.fail_after(60):
            looped = await session.call("browser_navigate",
                                        {"url": site.url("/loop"), "timeout_s": 3})
            still = await session.call("browser_navigate",
                                       {"url": site.url("/form"), "page_id": kept})
    assert looped.error is not None and looped.error.code == "TIMEOUT", looped
    assert "stopped answering" not in looped.error.message
    assert "browser_restarted" not in looped.error.details
    assert (engine().restarts, engine().launches) == (restarts, launches)
    assert still.success, still.error


async def test_a_frozen_browser_is_replaced_even_when_the_call_is_cut_first(
    site: Any, frozen: Any, limited_deck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a deployment limit the page's time ends a moment before the executor's, less than
    the probe takes: the executor cuts the call, and the check goes on to its end anyway."""
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    async with limited_deck({"browser_navigate": 4}) as deck:
        session = deck.session(max_level="moderate", grants={"browser"})
        await _open(session, site)
        restarts = engine().restarts
        frozen()
        with trio.fail_after(30):
            cut = await session.call("browser_navigate", {"url": site.url("/form")})
            assert cut.error is not None and cut.error.code == "TIMEOUT", cut
            while engine().restarts == restarts:  # the check, finishing after the call
                await trio.sleep(0.1)
            again = await session.call("browser_navigate", {"url": site.url("/form")})
        assert again.success, again.error


async def test_a_frozen_browser_being_replaced_for_other_settings_is_stopped_not_waited_on(
    site: Any, frozen: Any, limited_deck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another deck of the process asks for another memory cap: the browser is relaunched,
    and the old one closed first. Frozen, its contexts took 10 s each to give up and its own
    close never returned; it is now stopped after the 2 s question."""
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    async with limited_deck({"browser_navigate": 60}) as deck:
        for _ in range(3):
            await _open(deck.session(max_level="moderate", grants={"browser"}), site)
        pids = frozen()
    async with limited_deck({"browser_navigate": 60}, browser={"memory_mb": 1536}) as other:
        session = other.session(max_level="moderate", grants={"browser"})
        with trio.fail_after(30):  # before: 3 x 10 s of contexts, then a close without end
            fresh = await session.call("browser_navigate", {"url": site.url("/form")})
    assert fresh.success, fresh.error
    assert fresh.metadata["browser_sandbox"]["memory_mb"] == 1536
    assert not [pid for pid in pids if _alive(pid)]


async def test_a_frozen_browser_without_a_memory_cgroup_is_found_by_its_folder_and_stopped(
    site: Any, limited_deck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``memory_mb = 0``: no cgroup holds the browser's processes. The ones that name the
    launch's private folder (bubblewrap, Chromium's profile) are stopped with their process
    group, and the rest go with bubblewrap's PID namespace."""
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    async with limited_deck({"browser_navigate": 30}, browser={"memory_mb": 0}) as deck:
        session = deck.session(max_level="moderate", grants={"browser"})
        await _open(session, site)
        sandbox = engine().sandbox
        assert sandbox is not None and sandbox.cgroup is None and sandbox.root
        pids = marked_pids(sandbox.root)
        assert pids
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            with trio.fail_after(25):
                stuck = await session.call("browser_navigate",
                                           {"url": site.url("/form"), "timeout_s": 3})
            assert stuck.error is not None, stuck
            assert stuck.error.details.get("browser_restarted") is True, stuck.error
            assert not [pid for pid in pids if _alive(pid)]
            with trio.fail_after(60):
                again = await session.call("browser_navigate", {"url": site.url("/form")})
            assert again.success, again.error
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
