"""A file_write the runner gave up on (its call timed out or was cancelled) never lands.

Through the real deck and runner, with a short ``[tools.file_write.execution] timeout_s``. The
write is slowed at a seam of the tool's own (``_atomic._finish``: the data is written, the name
not yet given), never the runner's. The runner answers TIMEOUT or CANCELLED at once; when the
tool's thread gets on, ``ToolContext.commit()`` refuses the rename: the file keeps its old
content (or never appears) and no temp file is left. A write already past its commit when the
call is given up on is waited for, and its real result returned.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_tools_fs import _atomic

tooldeck_testing = pytest.importorskip("tooldeck.testing")

TIMEOUT_S = 0.5
#: Generous: nothing waits for it unless a test is broken.
LONG_S = 60.0


def _deck(timeout_s: float = TIMEOUT_S, grace_s: float | None = None) -> Any:
    config: dict[str, Any] = {"tools": {"file_write": {"execution": {"timeout_s": timeout_s}}}}
    if grace_s is not None:
        config["runner"] = {"commit_grace_s": grace_s}
    return tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs"], config=config)


class Gate:
    """Holds a step of the tool's thread until the test opens it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()

    def wrap(self, original: Callable[..., Any], *, after: bool) -> Callable[..., Any]:
        def held(*args: Any) -> Any:
            if not after:
                self._hold()
            value = original(*args)
            if after:
                self._hold()
            return value

        return held

    def _hold(self) -> None:
        self.entered.set()
        self.open.wait(LONG_S)

    async def until_entered(self) -> None:
        with trio.fail_after(LONG_S):
            while not self.entered.is_set():
                await trio.sleep(0.01)


@pytest.fixture(params=["auto", "named"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a write is made: an O_TMPFILE inode, or a named temp file."""
    monkeypatch.setattr(_atomic, "MODE", request.param)
    return str(request.param)


@pytest.fixture
def gate() -> Iterator[Gate]:
    held = Gate()
    try:
        yield held
    finally:
        held.open.set()  # never leave a thread behind


def _slow_before_rename(monkeypatch: pytest.MonkeyPatch, gate: Gate) -> None:
    # The data is on disk (a temp file in "named" mode), the name is not given yet.
    monkeypatch.setattr(_atomic, "_finish", gate.wrap(_atomic._finish, after=True))


async def _threads_done(deck: Any) -> None:
    """Wait until the abandoned write's thread has really ended."""
    with trio.fail_after(LONG_S):
        while deck.executor.statistics()["filesystem"].abandoned_threads:
            await trio.sleep(0.01)


def _names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("existing", [False, True], ids=["new", "replace"])
async def test_a_timed_out_write_never_lands(
    tmp_path: Path, mode: str, gate: Gate, existing: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "notes.txt"
    if existing:
        target.write_text("old")
    before = _names(tmp_path)
    _slow_before_rename(monkeypatch, gate)
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        result = await session.call("file_write", {"path": "notes.txt", "content": "new"})
        assert not result.success and result.error.code == "TIMEOUT", result.error
        assert gate.entered.is_set()  # the write was under way when the runner gave up
        gate.open.set()
        await _threads_done(deck)
    # The caller was told it failed, and it did not happen; no temp file is left either.
    assert _names(tmp_path) == before
    if existing:
        assert target.read_text() == "old"
    assert not any(_atomic.is_temp_name(name) for name in os.listdir(tmp_path))


async def _write_new(session: Any, path: str, results: list[Any]) -> None:
    """Write "new" to ``path`` in ``session``, appending the result (a nursery task)."""
    results.append(await session.call("file_write", {"path": path, "content": "new"}))


async def test_a_cancelled_write_never_lands(
    tmp_path: Path, mode: str, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("old")
    _slow_before_rename(monkeypatch, gate)
    results = []
    async with _deck(timeout_s=LONG_S) as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write_new, session, "notes.txt", results)
            await gate.until_entered()
            session.cancel()
        gate.open.set()
        await _threads_done(deck)
    (result,) = results
    assert not result.success and result.error.code == "CANCELLED", result.error
    assert target.read_text() == "old"
    assert _names(tmp_path) == ["notes.txt"]


async def test_a_write_past_its_commit_at_the_timeout_is_reported_as_it_ended(
    tmp_path: Path, mode: str, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("old")
    # Held after the rename (the directory's fsync): the change has landed.
    monkeypatch.setattr(_atomic, "_fsync_dir", gate.wrap(_atomic._fsync_dir, after=False))
    results = []
    async with _deck(grace_s=LONG_S) as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write_new, session, "notes.txt", results)
            await gate.until_entered()
            # The call started before the gate was reached: its deadline is past after this.
            await trio.sleep(TIMEOUT_S + 0.5)
            gate.open.set()
    (result,) = results
    assert result.success, result.error
    assert result.data["bytes_written"] == 3
    assert result.metadata["committed_late"] == "timeout"
    assert target.read_text() == "new"


async def test_a_write_past_its_commit_when_cancelled_is_reported_as_it_ended(
    tmp_path: Path, mode: str, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_atomic, "_fsync_dir", gate.wrap(_atomic._fsync_dir, after=False))
    results = []
    async with _deck(timeout_s=LONG_S, grace_s=LONG_S) as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write_new, session, "new.txt", results)
            await gate.until_entered()
            session.cancel()
            gate.open.set()
    (result,) = results
    assert result.success and result.data["created"] is True, result.error
    assert result.metadata["committed_late"] == "cancelled"
    assert (tmp_path / "new.txt").read_text() == "new"


async def test_a_commit_outlasting_the_grace_says_the_write_may_have_landed(
    tmp_path: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_atomic, "_fsync_dir", gate.wrap(_atomic._fsync_dir, after=False))
    async with _deck(grace_s=0.2) as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        result = await session.call("file_write", {"path": "new.txt", "content": "new"})
        gate.open.set()
        await _threads_done(deck)
    assert not result.success and result.error.code == "TIMEOUT"
    assert result.error.details["may_have_landed"] is True
    assert "may have landed" in result.error.message
    assert (tmp_path / "new.txt").read_text() == "new"  # it had
