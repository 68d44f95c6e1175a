"""One headless Chromium per process, driven by Playwright on its own asyncio thread.

Playwright's async API runs on asyncio; tooldeck runs on trio. The engine owns a daemon thread
with an asyncio loop; trio code submits coroutines with :meth:`BrowserEngine.run`, which waits
for the result without blocking the trio loop (a done-callback wakes it) and cancels the
coroutine if the trio side is cancelled (a timeout or a cancelled session).

Each tooldeck session gets its own browser context (cookies and storage are not shared between
sessions) whose traffic goes through a guarding proxy (:mod:`._proxy`); pages are keyed by
``(session_id, page_id)``, so one session never sees another's pages. A session keeps at most
``max_pages_per_session`` pages open (the oldest is closed to make room), and the engine at most
``max_sessions`` contexts (the least recently used one is closed); a session whose pages were
not used for ``idle_close_s`` seconds has its context closed (tooldeck has no "session ended"
hook, so idleness is the signal).
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import functools
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from tooldeck_hookspecs import ErrorCode, ToolFailure, wait_future

from ._guard import allow_list_for
from ._sandbox import DEFAULT_MEMORY_MB, DEFAULT_UID, BrowserSandbox, prepare_sandbox

if TYPE_CHECKING:
    # asyncio (~10 ms) and the proxy load with the engine's loop, at the first page: a deck
    # that registers the browser tools and never opens a page does not pay for them.
    import asyncio

    from ._proxy import GuardProxy, ProxyDoor

__all__ = [
    "DEFAULT_EXECUTABLES",
    "ENV_EXECUTABLE",
    "LAUNCH_ARGS",
    "BrowserEngine",
    "PageEntry",
    "configure",
    "engine",
    "find_executable",
    "shutdown",
]

T = TypeVar("T")

log = logging.getLogger("tooldeck.browser")

#: How long the browser process has to answer a trivial command (``Browser.getVersion``) when
#: a call timed out or a page would not close, before it is taken for frozen and stopped. It
#: answers from its own thread whatever its pages do (a page's script holding its renderer
#: does not delay it): measured in milliseconds on a loaded machine.
BROWSER_PROBE_TIMEOUT_S = 2.0
#: The longest the browser may take to open a context or a page (less when the call has less).
BROWSER_STEP_TIMEOUT_S = 10.0

#: Environment variable naming the Chromium (or Chrome) executable.
ENV_EXECUTABLE = "TOOLDECK_CHROMIUM"
#: Tried in order when neither :func:`configure` nor ``TOOLDECK_CHROMIUM`` names one.
DEFAULT_EXECUTABLES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
#: Headless flags. The background-networking, component-update and sync switches stop Chromium
#: from calling Google on its own; QUIC is off because UDP would not go through the proxy, and
#: WebRTC may not use non-proxied UDP for the same reason (STUN/TURN over UDP goes straight to any
#: address a page names). Chromium ignores a switch it does not know without a word: the name
#: is ``--webrtc-ip-handling-policy`` (a ``--force-`` prefix made it a no-op), and a test sends
#: STUN at a UDP canary to prove it holds.
LAUNCH_ARGS = (
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--metrics-recording-only",
    "--no-default-browser-check",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--proxy-bypass-list=<-loopback>",
)

_configured_executable: str | None = None


def configure(*, executable_path: str | None = None) -> None:
    """Set the Chromium executable programmatically (the environment variable still wins)."""
    global _configured_executable
    _configured_executable = executable_path


def find_executable() -> str:
    """The Chromium to launch: ``TOOLDECK_CHROMIUM``, :func:`configure`, then the defaults.

    Raises ``ToolFailure(EXECUTION_ERROR)`` naming the fix when none is installed.
    """
    for candidate in (os.environ.get(ENV_EXECUTABLE), _configured_executable):
        if candidate:
            found = candidate if os.path.isfile(candidate) else shutil.which(candidate)
            if found and os.access(found, os.X_OK):
                return found
            raise ToolFailure(
                ErrorCode.EXECUTION_ERROR,
                f"the configured Chromium executable {candidate!r} does not exist or is not "
                "executable",
                suggestion="Tell the user to fix TOOLDECK_CHROMIUM, or to install Chromium "
                "with `apt-get install chromium`.",
            )
    for path in DEFAULT_EXECUTABLES:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ToolFailure(
        ErrorCode.EXECUTION_ERROR,
        "no Chromium browser is installed (looked for " + ", ".join(DEFAULT_EXECUTABLES) + ")",
        suggestion="The browser tools cannot work here; tell the user to install Chromium "
        "(`apt-get install chromium`) or set TOOLDECK_CHROMIUM to its path. Use another tool.",
    )


@attrs.define(eq=False)
class PageEntry:
    """An open page of a session."""

    page_id: str
    page: Any  # playwright.async_api.Page
    #: Its renderer died (out of memory, a hostile page): every call on it would fail.
    crashed: bool = False
    #: Downloads the page started since the last call reported them (the context refuses them
    #: all; without a word the model took a click on "Download" for a saved file).
    refused_downloads: list[dict[str, str]] = attrs.Factory(list)
    #: Refused downloads beyond :data:`MAX_REPORTED_DOWNLOADS`, only counted.
    more_downloads: int = 0

    def note_download(self, url: str, filename: str) -> None:
        """Remember a refused download (bounded: a page may start thousands)."""
        if len(self.refused_downloads) >= MAX_REPORTED_DOWNLOADS:
            self.more_downloads += 1
            return
        self.refused_downloads.append({"url": _printable(url, 300),
                                       "filename": _printable(filename, 120)})

    def take_downloads(self) -> dict[str, Any]:
        """The refused downloads to report in a result (and forget), or ``{}``."""
        if not self.refused_downloads and not self.more_downloads:
            return {}
        found, more = self.refused_downloads, self.more_downloads
        self.refused_downloads, self.more_downloads = [], 0
        out: dict[str, Any] = {
            "refused_downloads": found,
            "note_downloads": "The page started a download; the browser does not download "
            "files, so nothing was saved" + (f" ({more} more not listed)" if more else "")
            + ". Use another tool to fetch a file, if the user wants it.",
        }
        return out


#: Refused downloads listed per result; more are counted.
MAX_REPORTED_DOWNLOADS = 8


def _printable(text: str, limit: int) -> str:
    """``text`` without control or bidi characters, cut at ``limit`` characters (with ``…``):
    names and URLs a page picks, shown to the model."""
    kept = "".join(c for c in text[: limit * 4] if c.isprintable() and c not in _BIDI)
    return kept if len(kept) <= limit else kept[: limit - 1] + "…"


_BIDI = frozenset("؜‎‏‪‫‬‭‮⁦⁧⁨⁩")


@attrs.define(eq=False)
class _SessionState:
    context: Any  # playwright.async_api.BrowserContext
    proxy: GuardProxy
    #: The context's own port of the proxy: what it refused is this session's alone.
    door: ProxyDoor
    pages: collections.OrderedDict[str, PageEntry] = attrs.field(
        factory=collections.OrderedDict
    )
    last_used: float = attrs.field(factory=time.monotonic)
    #: The checks of pages the site opened, kept referenced while they run.
    reaping: set[Any] = attrs.field(factory=set)
    #: How many of the session's own pages :meth:`BrowserEngine.new_page` is opening right now.
    opening: int = 0
    #: A page of the context that Chromium would not close: the context is retired.
    stuck: bool = False


def _close_if_stray(state: _SessionState, page: Any) -> None:
    """Close ``page`` unless it is one of the session's own (opened by :meth:`new_page`)."""
    import asyncio

    if not state.opening:
        # No page of the model's is being opened: this one is the site's. Closed at once: a
        # pop-up given a moment to live opened pop-ups of its own in that moment, and a chain of
        # them ran on after browser_close closed the page that started it.
        task = asyncio.ensure_future(_shut_page(page, state))
        state.reaping.add(task)
        task.add_done_callback(state.reaping.discard)
        return

    async def check() -> None:
        # new_page registers its page as soon as Playwright returns it, which may be just
        # after this event: give it that moment.
        for _ in range(20):
            if any(entry.page is page for entry in state.pages.values()):
                return
            await asyncio.sleep(0.01)
        await _shut_page(page, state)

    task = asyncio.ensure_future(check())
    state.reaping.add(task)
    task.add_done_callback(state.reaping.discard)


