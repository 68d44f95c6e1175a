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

Every method of :class:`PortalSession` comes twice: the blocking one under the
:class:`~tooldeck.Session` name (``call``, ``resume``, ``approve``, ``cancel``, ``grant``, ...)
and the awaitable one with an ``a`` in front (``acall``, ``aresume``, ``aapprove``, ``acancel``,
``agrant``, ..., ``aclose``). Both run on the deck's loop, never on the caller's thread: a session
is only ever touched by trio.

asyncio cancellation reaches the deck: cancelling a task that awaits ``acall`` (``task.cancel()``,
``asyncio.wait_for`` running out, a TaskGroup failing) cancels the deck call itself, so the tool
stops at its next checkpoint (a sandboxed tool has its process killed) and nothing of it runs
afterwards.

A ``confirm=`` callback given to :meth:`DeckPortal.session` is called on the caller's side: an
``async def`` callback runs on the asyncio loop the session was opened in (open the session inside
that loop, or pass ``confirm_loop=``), a plain function runs in a worker thread (it may block,
e.g. on ``input()``). Its answer (True, ``"always"``, False) is the answer the deck uses.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import trio

from tooldeck_hookspecs import SessionInfo, ToolCall, ToolResult, wait_future

from ._deck import ConfirmRequest, Deck, Hand, Session

__all__ = ["DeckPortal", "PortalSession", "PortalClosedError"]

T = TypeVar("T")

#: What a caller-side confirm callback answers (as :data:`tooldeck.ConfirmCallback`).
ConfirmAnswer = bool | Literal["always"]


