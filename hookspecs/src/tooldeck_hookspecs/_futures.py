"""Awaiting work that runs on another event loop (Playwright, an MCP client, any asyncio library
driven from a thread of its own) from a tool running on the deck's trio loop."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["wait_future"]

T = TypeVar("T")


async def wait_future(
    future: concurrent.futures.Future[T], *, cancel: Callable[[], object] | None = None
) -> T:
    """Await ``future`` from trio or asyncio; cancelling the wait cancels the future.

    The future is typically what ``asyncio.run_coroutine_threadsafe`` returned for a coroutine
    on a background loop: when the tool call is cancelled or times out, that coroutine is
    cancelled too, so the remote request or the navigation stops where it is.

    ``cancel`` replaces ``future.cancel()`` when the wait is cancelled before the future is
    done, for work whose future does not carry cancellation back to it (a job on another trio
    run, cancelled through its scope): the future itself is then left to report the work's
    own outcome.
    """
    # trio and sniffio come with any deck (trio requires sniffio); imported here so that the
    # contract package itself does not depend on an event loop.
    import sniffio

    if sniffio.current_async_library() == "asyncio":
        import asyncio

        waiting = asyncio.wrap_future(future)
        if cancel is None:
            try:
                return await waiting
            except asyncio.CancelledError:
                future.cancel()
                raise
        try:
            # Shielded: a cancelled wait would otherwise cancel the future itself, which only
            # marks it cancelled and leaves the work running.
            return await asyncio.shield(waiting)
        except asyncio.CancelledError:
            if not future.done():
                cancel()
            # Nobody awaits the outcome any more: retrieve it, so that asyncio does not log
            # "exception was never retrieved" for the cancellation asked for.
            waiting.add_done_callback(_retrieve)
            raise
    import trio

    if not future.done():
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def wake(_future: concurrent.futures.Future[T]) -> None:
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass  # the trio run that waited is gone; nobody to wake

        future.add_done_callback(wake)
        try:
            await done.wait()
        except BaseException:
            if cancel is None:
                future.cancel()
            elif not future.done():
                cancel()
            raise
    return future.result()


def _retrieve(waiting: Any) -> None:
    if not waiting.cancelled():
        waiting.exception()