class BrowserEngine:
    """The shared browser (see the module docstring). Use the process-wide :func:`engine`."""

    def __init__(
        self, *, max_pages_per_session: int = 5, max_sessions: int = 32,
        idle_close_s: float = 900.0,
        prepare: Callable[..., BrowserSandbox] = prepare_sandbox,
    ) -> None:
        """:param prepare: sets up the boundary of a launch, called as ``prepare(chromium, mode,
        uid=uid, memory_mb=memory_mb)`` in a worker thread (:func:`._sandbox.prepare_sandbox`;
        a partial of it with other ``bwrap``/``setpriv`` binaries, for instance)."""
        self.max_pages_per_session = max_pages_per_session
        self._prepare = prepare
        self.max_sessions = max_sessions
        self.idle_close_s = idle_close_s
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_lock = threading.Lock()
        # Touched only on the engine's loop:
        self._playwright: Any = None
        self._browser: Any = None
        self._launch_lock: asyncio.Lock | None = None
        self._sessions: collections.OrderedDict[str, _SessionState] = collections.OrderedDict()
        self._proxies: dict[tuple[str, ...], GuardProxy] = {}
        # Allow-lists a context is being created for right now: their proxy is in use even
        # though no session holds it yet.
        self._opening: collections.Counter[tuple[str, ...]] = collections.Counter()
        self.launches = 0
        #: Browsers stopped because they no longer answered (see :meth:`restart_if_frozen`).
        self.restarts = 0
        self._checks: set[asyncio.Future[bool]] = set()
        #: The boundary of the running browser (see :mod:`._sandbox`); None before a launch.
        self.sandbox: BrowserSandbox | None = None
        self._wanted: tuple[str, int, int] = ("auto", DEFAULT_UID, DEFAULT_MEMORY_MB)
        # OOM kills in the browser's cgroup already told (a later crash after more is the cap's).
        self._oom_seen = 0
        self._launched_for: tuple[str, int, int] | None = None

    # -- the bridge between trio and the engine's asyncio loop ---------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        import asyncio

        with self._start_lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=main, name="tooldeck-browser", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def submit(self, coroutine: Awaitable[T]) -> concurrent.futures.Future[T]:
        """Schedule ``coroutine`` on the engine's loop (thread-safe); returns its future."""
        import asyncio

        return asyncio.run_coroutine_threadsafe(coroutine, self._ensure_loop())  # type: ignore[arg-type]

    async def run(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``function(*args)`` on the engine's loop and await its result from trio.

        Cancelling the trio side cancels the asyncio task (a navigation stops where it is).
        """
        return await wait_future(self.submit(function(*args)))

    # -- on the engine's loop ------------------------------------------------------------------

    def want_sandbox(
        self, mode: str, uid: int = DEFAULT_UID, memory_mb: int = DEFAULT_MEMORY_MB
    ) -> None:
        """Ask for a sandbox mode (``auto``, ``bwrap``, ``user``, ``none``), uid and memory cap
        in MiB (thread-safe); a browser launched otherwise is replaced (with every session's
        context) at the next page a session opens. One browser serves the process, so decks of
        one process that ask for different settings make it relaunch: give them the same."""
        self._wanted = (mode, uid, memory_mb)

    def _launching(self) -> asyncio.Lock:
        """The lock of launching and replacing the browser (made on the engine's loop, which
        a lock belongs to; a new loop after shutdown() makes its own)."""
        import asyncio

        if self._launch_lock is None:
            self._launch_lock = asyncio.Lock()
        return self._launch_lock

    async def _get_browser(self) -> Any:
        import asyncio

        async with self._launching():
            wanted = self._wanted
            if self._browser is not None and self._browser.is_connected():
                if self._launched_for == wanted:
                    return self._browser
                await self._close_browser()  # another sandbox mode was asked for
            executable = find_executable()
            from playwright.async_api import async_playwright  # heavy: only when a page opens

            if self._playwright is None:
                self._playwright = await async_playwright().start()
            old, self.sandbox = self.sandbox, None
            if old is not None:  # the previous browser (crashed or replaced) is gone
                old.cleanup()
            loop = asyncio.get_running_loop()
            # The probe runs processes: off the loop, so other sessions' pages keep going.
            sandbox = await loop.run_in_executor(
                None, functools.partial(self._prepare, executable, wanted[0], uid=wanted[1],
                                        memory_mb=wanted[2])
            )
            try:
                self._browser = await self._playwright.chromium.launch(
                    executable_path=sandbox.executable, headless=True, args=list(LAUNCH_ARGS),
                    # False makes Playwright add --no-sandbox: only for the explicit opt-out.
                    chromium_sandbox=sandbox.chromium_sandbox,
                    # Playwright turns Chromium's pop-up blocker off: a page's script could
                    # then open pop-ups without end (each one a renderer), pop-ups opening
                    # pop-ups. With it on, only a click may open one (and it is closed).
                    ignore_default_args=["--disable-popup-blocking"],
                )
            except Exception as exc:
                sandbox.cleanup()
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                sandboxed = sandbox.mode != "none"
                raise ToolFailure(
                    ErrorCode.EXECUTION_ERROR,
                    f"Chromium ({executable}) failed to start"
                    + (f" inside its sandbox ({sandbox.mode})" if sandboxed else "")
                    + f": {first}",
                    suggestion="The browser cannot start on this machine; tell the user (check "
                    "the Chromium install, `apt-get install chromium`"
                    + (", or the sandbox: unprivileged user namespaces, bubblewrap; "
                       '[tool.tooldeck.browser] sandbox = "none" opts out' if sandboxed else "")
                    + ") and use another tool.",
                    details={"sandbox": sandbox.mode, "reason": first[:300]},
                ) from None
            self.sandbox = sandbox
            self._oom_seen = sandbox.oom_kills()
            self._launched_for = wanted
            self.launches += 1
            self._sessions.clear()  # contexts of a crashed browser are gone with it
            return self._browser

    async def _close_browser(self) -> None:
        if self._browser is not None and not await self._answers():
            # A frozen browser answers no close: each context would take its 10 s, and the
            # browser's own close none at all (a relaunch for another sandbox, a deck's end).
            await self._kill_browser("did not answer as it was being closed")
            return
        for session_id in list(self._sessions):
            await self._close_session(session_id)
        if self._browser is not None:
            try:
                await _within(self._browser.close(), CONTEXT_CLOSE_TIMEOUT_S)
            except TimeoutError:
                await self._kill_browser("did not close within "
                                         f"{CONTEXT_CLOSE_TIMEOUT_S:g} s")
                return
            except Exception:  # closed or crashed already
                pass
            self._browser = None
        if self.sandbox is not None:
            self.sandbox.cleanup()
            self.sandbox = None

    def sandbox_metadata(self) -> dict[str, Any] | None:
        """How the running browser is confined (``metadata["browser_sandbox"]`` of results)."""
        sandbox = self.sandbox
        return sandbox.metadata() if sandbox is not None else None

    async def _proxy_for(self, allow: tuple[str, ...]) -> GuardProxy:
        proxy = self._proxies.get(allow)
        if proxy is None:
            from ._proxy import GuardProxy

            proxy = GuardProxy(allow)
            await proxy.start()
            self._proxies[allow] = proxy
        return proxy

    async def session_state(
        self, session_id: str, timeout_s: float = BROWSER_STEP_TIMEOUT_S
    ) -> _SessionState:
        """The session's context, created (with its proxy) on first use; ``timeout_s`` bounds
        the browser's answer (``ToolFailure`` TIMEOUT past it)."""
        now = time.monotonic()
        for other_id, other in list(self._sessions.items()):
            if other_id != session_id and now - other.last_used > self.idle_close_s:
                await self._close_session(other_id)
        if self._browser is not None and self._launched_for != self._wanted:
            await self._get_browser()  # replaces the browser, and with it every context
        allow = allow_list_for(session_id)
        state = self._sessions.get(session_id)
        if state is not None and state.proxy.allow != allow:
            # The allow-list changed: the context's proxy is fixed at creation, start afresh.
            await self._close_session(session_id)
            state = None
        if state is not None and state.context.browser is not None and (
            state.context.browser.is_connected()
        ):
            self._sessions.move_to_end(session_id)
            state.last_used = now
            return state
        browser = await self._get_browser()
        self._opening[allow] += 1
        door = None
        try:
            proxy = await self._proxy_for(allow)
            door = await proxy.open_door()
            context = await _browser_step(browser.new_context(
                proxy={"server": f"http://127.0.0.1:{door.port}", "bypass": "<-loopback>"},
                service_workers="block",  # their requests would escape the page's view
                accept_downloads=False,
                java_script_enabled=True,
                viewport={"width": 1280, "height": 900},
            ), "open a browsing context", timeout_s)
        except BaseException:
            if door is not None:
                door.proxy.close_door(door)
            raise
        finally:
            self._opening[allow] -= 1
            if not self._opening[allow]:
                del self._opening[allow]
        try:
            await _within(context.add_init_script(HISTORY_LIMIT_JS), CONTEXT_CLOSE_TIMEOUT_S)
        except BaseException:
            await _quietly(_within(context.close(), CONTEXT_CLOSE_TIMEOUT_S))
            door.proxy.close_door(door)
            raise
        state = _SessionState(context=context, proxy=proxy, door=door)
        # Pages the site opens (window.open, a target=_blank link) are not the model's: they
        # got no id, escaped the page limit, kept running their scripts through the proxy and
        # outlived browser_close (30 pop-ups from one page). Each is closed as it opens.
        context.on("page", lambda page: _close_if_stray(state, page))
        self._sessions[session_id] = state
        while len(self._sessions) > self.max_sessions:
            oldest = next(iter(self._sessions))
            await self._close_session(oldest)
        return state

    async def new_page(
        self, session_id: str, timeout_s: float = BROWSER_STEP_TIMEOUT_S
    ) -> tuple[PageEntry, list[str]]:
        """Open a page for the session; returns it and the ids of pages closed to make room.
        ``timeout_s`` bounds each of the browser's answers (``ToolFailure`` TIMEOUT past it)."""
        state = await self.session_state(session_id, timeout_s)
        closed: list[str] = []
        while len(state.pages) >= self.max_pages_per_session:
            old_id, old = state.pages.popitem(last=False)
            closed.append(old_id)
            await _shut_page(old.page, state)
        if state.stuck:  # Chromium kept one open: the context goes, with the other pages
            closed += list(state.pages)
            await self._close_session(session_id)
            state = await self.session_state(session_id, timeout_s)
        state.opening += 1
        try:
            page = await _browser_step(state.context.new_page(), "open a page", timeout_s)
        finally:
            state.opening -= 1
        entry = PageEntry(page_id="pg_" + secrets.token_hex(4), page=page)
        page.on("crash", lambda _page: setattr(entry, "crashed", True))
        # The context refuses downloads (accept_downloads=False); Playwright still tells.
        page.on("download", lambda download: entry.note_download(
            str(download.url), str(download.suggested_filename)))
        state.pages[entry.page_id] = entry
        return entry, closed

    def get_page(self, session_id: str, page_id: str) -> PageEntry:
        """The session's page ``page_id``; ``ToolFailure`` when it is unknown or closed."""
        state = self._sessions.get(session_id)
        entry = state.pages.get(page_id) if state is not None else None
        if entry is not None and entry.crashed:
            # A crashed page answered "Target crashed" to every call, kept its place among the
            # session's five and was never closed: closed now, and said so.
            import asyncio

            assert state is not None
            state.pages.pop(page_id, None)
            task = asyncio.ensure_future(_shut_page(entry.page, state))
            state.reaping.add(task)
            task.add_done_callback(state.reaping.discard)
            raise crashed_failure(page_id, self._memory_limit_hit())
        if entry is None or entry.page.is_closed():
            if state is not None and entry is not None:
                state.pages.pop(page_id, None)
            known = sorted(state.pages) if state is not None else []
            raise ToolFailure(
                ErrorCode.EXECUTION_ERROR,
                f"no open page {page_id!r} in this session"
                + (f"; open pages: {', '.join(known)}" if known else "; no page is open"),
                suggestion="Open the page with browser_navigate (without page_id) and use the "
                "page_id it returns.",
                details={"open_pages": known},
            )
        assert state is not None  # an entry was found, so its session exists
        state.pages.move_to_end(page_id)  # recently used pages are closed last
        state.last_used = time.monotonic()
        return entry

    async def failure_if_crashed(
        self, session_id: str, page_id: str, exc: BaseException | None = None
    ) -> ToolFailure | None:
        """When page ``page_id`` crashed (its flag, or ``exc`` saying so): close it and return
        the structured error to raise; None when it did not crash."""
        state = self._sessions.get(session_id)
        entry = state.pages.get(page_id) if state is not None else None
        text = str(exc or "")
        if not ((entry is not None and entry.crashed) or "Target crashed" in text
                or "Page crashed" in text):
            return None
        await self.close_page(session_id, page_id, stop_first=False)
        return crashed_failure(page_id, self._memory_limit_hit())

    def _memory_limit_hit(self) -> int | None:
        """The memory cap (MiB) when the kernel killed a process of the browser at it since the
        last crash was reported, else None: the crash is then said to be the cap's doing."""
        sandbox = self.sandbox
        if sandbox is None or sandbox.memory_mb is None:
            return None
        kills = sandbox.oom_kills()
        if kills <= self._oom_seen:
            return None
        self._oom_seen = kills
        return sandbox.memory_mb

    def proxy_of(self, session_id: str) -> ProxyDoor | None:
        """The session's door of the guarding proxy: what it refused (to explain a blocked
        request), this session's alone."""
        state = self._sessions.get(session_id)
        return state.door if state is not None else None

    async def close_page(self, session_id: str, page_id: str, *, stop_first: bool = True
                         ) -> bool:
        """Close one page of a session; False when it was not open. ``stop_first=False``
        for a page whose script holds its thread (it would not answer the stop)."""
        state = self._sessions.get(session_id)
        entry = state.pages.pop(page_id, None) if state is not None else None
        if entry is None:
            return False
        assert state is not None
        await _shut_page(entry.page, state, stop_first=stop_first)
        if state.stuck and not await self.restart_if_frozen():
            # Chromium kept the page open (it was sending itself to another document as it
            # was closed): its scripts would go on through the proxy for as long as the
            # session lasted. Its context is closed, which Chromium does honour; the
            # session's other pages go with it (the next call on one says none is open).
            if state.pages:
                log.warning("browser: closed session %s's other pages %s with page %s, which "
                            "Chromium would not close alone", session_id,
                            ", ".join(state.pages), page_id)
            await self._close_session(session_id)
        return True

    async def _close_session(self, session_id: str) -> None:
        state = self._sessions.pop(session_id, None)
        if state is not None:
            await _quietly(_within(state.context.close(), CONTEXT_CLOSE_TIMEOUT_S))
            state.proxy.close_door(state.door)
            await self._close_unused_proxy(state.proxy)

    async def _close_unused_proxy(self, proxy: GuardProxy) -> None:
        """Stop ``proxy`` when no session's context goes through it any more.

        A proxy serves one allow-list (the environment's plus a session's ``url_allow``): an
        application giving its sessions allow-lists of their own got a listening proxy per
        distinct list, kept until the process ended.
        """
        allow = proxy.allow
        if (
            self._proxies.get(allow) is not proxy
            or allow in self._opening
            or any(state.proxy is proxy for state in self._sessions.values())
        ):
            return
        del self._proxies[allow]  # checked and dropped without a suspension in between
        await _quietly(proxy.aclose())

    async def close_session(self, session_id: str) -> int:
        """Close every page of a session; returns how many were open."""
        state = self._sessions.get(session_id)
        count = len(state.pages) if state is not None else 0
        await self._close_session(session_id)
        return count

    def open_pages(self, session_id: str) -> list[str]:
        """Ids of the session's open pages, oldest first."""
        state = self._sessions.get(session_id)
        return list(state.pages) if state is not None else []

    async def _answers(self) -> bool:
        """Whether the browser process answers a trivial command within
        :data:`BROWSER_PROBE_TIMEOUT_S` (True when there is no running browser to ask)."""
        browser = self._browser
        if browser is None or not browser.is_connected():
            return True

        async def probe() -> None:
            cdp = await browser.new_browser_cdp_session()
            try:
                await cdp.send("Browser.getVersion")
            finally:
                await _quietly(cdp.detach())

        try:
            await _within(probe(), BROWSER_PROBE_TIMEOUT_S)
        except TimeoutError:
            return False
        except Exception:  # closed or crashed meanwhile: relaunched at the next call anyway
            return True
        return True

    async def restart_if_frozen(self) -> bool:
        """When the browser process itself (not one page) no longer answers, stop it with
        every process it runs and forget its sessions' pages: the next call launches a new
        one. True when it was stopped.

        A frozen Chromium (stopped, deadlocked, starved) held every later call of every session
        until the executor's limit, with a TIMEOUT that named nothing, for as long as the
        process lived (measured: 20 s a call under a 20 s limit, for every call, after a
        ``timeout_s`` of 5). Asked after a call timed out and when a page would not close.
        """
        async with self._launching():  # not while a launch is under way, not twice
            if await self._answers():
                return False
            self.restarts += 1
            await self._kill_browser("did not answer within "
                                     f"{BROWSER_PROBE_TIMEOUT_S:g} s")
            return True

    async def _kill_browser(self, why: str) -> None:
        """Stop the browser with every process it runs, without asking it (it would not
        answer), and forget its sessions; the next page launches a new one."""
        import asyncio

        sandbox = self.sandbox
        self._browser, self.sandbox = None, None  # Playwright marks it closed when its pipe ends
        log.warning("browser: Chromium %s; stopping it (%s) and closing its sessions' pages %s",
                    why, sandbox.mode if sandbox is not None else "?",
                    {sid: list(st.pages) for sid, st in self._sessions.items()})
        states = list(self._sessions.values())
        self._sessions.clear()
        for state in states:
            state.proxy.close_door(state.door)
        for state in states:
            await self._close_unused_proxy(state.proxy)
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, _kill_browser_processes, sandbox):
            log.warning("browser: could not find the frozen Chromium's processes to stop them "
                        "(sandbox \"none\" without a memory cap); left as they are")

    async def restart_if_frozen_shielded(self, wait_s: float | None = None) -> bool:
        """:meth:`restart_if_frozen`, carried through to its end even when the caller is
        cancelled or stops waiting meanwhile: a call whose own timeout left less than the
        question's time before the executor's limit still gets its frozen browser replaced
        for the next call. ``wait_s`` bounds the wait (False past it: not known yet)."""
        import asyncio

        task = asyncio.ensure_future(self.restart_if_frozen())
        self._checks.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._checks.discard)
        try:
            return await asyncio.wait_for(asyncio.shield(task), wait_s)
        except TimeoutError:
            return False

    async def _aclose(self) -> None:
        await self._close_browser()
        if self._playwright is not None:
            await _quietly(self._playwright.stop())
            self._playwright = None
        for proxy in self._proxies.values():
            await _quietly(proxy.aclose())
        self._proxies.clear()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Close the browser and stop the engine's thread (blocking; also run at exit)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        import asyncio  # loaded by _ensure_loop already

        try:
            asyncio.run_coroutine_threadsafe(self._aclose(), loop).result(timeout_s)
        except Exception:  # best effort at exit: the process is going anyway
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        self._loop = self._thread = None
        self._launch_lock = None


