"""list_dir never drops what it could not read without saying so (audit s39).

A folder that cannot be entered during a recursive listing (EMFILE on a busy host, EACCES for a
deck that is not root, EIO) was skipped with ``truncated: false``: the listing read as complete.
Here the process runs out of file descriptors part-way down a deep tree (RLIMIT_NOFILE just
above the highest fd in use, every free number taken, then a few given back).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from tooldeck_tools_fs import tools

from tooldeck_hookspecs import ToolContext


def _context(root: Path) -> ToolContext:
    return ToolContext(session_id="t", workdir=str(root), allowed_paths=(str(root),))


def _list_with_few_fds(root: Path, free: int) -> dict:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = max(int(name) for name in os.listdir("/proc/self/fd"))
    hog: list[int] = []
    # Room for `free` more above the highest fd in use (a pytest-xdist worker has no gaps
    # below it to hand out), then every free number taken and `free` of them given back.
    resource.setrlimit(resource.RLIMIT_NOFILE, (top + 1 + free, hard))
    try:
        try:
            while True:
                hog.append(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            pass
        for _ in range(free):
            os.close(hog.pop())
        return tools.list_dir({"path": ".", "recursive": True, "max_depth": 100},
                              _context(root))
    finally:
        for fd in hog:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_running_out_of_fds_mid_listing_is_reported(tmp_path: Path):
    folder = tmp_path
    for level in range(12):
        folder = folder / f"d{level}"
        folder.mkdir()
        (folder / "f.txt").write_text("x")
    complete = tools.list_dir({"path": ".", "recursive": True, "max_depth": 100},
                              _context(tmp_path))
    assert complete["count"] == 24 and complete["truncated"] is False

    result = _list_with_few_fds(tmp_path, free=6)
    assert result["count"] < 24
    # Before the fix: truncated False, no note, the deeper folders silently missing.
    assert result["truncated"] is True
    assert "unreadable" in result["truncated_by"]
    failed = [e for e in result["entries"] if "error" in e]
    assert failed and failed[0]["type"] == "dir"
    assert failed[0]["error"] == os.strerror(24)  # EMFILE
    assert "could not be read" in result["note"]


def test_hidden_temp_names_count_towards_the_scan_cap(tmp_path: Path, monkeypatch):
    # A folder holding a flood of '.tooldeck-*.tmp' names (a model can plant them with a shell)
    # was read to its end: only visible names counted towards MAX_DIR_SCAN.
    monkeypatch.setattr(tools, "MAX_DIR_SCAN", 20)
    for number in range(60):
        (tmp_path / f".tooldeck-{number}.tmp").write_bytes(b"")
    (tmp_path / "visible.txt").write_text("x")
    result = tools.list_dir({"path": "."}, _context(tmp_path))
    assert result["truncated"] is True and result["truncated_by"] == ["directory_size"]
    assert all(not e["name"].startswith(".tooldeck-") for e in result["entries"])


def test_a_folder_removed_while_listed_is_skipped_quietly(tmp_path: Path, monkeypatch):
    # Gone since it was listed (ENOENT / ENOTDIR / ELOOP): no error, nothing to report.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "f").write_text("x")
    original = os.open

    def vanishing(path, flags, *args, **kwargs):
        if path == "a" and kwargs.get("dir_fd") is not None:
            os.rmdir(tmp_path / "a")
        return original(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", vanishing)
    result = tools.list_dir({"path": ".", "recursive": True}, _context(tmp_path))
    monkeypatch.undo()
    assert result["truncated"] is False
    assert [e["name"] for e in result["entries"]] == ["a", "b", "b/f"]
    assert all("error" not in e for e in result["entries"])
