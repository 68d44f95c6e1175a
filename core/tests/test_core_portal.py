"""The portal: the trio deck used from plain threads and from asyncio."""

from __future__ import annotations

import asyncio
import threading

import trio

from tooldeck import ErrorCode, tool
from tooldeck.portal import DeckPortal
from tooldeck.testing import make_deck


@tool(category="demo")
async def nap(label: str) -> str:
    """Sleep a moment on the deck's trio loop, then answer."""
    await trio.sleep(0.01)
    return label


def _portal() -> DeckPortal:
    return DeckPortal(make_deck(load_entry_points=["schema", "runner"], tools=[nap]))


def test_sync_calls_from_several_threads():
    with _portal() as portal:
        session = portal.session()
        results = {}

        def worker(i: int) -> None:
            results[i] = session.call("nap", {"label": f"t{i}"}).data

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == {i: f"t{i}" for i in range(8)}
        assert session.call("nope", {}).error.code is ErrorCode.TOOL_NOT_FOUND
    assert not portal._thread.is_alive()


def test_asyncio_callers_await_the_deck_concurrently():
    async def main(portal: DeckPortal) -> list[str]:
        session = portal.session()
        results = await asyncio.gather(
            *(session.acall("nap", {"label": str(i)}) for i in range(20))
        )
        return [r.data for r in results]

    with _portal() as portal:
        assert asyncio.run(main(portal)) == [str(i) for i in range(20)]