def crashed_failure(page_id: str, memory_limit_mb: int | None = None) -> ToolFailure:
    """The error of a call on a page whose renderer crashed (the page is closed);
    ``memory_limit_mb`` when the kernel killed it at the browser's memory cap."""
    if memory_limit_mb is not None:
        return ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"the page {page_id!r} crashed: it went over the browser's memory cap "
            f"({memory_limit_mb} MiB for all pages together) and its renderer was killed; the "
            "page was closed",
            suggestion="The page needs more memory than the browser may use; try another page "
            "or site (the user can raise [tool.tooldeck.browser] memory_mb).",
            details={"crashed": True, "memory_limit_mb": memory_limit_mb},
        )
    return ToolFailure(
        ErrorCode.EXECUTION_ERROR,
        f"the page {page_id!r} crashed (its renderer process died; the page may have used too "
        "much memory) and was closed",
        suggestion="Open the URL again with browser_navigate (without page_id), or try another "
        "page.",
        details={"crashed": True},
    )


#: History entries a document may add or replace per second; past it ``pushState`` and
#: ``replaceState`` throw, as Firefox and Safari do past their own limits. A page pushing 200
#: entries a timer tick kept Chromium from closing it (page.close waited 20 s and more) and a
#: call with timeout_s 3 took 19-21 s, the next plain page of its session 30-36 s.
HISTORY_LIMIT_PER_S = 50
HISTORY_LIMIT_JS = """(() => {
  let start = 0, count = 0;
  for (const name of ['pushState', 'replaceState']) {
    const original = History.prototype[name];
    Object.defineProperty(History.prototype, name, {
      configurable: false, writable: false, enumerable: true,
      value: function (...args) {
        const now = Date.now();
        if (now - start >= 1000) { start = now; count = 0; }
        if (++count > LIMIT) {
          throw new DOMException('history.' + name + ' called more than LIMIT times a second',
                                 'SecurityError');
        }
        return original.apply(this, args);
      },
    });
  }
})();""".replace("LIMIT", str(HISTORY_LIMIT_PER_S))
#: How long a page is given to close. Chromium answered Playwright's close of a page that sent
#: itself to another document at that moment only once in two tries: the close waited
#: without end (one browser_navigate held for the tool's two minutes, whatever its timeout_s).
PAGE_CLOSE_TIMEOUT_S = 3.0
#: How long stopping a page before it is closed may take.
_FREEZE_TIMEOUT_S = 0.5
#: How long a session's whole context is given to close.
CONTEXT_CLOSE_TIMEOUT_S = 10.0


