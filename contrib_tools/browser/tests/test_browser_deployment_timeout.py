"""The page tools' time follows the deployment's ``execution.timeout_s`` for the tool (the
family of "sandboxed calls die at 10 s": a limit the operator set that some inner default
overrides).

Without a ``timeout_s`` from the model, the browser waited for its own 30 s (navigate) or
10 s (click, fill) whatever the deployment had configured: raised for slow sites, the page
still failed at 30 s; lowered, the executor gave up first with a TIMEOUT that knew nothing of
the page, which stayed open and busy.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from tooldeck_tools_browser._limits import (
    DEFAULT_ACTION_TIMEOUT_S,
    DEFAULT_NAVIGATE_TIMEOUT_S,
    EXECUTION_TIMEOUT_S,
)
from tooldeck_tools_browser.tools import _timeout_ms

from tooldeck_hookspecs import ToolContext


def _context(**limits: Any) -> ToolContext:
    return ToolContext(session_id="s", workdir="/tmp", limits=limits)


def test_an_omitted_timeout_follows_the_deployments_limit() -> None:
    assert _timeout_ms({}, DEFAULT_NAVIGATE_TIMEOUT_S, _context()) == 30_000
    assert _timeout_ms({}, DEFAULT_ACTION_TIMEOUT_S, _context()) == 10_000
    # The pack's own execution.timeout_s is no deployment's choice.
    assert _timeout_ms({}, DEFAULT_NAVIGATE_TIMEOUT_S,
                       _context(timeout_s=EXECUTION_TIMEOUT_S)) == 30_000
    assert _timeout_ms({}, DEFAULT_NAVIGATE_TIMEOUT_S, _context(timeout_s=240)) == 240_000
    assert _timeout_ms({}, DEFAULT_ACTION_TIMEOUT_S, _context(timeout_s=4)) == 4_000
    for junk in (True, float("nan"), float("inf"), 0, -3, "240"):
        assert _timeout_ms({}, DEFAULT_NAVIGATE_TIMEOUT_S, _context(timeout_s=junk)) == 30_000
    # The model's own value is taken as before (bounded by MAX_TIMEOUT_S).
    assert _timeout_ms({"timeout_s": 5}, DEFAULT_NAVIGATE_TIMEOUT_S,
                       _context(timeout_s=240)) == 5_000


@pytest.mark.chromium
async def test_a_lowered_limit_gets_the_tools_timeout_and_closes_the_page(
    site: Any, limited_deck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    limit_s = 10.0
    async with limited_deck({"browser_navigate": limit_s}) as deck:
        session = deck.session(max_level="moderate", grants={"browser"})
        ok = await session.call("browser_navigate", {"url": site.url("/form")})
        assert ok.success, ok.error
        with trio.fail_after(60):  # not a timing figure: a hang would end the test here
            looped = await session.call(
                "browser_navigate", {"url": site.url("/loop"), "page_id": ok.data["page_id"]}
            )
    assert looped.error is not None and looped.error.code == "TIMEOUT", looped
    # The tool's answer (the page it gave up on, closed), not the executor's generic one.
    assert "closed" in looped.error.message, looped.error


@pytest.mark.chromium
async def test_a_screenshot_keeps_to_the_deployments_limit_and_says_so(
    site: Any, limited_deck: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Measuring and capturing had 30 s each, fixed: under a lowered limit the executor cut
    the call with its own TIMEOUT, which knows nothing of the page; under a raised one a
    busy page still failed at 30 s. They now share the call's time, the deployment's."""
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    limit_s = 6.0
    async with limited_deck({"browser_screenshot": limit_s}) as deck:
        session = deck.session(max_level="moderate", grants={"browser"},
                               workdir=str(tmp_path))
        ok = await session.call("browser_navigate", {"url": site.url("/loop-later")})
        assert ok.success, ok.error
        await trio.sleep(2.0)  # its script now holds the page
        with trio.fail_after(60):  # a hang guard
            shot = await session.call("browser_screenshot", {"page_id": ok.data["page_id"],
                                                             "full_page": True})
    assert shot.error is not None and shot.error.code == "TIMEOUT", shot
    assert "screenshot of" in shot.error.message and ok.data["page_id"] in shot.error.message
    assert not (tmp_path / "screenshot.png").exists()
