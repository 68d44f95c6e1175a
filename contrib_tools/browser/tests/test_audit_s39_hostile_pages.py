"""A hostile page once it has loaded, against the real Chromium through a real deck.

An audit (s39) found:
- Playwright turns Chromium's pop-up blocker off: a page's script opened pop-ups without end, and
  pop-ups given a moment to live opened pop-ups of their own, a chain that ran on after
  ``browser_close`` closed the page that started it;
- a page whose renderer crashed stayed among the session's pages, answering "Target crashed" to
  every call, never closed;
- ``full_page`` screenshots had no size limit: a 4 000 x 8 000 canvas of noise made a 15 MB PNG
  in memory and in the workdir, and nothing stopped a bigger page;
- sessions with the same allow-list shared the guarding proxy's log of refusals: a page of one
  session that kept reaching for refused hosts filled the other sessions' ``blocked_requests``.
"""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_tools_browser import engine
from tooldeck_tools_browser.tools import (
    MAX_SCREENSHOT_HEIGHT,
    MAX_SCREENSHOT_PIXELS,
    MAX_SCREENSHOT_WIDTH,
    screenshot_clip,
)

from tooldeck.testing import make_deck

ENTRY_POINTS = ["schema", "runner", "policy", "browser"]

PAGES = {
    # Tells through its title whether the pop-up blocker stopped a script's window.open.
    "/opener": "<title>start</title><a id=link target=_blank href='/chain'>link</a><script>"
               "document.title = window.open('/chain') === null ? 'blocked' : 'opened'</script>",
    # Every pop-up opens more, for as long as it lives.
    "/chain": "<title>chain</title><script>setInterval(() => { for (let i = 0; i < 5; i++) "
              "window.open('/chain') }, 10)</script>",
    "/plain": "<title>plain</title><p>plain text</p>",
    "/huge": "<title>huge</title><body style='margin:0'><div style='width:20000px;"
             "height:40000px;background:linear-gradient(red, blue)'>x</div></body>",
    # Keeps reaching for a refused host (::1 is not allowed) for as long as it is open.
    "/noisy": "<title>noisy</title><p>x</p><script>let n = 0; setInterval(() => "
              "{ new Image().src = 'http://[::1]:8081/other-session-' + (n++) }, 20)</script>",
    "/gated": "<title>gated</title><p>a</p><img src='/gate'>",
    "/downloads": "<title>dl</title><p id=still>still</p><input type=file id=upload>"
                  "<a id=attachment href='/attachment'>a</a>"
                  "<a id=data download='planted.pth' href='data:text/plain,import os'>d</a>"
                  "<a id=blob onclick=\"const a = document.createElement('a'); a.href = "
                  "URL.createObjectURL(new Blob(['x'])); a.download = 'tooldeck.toml'; "
                  "document.body.appendChild(a); a.click()\">b</a>",
    "/attachment": "import os",
}


class _Site:
    def __init__(self) -> None:
        self.gate = threading.Event()
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                if path == "/gate":
                    site.gate.wait(30)  # released by the test (bounded: never a hung server)
                body = PAGES.get(path, "<title>none</title>").encode()
                self.send_response(200)
                if path == "/attachment":
                    self.send_header("Content-Disposition", "attachment; filename=.bashrc")
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_port}"


@pytest.fixture(scope="module")
def hostile() -> Iterator[_Site]:
    served = _Site()
    threading.Thread(target=served.server.serve_forever, daemon=True).start()
    try:
        yield served
    finally:
        served.gate.set()
        served.server.shutdown()
        served.server.server_close()