async def _browser_step(awaitable: Awaitable[T], what: str, timeout_s: float) -> T:
    """``awaitable``, a step the browser process must answer, within ``timeout_s``; a
    ``ToolFailure`` TIMEOUT past it (which the call's end turns into a restart when the browser
    is frozen, see :meth:`BrowserEngine.restart_if_frozen`)."""
    seconds = max(0.1, min(timeout_s, BROWSER_STEP_TIMEOUT_S))
    try:
        return await _within(awaitable, seconds)
    except TimeoutError:
        raise ToolFailure(
            ErrorCode.TIMEOUT,
            f"the browser did not {what} within {seconds:g}s",
            suggestion="Try again in a moment; if it keeps failing, tell the user the browser "
            "is not responding.",
        ) from None


def _kill_browser_processes(sandbox: BrowserSandbox | None) -> bool:
    """Stop every process of a frozen browser (blocking); False when they cannot be found.

    With a memory cap they are the cgroup's, killed until it is empty. Otherwise the process
    whose command line names the launch's private folder (bubblewrap, or Chromium's profile
    under the ``user`` sandbox) is killed with its process group: bubblewrap's PID namespace
    takes everything inside with it. ``sandbox = "none"`` without a cap leaves nothing to know
    the processes by.
    """
    if sandbox is None:
        return False
    found = sandbox.cgroup is not None
    killed: list[int] = []
    if not found and sandbox.root:
        marker = sandbox.root.encode()
        own_group = os.getpgrp()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    if marker not in handle.read():
                        continue
                pid = int(name)
                group = os.getpgid(pid)
                if group != own_group:
                    os.killpg(group, 9)
                else:
                    os.kill(pid, 9)
                killed.append(pid)
                found = True
            except (OSError, ValueError):  # gone meanwhile, or not ours to read
                continue
    # A killed process takes a moment to go (bounded): its folder is removed after it.
    deadline = time.monotonic() + 5.0
    while killed and time.monotonic() < deadline:
        killed = [pid for pid in killed if _still_running(pid)]
        if killed:
            time.sleep(0.02)
    sandbox.cleanup()  # kills what is left in the cgroup, removes the folder
    return found


