"""Hostile pages against the browser tools, through the whole deck and real Chromium.

An audit found:
- a page looping forever after its load event held ``browser_navigate`` for the tool's
  execution timeout (two minutes), whatever ``timeout_s`` said, and its renderer kept a core at
  100% after the call: reading the page waited for its scripts with no limit;
- ``window.open`` pop-ups escaped the five-page limit and outlived ``browser_close``: 30 pages
  from one, running their scripts through the proxy;
- a 600 kB title or a 1.5 MB URL lost the whole result to the output cap.
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


def _session(deck: Any) -> Any:
    return deck.session(max_level="moderate", grants={"browser"})


async def _pages(session_id: str) -> tuple[int, int]:
    eng = engine()

    async def count() -> tuple[int, int]:
        state = eng._sessions.get(session_id)
        return (len(state.context.pages), len(state.pages)) if state is not None else (0, 0)

    return await eng.run(count)  # type: ignore[no-any-return]


async def test_a_page_that_loops_after_loading_ends_at_timeout_s_and_is_closed(
    site: Any,
) -> None:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck)
        ok = await session.call("browser_navigate", {"url": site.url("/form")})
        assert ok.success, ok.error
        page_id = ok.data["page_id"]
        with trio.fail_after(60):  # not a timing figure: the tool's own timeout is 120 s
            looped = await session.call(
                "browser_navigate", {"url": site.url("/loop"), "page_id": page_id, "timeout_s": 3}
            )
        assert looped.error is not None and looped.error.code == "TIMEOUT", looped
        assert "closed" in looped.error.message
        assert await _pages(session.id) == (0, 0)  # the looping page is gone
        again = await session.call("browser_click", {"page_id": page_id, "selector": "p"})
        assert again.error is not None and again.error.code != "TIMEOUT"


async def test_pop_ups_are_closed_and_never_counted_as_the_models_pages(site: Any) -> None:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck)
        result = await session.call("browser_navigate", {"url": site.url("/popups")})
        assert result.success, result.error
        with trio.fail_after(30):
            while (await _pages(session.id))[0] > 1:
                await trio.sleep(0.1)
        assert await _pages(session.id) == (1, 1)


@pytest.mark.parametrize(("path", "field", "flag"), [("/bigtitle", "title", "title_truncated"),
                                                      ("/bigurl", "url", "url_truncated")])
async def test_a_huge_title_or_url_is_cut_not_the_whole_result(
    site: Any, path: str, field: str, flag: str
) -> None:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        result = await _session(deck).call("browser_navigate", {"url": site.url(path)})
    assert result.success, result.error
    assert result.data[flag] is True and len(result.data[field]) <= 4_000
    assert result.data["text"]  # the page itself came back
