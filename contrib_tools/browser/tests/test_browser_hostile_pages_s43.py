"""Hostile pages while a call uses them (audit s43), through the whole deck and real Chromium.

The audit found:
- ``browser_click`` gave clicking, waiting for the load it started and reading the page a full
  ``timeout_s`` each: a click that led to a page that never finished loading and then kept its
  thread took twice its time, past the deployment's limit for the tool, whose executor then
  answered with a TIMEOUT that knew nothing of the page (left open, its script spinning);
- a click or fill on a page whose script held its thread (a button looping forever) answered
  "no matching element became ready in time" and left the renderer at 100% of a core.
Dialogs (alert, confirm, prompt, print, on load or in a loop), beforeunload, meta refresh and
reload loops, redirects while clicking or typing and pop-ups while navigating ended within the
call's time and left the session serving plain pages: no test of theirs was needed.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from tooldeck_tools_browser import engine

from tooldeck.testing import make_deck

# Skipped with the reason when Chromium is missing (conftest.py).
pytestmark = pytest.mark.chromium

ENTRY_POINTS = ["schema", "runner", "policy", "browser"]


@pytest.fixture(autouse=True)
def _allow_the_site(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")


async def _pages(session_id: str) -> tuple[int, int]:
    eng = engine()

    async def count() -> tuple[int, int]:
        state = eng._sessions.get(session_id)
        return (len(state.context.pages), len(state.pages)) if state is not None else (0, 0)

    return await eng.run(count)  # type: ignore[no-any-return]


async def test_a_click_keeps_to_the_deployments_limit_and_closes_the_page_it_gave_up_on(
    site: Any,
) -> None:
    """A click to a page that never loads (an image that never comes) and whose script then
    holds its thread: the click's wait for the load and the read each took the whole limit,
    so the executor ended the call with its own TIMEOUT (nothing about the page, which stayed
    open and spinning). They now share the call's time: the tool's own TIMEOUT answers, the
    page is closed, and the session serves a plain page right after."""
    limit_s = 8.0
    async with make_deck(
        load_entry_points=ENTRY_POINTS,
        config={"tools": {"browser_click": {"execution": {"timeout_s": limit_s}}}},
    ) as deck:
        session = deck.session(max_level="moderate", grants={"browser"})
        ok = await session.call("browser_navigate", {"url": site.url("/click-stall")})
        assert ok.success, ok.error
        page_id = ok.data["page_id"]
        with trio.fail_after(60):  # a hang guard, not a timing figure
            clicked = await session.call("browser_click", {"page_id": page_id, "selector": "#b"})
        assert clicked.error is not None and clicked.error.code == "TIMEOUT", clicked
        # The tool's answer (the page it gave up on, closed), not the executor's generic one.
        assert page_id in clicked.error.message and "closed" in clicked.error.message, clicked
        assert await _pages(session.id) == (0, 0)
        with trio.fail_after(60):
            plain = await session.call("browser_navigate", {"url": site.url("/form")})
        assert plain.success and plain.data["title"] == "Form page", plain.error


@pytest.mark.parametrize(("path", "tool", "arguments"), [
    ("/click-busy", "browser_click", {"selector": "#b"}),
    # Busy once loaded: the fill's wait for the element cannot run either.
    ("/loop-later", "browser_fill", {"selector": "p", "value": "x"}),
])
async def test_an_action_on_a_page_its_script_holds_says_so_and_closes_the_page(
    site: Any, path: str, tool: str, arguments: dict[str, Any]
) -> None:
    """A button whose handler loops forever (or a page looping by itself): the click or fill
    timed out with "no matching element became ready in time" (the model went on checking its
    selector) and the page stayed open, its renderer at 100% of a core. A page that no longer
    answers is now closed and the call says its scripts kept it busy (TIMEOUT)."""
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(max_level="moderate", grants={"browser"})
        ok = await session.call("browser_navigate", {"url": site.url(path)})
        assert ok.success, ok.error
        page_id = ok.data["page_id"]
        await trio.sleep(2.0)  # /loop-later's script holds the page from 1.5 s after loading
        with trio.fail_after(60):  # a hang guard
            result = await session.call(tool, {"page_id": page_id, "timeout_s": 3, **arguments})
        assert result.error is not None and result.error.code == "TIMEOUT", result
        assert "kept it busy" in result.error.message and page_id in result.error.message
        assert await _pages(session.id) == (0, 0)
        with trio.fail_after(60):
            plain = await session.call("browser_navigate", {"url": site.url("/form")})
        assert plain.success and plain.data["title"] == "Form page", plain.error