def _still_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie is gone
    except (OSError, IndexError):
        return False


async def _within(awaitable: Awaitable[T], timeout_s: float) -> T:
    import asyncio

    return await asyncio.wait_for(awaitable, timeout_s)


async def _shut_page(page: Any, state: _SessionState, *, stop_first: bool = True) -> None:
    """Close ``page`` within :data:`PAGE_CLOSE_TIMEOUT_S`; when Chromium does not close it,
    ``state.stuck`` is set (the caller retires the context, which Chromium does close).

    With ``stop_first`` the page's scripts are switched off and its loading stopped before
    (within :data:`_FREEZE_TIMEOUT_S` in all): a page redirecting itself kept Chromium from
    closing it in 14-20 closes out of 30; stopped first, 0-2 (about 10 ms more a close). A
    page whose script holds its thread would not answer: it is closed without.
    """
    if page.is_closed():
        return
    if stop_first:
        await _quietly(_within(_stop(page), _FREEZE_TIMEOUT_S))
    try:
        await _within(page.close(), PAGE_CLOSE_TIMEOUT_S)
    except TimeoutError:
        state.stuck = True
    except Exception:  # closing something already closed or crashed
        pass


async def _stop(page: Any) -> None:
    cdp = await page.context.new_cdp_session(page)
    try:
        await cdp.send("Emulation.setScriptExecutionDisabled", {"value": True})
        await cdp.send("Page.stopLoading")
    finally:
        await _quietly(cdp.detach())


async def _quietly(awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception:  # closing something already closed or crashed
        pass


_ENGINE: BrowserEngine | None = None
_ENGINE_LOCK = threading.Lock()


def engine() -> BrowserEngine:
    """The process-wide engine (created on first use; the browser launches lazily)."""
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = BrowserEngine()
            atexit.register(_ENGINE.shutdown)
        return _ENGINE


def release_session(session_id: str) -> None:
    """Close a session's pages in the background (called when the deck closes the session).

    Does nothing when the browser was never used, so closing sessions costs nothing then.
    """
    eng = _ENGINE
    if eng is not None and session_id in eng._sessions:
        eng.submit(eng.close_session(session_id))


def shutdown() -> None:
    """Close the shared browser now (it is closed at exit anyway)."""
    if _ENGINE is not None:
        _ENGINE.shutdown()
