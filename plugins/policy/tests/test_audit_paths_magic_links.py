"""Audit: a path that passes *through* a process magic link is refused, even when '..' after it
brings the resolved path back inside the workdir.

The deck resolves ``/proc/self/...`` in its own process; the tool that later opens the path is
another process (a sandbox worker) or another thread, whose ``/proc/self/cwd`` or ``root`` is
not the deck's. So the guard must not judge such a path by where the *deck's* links lead: the
docstring promises magic links are refused "wherever they point".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tooldeck_policy import check_path


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workdir that is also the deck's current directory (``tooldeck`` started in it)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.mark.parametrize(
    "spelling",
    [
        "/proc/self/cwd/../work/notes.txt",
        "/proc/self/cwd/./../work/notes.txt",
        "/proc/thread-self/cwd/../work/notes.txt",
        "/proc/{pid}/cwd/../work/notes.txt",
        "/proc/self/task/{pid}/cwd/../work/notes.txt",
    ],
)
def test_dotdot_after_a_magic_link_is_still_refused(workdir: Path, spelling: str) -> None:
    path = spelling.format(pid=os.getpid())
    reason = check_path(path, str(workdir))
    assert reason is not None and "process link" in reason, (path, reason)


def test_a_workdir_link_to_a_magic_link_is_refused_too(workdir: Path) -> None:
    os.symlink("/proc/self/cwd", workdir / "here")
    reason = check_path("here/../work/notes.txt", str(workdir))
    assert reason is not None and "process link" in reason, reason


def test_ordinary_links_and_dotdot_stay_allowed(workdir: Path) -> None:
    (workdir / "sub").mkdir()
    os.symlink("sub", workdir / "link")
    assert check_path("link/../notes.txt", str(workdir)) is None
    assert check_path(str(workdir / "sub" / ".." / "notes.txt"), str(workdir)) is None
