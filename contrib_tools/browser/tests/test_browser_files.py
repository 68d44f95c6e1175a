"""Screenshot writes without a browser: odd targets (FIFO, socket, device, symlink, folder, hard
link), atomic replacement, protected paths and the allowed paths."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from tooldeck_tools_browser import _files

from tooldeck_hookspecs import ToolFailure

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def _write_guarded(*args: object) -> BaseException | str:
    """write_in_workdir in a thread; a call that has not returned after 20 s is a hang (the bug
    this file is about), reported as such instead of hanging the test run."""
    outcome: list[BaseException | str] = []

    def run() -> None:
        try:
            outcome.append(_files.write_in_workdir(*args))  # type: ignore[arg-type]
        except BaseException as exc:  # reported to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "write_in_workdir hung"
    return outcome[0]


def test_a_fifo_target_is_refused_without_blocking(tmp_path: Path):
    os.mkfifo(tmp_path / "shot.png")
    with pytest.raises(ToolFailure) as info:
        _files.check_target(str(tmp_path), "shot.png")
    assert info.value.code == "PATH_NOT_ALLOWED" and "FIFO" in info.value.message
    outcome = _write_guarded(str(tmp_path), "shot.png", PNG)
    assert isinstance(outcome, ToolFailure) and outcome.code == "PATH_NOT_ALLOWED"
    assert "FIFO" in outcome.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shot.png"]  # no temporary left


def test_sockets_devices_symlinks_and_folders_are_refused(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(work / "sock.png"))
    os.symlink("/dev/null", work / "dev.png")
    os.symlink(tmp_path / "nowhere.png", work / "dangling.png")
    (work / "dir.png").mkdir()
    try:
        for name, kind in (("sock.png", "socket"), ("dev.png", "symlink"),
                           ("dangling.png", "symlink"), ("dir.png", "folder")):
            outcome = _write_guarded(str(work), name, PNG)
            assert isinstance(outcome, ToolFailure), name
            assert outcome.code == "PATH_NOT_ALLOWED" and kind in outcome.message, outcome.message
    finally:
        sock.close()
    assert not (tmp_path / "nowhere.png").exists()
    if os.path.exists("/dev/null") and os.geteuid() == 0:
        os.mknod(work / "null.png", 0o600 | 0o020000, os.makedev(1, 3))  # a character device
        outcome = _write_guarded(str(work), "null.png", PNG)
        assert isinstance(outcome, ToolFailure) and "character device" in outcome.message


def test_an_existing_file_is_replaced_atomically_and_a_hard_link_is_not_written_through(
    tmp_path: Path,
):
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    os.link(outside, work / "linked.png")  # a hard link: writing in place would change outside
    assert _files.write_in_workdir(str(work), "linked.png", PNG) == "linked.png"
    assert outside.read_bytes() == b"precious"
    assert (work / "linked.png").read_bytes() == PNG
    (work / "old.png").write_bytes(b"old")
    before = os.stat(work / "old.png").st_ino
    _files.write_in_workdir(str(work), "old.png", PNG)
    assert (work / "old.png").read_bytes() == PNG
    assert os.stat(work / "old.png").st_ino != before  # a new file renamed over the old one
    assert sorted(p.name for p in work.iterdir()) == ["linked.png", "old.png"]


def test_a_failed_write_leaves_no_partial_file(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()

    # A str has no buffer: the write fails after the temporary file was created.
    with pytest.raises(TypeError):
        _files.write_in_workdir(str(work), "shot.png", "not bytes")  # type: ignore[arg-type]
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("path, rule", [
    (".git/shot.png", ".git/"),
    (".GIT/hooks/x.png", ".git/"),
    ("sub/.git/x.png", ".git/"),
    (".vscode/x.png", ".vscode/"),
    (".tooldeck/x.png", ".tooldeck/"),
    ("secret/x.png", "secret/"),
    ("deep/private.png", "/deep/private.png"),
])
def test_protected_paths_are_refused_naming_the_rule(tmp_path: Path, path: str, rule: str):
    rules = ("secret/", "/deep/private.png")
    with pytest.raises(ToolFailure) as info:
        _files.write_in_workdir(str(tmp_path), path, PNG, rules)
    assert info.value.code == "PATH_NOT_ALLOWED" and info.value.details["rule"] == rule
    assert rule in info.value.message
    assert list(tmp_path.iterdir()) == []  # refused before any folder was created


def test_the_allowed_paths_bound_where_a_screenshot_lands(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ToolFailure) as info:
        _files.write_in_workdir(str(work), "x.png", PNG, (), (str(elsewhere),))
    assert info.value.code == "PATH_NOT_ALLOWED" and str(elsewhere) in info.value.message
    assert info.value.details["allowed_paths"] == [str(elsewhere)]
    # A narrower allowed folder inside the workdir: only writes beneath it pass...
    shots = work / "shots"
    assert _files.write_in_workdir(str(work), "shots/a.png", PNG, (), (str(shots),)) == (
        "shots/a.png")
    with pytest.raises(ToolFailure):
        _files.write_in_workdir(str(work), "b.png", PNG, (), (str(shots),))
    # ...and rules anchored at that root apply beneath it too.
    with pytest.raises(ToolFailure) as info:
        _files.write_in_workdir(str(work), "shots/keep/c.png", PNG, ("/keep",), (str(shots),))
    assert info.value.details["rule"] == "/keep"
    # "{workdir}" templates (a context built by hand) mean the workdir.
    assert _files.write_in_workdir(str(work), "d.png", PNG, (), ("{workdir}",)) == "d.png"
