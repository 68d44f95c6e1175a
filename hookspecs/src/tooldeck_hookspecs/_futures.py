"""Awaiting work that runs on another event loop (Playwright, an MCP client, any asyncio library
driven from a thread of its own) from a tool running on the deck's trio loop."""

from __future__ import annotations

import concurrent.futures
from typing import TypeVar

__all__ = ["wait_future"]

T = TypeVar("T")


async def wait_future(future: concurrent.futures.Future[T]) -> T:
    """Await ``future`` from trio or asyncio; cancelling the wait cancels the future.

    The future is typically what ``asyncio.run_coroutine_threadsafe`` returned for a coroutine
    on a background loop: when the tool call is cancelled or times out, that coroutine is
    cancelled too, so the remote request or the navigation stops where it is.
    """
    # trio and sniffio come with any deck (trio requires sniffio); imported here so that the
    # contract package itself does not depend on an event loop.
    import sniffio

    if sniffio.current_async_library() == "asyncio":
        import asyncio

        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
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
            future.cancel()
            raise
    return future.result()
