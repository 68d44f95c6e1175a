"""Special files inside the workdir are refused without being opened (audit s39).

Opening a FIFO for reading, even with O_NONBLOCK, releases a writer blocked in open() on it;
when the reader closes at once, the writer's next write dies of SIGPIPE and its data is lost.
Opening a device runs its driver. file_read now looks at the path through an O_PATH fd and only
opens regular files. Whether anything opened the FIFO is read from inotify (IN_OPEN), which the
kernel queues synchronously in open(2): no timing involved.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from tooldeck_tools_fs import tools

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure

tooldeck_testing = pytest.importorskip("tooldeck.testing")

_IN_OPEN = 0x20


class OpenWatch:
    """Counts the open(2)s of one path (inotify IN_OPEN; O_PATH opens are not events)."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            pytest.skip(f"no inotify: {os.strerror(ctypes.get_errno())}")
        if libc.inotify_add_watch(self.fd, os.fsencode(path), _IN_OPEN) < 0:
            os.close(self.fd)
            pytest.skip(f"no inotify watch: {os.strerror(ctypes.get_errno())}")

    def opens(self) -> int:
        count = 0
        while True:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                return count
            count += len(data) // 16  # struct inotify_event, no name for a watched file

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[tuple[Path, OpenWatch]]:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    watch = OpenWatch(path)
    try:
        yield path, watch
    finally:
        watch.close()


async def test_a_fifo_is_refused_through_the_deck_without_being_opened(tmp_path, fifo):
    path, watch = fifo
    (tmp_path / "ok.txt").write_text("fine")
    async with tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs"]) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        read = await session.call("file_read", {"path": "pipe"})
        listed = await session.call("list_dir", {"path": "pipe"})
        wrote = await session.call("file_write", {"path": "pipe", "content": "x"})
        # The slot is free again at once: the next call runs.
        after = await session.call("file_read", {"path": "ok.txt"})
    assert not read.success and read.error.code == "EXECUTION_ERROR"
    assert "not a regular file" in read.error.message and read.error.suggestion
    assert not listed.success and not wrote.success
    assert after.success and after.data["content"] == "fine"
    # Without the O_PATH look first, file_read opened the FIFO (and released any writer).
    assert watch.opens() == 0
    assert path.exists() and not path.is_file()


def test_a_symlink_to_a_fifo_is_refused_by_both_resolvers(tmp_path, fifo, resolve_mode):
    _path, watch = fifo
    os.symlink("pipe", tmp_path / "link")
    context = ToolContext(session_id="t", workdir=str(tmp_path), allowed_paths=(str(tmp_path),))
    with pytest.raises(ToolFailure) as info:
        tools.file_read({"path": "link"}, context)
    assert info.value.code == ErrorCode.EXECUTION_ERROR
    assert "not a regular file" in info.value.message
    assert watch.opens() == 0


def test_symlinks_to_files_still_read_through_the_o_path_open(tmp_path, resolve_mode):
    # The walk opens the last component O_PATH|O_NOFOLLOW, which opens a symlink itself
    # instead of failing with ELOOP: it must still be followed.
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "real.txt").write_text("content")
    os.symlink("d/real.txt", tmp_path / "rel")
    os.symlink(str(tmp_path / "d" / "real.txt"), tmp_path / "abs")
    os.symlink("../rel", tmp_path / "d" / "chain")
    context = ToolContext(session_id="t", workdir=str(tmp_path), allowed_paths=(str(tmp_path),))
    for name in ("rel", "abs", "d/chain"):
        assert tools.file_read({"path": name}, context)["content"] == "content", name


def test_a_socket_is_refused_and_never_connected(tmp_path):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(tmp_path / "sock"))
        server.listen(1)
        server.setblocking(False)
        context = ToolContext(session_id="t", workdir=str(tmp_path),
                              allowed_paths=(str(tmp_path),))
        with pytest.raises(ToolFailure) as info:
            tools.file_read({"path": "sock"}, context)
        assert "not a regular file" in info.value.message
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


def test_a_device_node_is_refused_without_being_opened(tmp_path):
    try:
        os.mknod(tmp_path / "null", 0o666 | 0o020000, os.makedev(1, 3))
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES, errno.EOPNOTSUPP):
            pytest.skip("cannot create a device node here")
        raise
    watch = OpenWatch(tmp_path / "null")
    try:
        context = ToolContext(session_id="t", workdir=str(tmp_path),
                              allowed_paths=(str(tmp_path),))
        with pytest.raises(ToolFailure) as info:
            tools.file_read({"path": "null"}, context)
        assert "not a regular file" in info.value.message
        assert watch.opens() == 0
    finally:
        watch.close()


def test_without_proc_regular_files_still_read_and_fifos_stay_closed(tmp_path, fifo,
                                                                     monkeypatch, resolve_mode):
    # No /proc to reopen the O_PATH fd through: the path is opened again and must be the
    # same inode; a special file is still refused from the O_PATH look alone.
    _path, watch = fifo
    monkeypatch.setattr(tools, "PROC_FD", str(tmp_path / "no-proc"))
    (tmp_path / "a.txt").write_text("text")
    context = ToolContext(session_id="t", workdir=str(tmp_path), allowed_paths=(str(tmp_path),))
    assert tools.file_read({"path": "a.txt"}, context)["content"] == "text"
    with pytest.raises(ToolFailure):
        tools.file_read({"path": "pipe"}, context)
    assert watch.opens() == 0
