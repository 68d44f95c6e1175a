"""The browser tools: ``browser_navigate``, ``browser_click``, ``browser_fill``,
``browser_screenshot`` and ``browser_close``.

Each is an async function called as ``tool(arguments, context)``; the work runs on the shared
engine's asyncio thread (:mod:`._engine`). Failures a model can cause raise
:class:`~tooldeck_hookspecs.ToolFailure` with a stable code and a suggestion. A success is a
``ToolResult`` whose ``metadata["browser_sandbox"]`` says how the browser that served the call was
confined (:mod:`._sandbox`): the mode in use, the mode asked for, its layers and uid.
"""

from __future__ import annotations

import math
import struct
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure, ToolResult
from tooldeck_hookspecs.content import Image

from ._engine import BROWSER_STEP_TIMEOUT_S, BrowserEngine, engine
from ._extract import PageBusy, PageKeptNavigating, page_snapshot
from ._files import check_target, write_in_workdir
from ._guard import remember_session_allow, scheme_problem
from ._limits import (
    DEFAULT_ACTION_TIMEOUT_S,
    DEFAULT_NAVIGATE_TIMEOUT_S,
    DEFAULT_SCREENSHOT_TIMEOUT_S,
    EXECUTION_TIMEOUT_S,
    IMAGE_MAX_BYTES,
    MAX_TIMEOUT_S,
    SCREENSHOT_MAX_OUTPUT_BYTES,
)
from ._sandbox import requested_memory_mb, requested_mode, requested_uid

__all__ = [
    "DEFAULT_ACTION_TIMEOUT_S",
    "DEFAULT_NAVIGATE_TIMEOUT_S",
    "IMAGE_MAX_BYTES",
    "MAX_TIMEOUT_S",
    "SCREENSHOT_MAX_OUTPUT_BYTES",
    "browser_click",
    "browser_close",
    "browser_fill",
    "browser_navigate",
    "browser_screenshot",
]

_WAIT_UNTIL = ("load", "domcontentloaded", "networkidle")


def _is_seconds(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def _timeout_ms(arguments: Mapping[str, Any], default: float, context: ToolContext) -> float:
    """The browser's timeout for this call's page work, in milliseconds.

    The model's ``timeout_s``; without one the tool's default, or the deployment's own
    ``execution.timeout_s`` for the tool where it set one (``ToolContext.limits``: a limit
    raised for slow sites must not end at the 30 s default). Never past the call's deadline
    less a moment to answer in, so that a lowered limit still gets the tool's TIMEOUT naming
    the page instead of the executor's, which knows nothing of it.
    """
    value = arguments.get("timeout_s")
    if value is None:
        limits = getattr(context, "limits", None)
        configured = limits.get("timeout_s") if isinstance(limits, Mapping) else None
        value = default
        if _is_seconds(configured) and configured != EXECUTION_TIMEOUT_S:
            value = float(configured)
    elif not _is_seconds(value) or value > MAX_TIMEOUT_S:
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}]")
    seconds_left = context.seconds_left()
    if seconds_left is not None:
        value = min(value, max(seconds_left - min(1.0, max(0.5, seconds_left / 5)), 0.5))
    return float(value) * 1000.0


def _string(arguments: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = arguments.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, f"{name} must be a non-empty string")
    return value


def _host(url: str) -> str | None:
    try:
        return urllib.parse.urlsplit(url).hostname
    except ValueError:
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _blocked_since(eng: BrowserEngine, session_id: str, before: int) -> list[dict[str, str]]:
    proxy = eng.proxy_of(session_id)
    if proxy is None or proxy.block_count <= before:
        return []
    fresh = list(proxy.blocked)[-min(proxy.block_count - before, len(proxy.blocked)):]
    return [{"host": host, "reason": reason} for host, reason in fresh][:20]


def _block_count(eng: BrowserEngine, session_id: str) -> int:
    proxy = eng.proxy_of(session_id)
    return proxy.block_count if proxy is not None else 0


