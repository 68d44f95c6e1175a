"""Replaced files lose set-ID bits, read-only files stay, deep trees list, messages stay short."""

from __future__ import annotations

import os
import stat

import pytest
from tooldeck_tools_fs import MAX_LIST_DEPTH, file_read, file_write, list_dir

from tooldeck_hookspecs import ErrorCode, ToolFailure


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o6750, 0o2644])
def test_a_replaced_file_never_keeps_setuid_or_setgid(sandbox, resolve_mode, mode):
    target = sandbox.allowed / "tool"
    target.write_text("old")
    os.chmod(target, mode)
    file_write({"path": "tool", "content": "new"}, sandbox.context)
    got = stat.S_IMODE(target.stat().st_mode)
    assert got == mode & 0o777 and target.read_text() == "new"


def test_a_new_file_in_a_setgid_folder_gets_no_setid_bits(sandbox):
    folder = sandbox.allowed / "shared"
    folder.mkdir()
    os.chmod(folder, 0o2775)
    file_write({"path": "shared/n.txt", "content": "x"}, sandbox.context)
    assert not (folder / "n.txt").stat().st_mode & (stat.S_ISUID | stat.S_ISGID)


@pytest.mark.parametrize("mode", [0o444, 0o400, 0o555, 0o044])
def test_read_only_files_are_refused_not_chmodded(sandbox, resolve_mode, mode):
    target = sandbox.allowed / "ro.txt"
    target.write_text("keep")
    os.chmod(target, mode)
    os.symlink("ro.txt", sandbox.allowed / "to_ro")
    for path in ("ro.txt", "to_ro"):
        with pytest.raises(ToolFailure) as info:
            file_write({"path": path, "content": "changed"}, sandbox.context)
        assert info.value.code == ErrorCode.PERMISSION_DENIED and "read-only" in info.value.message
        assert info.value.suggestion
    assert target.read_text() == "keep" and stat.S_IMODE(target.stat().st_mode) == mode


def _deep_tree(root, depth: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)


def _remove_deep(root) -> None:
    """rmtree recurses (Python 3.11): remove the chain of 'd' folders iteratively."""
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    while True:
        try:
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        except FileNotFoundError:
            break
    os.close(fds.pop())
    while fds:
        os.rmdir("d", dir_fd=fds[-1])
        os.close(fds.pop())


def test_a_5000_level_tree_lists_bounded_by_depth(sandbox, resolve_mode):
    _deep_tree(sandbox.allowed, 5000)
    try:
        got = list_dir({"recursive": True, "max_entries": 10_000}, sandbox.context)
        assert got["count"] == 20 and got["truncated"] is True
        assert got["truncated_by"] == ["max_depth"] and "max_depth" in got["note"]
        deepest = list_dir({"recursive": True, "max_depth": MAX_LIST_DEPTH, "max_entries": 50},
                           sandbox.context)
        assert deepest["count"] == 50 and deepest["truncated_by"] == ["max_entries"]
        full = list_dir({"recursive": True, "max_depth": MAX_LIST_DEPTH,
                         "max_entries": 10_000}, sandbox.context)
        assert full["count"] == MAX_LIST_DEPTH
        assert full["entries"][-1]["name"] == "/".join(["d"] * MAX_LIST_DEPTH)
        with pytest.raises(ToolFailure) as info:
            list_dir({"recursive": True, "max_depth": MAX_LIST_DEPTH + 1}, sandbox.context)
        assert info.value.code == ErrorCode.INVALID_ARGUMENTS
    finally:
        _remove_deep(sandbox.allowed)


def test_a_shallow_tree_is_complete_and_ordered(sandbox):
    (sandbox.allowed / "a" / "b").mkdir(parents=True)
    (sandbox.allowed / "a" / "b" / "f").write_text("x")
    (sandbox.allowed / "z").write_text("")
    got = list_dir({"recursive": True}, sandbox.context)
    assert [e["name"] for e in got["entries"]] == ["a", "a/b", "a/b/f", "z"]
    assert got["truncated"] is False and "truncated_by" not in got
    one = list_dir({"recursive": True, "max_depth": 1}, sandbox.context)
    assert [e["name"] for e in one["entries"]] == ["a", "z"] and one["truncated_by"] == [
        "max_depth"]


@pytest.mark.parametrize("call", [file_read, file_write, list_dir])
@pytest.mark.parametrize("path", ["x" * 10_000_000, "../" * 3_000_000 + "etc/passwd",
                                  "missing/" + "y" * 5_000_000])
def test_messages_never_echo_unbounded_input(sandbox, call, path):
    with pytest.raises(ToolFailure) as info:
        call({"path": path, "content": "x"} if call is file_write else {"path": path},
             sandbox.context)
    text = info.value.message + (info.value.suggestion or "")
    assert len(text) < 1000 and "…[+" in text, text[:300]


def test_bad_values_are_clipped_too(sandbox):
    with pytest.raises(ToolFailure) as info:
        file_read({"path": "a", "encoding": "e" * 1_000_000}, sandbox.context)
    assert len(info.value.message) < 1000 and "…[+" in info.value.message