@pytest.fixture(autouse=True)
def _allow_the_site(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")


def _session(deck: Any, tmp_path: Path) -> Any:
    return deck.session(workdir=str(tmp_path), max_level="moderate", grants={"browser"})


async def _context_pages(session_id: str) -> int:
    eng = engine()

    async def count() -> int:
        state = eng._sessions.get(session_id)
        return len(state.context.pages) if state is not None else 0

    return await eng.run(count)  # type: ignore[no-any-return]


def test_full_page_screenshots_keep_a_bounded_part_of_the_page() -> None:
    assert screenshot_clip(1280, 5000) is None
    for width, height in ((30_000, 300_000), (4_000, 8_000), (1_000, 100_000), (9, 10**7)):
        clip = screenshot_clip(width, height)
        assert clip is not None and clip["x"] == clip["y"] == 0
        assert clip["width"] <= min(width, MAX_SCREENSHOT_WIDTH)
        assert clip["height"] <= min(height, MAX_SCREENSHOT_HEIGHT)
        assert clip["width"] * clip["height"] <= MAX_SCREENSHOT_PIXELS


@pytest.mark.chromium
async def test_scripts_cannot_open_pop_ups_and_no_chain_outlives_its_page(
    hostile: _Site, tmp_path: Path
) -> None:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, tmp_path)
        page = await session.call("browser_navigate", {"url": hostile.base + "/opener"})
        assert page.success, page.error
        assert page.data["title"] == "blocked"  # window.open without a click returned null
        # A click may open one (a user gesture); it is closed, and opens nothing of its own.
        clicked = await session.call("browser_click", {"page_id": page.data["page_id"],
                                                       "selector": "#link"})
        assert clicked.success, clicked.error
        closed = await session.call("browser_close", {"page_id": page.data["page_id"]})
        assert closed.success and closed.data["open_pages"] == []
        with trio.fail_after(30):  # not a timing figure: a chain would never end
            while await _context_pages(session.id):
                await trio.sleep(0.05)


@pytest.mark.chromium
async def test_a_crashed_page_is_closed_and_said_so_and_the_session_goes_on(
    hostile: _Site, tmp_path: Path
) -> None:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, tmp_path)
        page = await session.call("browser_navigate", {"url": hostile.base + "/plain"})
        assert page.success, page.error
        page_id = page.data["page_id"]
        eng = engine()

        async def crash() -> None:
            import asyncio

            entry = eng.get_page(session.id, page_id)
            cdp = await entry.page.context.new_cdp_session(entry.page)
            # The renderer dies before it can answer: not awaited.
            sent = asyncio.ensure_future(cdp.send("Page.crash"))
            for _ in range(600):
                if entry.crashed:
                    break
                await asyncio.sleep(0.05)
            sent.cancel()
            assert entry.crashed

        await eng.run(crash)
        clicked = await session.call("browser_click", {"page_id": page_id, "selector": "p"})
        assert clicked.error is not None and clicked.error.code == "EXECUTION_ERROR"
        assert clicked.error.details == {"crashed": True}, clicked.error
        assert "crashed" in clicked.error.message and "closed" in clicked.error.message
        assert page_id not in eng.open_pages(session.id)
        again = await session.call("browser_navigate", {"url": hostile.base + "/plain"})
        assert again.success and again.data["text"] == "plain text"


@pytest.mark.chromium
async def test_a_full_page_screenshot_of_a_huge_page_is_clipped_and_says_so(
    hostile: _Site, tmp_path: Path
) -> None:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, tmp_path)
        page = await session.call("browser_navigate", {"url": hostile.base + "/huge"})
        assert page.success, page.error
        shot = await session.call("browser_screenshot", {"page_id": page.data["page_id"],
                                                         "path": "huge.png", "full_page": True})
    assert shot.success, shot.error
    data = shot.data
    assert data["clipped"] is True and data["page_height"] >= 40_000, data
    assert data["width"] <= MAX_SCREENSHOT_WIDTH and data["height"] <= MAX_SCREENSHOT_HEIGHT
    assert data["width"] * data["height"] <= MAX_SCREENSHOT_PIXELS
    assert "note_clip" in data and (tmp_path / "huge.png").stat().st_size == data["bytes"]