class PortalClosedError(RuntimeError):
    """The portal's loop has stopped (the portal was closed): nothing more can run on it."""


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

    # ------------------------------------------------------------------ running work

    def _start(
        self, function: Callable[..., Awaitable[T]], *args: Any
    ) -> tuple[concurrent.futures.Future[T], trio.CancelScope]:
        """Schedule ``await function(*args)`` under its own cancel scope, without blocking."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        scope = trio.CancelScope()
        nursery, token = self._nursery, self._token
        if nursery is None or token is None or not self._thread.is_alive():
            raise PortalClosedError("the deck portal is closed")

        async def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                with scope:
                    future.set_result(await function(*args))
            except BaseException as exc:
                # Cancelled by the portal closing: the waiting caller gets an answer, and trio
                # gets its Cancelled back.
                if not future.done():
                    future.set_exception(
                        PortalClosedError("the deck portal closed while the call ran")
                        if isinstance(exc, trio.Cancelled)
                        else exc
                    )
                if isinstance(exc, trio.Cancelled | KeyboardInterrupt | SystemExit):
                    raise
                return
            if not future.done():  # our scope was cancelled: the caller gave up waiting
                future.set_exception(concurrent.futures.CancelledError())

        def spawn() -> None:
            # Runs on the trio thread, outside any task: it must not raise.
            try:
                nursery.start_soon(run)
            except RuntimeError:  # the nursery closed in between (the portal is closing)
                if future.set_running_or_notify_cancel():
                    future.set_exception(PortalClosedError("the deck portal is closed"))

        try:
            # run_sync_soon does not wait for the trio thread: an asyncio caller's loop is
            # never blocked, not even briefly.
            token.run_sync_soon(spawn)
        except trio.RunFinishedError:
            raise PortalClosedError("the deck portal is closed") from None
        return future, scope

    def _cancel_soon(self, scope: trio.CancelScope) -> None:
        """Cancel a job's scope from any thread (a no-op once the loop has finished)."""
        if self._token is None:
            return
        try:
            self._token.run_sync_soon(scope.cancel)
        except trio.RunFinishedError:
            pass

    def submit(
        self, function: Callable[..., Awaitable[T]], *args: Any
    ) -> concurrent.futures.Future[T]:
        """Run ``await function(*args)`` on the deck's loop; return a concurrent future.

        ``future.cancel()`` only stops work that has not started; use :meth:`run` or
        :meth:`arun` to have an interrupted wait cancel the work itself.
        """
        return self._start(function, *args)[0]

    def run(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await function(*args)`` on the deck's loop and block until it is done.

        An interrupted wait (``KeyboardInterrupt``) cancels the work on the deck's loop.

        :raises RuntimeError: called on the deck's own loop (it would wait for itself forever).
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                "DeckPortal.run() called on the deck's own trio loop: await the function there"
            )
        future, scope = self._start(function, *args)
        try:
            return future.result()
        except BaseException:
            if not future.done():
                self._cancel_soon(scope)
            raise

    async def arun(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``function(*args)`` from asyncio code, or from another trio run than the
        deck's (no thread is blocked while waiting).

        Cancelling the awaiting task cancels the work on the deck's loop (a trio cancellation
        of its scope), then re-raises the cancellation in the task.
        """
        future, scope = self._start(function, *args)
        # The concurrent future does not carry a cancellation back to the trio side: the
        # job's scope is cancelled instead.
        return await wait_future(future, cancel=lambda: self._cancel_soon(scope))

    # ------------------------------------------------------------------ sessions

    def session(
        self,
        *,
        confirm: Callable[[ConfirmRequest], Any] | None = None,
        confirm_loop: asyncio.AbstractEventLoop | None = None,
        **options: Any,
    ) -> PortalSession:
        """Open a session (options as :meth:`Deck.session`).

        :param confirm: asks the user whether a call may run: an ``async def`` callback runs on
            an asyncio loop (``confirm_loop``, else the loop running where ``session()`` is
            called), a plain function in a worker thread. It answers True, ``"always"`` or
            False; raising or the ``[approvals] confirm_timeout_s`` running out denies.
        :param confirm_loop: the asyncio loop that runs an ``async def`` ``confirm``.
        :raises TypeError: ``confirm`` is an ``async def`` callback and there is no asyncio loop
            to run it on (no ``confirm_loop``, and ``session()`` was called outside a loop).
        """
        bridged = None
        if confirm is not None:
            bridged = self._bridge_confirm(confirm, confirm_loop)
        session = self.deck.session(confirm=bridged, **options)
        return PortalSession(self, session, confirm_loop=getattr(bridged, "loop", None))

    def _bridge_confirm(
        self,
        confirm: Callable[[ConfirmRequest], Any],
        loop: asyncio.AbstractEventLoop | None,
    ) -> _CallerConfirm:
        if _is_async_callable(confirm):
            if loop is None:
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:
                    raise TypeError(
                        f"confirm={_name(confirm)} is an async callback but no asyncio event "
                        "loop is running here to run it: open the session inside that loop "
                        "(in async code), pass confirm_loop=<the loop>, or pass a plain "
                        "function (it then runs in a worker thread)"
                    ) from None
            return _CallerConfirm(confirm, loop)
        if not callable(confirm):
            raise TypeError(f"confirm must be callable, not {type(confirm).__name__}")
        return _CallerConfirm(confirm, None)

    def close(self) -> None:
        """Stop the loop, release the deck's workers and join the thread."""
        if self._stop is not None and self._token is not None and self._thread.is_alive():
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join()

    async def aclose(self) -> None:
        """:meth:`close` awaited from asyncio (the join happens in a worker thread)."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> DeckPortal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> DeckPortal:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _is_async_callable(function: object) -> bool:
    while isinstance(function, functools.partial):
        function = function.func
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


def _name(function: object) -> str:
    return str(getattr(function, "__qualname__", None) or getattr(function, "__name__", function))


class _CallerConfirm:
    """A caller-side confirm callback, as the trio-side ``confirm`` the deck awaits.

    The deck's own deadline and ``Session.cancel`` end the wait with a trio cancellation; the
    caller's coroutine (or the wait for its thread) is then cancelled too.
    """

    def __init__(
        self, function: Callable[[ConfirmRequest], Any], loop: asyncio.AbstractEventLoop | None
    ) -> None:
        self.function = function
        self.loop = loop

    async def __call__(self, request: ConfirmRequest) -> ConfirmAnswer:
        if self.loop is None:
            answer = await trio.to_thread.run_sync(self.function, request, abandon_on_cancel=True)
            if inspect.isawaitable(answer):
                # A plain function that returned a coroutine: there is no loop to run it on.
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                raise TypeError(
                    f"confirm={_name(self.function)} returned an awaitable; open the session "
                    "inside the asyncio loop that should run it"
                )
            return answer  # type: ignore[no-any-return]
        if self.loop.is_closed():
            raise RuntimeError(
                f"the asyncio loop of confirm={_name(self.function)} is closed; the call is denied"
            )
        future = asyncio.run_coroutine_threadsafe(self._ask(request), self.loop)
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def wake(_: object) -> None:
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        future.add_done_callback(wake)
        try:
            await done.wait()
        except BaseException:
            future.cancel()  # cancels the asyncio task running the callback
            raise
        return future.result()

    async def _ask(self, request: ConfirmRequest) -> ConfirmAnswer:
        answer = self.function(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer  # type: ignore[no-any-return]


class PortalSession:
    """A :class:`Session` usable from sync code (``call``) and asyncio code (``acall``).

    Blocking methods carry the :class:`Session` names; awaitables the same names with an ``a``
    in front. Use it as ``async with`` (or ``with``) to close the session at the end.
    """

    def __init__(
        self,
        portal: DeckPortal,
        session: Session,
        *,
        confirm_loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.portal = portal
        self.session = session
        self._confirm_loop = confirm_loop

    def fork(self, session_id: str) -> PortalSession:
        """:meth:`Session.fork <tooldeck.Session.fork>`: a session with this one's settings
        and a state of its own (hand, approvals), usable like this one."""
        return PortalSession(
            self.portal, self.session.fork(session_id), confirm_loop=self._confirm_loop
        )

    # ------------------------------------------------------------------ state (read-only)

    @property
    def id(self) -> str:
        """The session id."""
        return self.session.id

    @property
    def workdir(self) -> str:
        """The session's working directory."""
        return self.session.workdir

    @property
    def hand(self) -> Hand | None:
        """The last hand dealt by :meth:`select` / :meth:`aselect`."""
        return self.session.hand

    def _sync(self, function: Callable[[], Awaitable[T]]) -> T:
        loop = self._confirm_loop
        if loop is not None and _running_loop() is loop:
            # The callback needs this very loop, which a blocking wait would hold: a deadlock
            # until the confirm timeout. Refused instead.
            raise RuntimeError(
                "this session's confirm callback runs on the asyncio loop of this thread; "
                "a blocking call here would deadlock: use the awaitable method (acall, "
                "aresume, ...)"
            )
        return self.portal.run(function)

    # ------------------------------------------------------------------ calls

    def call(
        self, name: str | ToolCall, arguments: Mapping[str, Any] | None = None, **kw: Any
    ) -> ToolResult:
        """Blocking :meth:`Session.call`."""
        return self._sync(lambda: self.session.call(name, arguments, **kw))

    async def acall(
        self, name: str | ToolCall, arguments: Mapping[str, Any] | None = None, **kw: Any
    ) -> ToolResult:
        """:meth:`Session.call` awaited from asyncio; cancelling the await cancels the call."""
        return await self.portal.arun(lambda: self.session.call(name, arguments, **kw))

    def call_many(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Blocking :meth:`Session.call_many`."""
        return self._sync(lambda: self.session.call_many(calls))

    async def acall_many(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """:meth:`Session.call_many` awaited from asyncio."""
        return await self.portal.arun(lambda: self.session.call_many(calls))

    def select(self, task: str, **kw: Any) -> Hand:
        """Blocking :meth:`Session.select`."""
        return self._sync(lambda: self.session.select(task, **kw))

    async def aselect(self, task: str, **kw: Any) -> Hand:
        """:meth:`Session.select` awaited from asyncio."""
        return await self.portal.arun(lambda: self.session.select(task, **kw))

    def run_tool_calls(self, format: str, response: Any) -> list[dict[str, Any]]:
        """Blocking :meth:`Session.run_tool_calls`."""
        return self._sync(lambda: self.session.run_tool_calls(format, response))

    async def arun_tool_calls(self, format: str, response: Any) -> list[dict[str, Any]]:
        """:meth:`Session.run_tool_calls` awaited from asyncio."""
        return await self.portal.arun(lambda: self.session.run_tool_calls(format, response))

    # ------------------------------------------------------------------ approvals

    def resume(self, approval_id: str, *, approved: bool = True) -> ToolResult:
        """Blocking :meth:`Session.resume`."""
        return self._sync(lambda: self.session.resume(approval_id, approved=approved))

    async def aresume(self, approval_id: str, *, approved: bool = True) -> ToolResult:
        """:meth:`Session.resume` awaited from asyncio."""
        return await self.portal.arun(lambda: self.session.resume(approval_id, approved=approved))

    def approve(self, approval_id: str) -> bool:
        """Blocking :meth:`Session.approve`."""
        return self._sync(lambda: self.session.approve(approval_id))

    async def aapprove(self, approval_id: str) -> bool:
        """:meth:`Session.approve` awaited from asyncio."""
        return await self.portal.arun(lambda: self.session.approve(approval_id))

    def deny(self, approval_id: str) -> bool:
        """Blocking :meth:`Session.deny`."""
        return self._sync(lambda: self.session.deny(approval_id))

    async def adeny(self, approval_id: str) -> bool:
        """:meth:`Session.deny` awaited from asyncio."""
        return await self.portal.arun(lambda: self.session.deny(approval_id))

    def pending_approvals(self) -> dict[str, ToolCall]:
        """Blocking :meth:`Session.pending_approvals`."""
        return self.portal.run(_on_loop(self.session.pending_approvals))

    async def apending_approvals(self) -> dict[str, ToolCall]:
        """:meth:`Session.pending_approvals` awaited from asyncio."""
        return await self.portal.arun(_on_loop(self.session.pending_approvals))

    # ------------------------------------------------------------------ grants and state

    def grant(self, *categories: str) -> None:
        """Blocking :meth:`Session.grant`."""
        self.portal.run(_on_loop(self.session.grant, *categories))

    async def agrant(self, *categories: str) -> None:
        """:meth:`Session.grant` awaited from asyncio."""
        await self.portal.arun(_on_loop(self.session.grant, *categories))

    def revoke(self, *categories: str) -> None:
        """Blocking :meth:`Session.revoke`."""
        self.portal.run(_on_loop(self.session.revoke, *categories))

    async def arevoke(self, *categories: str) -> None:
        """:meth:`Session.revoke` awaited from asyncio."""
        await self.portal.arun(_on_loop(self.session.revoke, *categories))

    def always_allow(self, tool_name: str) -> None:
        """Blocking :meth:`Session.always_allow`."""
        self.portal.run(_on_loop(self.session.always_allow, tool_name))

    async def aalways_allow(self, tool_name: str) -> None:
        """:meth:`Session.always_allow` awaited from asyncio."""
        await self.portal.arun(_on_loop(self.session.always_allow, tool_name))

    def is_always_allowed(self, tool_name: str) -> bool:
        """Blocking :meth:`Session.is_always_allowed`."""
        return self.portal.run(_on_loop(self.session.is_always_allowed, tool_name))

    async def ais_always_allowed(self, tool_name: str) -> bool:
        """:meth:`Session.is_always_allowed` awaited from asyncio."""
        return await self.portal.arun(_on_loop(self.session.is_always_allowed, tool_name))

    def info(self) -> SessionInfo:
        """Blocking :meth:`Session.info`."""
        return self.portal.run(_on_loop(self.session.info))

    async def ainfo(self) -> SessionInfo:
        """:meth:`Session.info` awaited from asyncio."""
        return await self.portal.arun(_on_loop(self.session.info))

    # ------------------------------------------------------------------ ending

    def cancel(self) -> None:
        """Blocking :meth:`Session.cancel`: every queued and running call returns CANCELLED."""
        self.portal.run(_on_loop(self.session.cancel))

    async def acancel(self) -> None:
        """:meth:`Session.cancel` awaited from asyncio."""
        await self.portal.arun(_on_loop(self.session.cancel))

    def close(self) -> None:
        """Blocking :meth:`Session.aclose`: cancel the calls, tell observers, refuse new calls."""
        self.portal.run(self.session.aclose)

    async def aclose(self) -> None:
        """:meth:`Session.aclose` awaited from asyncio."""
        await self.portal.arun(self.session.aclose)

    def __enter__(self) -> PortalSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> PortalSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _on_loop(function: Callable[..., T], *args: Any) -> Callable[[], Awaitable[T]]:
    """A sync session method as an async function, so that it runs on the deck's loop."""

    async def run() -> T:
        return function(*args)

    return run


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
