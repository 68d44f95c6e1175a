"""The browser tools against real pages in real Chromium, through the whole deck.

The deck loads schema (argument validation), runner, policy (tiers and the URL guard) and the
pack itself; the pages come from a threaded HTTP server on 127.0.0.1 (see conftest).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
from tooldeck_tools_browser import MAX_TEXT_CHARS, browser_navigate, engine

from tooldeck.testing import make_deck
from tooldeck_hookspecs import ToolContext, ToolFailure

# Skipped with the reason when Chromium is missing (conftest.py).
pytestmark = pytest.mark.chromium

ENTRY_POINTS = ["schema", "runner", "policy", "browser"]


@pytest.fixture
def allow_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def _session(deck, workdir, **kw):
    kw.setdefault("grants", {"browser"})
    return deck.session(workdir=str(workdir), max_level="moderate", **kw)


async def test_navigate_extracts_title_text_and_links(site, allow_loopback, workdir):
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, workdir)
        result = await session.call("browser_navigate", {"url": site.url("/")})
        assert result.success, result.error
        data = result.data
        assert data["title"] == "Tooldeck Test Home" and data["status"] == 200
        assert data["url"] == site.url("/") and data["page_id"].startswith("pg_")
        text = data["text"]
        assert "Main heading" in text and "First paragraph with bold words." in text
        assert "Second paragraph." in text and "\n\n\n" not in text
        # Scripts, styles and navigation are not part of the readable text.
        for noise in ("SCRIPTTEXT", "STYLETEXT", "Menu text", "NAVLINK"):
            assert noise not in text
        assert data["truncated"] is False
        hrefs = {link["href"]: link["text"] for link in data["links"]}
        assert hrefs[site.url("/form")] == "Go to the form"
        assert hrefs[site.url("/page2?x=1")] == "Relative link"  # made absolute
        assert "https://example.org/abs" in hrefs
        assert site.url("/nav-only") in hrefs  # navigation links are still links
        assert not any(h.startswith("mailto:") for h in hrefs)
        assert data["link_count"] == len(data["links"]) == 4
        await session.call("browser_close", {"page_id": data["page_id"]})


async def test_fill_and_click_submit_a_form_the_server_receives(site, allow_loopback, workdir):
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, workdir)
        page = (await session.call("browser_navigate", {"url": site.url("/form")})).data
        page_id = page["page_id"]
        filled = await session.call("browser_fill", {"page_id": page_id, "selector": "#q",
                                                     "value": "héllo wörld & more"})
        assert filled.success and filled.data["filled"] is True, filled.error
        await session.call("browser_fill", {"page_id": page_id, "selector": "textarea[name=note]",
                                            "value": "a note"})
        clicked = await session.call("browser_click", {"page_id": page_id, "text": "Send it"})
        assert clicked.success, clicked.error
        assert clicked.data["title"] == "Thanks"
        assert "Received: héllo wörld & more" in clicked.data["text"]
        assert site.submitted[-1] == {"q": ["héllo wörld & more"], "note": ["a note"]}
        # A selector that matches nothing is a structured error, quickly.
        missing = await session.call("browser_click", {"page_id": page_id, "selector": "#nope",
                                                       "timeout_s": 0.5})
        assert missing.error.code == "EXECUTION_ERROR" and "selector" in missing.error.suggestion
        closed = await session.call("browser_close", {"page_id": page_id})
        assert closed.data["closed"] is True
        gone = await session.call("browser_click", {"page_id": page_id, "selector": "#go"})
        assert gone.error.code == "EXECUTION_ERROR" and "browser_navigate" in gone.error.suggestion


async def test_screenshot_is_a_png_inside_the_workdir(site, allow_loopback, workdir):
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, workdir)
        page_id = (await session.call("browser_navigate", {"url": site.url("/")})).data["page_id"]
        shot = await session.call("browser_screenshot", {"page_id": page_id,
                                                         "path": "shots/home.png",
                                                         "full_page": True})
        assert shot.success, shot.error
        png = (workdir / "shots" / "home.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and shot.data["bytes"] == len(png)
        assert shot.data["path"] == "shots/home.png" and shot.data["width"] == 1280
        # The picture comes back too, as an image block in every provider's shape.
        import base64

        from tooldeck.adapters import result_messages
        from tooldeck_hookspecs import ToolCall

        image = shot.data["image"]
        assert image["$content"] == "image" and image["mimeType"] == "image/png"
        assert base64.b64decode(image["data"]) == png
        call = ToolCall(name="browser_screenshot", arguments={}, id="c1")
        (mcp,) = result_messages("mcp", [(call, shot)])
        assert [b["type"] for b in mcp["content"]] == ["text", "image"]
        assert mcp["content"][1]["data"] == image["data"]
        assert image["data"] not in mcp["content"][0]["text"]  # the text names it, no bytes
        (anthropic,) = result_messages("anthropic", [(call, shot)])
        assert anthropic["content"][0]["content"][1]["source"]["media_type"] == "image/png"
        # Escapes are refused by the policy before the tool runs...
        escape = await session.call("browser_screenshot", {"page_id": page_id,
                                                           "path": "../outside.png"})
        assert escape.error.code == "PATH_NOT_ALLOWED"
        assert not (workdir.parent / "outside.png").exists()
        not_png = await session.call("browser_screenshot", {"page_id": page_id,
                                                            "path": "shot.jpg"})
        assert not_png.error.code == "INVALID_ARGUMENTS"  # the schema's .png pattern
        # ...and a symlink planted inside the workdir is not followed by the tool itself.
        outside = workdir.parent / f"{workdir.name}-outside"
        outside.mkdir()
        os.symlink(outside, workdir / "link")
        through = await session.call("browser_screenshot", {"page_id": page_id,
                                                            "path": "link/x.png"})
        assert not through.success
        assert through.error.code == "PATH_NOT_ALLOWED"
        assert list(outside.iterdir()) == []


async def test_screenshot_targets_that_are_no_regular_file_or_protected_are_refused(
    site, allow_loopback, workdir
):
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, workdir)
        page_id = (await session.call("browser_navigate", {"url": site.url("/")})).data["page_id"]
        os.mkfifo(workdir / "fifo.png")
        # A FIFO nobody reads used to block the write forever, in a thread nobody can cancel;
        # the deadline only turns such a hang into a failure instead of a stuck test run.
        with trio.fail_after(60):
            fifo = await session.call("browser_screenshot", {"page_id": page_id,
                                                             "path": "fifo.png"})
        assert fifo.error.code == "PATH_NOT_ALLOWED" and "FIFO" in fifo.error.message
        for path, rule in ((".git/shot.png", ".git/"), (".VSCode/a.png", ".vscode/")):
            refused = await session.call("browser_screenshot", {"page_id": page_id,
                                                                "path": path})
            assert refused.error.code == "PATH_NOT_ALLOWED", path
            assert rule in refused.error.message
        assert sorted(p.name for p in workdir.iterdir()) == ["fifo.png"]  # nothing created
        shot = await session.call("browser_screenshot", {"page_id": page_id, "path": "ok.png"})
        assert shot.success and "mode" in shot.metadata["browser_sandbox"]


async def test_loopback_is_refused_without_an_allowance(site, workdir, monkeypatch):
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        result = await _session(deck, workdir).call("browser_navigate", {"url": site.url("/")})
        assert result.error.code == "URL_NOT_ALLOWED"
        assert "loopback" in result.error.message
        for url in ("file:///etc/passwd", "javascript:alert(1)", "chrome://version",
                    "data:text/html,<h1>x</h1>"):
            refused = await _session(deck, workdir).call("browser_navigate", {"url": url})
            assert refused.error.code == "URL_NOT_ALLOWED", url


async def test_session_attribute_allowance_reaches_the_browser(site, workdir, monkeypatch):
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, workdir, attributes={"url_allow": "127.0.0.1"})
        result = await session.call("browser_navigate", {"url": site.url("/")})
        assert result.success, result.error
        assert result.data["title"] == "Tooldeck Test Home"


async def test_the_browser_guards_even_when_the_policy_is_bypassed(site, workdir, monkeypatch):
    # Called directly, no policy plugin ran: the proxy alone must refuse loopback.
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    context = ToolContext(session_id="direct-no-policy", workdir=str(workdir))

    with pytest.raises(ToolFailure) as info:
        await browser_navigate({"url": site.url("/")}, context)
    assert info.value.code == "URL_NOT_ALLOWED"
    with pytest.raises(ToolFailure) as info:
        await browser_navigate({"url": "file:///etc/passwd"}, context)
    assert info.value.code == "URL_NOT_ALLOWED"
    assert engine().open_pages("direct-no-policy") == []  # failed pages are not left open


async def test_redirect_and_subresources_to_a_disallowed_host_are_blocked(
    site, allow_loopback, workdir
):
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, workdir)
        before = len(site.canary_hits)
        redirected = await session.call("browser_navigate", {"url": site.url("/redirect-out")})
        assert redirected.error.code == "URL_NOT_ALLOWED", redirected
        assert "redirect" in redirected.error.message and "::1" in redirected.error.message
        # An allowed redirect is followed.
        fine = await session.call("browser_navigate", {"url": site.url("/redirect-in")})
        assert fine.success and fine.data["url"] == site.url("/form")
        # A page on an allowed host that loads an image from a disallowed one: the page loads,
        # the image request is stopped and reported.
        page = await session.call("browser_navigate", {"url": site.url("/subresource")})
        assert page.success and "Image below" in page.data["text"]
        assert any(b["host"] == "::1" for b in page.data["blocked_requests"])
        assert len(site.canary_hits) == before  # nothing reached the internal server


async def test_unreachable_binary_odd_charsets_and_huge_pages(
    site, allow_loopback, workdir, closed_port
):
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, workdir)
        down = await session.call("browser_navigate",
                                  {"url": f"http://127.0.0.1:{closed_port}/"})
        assert down.error.code == "EXECUTION_ERROR" and "connect" in down.error.message
        binary = await session.call("browser_navigate", {"url": site.url("/binary")})
        assert binary.error.code == "EXECUTION_ERROR", binary
        assert "download" in binary.error.message
        latin = await session.call("browser_navigate", {"url": site.url("/latin1")})
        assert latin.data["title"] == "Café page"
        assert "Café naïve à la carte" in latin.data["text"]
        meta = await session.call("browser_navigate", {"url": site.url("/latin1-nocharset")})
        assert "Crème brûlée" in meta.data["text"]
        huge = await session.call("browser_navigate", {"url": site.url("/huge")})
        assert huge.success, huge.error
        assert huge.data["truncated"] is True and len(huge.data["text"]) == MAX_TEXT_CHARS
        assert "THE-END" not in huge.data["text"] and "word0 word1" in huge.data["text"]
        missing = await session.call("browser_navigate", {"url": site.url("/nowhere")})
        assert missing.success and missing.data["status"] == 404  # a page, with its status


async def test_bad_arguments_are_reported_by_field(site, allow_loopback, workdir):
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, workdir)
        wrong_type = await session.call("browser_navigate", {"url": 123})
        assert wrong_type.error.code == "INVALID_ARGUMENTS"
        bad_wait = await session.call("browser_navigate", {"url": site.url("/"),
                                                           "wait_until": "eventually"})
        assert bad_wait.error.code == "INVALID_ARGUMENTS"
        extra = await session.call("browser_fill", {"page_id": "pg_x", "selector": "#q"})
        assert extra.error.code == "INVALID_ARGUMENTS"  # value is required
        both = await session.call("browser_click", {"page_id": "pg_x", "selector": "a",
                                                    "text": "b"})
        assert both.error.code == "INVALID_ARGUMENTS"
        ungranted = await deck.session(workdir=str(workdir)).call(
            "browser_navigate", {"url": site.url("/")})
        assert ungranted.error.code == "PERMISSION_DENIED"  # moderate needs the browser grant


async def test_pages_belong_to_their_session_and_are_capped(site, allow_loopback, workdir):
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        alice, bob = _session(deck, workdir), _session(deck, workdir)
        first = (await alice.call("browser_navigate", {"url": site.url("/form")})).data
        stolen = await bob.call("browser_fill", {"page_id": first["page_id"], "selector": "#q",
                                                 "value": "x"})
        assert stolen.error.code == "EXECUTION_ERROR" and "no open page" in stolen.error.message
        cap = engine().max_pages_per_session
        ids = [first["page_id"]]
        closed: list[str] = []
        for _ in range(cap):
            data = (await alice.call("browser_navigate", {"url": site.url("/latin1")})).data
            ids.append(data["page_id"])
            closed += data.get("closed_pages", [])
        assert closed == [first["page_id"]]
        assert engine().open_pages(alice.id) == ids[1:]
        # Loading into an open page keeps its id.
        again = await alice.call("browser_navigate", {"url": site.url("/"), "page_id": ids[-1]})
        assert again.data["page_id"] == ids[-1] and again.data["title"] == "Tooldeck Test Home"


async def test_slow_pages_time_out_and_cancelled_calls_leave_no_page(
    site, allow_loopback, workdir
):
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, workdir)
        slow = await session.call("browser_navigate", {"url": site.url("/slow"),
                                                       "timeout_s": 0.5})
        assert slow.error.code == "TIMEOUT" and "timeout_s" in slow.error.suggestion
        assert engine().open_pages(session.id) == []
        with trio.move_on_after(0.5) as scope:
            await session.call("browser_navigate", {"url": site.url("/slow")})
        assert scope.cancelled_caught
        # The asyncio side closes the page once the cancellation reaches it.
        for _ in range(100):
            if not engine().open_pages(session.id):
                break
            await trio.sleep(0.05)
        assert engine().open_pages(session.id) == []


async def test_closing_the_session_closes_its_pages(site, tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    deck = make_deck(load_entry_points=["schema", "runner", "policy", "browser"])
    async with deck:
        session = deck.session(workdir=tmp_path, grants={"browser"})
        page = await session.call("browser_navigate", {"url": site.url("/")})
        assert page.success, page.error
        assert engine().open_pages(session.id) == [page.data["page_id"]]
        await session.aclose()
        with trio.fail_after(10):
            while engine().open_pages(session.id):
                await trio.sleep(0.05)
