"""The fs pack through the real core: entry points, schema validation, runner, errors."""

from __future__ import annotations

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")


def _deck():
    return tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs"])


async def test_fs_pack_registers_and_runs_through_the_deck(sandbox):
    async with _deck() as deck:
        assert {"file_read", "file_write", "list_dir"} <= set(deck.catalog.names())
        assert deck.catalog.get("file_read").plugin == "fs"
        session = deck.session(workdir=str(sandbox.allowed), grants={"filesystem"},
                               max_level="dangerous")
        wrote = await session.call("file_write", {"path": "a/b.txt", "content": "hi",
                                                  "create_dirs": True})
        assert wrote.success, wrote.error
        read = await session.call("file_read", {"path": "a/b.txt"})
        assert read.success and read.data["content"] == "hi"
        listed = await session.call("list_dir", {"path": "a"})
        assert listed.success and listed.data["entries"][0]["name"] == "b.txt"


async def test_errors_come_back_as_results(sandbox):
    async with _deck() as deck:
        session = deck.session(workdir=str(sandbox.allowed), grants={"filesystem"})
        bad = await session.call("file_read", {"pth": "a.txt"})
        assert not bad.success and bad.error.code == "INVALID_ARGUMENTS"
        assert "did you mean 'path'?" in str(bad.error.details) + bad.error.message
        out = await session.call("file_read", {"path": "../outside/canary.txt"})
        assert not out.success and out.error.code == "PATH_NOT_ALLOWED"
        assert sandbox.marker not in repr(out)
        missing = await session.call("file_read", {"path": "nope.txt"})
        assert not missing.success and missing.error.code == "EXECUTION_ERROR"
        assert missing.error.suggestion


async def test_a_write_invalidates_cached_reads(tmp_path):
    from tooldeck.testing import make_deck

    (tmp_path / "note.txt").write_text("old")
    deck = make_deck(load_entry_points=["schema", "runner", "policy", "cache", "fs"])
    async with deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        first = await session.call("file_read", {"path": "note.txt"})
        again = await session.call("file_read", {"path": "note.txt"})
        assert again.metadata["cached"] is True and again.data["content"] == "old"
        wrote = await session.call("file_write", {"path": "note.txt", "content": "new"})
        assert wrote.success, wrote.error
        fresh = await session.call("file_read", {"path": "note.txt"})
    assert first.data["content"] == "old"
    assert fresh.metadata["cached"] is False and fresh.data["content"] == "new"
