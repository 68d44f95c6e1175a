"""A file written to in place while file_read reads it is said so, never silently (audit s39).

The other writer is played at a seam of the tool's own: ``tools._pread_all`` is wrapped so that
the file is truncated or appended to after file_read opened and checked it, just before the
bytes are read (what a log rotation with copytruncate, or an appending process, does).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tooldeck_tools_fs import tools

tooldeck_testing = pytest.importorskip("tooldeck.testing")


def _deck():
    return tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs"])


def _meddle(monkeypatch: pytest.MonkeyPatch, change) -> None:
    original = tools._pread_all

    def meddled(fd: int, count: int, offset: int) -> bytes:
        change()
        return original(fd, count, offset)

    monkeypatch.setattr(tools, "_pread_all", meddled)


async def test_a_file_truncated_while_read_says_so(tmp_path: Path, monkeypatch):
    log = tmp_path / "app.log"
    log.write_bytes(b"x" * 5000)
    _meddle(monkeypatch, lambda: os.truncate(log, 100))
    async with _deck() as deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        read = await session.call("file_read", {"path": "app.log"})
    assert read.success, read.error
    data = read.data
    # Before the fix: size 5000, 100 bytes, truncated false, nothing said.
    assert data["bytes_read"] == 100 and data["truncated"] is False
    assert data["size"] == 100
    assert data["changed_while_read"] is True
    assert "changed while it was read" in data["note"]


async def test_a_file_growing_while_read_says_so(tmp_path: Path, monkeypatch):
    log = tmp_path / "app.log"
    log.write_text("first\n")

    def append() -> None:
        with open(log, "a") as handle:
            handle.write("second\n")

    _meddle(monkeypatch, append)
    async with _deck() as deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        read = await session.call("file_read", {"path": "app.log", "max_bytes": 8})
    data = read.data
    assert data["truncated"] is True and data["next_offset"] == 8
    # The size is the one after the read: never "bytes 0..8 of 6".
    assert data["size"] == 13
    assert data["changed_while_read"] is True
    assert "of 13 were returned" in data["note"]


async def test_an_unchanged_file_says_nothing_more(tmp_path: Path):
    (tmp_path / "a.txt").write_text("steady")
    async with _deck() as deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        read = await session.call("file_read", {"path": "a.txt"})
    assert read.data["size"] == 6 and "changed_while_read" not in read.data
    assert "note" not in read.data


async def test_an_offset_past_the_end_says_so(tmp_path: Path):
    (tmp_path / "a.txt").write_text("short")
    async with _deck() as deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        read = await session.call("file_read", {"path": "a.txt", "offset": 2**40})
        at_end = await session.call("file_read", {"path": "a.txt", "offset": 5})
    assert read.success and read.data["content"] == "" and read.data["truncated"] is False
    assert "past the end of the file (5 bytes)" in read.data["note"]
    assert at_end.data["content"] == "" and "note" not in at_end.data
