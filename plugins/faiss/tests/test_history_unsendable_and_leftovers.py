"""A use the shared store cannot take is dropped, not re-sent for ever; a save killed before its
rename leaves no temporary file for good."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tooldeck_faiss._history import HistoryRow, SelectionHistory

ODD = "read the file \ud800 please"


class StrictStore:
    """A store that encodes its rows strictly (as tooldeck-redis did): a lone surrogate raises
    UnicodeEncodeError before anything is sent."""

    label = "strict"

    def __init__(self, refuse: str | None = None) -> None:
        self.refuse = refuse
        self.received: list[tuple[str, str]] = []
        self.calls = 0
        self.down = False

    def exchange(self, uses: Sequence[HistoryRow], since: float) -> tuple[list[HistoryRow], float]:
        self.calls += 1
        if self.down:
            raise ConnectionError("store down")
        for use in uses:
            f"{use.tool}\0{use.query}".encode()
            if self.refuse is not None and use.tool == self.refuse:
                raise ValueError(f"cannot store {use.tool!r}")
        self.received += [(use.query, use.tool) for use in uses]
        return [], float(self.calls)

    def forget(self, tools: Sequence[str]) -> None:
        pass

    def close(self) -> None:
        pass


def _history(store: Any) -> SelectionHistory:
    return SelectionHistory(store=store, model_id="m", retry_interval_s=60.0)


def test_a_task_the_store_cannot_encode_is_dropped_and_the_rest_still_shared() -> None:
    """Before, the store's UnicodeEncodeError marked it down and the uses were queued again:
    every later exchange failed the same way, and nothing was shared again."""
    store = StrictStore()
    history = _history(store)
    history.record("read my notes", "file_read")
    assert history.sync(force=True)
    history.record(ODD, "file_read")
    history.record("other task 0", "web_search")
    assert not history.sync(force=True)  # refused: the odd use is dropped, the other kept
    assert not history.statistics().store_down
    for i in range(1, 3):
        history.record(f"other task {i}", "web_search")
        assert history.sync(force=True)
    assert store.received == [
        ("read my notes", "file_read"), ("other task 0", "web_search"),
        ("other task 1", "web_search"), ("other task 2", "web_search"),
    ]
    stats = history.statistics()
    assert not stats.store_down and stats.store_errors == 1 and stats.syncs == 3
    # The odd task is still a record of this process: only sharing it was given up.
    assert (ODD, "file_read") in {(r["query"], r["tool"]) for r in history.as_rows()}


def test_uses_refused_for_no_visible_reason_are_dropped_not_resent() -> None:
    store = StrictStore(refuse="weird_tool")
    history = _history(store)
    history.record("task", "weird_tool")
    history.record("another", "file_read")
    assert not history.sync(force=True)
    assert not history.statistics().store_down
    history.record("later", "web_search")
    assert history.sync(force=True)
    assert store.received == [("later", "web_search")]


def test_a_store_that_fails_keeps_the_uses_for_later() -> None:
    store = StrictStore()
    store.down = True
    history = _history(store)
    history.record("task", "file_read")
    assert not history.sync(force=True)
    assert history.statistics().store_down
    store.down = False
    assert history.sync(force=True)
    assert store.received == [("task", "file_read")]


# ---------------------------------------------------------------- temporary files


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _temp_name(pid: int) -> str:
    from tooldeck_faiss._history import _host_token

    return f".history-{pid}@{_host_token()}-abcd1234"


def _saved_history(path: Path) -> SelectionHistory:
    history = SelectionHistory(path, model_id="m", max_records=10)
    history.record("a task", "file_read", np.ones(4, np.float32) / 2)
    return history


def test_a_save_removes_what_killed_saves_left(tmp_path: Path) -> None:
    """Before, a process killed between writing its temporary file and renaming it left the
    file (a whole history) there for good: one more per kill."""
    path = tmp_path / "history.json"
    dead = tmp_path / _temp_name(_dead_pid())
    dead.write_text("{}")
    alive = tmp_path / _temp_name(os.getpid())  # a save of this process, under way
    alive.write_text("{}")
    old_style = tmp_path / ".history-k2j4h5g6"  # an older name: only its age tells
    old_style.write_text("{}")
    stale = time.time() - 2 * 3600
    os.utime(old_style, (stale, stale))
    recent_style = tmp_path / ".history-a1b2c3d4"
    recent_style.write_text("{}")
    other_file = tmp_path / "notes.txt"
    other_file.write_text("mine")
    _saved_history(path).save()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["history.json", alive.name, recent_style.name, "notes.txt"])


def test_a_load_removes_them_too(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    _saved_history(path).save()
    dead = tmp_path / _temp_name(_dead_pid())
    dead.write_text("{}")
    again = SelectionHistory(path, model_id="m", max_records=10)
    assert len(again) == 1
    assert not dead.exists()


def test_a_killed_save_leaves_nothing_after_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    script = (
        "import sys, os, numpy as np\n"
        "from tooldeck_faiss._history import SelectionHistory\n"
        "h = SelectionHistory(sys.argv[1], model_id='m', max_records=50)\n"
        "h.record('task', 'file_read', np.ones(4, np.float32) / 2)\n"
        # Killed mid-save: after the temporary file is written, before the rename.
        "os.replace = lambda *a: os.kill(os.getpid(), 9)\n"
        "h.save()\n"
    )
    child = subprocess.run([sys.executable, "-c", script, str(path)], check=False)
    assert child.returncode == -9
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".history-")]
    _saved_history(path).save()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.json"]
