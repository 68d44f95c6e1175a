"""A closed session's zygote goes with it, not when newer sessions push it out.

With ``zygote = true`` every session gets a long-lived sandbox of its own per mount set. Closing
the session left it running (processes, their memory, mounts of the session's workdir) until
``max_warm_keys`` newer zygotes evicted it: for good on a deck that had gone quiet.
Real bubblewrap and cgroups; skipped where zygotes cannot run.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from tooldeck_hookspecs import SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

TOOLS_DIR = str(Path(__file__).resolve().parent)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

ECHO = ToolDefinition(
    name="echo", description="Echo the arguments from a sandbox.", category="code",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    entrypoint="runner_sandbox_tools:echo", security=SecurityConfig(sandbox=True),
)


def _zygote_deck(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A deck whose sandboxed ``echo`` runs in per-session zygotes."""
    monkeypatch.syspath_prepend(TOOLS_DIR)  # registration imports the entrypoint on the host
    config = {"runner": {"sandbox": "bubblewrap", "python_path": [TOOLS_DIR], "zygote": True,
                         "max_warm_keys": 8}}
    return tooldeck_testing.make_deck(
        config=config, load_entry_points=["schema", "runner"], tools=[ECHO]
    )



def _zygote_pool(deck: Any) -> Any:
    """The deck's sandbox pool; skips the test where zygotes cannot run."""
    pool = deck.executor.sandbox_pool()
    if not pool._zygote_usable():
        pytest.skip("zygotes need bubblewrap and per-call cgroups here")
    return pool


async def _wait_released(pool: Any, session_ids: list[str], *, collect: bool = False) -> None:
    """Wait (up to 5 s) until the pool holds none of ``session_ids``: the release runs in
    the background, so the tests wait for it, not for a time. ``collect`` runs the garbage
    collector first on every round (for sessions that were dropped, not closed)."""
    import gc

    for _ in range(500):
        if collect:
            gc.collect()
        if not any(pool.holds_session(sid) for sid in session_ids):
            return
        await trio.sleep(0.01)


async def test_closing_sessions_retires_their_zygotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deck = _zygote_deck(monkeypatch)
    async with deck:
        pool = _zygote_pool(deck)
        closed = []
        for n in range(4):
            session = deck.session(workdir=str(tmp_path))
            result = await session.call("echo", {"text": f"hello {n}"})
            assert result.success, result.error
            assert pool.holds_session(session.id)
            await session.aclose()
            closed.append(session.id)
        await _wait_released(pool, closed)
        assert pool.statistics().zygotes == 0
        assert pool._zygote_locks == {}
        # A session still open keeps its zygote.
        live = deck.session(workdir=str(tmp_path))
        assert (await live.call("echo", {"text": "still here"})).success
        other = deck.session(workdir=str(tmp_path))
        await other.aclose()
        for _ in range(50):
            await trio.sleep(0.01)
        assert pool.statistics().zygotes == 1 and pool.holds_session(live.id)


async def test_a_dropped_session_retires_its_zygote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A session dropped without aclose() (framework glue that opens one per request): its
    # zygote goes when the session is garbage-collected, not when eviction pushes it out.
    deck = _zygote_deck(monkeypatch)
    async with deck:
        pool = _zygote_pool(deck)
        session = deck.session(workdir=str(tmp_path))
        assert (await session.call("echo", {"text": "hello"})).success
        dropped = session.id
        assert pool.holds_session(dropped)
        del session
        await _wait_released(pool, [dropped], collect=True)  # collected, announced, released
        assert not pool.holds_session(dropped)
        assert pool.statistics().zygotes == 0
