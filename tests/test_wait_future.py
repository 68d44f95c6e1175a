"""wait_future: a future of another thread's event loop, awaited from trio or asyncio."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import trio

from tooldeck_hookspecs import wait_future


def _resolve_later(future: concurrent.futures.Future[int], value: int) -> None:
    threading.Timer(0.05, future.set_result, args=(value,)).start()


async def test_trio_gets_the_result_and_a_cancelled_wait_cancels_the_future() -> None:
    ready: concurrent.futures.Future[int] = concurrent.futures.Future()
    _resolve_later(ready, 7)
    assert await wait_future(ready) == 7

    pending: concurrent.futures.Future[int] = concurrent.futures.Future()
    with trio.move_on_after(0.05) as scope:
        await wait_future(pending)
    assert scope.cancelled_caught
    assert pending.cancelled()


def test_asyncio_gets_the_result_too() -> None:
    future: concurrent.futures.Future[int] = concurrent.futures.Future()
    _resolve_later(future, 11)
    assert asyncio.run(wait_future(future)) == 11


async def test_trio_a_cancelled_wait_calls_cancel_instead_and_leaves_the_future() -> None:
    pending: concurrent.futures.Future[int] = concurrent.futures.Future()
    calls: list[str] = []
    with trio.move_on_after(0.05) as scope:
        await wait_future(pending, cancel=lambda: calls.append("cancel"))
    assert scope.cancelled_caught
    assert calls == ["cancel"] and not pending.cancelled()
    done: concurrent.futures.Future[int] = concurrent.futures.Future()
    done.set_result(3)
    assert await wait_future(done, cancel=lambda: calls.append("again")) == 3
    assert calls == ["cancel"]


def test_asyncio_a_cancelled_wait_calls_cancel_instead_and_leaves_the_future() -> None:
    pending: concurrent.futures.Future[int] = concurrent.futures.Future()
    calls: list[str] = []

    async def main() -> None:
        try:
            await asyncio.wait_for(
                wait_future(pending, cancel=lambda: calls.append("cancel")), 0.05
            )
        except TimeoutError:
            pass

    asyncio.run(main())
    assert calls == ["cancel"] and not pending.cancelled()
    pending.set_result(1)  # the work's own outcome still lands, and nothing logs it unread
