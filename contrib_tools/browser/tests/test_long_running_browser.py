"""Closed sessions leave nothing behind in the process-wide browser engine.

Each distinct allow-list (the environment's plus a session's ``url_allow``) gets a guarding
proxy, a listening socket on loopback; sessions' allow-lists are remembered by session id. An
application giving each of its sessions an allow-list of its own grew one proxy per session
for the life of the process, and kept the closed sessions' lists until 4,096 newer ones came.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from tooldeck_tools_browser import _guard, engine

from tooldeck.testing import make_deck

# Skipped with the reason when Chromium is missing (conftest.py).
pytestmark = pytest.mark.chromium


def _ours(allow: tuple[str, ...]) -> bool:
    return any(entry.endswith(".long-running.example") for entry in allow)


async def test_sessions_with_allow_lists_of_their_own_leave_no_proxy(
    site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    async with make_deck(load_entry_points=["schema", "runner", "policy", "browser"]) as deck:
        closed = []
        for n in range(4):
            session = deck.session(
                workdir=str(tmp_path), grants={"browser"}, max_level="moderate",
                attributes={"url_allow": f"127.0.0.1,user{n}.long-running.example"},
            )
            page = await session.call("browser_navigate", {"url": site.url("/")})
            assert page.success, page.error
            await session.aclose()
            closed.append(session.id)
        eng = engine()
        # The pages close in the background, on the engine's loop: wait for that (bounded),
        # then check what is left.
        with trio.move_on_after(30):
            while any(eng.open_pages(sid) for sid in closed) or any(map(_ours, eng._proxies)):
                await trio.sleep(0.05)
        assert not [allow for allow in eng._proxies if _ours(allow)]
        assert not set(closed) & set(_guard._SESSION_ALLOW)
        # A session still open keeps its proxy and its allow-list.
        live = deck.session(
            workdir=str(tmp_path), grants={"browser"}, max_level="moderate",
            attributes={"url_allow": "127.0.0.1,live.long-running.example"},
        )
        assert (await live.call("browser_navigate", {"url": site.url("/")})).success
        assert len([allow for allow in eng._proxies if _ours(allow)]) == 1
        assert live.id in _guard._SESSION_ALLOW
        await live.aclose()