@pytest.mark.chromium
async def test_blocked_requests_are_reported_to_their_own_session_only(
    hostile: _Site, tmp_path: Path
) -> None:
    hostile.gate.clear()
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        mine, other = _session(deck, tmp_path), _session(deck, tmp_path)
        noisy = await other.call("browser_navigate", {"url": hostile.base + "/noisy"})
        assert noisy.success, noisy.error
        eng = engine()

        async def other_blocks() -> int:
            proxy = eng.proxy_of(other.id)
            return proxy.block_count if proxy is not None else 0

        results: list[Any] = []

        async def navigate() -> None:
            results.append(await mine.call("browser_navigate", {"url": hostile.base + "/gated"}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(navigate)
            # My page is held at its image until the other session's page was refused more.
            start = await eng.run(other_blocks)
            with trio.fail_after(30):
                while await eng.run(other_blocks) < start + 3:
                    await trio.sleep(0.05)
            hostile.gate.set()
    (result,) = results
    assert result.success, result.error
    assert "blocked_requests" not in result.data, result.data["blocked_requests"]


@pytest.mark.chromium
async def test_downloads_write_nothing_and_file_inputs_take_no_host_path(
    hostile: _Site, tmp_path: Path
) -> None:
    # Held before the audit (contexts refuse downloads): kept so that it stays so.
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, tmp_path)
        page = await session.call("browser_navigate", {"url": hostile.base + "/downloads"})
        assert page.success, page.error
        page_id = page.data["page_id"]
        reported: list[dict[str, str]] = []
        # (Chromium suggests ".bashrc" as "bashrc": it strips a leading dot. The script-made
        # blob link starts no download in headless Chromium: nothing to report, nothing saved.)
        for link, name in (("#attachment", "bashrc"), ("#data", "planted.pth"), ("#blob", None)):
            clicked = await session.call("browser_click", {"page_id": page_id, "selector": link})
            assert clicked.success, clicked.error
            if name is None:
                continue
            # ... and says so: the model does not take the click for a saved file (s40).
            with trio.fail_after(10):  # the refusal is reported by the next call at the latest
                while not clicked.data.get("refused_downloads"):
                    await trio.sleep(0.1)
                    clicked = await session.call("browser_click",
                                                 {"page_id": page_id, "selector": "#still"})
            refused = clicked.data["refused_downloads"]
            assert [d["filename"] for d in refused] == [name], refused
            assert "nothing was saved" in clicked.data["note_downloads"]
            reported += refused
        assert reported[1]["url"].startswith("data:text/plain")
        filled = await session.call("browser_fill", {"page_id": page_id, "selector": "#upload",
                                                     "value": "/etc/passwd"})
        assert filled.error is not None and filled.error.code == "EXECUTION_ERROR"
        sandbox = engine().sandbox
        profile = Path(sandbox.profile_dir) if sandbox and sandbox.profile_dir else None
    names = {".bashrc", "planted.pth", "tooldeck.toml", "attachment"}
    assert not [p for p in tmp_path.rglob("*") if p.name in names]
    if profile is not None and profile.exists():
        assert not [p for p in profile.rglob("*") if p.name in names]


def test_refused_downloads_are_reported_bounded_and_printable() -> None:
    from tooldeck_tools_browser._engine import MAX_REPORTED_DOWNLOADS, PageEntry

    entry = PageEntry(page_id="pg_1", page=None)
    assert entry.take_downloads() == {}
    entry.note_download("data:text/plain," + "A" * 5_000, "evil\u202etxt.exe\x1b[31m\n.toml")
    for n in range(20):
        entry.note_download(f"http://127.0.0.1/{n}", f"f{n}")
    report = entry.take_downloads()
    refused = report["refused_downloads"]
    assert len(refused) == MAX_REPORTED_DOWNLOADS
    assert refused[0]["filename"] == "eviltxt.exe[31m.toml"  # no bidi, ESC or newline
    assert len(refused[0]["url"]) == 300 and refused[0]["url"].endswith("\u2026")
    assert f"({21 - MAX_REPORTED_DOWNLOADS} more not listed)" in report["note_downloads"]
    assert entry.take_downloads() == {}  # reported once
