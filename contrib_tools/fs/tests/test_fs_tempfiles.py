"""Kills during file_write leave no temp file for good; list_dir never shows one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from tooldeck_tools_fs import _atomic, file_write, list_dir

_CHILD = textwrap.dedent("""
    import os, signal, sys
    from tooldeck_hookspecs import ToolContext
    from tooldeck_tools_fs import _atomic, file_write
    allowed, where, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    _atomic.MODE = mode
    ctx = ToolContext(session_id="crash", workdir=allowed, allowed_paths=(allowed,))
    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)
    real_write = os.write
    def dying_write(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        die()
    if where == "write":
        os.write = dying_write
    elif where == "fsync":
        os.fsync = die
    elif where == "rename":
        os.replace = die  # after the temp name exists, before it replaces the target
    elif where == "outside":
        # Tell the parent we are about to write, then write until killed from outside.
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        while True:
            file_write({"path": "data.txt", "content": "NEW" * 300000}, ctx)
    file_write({"path": "data.txt", "content": "NEW" * 100000}, ctx)
    print("not reached")
""")


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _temps(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(".tooldeck-")]


def _content_ok(path) -> bool:
    data = path.read_text()
    return data in ("OLD CONTENT", "NEW" * 300000, "NEW" * 100000, "next")


@pytest.mark.parametrize("mode", ["auto", "named"])
@pytest.mark.parametrize("where", ["write", "fsync", "rename"])
def test_a_kill_at_each_stage_leaves_old_content_and_no_lasting_temp(sandbox, mode, where):
    target = sandbox.allowed / "data.txt"
    target.write_text("OLD CONTENT")
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(sandbox.allowed), where, mode],
                          capture_output=True, text=True, env=_env(), check=False, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert target.read_text() == "OLD CONTENT"
    leftovers = _temps(sandbox.allowed)
    if mode == "auto" and where != "rename":
        assert leftovers == []  # the anonymous O_TMPFILE inode died with the process
    # Whatever was left is invisible to list_dir and gone after the next write there.
    assert [e["name"] for e in list_dir({}, sandbox.context)["entries"]] == ["data.txt"]
    file_write({"path": "other.txt", "content": "next"}, sandbox.context)
    assert _temps(sandbox.allowed) == []
    assert target.read_text() == "OLD CONTENT"


@pytest.mark.parametrize("mode", ["auto", "named"])
def test_repeated_sigkill_from_outside(sandbox, mode):
    target = sandbox.allowed / "data.txt"
    target.write_text("OLD CONTENT")
    for i in range(8):
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(sandbox.allowed), "outside",
                                 mode], stdout=subprocess.PIPE, text=True, env=_env())
        assert proc.stdout.readline() == "ready\n"
        # Vary where in the loop the kill lands, without asserting anything about time.
        for _ in range(i * 3):
            os.sched_yield()
        proc.kill()
        proc.wait(timeout=60)
        proc.stdout.close()
        assert _content_ok(target)
        assert all(not _atomic.is_temp_name(e["name"])
                   for e in list_dir({}, sandbox.context)["entries"])
        file_write({"path": "probe.txt", "content": "next"}, sandbox.context)
        assert _temps(sandbox.allowed) == [], i


def test_o_tmpfile_use_or_fallback_is_reported(sandbox, monkeypatch):
    _atomic.STATS.clear()
    file_write({"path": "a.txt", "content": "1"}, sandbox.context)
    file_write({"path": "a.txt", "content": "2"}, sandbox.context)
    if getattr(os, "O_TMPFILE", 0):
        used = _atomic.STATS["tmpfile:link"] + _atomic.STATS["tmpfile:rename"]
        fell_back = [k for k in _atomic.STATS if k.startswith("tmpfile->named")]
        # Either O_TMPFILE served both writes, or the reason it could not is counted.
        assert used == 2 or (fell_back and _atomic.STATS["named"] == 2), _atomic.STATS
    else:
        assert _atomic.STATS["named"] == 2
    # Forcing the fallback: it is counted, and works the same.
    monkeypatch.setattr(_atomic, "MODE", "named")
    file_write({"path": "a.txt", "content": "3"}, sandbox.context)
    assert _atomic.STATS["named"] >= 1 and (sandbox.allowed / "a.txt").read_text() == "3"
    assert _temps(sandbox.allowed) == []


def test_live_writers_temp_files_are_not_swept(sandbox):
    # A temp name of a live process of ours (this one) is a write in progress elsewhere.
    live = sandbox.allowed / f".tooldeck-{_atomic._PIDNS}-{os.getpid()}-abcdef.tmp"
    live.write_text("in progress")
    file_write({"path": "x.txt", "content": "x"}, sandbox.context)
    assert live.exists()
    assert "x.txt" in [e["name"] for e in list_dir({}, sandbox.context)["entries"]]
    assert live.name not in [e["name"] for e in list_dir({}, sandbox.context)["entries"]]


def test_temp_names_cannot_be_written(sandbox):
    from tooldeck_hookspecs import ToolFailure

    with pytest.raises(ToolFailure) as info:
        file_write({"path": ".tooldeck-0-1-ab.tmp", "content": "x"}, sandbox.context)
    assert info.value.code == "PATH_NOT_ALLOWED"
