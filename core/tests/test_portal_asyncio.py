"""asyncio callers of the portal: cancellation reaches the deck, the whole session API as
awaitables, asyncio confirm callbacks. Real asyncio loops, a real trio loop in the portal."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import trio

from tooldeck import ErrorCode, tool
from tooldeck.portal import DeckPortal, PortalClosedError
from tooldeck.testing import make_deck

# The trio-native tool reports to the test thread through these (it runs on the portal thread).
STARTED = threading.Event()
ENDED = threading.Event()
OUTCOMES: list[str] = []


@tool(category="demo")
async def slow_marker(path: str) -> str:
    """Sleep on trio, then write a marker file: it must never appear once cancelled."""
    STARTED.set()
    try:
        await trio.sleep(30)
    except trio.Cancelled:
        OUTCOMES.append("cancelled")
        raise
    finally:
        ENDED.set()
    Path(path).write_text("ran")
    OUTCOMES.append("ran")
    return "ran"


@tool(category="admin", security={"level": "dangerous"})
def wipe(target: str) -> str:
    """Pretend to wipe a target (dangerous: needs the user's approval)."""
    return f"wiped {target}"


@tool(category="filesystem", security={"level": "moderate"})
def touch(name: str) -> str:
    """Pretend to create a file (moderate: needs the filesystem grant)."""
    return f"touched {name}"


@pytest.fixture
def portal():
    STARTED.clear()
    ENDED.clear()
    OUTCOMES.clear()
    deck = make_deck(
        load_entry_points=["schema", "policy", "runner"], tools=[slow_marker, wipe, touch]
    )
    with DeckPortal(deck) as running:
        yield running


async def _in_thread(function, *args):
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


def _started_then(cancel):
    """Start slow_marker from asyncio, wait until it runs on trio, cancel the way given."""

    async def main(portal: DeckPortal, marker: Path) -> None:
        session = portal.session()
        task = asyncio.ensure_future(session.acall("slow_marker", {"path": str(marker)}))
        assert await _in_thread(STARTED.wait, 10)
        await cancel(task)
        # The deck call itself ended (well before its 30 s sleep), cancelled.
        assert await _in_thread(ENDED.wait, 10)

    return main


@pytest.mark.parametrize("how", ["task.cancel", "wait_for"])
def test_asyncio_cancellation_cancels_the_deck_call(portal, tmp_path, how):
    marker = tmp_path / "marker"

    async def by_task_cancel(task: asyncio.Future) -> None:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def by_wait_for(task: asyncio.Future) -> None:
        # wait_for cancels what it waits for when the timeout runs out.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(task, timeout=0.01)

    cancel = by_task_cancel if how == "task.cancel" else by_wait_for
    asyncio.run(_started_then(cancel)(portal, marker))
    assert OUTCOMES == ["cancelled"]
    assert not marker.exists()
    # The portal keeps serving after a cancelled call.
    assert portal.session().call("touch", {"name": "x"}).error.code is ErrorCode.PERMISSION_DENIED


def test_wait_for_around_acall_itself(portal, tmp_path):
    marker = tmp_path / "marker"

    async def main() -> None:
        session = portal.session()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(session.acall("slow_marker", {"path": str(marker)}), 0.2)
        assert await _in_thread(ENDED.wait, 10)

    asyncio.run(main())
    assert not marker.exists()
    assert "ran" not in OUTCOMES


def test_session_cancel_from_asyncio_returns_cancelled(portal, tmp_path):
    marker = tmp_path / "marker"

    async def main() -> None:
        session = portal.session()
        task = asyncio.ensure_future(session.acall("slow_marker", {"path": str(marker)}))
        assert await _in_thread(STARTED.wait, 10)
        await session.acancel()
        result = await task
        assert result.error is not None and result.error.code is ErrorCode.CANCELLED

    asyncio.run(main())
    assert not marker.exists()


def test_the_session_api_as_awaitables(portal):
    async def main() -> None:
        async with portal.session() as session:
            denied = await session.acall("touch", {"name": "a"})
            assert denied.error.code is ErrorCode.PERMISSION_DENIED
            await session.agrant("filesystem")
            assert "filesystem" in (await session.ainfo()).grants
            assert (await session.acall("touch", {"name": "a"})).data == "touched a"
            await session.arevoke("filesystem")
            assert (await session.acall("touch", {"name": "a"})).error is not None

            asked = await session.acall("wipe", {"target": "t"})
            assert asked.error.code is ErrorCode.CONFIRMATION_REQUIRED
            approval = asked.error.details["approval_id"]
            assert approval in await session.apending_approvals()
            assert (await session.aresume(approval)).data == "wiped t"

            asked = await session.acall("wipe", {"target": "u"})
            approval = asked.error.details["approval_id"]
            assert await session.adeny(approval)
            assert (await session.aresume(approval)).error.code is ErrorCode.PERMISSION_DENIED

            asked = await session.acall("wipe", {"target": "v"})
            assert await session.aapprove(asked.error.details["approval_id"])
            ran = await session.acall(
                "wipe", {"target": "v"}, approval_id=asked.error.details["approval_id"]
            )
            assert ran.data == "wiped v"

            assert not await session.ais_always_allowed("wipe")
            await session.aalways_allow("wipe")
            assert await session.ais_always_allowed("wipe")
            assert (await session.acall("wipe", {"target": "w"})).data == "wiped w"
            inner = session
        closed = await inner.acall("touch", {"name": "b"})
        assert closed.error.code is ErrorCode.CANCELLED and "closed" in closed.error.message

    asyncio.run(main())


def test_the_same_api_blocking_from_threads(portal):
    with portal.session() as session:
        session.grant("filesystem")
        assert session.call("touch", {"name": "a"}).data == "touched a"
        asked = session.call("wipe", {"target": "t"})
        approval = asked.error.details["approval_id"]
        assert list(session.pending_approvals()) == [approval]
        assert session.resume(approval).data == "wiped t"
        session.cancel()
    assert session.call("touch", {"name": "a"}).error.code is ErrorCode.CANCELLED


def test_asyncio_confirm_runs_on_the_asyncio_loop_and_its_answer_is_used(portal):
    async def main() -> None:
        loop = asyncio.get_running_loop()
        asked: list[tuple[str, bool]] = []

        async def confirm(request):
            # A genuine asyncio callback: it awaits asyncio, on the loop that opened the session.
            await asyncio.sleep(0)
            asked.append((request.call.arguments["target"], asyncio.get_running_loop() is loop))
            return request.call.arguments["target"] == "yes"

        session = portal.session(confirm=confirm)
        approved = await session.acall("wipe", {"target": "yes"})
        assert approved.success and approved.data == "wiped yes"
        refused = await session.acall("wipe", {"target": "no"})
        assert refused.error.code is ErrorCode.PERMISSION_DENIED
        assert asked == [("yes", True), ("no", True)]
        # A blocking call on the very loop the callback needs would deadlock: refused.
        with pytest.raises(RuntimeError, match="deadlock"):
            session.call("wipe", {"target": "yes"})

    asyncio.run(main())


def test_asyncio_confirm_answering_always(portal):
    async def main() -> None:
        count = 0

        async def confirm(request):
            nonlocal count
            count += 1
            return "always"

        session = portal.session(confirm=confirm)
        assert (await session.acall("wipe", {"target": "a"})).success
        assert (await session.acall("wipe", {"target": "b"})).success
        assert count == 1

    asyncio.run(main())


def test_asyncio_confirm_without_a_loop_is_refused_at_session_time(portal):
    async def confirm(request):
        return True

    with pytest.raises(TypeError, match="no asyncio event loop"):
        portal.session(confirm=confirm)


def test_asyncio_confirm_with_an_explicit_loop_serves_threads(portal):
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        seen: list[bool] = []

        async def confirm(request):
            seen.append(asyncio.get_running_loop() is loop)
            return True

        session = portal.session(confirm=confirm, confirm_loop=loop)
        assert session.call("wipe", {"target": "t"}).data == "wiped t"
        assert seen == [True]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_a_plain_confirm_function_runs_in_a_worker_thread(portal):
    threads: list[str] = []

    def confirm(request):
        threads.append(threading.current_thread().name)
        return False

    session = portal.session(confirm=confirm)
    assert session.call("wipe", {"target": "t"}).error.code is ErrorCode.PERMISSION_DENIED
    assert threads and threads[0] not in {"tooldeck-portal", threading.current_thread().name}


def test_cancelling_while_the_user_is_asked_cancels_the_question_too(portal, tmp_path):
    async def main() -> None:
        waiting = asyncio.Event()
        gave_up = asyncio.Event()

        async def confirm(request):
            waiting.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                gave_up.set()
                raise
            return True

        session = portal.session(confirm=confirm)
        task = asyncio.ensure_future(session.acall("wipe", {"target": "t"}))
        await waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(gave_up.wait(), 10)

    asyncio.run(main())


def test_a_closed_portal_says_so():
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[touch])
    portal = DeckPortal(deck)
    session = portal.session()
    portal.close()
    with pytest.raises(PortalClosedError):
        session.call("touch", {"name": "a"})

    async def main() -> None:
        with pytest.raises(PortalClosedError):
            await session.acall("touch", {"name": "a"})

    asyncio.run(main())


def test_a_blocking_call_on_the_decks_own_loop_is_refused(portal):
    async def nested() -> str:
        try:
            portal.run(trio.sleep, 0)
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    assert "own trio loop" in portal.run(nested)
