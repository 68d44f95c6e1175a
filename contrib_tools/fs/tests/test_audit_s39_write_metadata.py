"""What a replaced file keeps, and what a failed write leaves (audit s39).

A POSIX ACL lives in an extended attribute; with one, the group bits of the mode are the ACL's
*mask*. file_write used to replace the file with the mode alone: a file shared as
``user:1234:rw-, group::---, mask::rw-`` (mode 0660) came back as a plain 0660 file, readable and
writable by its whole owning group, and no longer by user 1234. The ACL (and ``user.*``
metadata) is now copied to the new file; ``security.*`` (file capabilities) never is.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tooldeck_tools_fs import _atomic, tools

from tooldeck_hookspecs import ToolContext, ToolFailure

tooldeck_testing = pytest.importorskip("tooldeck.testing")

_ACL = "system.posix_acl_access"
_UNDEFINED = 0xFFFFFFFF


def _acl(*entries: tuple[int, int, int]) -> bytes:
    """The kernel's xattr form of a POSIX ACL (version 2, then tag, perm, id per entry)."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


#: owner rw, user 1234 rw, owning group nothing, mask rw, others nothing.
SHARED_WITH_ONE_USER = _acl((0x01, 6, _UNDEFINED), (0x02, 6, 1234), (0x04, 0, _UNDEFINED),
                            (0x10, 6, _UNDEFINED), (0x20, 0, _UNDEFINED))


@pytest.fixture(params=["auto", "named"])
def atomic_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(_atomic, "MODE", request.param)
    return str(request.param)


def _set_or_skip(path: Path, name: str, value: bytes) -> None:
    try:
        os.setxattr(path, name, value)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
            pytest.skip(f"{name} cannot be set here: {os.strerror(exc.errno)}")
        raise


async def test_a_replaced_file_keeps_its_acl_and_user_attributes(tmp_path: Path, atomic_mode):
    secret = tmp_path / "secret.txt"
    secret.write_text("old")
    os.chmod(secret, 0o600)
    _set_or_skip(secret, _ACL, SHARED_WITH_ONE_USER)
    _set_or_skip(secret, "user.origin", b"kept")
    mode_before = os.stat(secret).st_mode
    async with tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs"]) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        wrote = await session.call("file_write", {"path": "secret.txt", "content": "new"})
    assert wrote.success, wrote.error
    assert secret.read_text() == "new"
    # Before the fix: no ACL any more, and mode 0660 gave the owning group read and write.
    assert os.getxattr(secret, _ACL) == SHARED_WITH_ONE_USER
    assert os.getxattr(secret, "user.origin") == b"kept"
    assert os.stat(secret).st_mode == mode_before
    assert os.listdir(tmp_path) == ["secret.txt"]


def test_file_capabilities_are_never_carried_over(tmp_path: Path, atomic_mode):
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    os.chmod(tool, 0o755)
    # VFS_CAP_REVISION_2 with cap_setuid (bit 7) permitted and effective.
    _set_or_skip(tool, "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 7, 0, 0, 0))
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert _atomic.kept_xattrs(dirfd, "tool") == {}
    finally:
        os.close(dirfd)
    context = ToolContext(session_id="t", workdir=str(tmp_path), allowed_paths=(str(tmp_path),))
    tools.file_write({"path": "tool", "content": "#!/bin/sh\nid\n"}, context)
    assert "security.capability" not in os.listxattr(tool)


def test_an_acl_that_cannot_be_kept_refuses_the_write(tmp_path: Path, monkeypatch):
    target = tmp_path / "shared.txt"
    target.write_text("old")
    _set_or_skip(target, _ACL, SHARED_WITH_ONE_USER)
    original = os.setxattr

    def refusing(path, attribute, *args, **kwargs):
        if attribute == _ACL:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        return original(path, attribute, *args, **kwargs)

    monkeypatch.setattr(os, "setxattr", refusing)
    context = ToolContext(session_id="t", workdir=str(tmp_path), allowed_paths=(str(tmp_path),))
    with pytest.raises(ToolFailure):
        tools.file_write({"path": "shared.txt", "content": "new"}, context)
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert os.getxattr(target, _ACL) == SHARED_WITH_ONE_USER
    assert os.listdir(tmp_path) == ["shared.txt"]


def test_a_file_size_limit_fails_cleanly_and_keeps_the_old_file(tmp_path: Path):
    # RLIMIT_FSIZE stands in for a full disk or a quota: EFBIG mid-write (Python ignores
    # SIGXFSZ). Own process, so the limit touches nothing else.
    (tmp_path / "data.txt").write_text("old")
    script = textwrap.dedent(f"""
        import json, resource
        from tooldeck_hookspecs import ToolContext, ToolFailure
        from tooldeck_tools_fs import tools
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        ctx = ToolContext(session_id="t", workdir={str(tmp_path)!r},
                          allowed_paths=({str(tmp_path)!r},))
        out = []
        for path in ("data.txt", "new.txt"):
            try:
                tools.file_write({{"path": path, "content": "x" * 100000}}, ctx)
                out.append("written")
            except ToolFailure as exc:
                out.append([exc.code.value, exc.message])
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    outcomes = json.loads(done.stdout)
    for code, message in outcomes:
        assert code == "EXECUTION_ERROR" and "nothing was changed" in message
    assert (tmp_path / "data.txt").read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["data.txt"]