def _navigation_error(
    eng: BrowserEngine, session_id: str, url: str, exc: Exception
) -> ToolFailure:
    """A Playwright navigation exception as a structured error."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    message = _first_line(exc)
    proxy = eng.proxy_of(session_id)
    host = _host(url)
    if isinstance(exc, PlaywrightTimeout):
        return ToolFailure(ErrorCode.TIMEOUT, f"loading {url!r} did not finish in time "
                           f"({message})", suggestion="Try again with wait_until "
                           "'domcontentloaded' or a larger timeout_s, or try another page.")
    if "Download is starting" in message:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"{url!r} is a file download (binary "
                           "content), not a web page; the browser does not download files",
                           suggestion="Open a web page instead; this tool reads HTML pages.")
    if "ERR_ABORTED" in message:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"loading {url!r} was aborted: it is "
                           "probably a file download (binary content) rather than a page, or "
                           "the page navigated elsewhere while loading",
                           suggestion="Open a web page instead; this tool reads HTML pages.")
    if "ERR_TUNNEL_CONNECTION_FAILED" in message or "ERR_PROXY" in message:
        reason = proxy.last_block_for(host) if proxy is not None else None
        if reason is not None:
            return ToolFailure(ErrorCode.URL_NOT_ALLOWED, f"navigation to {url!r} was blocked: "
                               f"{reason}", suggestion="Use a public http(s) URL.")
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"could not connect to {host!r} "
                           "(connection refused or unreachable)",
                           suggestion="Check the URL; the site may be down. Try again later "
                           "or use another source.")
    if "ERR_NAME_NOT_RESOLVED" in message or "ERR_CONNECTION" in message:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"could not load {url!r}: {message}",
                           suggestion="Check the URL; the site may be down or not exist.")
    return ToolFailure(ErrorCode.EXECUTION_ERROR, f"could not load {url!r}: {message}")


async def _navigate(
    eng: BrowserEngine, session_id: str, url: str, page_id: str | None, wait_until: str,
    timeout_ms: float, open_s: float = BROWSER_STEP_TIMEOUT_S,
) -> dict[str, Any]:
    closed: list[str] = []
    # Loading and reading the page share the one timeout: with a fresh one each, a call could
    # take twice its time and pass its deadline, answered by the executor with nothing of it.
    started = time.monotonic()
    if page_id is None:
        entry, closed = await eng.new_page(session_id, open_s)
        fresh = True
    else:
        entry, fresh = eng.get_page(session_id, page_id), False
    page = entry.page
    before = _block_count(eng, session_id)
    try:
        try:
            response = await page.goto(url, wait_until=wait_until, timeout=timeout_ms)
        except ToolFailure:
            raise
        except Exception as exc:  # Playwright errors are mapped to codes
            crashed = await eng.failure_if_crashed(session_id, entry.page_id, exc)
            raise crashed or _navigation_error(eng, session_id, url, exc) from None
        from ._proxy import BLOCKED_HEADER, UNREACHABLE_HEADER  # loaded with the engine's loop

        status = response.status if response is not None else None
        headers = response.headers if response is not None else {}
        blocked = headers.get(BLOCKED_HEADER.lower())
        if blocked is not None:
            reason = urllib.parse.unquote(blocked)
            what = "a redirect" if page.url != url else "the URL"
            raise ToolFailure(ErrorCode.URL_NOT_ALLOWED, f"navigation to {url!r} was blocked: "
                              f"{what} led to {page.url!r}: {reason}",
                              suggestion="Use a public http(s) URL.",
                              details={"final_url": page.url})
        if headers.get(UNREACHABLE_HEADER.lower()) is not None:
            raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"could not connect to "
                              f"{_host(page.url)!r} for {url!r} (connection refused or "
                              "unreachable)", suggestion="Check the URL; the site may be down.")
        left_ms = timeout_ms - (time.monotonic() - started) * 1000.0
        snapshot = await _snapshot(eng, session_id, entry.page_id, page, left_ms, wait_until)
    except BaseException:
        if fresh:  # a page the model never got an id for would leak
            await eng.close_page(session_id, entry.page_id)
        raise
    content_type = headers.get("content-type")
    result: dict[str, Any] = {"page_id": entry.page_id, "status": status,
                              "content_type": content_type[:200] if content_type else None,
                              **snapshot, **entry.take_downloads()}
    blocked_requests = _blocked_since(eng, session_id, before)
    if blocked_requests:
        result["blocked_requests"] = blocked_requests
    if closed:
        result["closed_pages"] = closed
        result["note_pages"] = (f"At most {eng.max_pages_per_session} pages stay open per "
                                f"session; closed the oldest: {', '.join(closed)}.")
    return result


async def _snapshot(
    eng: BrowserEngine, session_id: str, page_id: str, page: Any, timeout_ms: float,
    wait_until: str = "commit",
) -> dict[str, Any]:
    """The page as the model reads it, within the call's ``timeout_s``. A page whose scripts
    keep it busy past that is closed (its loop would run on, a core at 100%, for as long as it
    stayed open) and the call fails with TIMEOUT; one that redirects itself each time it is
    read is closed too (EXECUTION_ERROR). ``wait_until`` is how far a document the page's
    own script went on to must have loaded to be read (a navigation's own; after a click,
    which waited for its load already, whatever is there)."""
    try:
        return await page_snapshot(page, timeout_s=max(timeout_ms / 1000.0, 0.5),
                                   wait_until=wait_until)
    except ToolFailure:
        raise
    except PageBusy as exc:
        await eng.close_page(session_id, page_id, stop_first=False)
        raise ToolFailure(
            ErrorCode.TIMEOUT,
            f"{exc}; the page {page_id!r} was closed",
            suggestion="The page runs a script that never ends; try another page or site.",
        ) from None
    except PageKeptNavigating as exc:  # closed too: its redirects would go on without end
        await eng.close_page(session_id, page_id)
        raise ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"could not read the page {page_id!r}: {exc}; the page was closed",
            suggestion="The page redirects itself without end; try another page or site.",
            details={"page_id": page_id},
        ) from None
    except Exception as exc:  # the page crashed or closed while it was read
        crashed = await eng.failure_if_crashed(session_id, page_id, exc)
        raise crashed or ToolFailure(ErrorCode.EXECUTION_ERROR, f"could not read the page "
                                     f"{page_id!r}: {_first_line(exc)}") from None


def _engine_for(context: ToolContext) -> BrowserEngine:
    # The proxy must honour the same allow-list as the policy's URL check: the session's
    # ``url_allow`` attribute (plus TOOLDECK_URL_ALLOW), which the call's context carries.
    remember_session_allow(context.session_id, (context.attributes or {}).get("url_allow"))
    # The boundary comes from the pack's own table ([tool.tooldeck.browser]); a bad value is an
    # EXECUTION_ERROR here, before any browser starts.
    settings = context.settings if isinstance(context.settings, Mapping) else {}
    mode, uid = requested_mode(settings), requested_uid(settings)
    memory_mb = requested_memory_mb(settings)
    eng = engine()
    eng.want_sandbox(mode, uid, memory_mb)
    return eng


def _answer_by(context: ToolContext) -> float | None:
    """The ``time.monotonic()`` instant by which a call must have its answer (a moment before
    its deadline), or None without a deadline."""
    left = context.seconds_left()
    return None if left is None else time.monotonic() + max(left - _ANSWER_MARGIN_S, 0.0)


#: What a call keeps of its time to hand its answer back after the browser's work.
_ANSWER_MARGIN_S = 0.3


async def _in_sandbox(
    eng: BrowserEngine, answer_by: float | None,
    function: Callable[..., Awaitable[dict[str, Any]]], *args: Any,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    # Read on the engine's loop right after the work, so the report names the browser that
    # did it even if another call replaces the browser meanwhile.
    try:
        data = await function(eng, *args)
    except ToolFailure as failure:
        # A page that timed out may be the page's doing or the browser's: a frozen browser
        # would hold every later call of every session. Asked once, within 2 s; the call
        # waits for the answer only while its own time lasts (a healthy browser answers in
        # milliseconds, but a click's TIMEOUT comes a moment before the deadline), and the
        # check goes on without it past that.
        wait_s = None if answer_by is None else max(answer_by - time.monotonic(), 0.0)
        if failure.code is ErrorCode.TIMEOUT and await eng.restart_if_frozen_shielded(wait_s):
            raise ToolFailure(
                ErrorCode.TIMEOUT,
                f"{failure.message}: the browser itself had stopped answering, so it was "
                "stopped with all its pages; the next call starts a new one",
                suggestion="Open the page again with browser_navigate (without page_id); other "
                "page ids of this session are gone.",
                details={**failure.details, "browser_restarted": True},
            ) from None
        raise
    return data, eng.sandbox_metadata()


async def _run(
    eng: BrowserEngine, context: ToolContext,
    function: Callable[..., Awaitable[dict[str, Any]]], *args: Any,
) -> ToolResult:
    data, sandbox = await eng.run(_in_sandbox, eng, _answer_by(context), function, *args)
    return ToolResult.ok(data, browser_sandbox=sandbox) if sandbox else ToolResult.ok(data)


async def browser_navigate(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    """Open ``url`` in a new page (or in page ``page_id``) and return what a reader sees."""
    url = _string(arguments, "url")
    assert url is not None
    problem = scheme_problem(url)
    if problem:
        raise ToolFailure(ErrorCode.URL_NOT_ALLOWED, problem,
                          suggestion="Use a public http(s) URL.")
    page_id = _string(arguments, "page_id", required=False)
    wait_until = arguments.get("wait_until", "load")
    if wait_until not in _WAIT_UNTIL:
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"wait_until must be one of {', '.join(_WAIT_UNTIL)}")
    timeout_ms = _timeout_ms(arguments, DEFAULT_NAVIGATE_TIMEOUT_S, context)
    # Opening the page is the browser's work, not the site's: the model's timeout_s (which
    # may be half a second for a page it expects fast) does not bound it, the call's deadline
    # does (at most BROWSER_STEP_TIMEOUT_S).
    open_s = _timeout_ms({}, BROWSER_STEP_TIMEOUT_S, context) / 1000.0
    eng = _engine_for(context)
    return await _run(eng, context, _navigate, context.session_id, url, page_id, wait_until,
                      timeout_ms, open_s)


def _action_error(what: str, target: str, exc: Exception) -> ToolFailure:
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    if isinstance(exc, PlaywrightTimeout):
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"could not {what} {target}: no matching "
                           "element became ready in time", suggestion="Check the selector or "
                           "text against the page's text and links (browser_navigate shows "
                           "them); use a CSS selector such as 'button[type=submit]' or '#email'.")
    return ToolFailure(ErrorCode.EXECUTION_ERROR, f"could not {what} {target}: {_first_line(exc)}",
                       suggestion="Check the selector; it must be a valid CSS selector.")


#: How long a page that did not let an action finish is given to answer a trivial script: one
#: that does not is held by its own script (and is closed, as a read of it would be).
BUSY_PROBE_S = 1.0


async def _failure_if_busy(
    eng: BrowserEngine, session_id: str, page_id: str, page: Any, what: str
) -> ToolFailure | None:
    """After an action timed out: when the page's own script holds its thread, close the page
    and return the TIMEOUT to raise; None when the page answers (the element was the issue).

    A button whose handler looped forever made browser_click answer "no matching element
    became ready in time" (a wrong lead for the model) and left the renderer at 100% of a
    core for as long as the session lasted.
    """
    import asyncio

    try:
        await asyncio.wait_for(page.evaluate("1"), BUSY_PROBE_S)
    except TimeoutError:
        await eng.close_page(session_id, page_id, stop_first=False)
        return ToolFailure(
            ErrorCode.TIMEOUT,
            f"could not {what}: the page's scripts kept it busy; the page {page_id!r} was "
            "closed",
            suggestion="The page runs a script that never ends; try another page or site.",
        )
    except Exception:  # the page navigated or closed meanwhile: not a busy page
        return None
    return None


#: The part of a click's time kept for reading the page afterwards (at most a third of it).
READ_RESERVE_MS = 2_000.0


async def _click(
    eng: BrowserEngine, session_id: str, page_id: str, selector: str | None, text: str | None,
    timeout_ms: float,
) -> dict[str, Any]:
    entry = eng.get_page(session_id, page_id)
    page = entry.page
    target = f"selector {selector!r}" if selector else f"the element with text {text!r}"
    locator = page.locator(selector).first if selector else page.get_by_text(text).first
    before = _block_count(eng, session_id)
    # Clicking, waiting for the load and reading share the call's one timeout (as in
    # _navigate): with a fresh one each, a click that led to a page that never finished
    # loading and then kept its thread took twice its time, past the deployment's limit,
    # which then answered with a TIMEOUT that knew nothing of the page (left open, spinning).
    started = time.monotonic()
    # Playwright's click waits on for a navigation it started, up to its whole timeout, and
    # then returns without a word: the read (and closing a page it finds busy) keeps a part.
    reserve_ms = min(READ_RESERVE_MS, timeout_ms / 3)

    def left_ms(reserved: float = 0.0) -> float:
        # Never 0: Playwright reads a timeout of 0 as "no timeout".
        return max(timeout_ms - reserved - (time.monotonic() - started) * 1000.0, 1.0)

    try:
        await locator.click(timeout=left_ms(reserve_ms))
    except Exception as exc:  # mapped to a structured error
        crashed = await eng.failure_if_crashed(session_id, page_id, exc)
        busy = None if crashed else await _failure_if_busy(eng, session_id, page_id, page,
                                                           f"click {target}")
        raise crashed or busy or _action_error("click", target, exc) from None
    try:
        # A click may start a navigation: let it load (or give up quietly, the click happened).
        await page.wait_for_load_state("load", timeout=left_ms(reserve_ms))
    except Exception:  # a slow load is reported through the snapshot's state
        pass
    snapshot = await _snapshot(eng, session_id, page_id, page, left_ms())
    result: dict[str, Any] = {"page_id": page_id, "clicked": target, **snapshot,
                              **entry.take_downloads()}
    blocked = _blocked_since(eng, session_id, before)
    if blocked:
        result["blocked_requests"] = blocked
    return result


async def browser_click(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    """Click the first element matching ``selector`` (CSS) or showing ``text``; return the
    page as it is afterwards."""
    page_id = _string(arguments, "page_id")
    selector = _string(arguments, "selector", required=False)
    text = _string(arguments, "text", required=False)
    if bool(selector) == bool(text):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "give exactly one of selector or text",
                          suggestion="Pass selector (a CSS selector) or text (the visible text "
                          "of the element), not both.")
    timeout_ms = _timeout_ms(arguments, DEFAULT_ACTION_TIMEOUT_S, context)
    eng = _engine_for(context)
    return await _run(eng, context, _click, context.session_id, page_id, selector, text, timeout_ms)


async def _fill(
    eng: BrowserEngine, session_id: str, page_id: str, selector: str, value: str,
    timeout_ms: float,
) -> dict[str, Any]:
    entry = eng.get_page(session_id, page_id)
    page = entry.page
    try:
        await page.locator(selector).first.fill(value, timeout=timeout_ms)
    except Exception as exc:  # mapped to a structured error
        crashed = await eng.failure_if_crashed(session_id, page_id, exc)
        busy = None if crashed else await _failure_if_busy(eng, session_id, page_id, page,
                                                           f"fill selector {selector!r}")
        raise crashed or busy or _action_error("fill", f"selector {selector!r}", exc) from None
    return {"page_id": page_id, "selector": selector, "filled": True, "url": page.url,
            **entry.take_downloads()}


async def browser_fill(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    """Type ``value`` into the input, textarea or editable element matching ``selector``."""
    page_id = _string(arguments, "page_id")
    selector = _string(arguments, "selector")
    value = arguments.get("value")
    if not isinstance(value, str):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "value must be a string")
    timeout_ms = _timeout_ms(arguments, DEFAULT_ACTION_TIMEOUT_S, context)
    eng = _engine_for(context)
    return await _run(eng, context, _fill, context.session_id, page_id, selector, value, timeout_ms)


#: A full-page screenshot covers at most this much of the page (from its top left corner):
#: the page sets its own size, and a 4 000 x 8 000 canvas of noise made a 15 MB PNG, held in
#: memory (and base64 on Playwright's pipe) and written to the workdir, with nothing to stop a
#: page ten times that size. 12 million pixels is at most about 36 MB of PNG.
MAX_SCREENSHOT_WIDTH = 4_096
MAX_SCREENSHOT_HEIGHT = 16_384
MAX_SCREENSHOT_PIXELS = 12_000_000

_PAGE_SIZE_JS = """() => {
  const de = document.documentElement, b = document.body;
  return [Math.max(de ? de.scrollWidth : 0, b ? b.scrollWidth : 0, de ? de.clientWidth : 0),
          Math.max(de ? de.scrollHeight : 0, b ? b.scrollHeight : 0, de ? de.clientHeight : 0)];
}"""


def screenshot_clip(width: int, height: int) -> dict[str, int] | None:
    """The part of a ``width`` x ``height`` page a full-page screenshot keeps (from the top
    left corner), or None when the whole page is within the limits."""
    if (width <= MAX_SCREENSHOT_WIDTH and height <= MAX_SCREENSHOT_HEIGHT
            and width * height <= MAX_SCREENSHOT_PIXELS):
        return None
    kept_width = max(1, min(width, MAX_SCREENSHOT_WIDTH))
    kept_height = max(1, min(height, MAX_SCREENSHOT_HEIGHT, MAX_SCREENSHOT_PIXELS // kept_width))
    return {"x": 0, "y": 0, "width": kept_width, "height": kept_height}


async def _screenshot(
    eng: BrowserEngine, session_id: str, page_id: str, full_page: bool, timeout_ms: float
) -> dict[str, Any]:
    import asyncio

    from playwright.async_api import TimeoutError as PlaywrightTimeout

    page = eng.get_page(session_id, page_id).page
    out: dict[str, Any] = {}
    clip = None
    # Measuring and capturing share the call's one timeout (they had 30 s each, whatever the
    # deployment's limit for the tool said).
    started = time.monotonic()
    try:
        if full_page:
            # Measured in the page, whose scripts may keep it busy: bounded like the capture.
            width, height = await asyncio.wait_for(page.evaluate(_PAGE_SIZE_JS),
                                                   timeout_ms / 1000.0)
            clip = screenshot_clip(int(width), int(height))
            if clip is not None:
                out.update(clipped=True, page_width=int(width), page_height=int(height),
                           note_clip=f"The page is {int(width)} x {int(height)} pixels; the "
                           f"screenshot keeps its top left {clip['width']} x {clip['height']} "
                           f"(at most {MAX_SCREENSHOT_WIDTH} x {MAX_SCREENSHOT_HEIGHT} and "
                           f"{MAX_SCREENSHOT_PIXELS:,} pixels).")
        left_ms = max(timeout_ms - (time.monotonic() - started) * 1000.0, 500.0)
        data: bytes = await page.screenshot(type="png", full_page=full_page, clip=clip,
                                            timeout=left_ms)
    except (TimeoutError, PlaywrightTimeout):
        raise ToolFailure(ErrorCode.TIMEOUT, f"the screenshot of {page_id!r} was not taken "
                          f"within {timeout_ms / 1000.0:g} s: the page's scripts kept it busy",
                          suggestion="Try again later or take a screenshot of another page."
                          ) from None
    except Exception as exc:  # mapped to a structured error
        raise await eng.failure_if_crashed(session_id, page_id, exc) or ToolFailure(
            ErrorCode.EXECUTION_ERROR, f"the screenshot failed: {_first_line(exc)}") from None
    out["png"] = data
    return out


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 24:
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


async def browser_screenshot(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    """Save a PNG screenshot of page ``page_id`` at ``path`` inside the working directory.

    The file is written atomically (a temporary file renamed over the target), only as a new or
    regular file, never on a protected path (``context.protected_paths``) nor outside the
    tool's allowed paths (``context.allowed_paths``); see :mod:`._files`.
    """
    page_id = _string(arguments, "page_id")
    path = arguments.get("path", "screenshot.png")
    full_page = arguments.get("full_page", False)
    if not isinstance(full_page, bool):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "full_page must be true or false")
    rules, allowed = context.protected_paths, context.allowed_paths
    # Refuse before taking the picture: a FIFO, a protected or a disallowed path answers at once.
    await trio.to_thread.run_sync(check_target, context.workdir, path, rules, allowed)
    timeout_ms = _timeout_ms({}, DEFAULT_SCREENSHOT_TIMEOUT_S, context)
    eng = _engine_for(context)
    shot, sandbox = await eng.run(_in_sandbox, eng, _answer_by(context), _screenshot,
                                  context.session_id, page_id,
                                  full_page, timeout_ms)
    data: bytes = shot.pop("png")
    # context.commit just before the rename: a screenshot whose call timed out or was cancelled
    # meanwhile is not saved (the wait for this thread cannot be cancelled, so once the rename
    # is under way its real result is what the call returns).
    written = await trio.to_thread.run_sync(write_in_workdir, context.workdir, path, data, rules,
                                            allowed, context.commit)
    size = _png_size(data)
    result: dict[str, Any] = {"page_id": page_id, "path": written, "bytes": len(data)}
    if size is not None:
        result["width"], result["height"] = size
    result.update(shot)  # clipped, page_width, page_height, note_clip
    if len(data) <= IMAGE_MAX_BYTES:
        # The picture itself, for clients that show it to the model (an MCP image block, an
        # Anthropic image, an OpenAI image part: see tooldeck_hookspecs.content).
        result["image"] = Image(data, "image/png")
    else:
        result["image_omitted"] = (
            f"the PNG ({len(data)} bytes) is over the {IMAGE_MAX_BYTES}-byte limit for an "
            "inline image; it is saved at path"
        )
    return ToolResult.ok(result, browser_sandbox=sandbox) if sandbox else ToolResult.ok(result)


async def _close(eng: BrowserEngine, session_id: str, page_id: str) -> dict[str, Any]:
    before = eng.open_pages(session_id)
    closed = await eng.close_page(session_id, page_id)
    result: dict[str, Any] = {"page_id": page_id, "closed": closed,
                              "open_pages": eng.open_pages(session_id)}
    gone = [other for other in before if other != page_id and other not in result["open_pages"]]
    if gone:  # the page would not close alone: its session's context went (close_page)
        result["closed_pages"] = gone
        result["note_pages"] = ("The browser would not close the page alone; the session's "
                                f"other pages closed with it: {', '.join(gone)}.")
    return result


async def browser_close(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    """Close page ``page_id`` (closing a page that is not open is not an error)."""
    page_id = _string(arguments, "page_id")
    eng = _engine_for(context)
    return await _run(eng, context, _close, context.session_id, page_id)
