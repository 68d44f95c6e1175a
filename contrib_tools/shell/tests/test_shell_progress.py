"""A long shell_exec reports its output lines as progress while it runs, from inside bubblewrap.

Sandbox worker → progress frames → host → ``Session.call(on_progress=...)`` (issue 15).
"""

from __future__ import annotations

import shutil

import pytest
import trio

tooldeck_testing = pytest.importorskip("tooldeck.testing")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

# Prints a line every 0.3 s for ~2.4 s: long enough for a few progress events.
SCRIPT = "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.3; done"


async def test_long_runs_report_progress_and_quick_ones_do_not(workdir):
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "shell"],
        config={"runner": {"sandbox": "bubblewrap"}},
    )
    events: list[dict] = []
    quick_events: list[dict] = []
    async with deck:
        session = deck.session(workdir=workdir)
        session.always_allow("shell_exec")
        (workdir / "steps.sh").write_text(SCRIPT + "\n")
        long_run = await session.call("shell_exec", {"command": ["sh", "steps.sh"]},
                                      on_progress=lambda e: events.append(dict(e)))
        quick = await session.call("shell_exec", {"command": ["echo", "hi"]},
                                   on_progress=lambda e: quick_events.append(dict(e)))
        await trio.sleep(0.05)
    assert long_run.success, long_run.error
    assert long_run.metadata.get("isolation", "").startswith("bubblewrap")
    assert "line 8" in long_run.data["stdout"]
    assert events, "no progress from a 2.4 s run"
    assert all(e["message"].startswith("[stdout] line ") for e in events)
    counts = [e["progress"] for e in events]
    assert counts == sorted(counts) and counts[-1] <= 8
    assert quick.success and quick_events == []  # under a second: nothing to report
