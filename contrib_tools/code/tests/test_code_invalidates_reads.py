"""A snippet that can write the workdir (the runner's degraded mode) leaves no stale cached read:
``code_execute`` declares the fs pack's cacheable readers in ``invalidates``."""

from __future__ import annotations

import pytest
from tooldeck_tools_code import CODE_EXECUTE


def test_code_execute_declares_the_workdir_readers():
    assert {"file_read", "list_dir"} <= set(CODE_EXECUTE.execution.invalidates)


async def test_a_degraded_snippet_writing_the_workdir_is_seen_by_the_next_file_read(tmp_path):
    pytest.importorskip("tooldeck_tools_fs")
    pytest.importorskip("tooldeck_cache")
    from tooldeck.testing import make_deck

    (tmp_path / "n.txt").write_text("before")
    deck = make_deck(load_entry_points=["schema", "runner", "policy", "cache", "fs", "code"],
                     config={"runner": {"sandbox": "process"}})
    async with deck:
        session = deck.session(workdir=tmp_path, grants={"code", "filesystem"})
        first = await session.call("file_read", {"path": "n.txt"})
        again = await session.call("file_read", {"path": "n.txt"})
        assert first.data["content"] == "before" and again.metadata.get("cached")
        wrote = await session.call("code_execute", {
            "code": "import os; open(os.environ['WORKDIR'] + '/n.txt', 'w').write('after')"})
        assert wrote.success and wrote.data["exit_code"] == 0, wrote
        assert (tmp_path / "n.txt").read_text() == "after"
        read = await session.call("file_read", {"path": "n.txt"})
    assert read.data["content"] == "after" and not read.metadata.get("cached")
