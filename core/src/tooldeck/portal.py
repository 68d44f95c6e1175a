"""Use a deck from synchronous code or from asyncio, without a rewrite.

The deck lives on trio. :class:`DeckPortal` keeps one trio event loop alive in a background thread
(starting ``trio.run`` per call would cost about 0.4 ms each) and hands work to it:

.. code-block:: python

    from tooldeck import Deck
    from tooldeck.portal import DeckPortal

    with DeckPortal(Deck.load()) as portal:
        session = portal.session(workdir=".")
        result = session.call("file_read", {"path": "README.md"})          # blocking
        hand = session.select("read the readme")

    # in asyncio code (LangChain, OpenAI Agents SDK, FastAPI, ...):
        result = await session.acall("file_read", {"path": "README.md"})
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import trio

from tooldeck_hookspecs import ToolCall, ToolResult

from ._deck import Deck, Hand, Session

__all__ = ["DeckPortal", "PortalSession"]

T = TypeVar("T")


class DeckPortal:
    """A deck served by a trio loop in a background thread; thread-safe and asyncio-friendly."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tooldeck-portal", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # surfaced to the constructor if start-up failed
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with self.deck:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

    def submit(
        self, function: Callable[..., Awaitable[T]], *args: Any
    ) -> concurrent.futures.Future[T]:
        """Run ``await function(*args)`` on the deck's loop; return a concurrent future."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        async def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(await function(*args))
            except BaseException as exc:  # delivered to the waiting thread
                future.set_exception(exc)

        assert self._nursery is not None and self._token is not None
        trio.from_thread.run_sync(self._nursery.start_soon, run, trio_token=self._token)
        return future

    def run(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await function(*args)`` on the deck's loop and block until it is done."""
        return self.submit(function, *args).result()

    async def arun(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``function(*args)`` from asyncio code (no thread is blocked while waiting)."""
        return await asyncio.wrap_future(self.submit(function, *args))

    def session(self, **options: Any) -> PortalSession:
        """Open a session (options as :meth:`Deck.session`)."""
        return PortalSession(self, self.deck.session(**options))

    def close(self) -> None:
        """Stop the loop, release the deck's workers and join the thread."""
        if self._stop is not None and self._token is not None and self._thread.is_alive():
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join()

    def __enter__(self) -> DeckPortal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class PortalSession:
    """A :class:`Session` usable from sync code (``call``) and asyncio code (``acall``)."""

    def __init__(self, portal: DeckPortal, session: Session) -> None:
        self.portal = portal
        self.session = session

    @property
    def id(self) -> str:
        """The session id."""
        return self.session.id

    def call(
        self, name: str | ToolCall, arguments: Mapping[str, Any] | None = None, **kw: Any
    ) -> ToolResult:
        """Blocking :meth:`Session.call`."""
        return self.portal.run(lambda: self.session.call(name, arguments, **kw))

    async def acall(
        self, name: str | ToolCall, arguments: Mapping[str, Any] | None = None, **kw: Any
    ) -> ToolResult:
        """:meth:`Session.call` awaited from asyncio."""
        return await self.portal.arun(lambda: self.session.call(name, arguments, **kw))

    def select(self, task: str, **kw: Any) -> Hand:
        """Blocking :meth:`Session.select`."""
        return self.portal.run(lambda: self.session.select(task, **kw))

    async def aselect(self, task: str, **kw: Any) -> Hand:
        """:meth:`Session.select` awaited from asyncio."""
        return await self.portal.arun(lambda: self.session.select(task, **kw))

    def run_tool_calls(self, format: str, response: Any) -> list[dict[str, Any]]:
        """Blocking :meth:`Session.run_tool_calls`."""
        return self.portal.run(lambda: self.session.run_tool_calls(format, response))

    async def arun_tool_calls(self, format: str, response: Any) -> list[dict[str, Any]]:
        """:meth:`Session.run_tool_calls` awaited from asyncio."""
        return await self.portal.arun(lambda: self.session.run_tool_calls(format, response))

    def resume(self, approval_id: str, *, approved: bool = True) -> ToolResult:
        """Blocking :meth:`Session.resume`."""
        return self.portal.run(lambda: self.session.resume(approval_id, approved=approved))
