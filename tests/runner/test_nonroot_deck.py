"""Root inside is not root outside, through the real deck: the shell pack's ``shell_exec`` under
bubblewrap runs as an unprivileged uid on the host, its files belong to the deck's user, and a
setuid copy of a shell cannot be left behind (issue 12, item 4)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")



def _why_not_here() -> str:
    """Why sandboxes cannot get their own uid on this machine (a root deck, a kernel with
    id-mapped mounts, the right to make a mount namespace), or ""; probed in a fresh process."""
    code = "import sys; from tooldeck_runner._idmap import probe; print(probe(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", code, tempfile.gettempdir()], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else "the probe failed"


WHY_NOT = _why_not_here() if shutil.which("bwrap") else "bubblewrap not installed"
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=f"no id-mapped sandboxes: {WHY_NOT}")


@pytest.fixture
def workdir() -> Iterator[Path]:
    # 0700 and root's: the sandbox's uid could not even look inside without the id-mapped mount.
    path = Path(tempfile.mkdtemp(prefix="tdnonroot-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _approve(request: object) -> bool:
    return True


async def test_shell_exec_is_nobody_on_the_host_and_its_files_are_the_users(
    workdir: Path,
) -> None:
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "shell"],
        config={"runner": {"sandbox": "bubblewrap"}},
    )
    async with deck:
        session = deck.session(workdir=workdir, confirm=_approve)
        who = await session.call("shell_exec", {"command": ["id", "-u"]})
        assert who.success, who.error
        assert who.data["stdout"] == "65534\n"
        assert who.metadata["limits"]["host_uid"] == 65534
        made = await session.call("shell_exec", {"command": ["cp", "/bin/sh", "copied-sh"]})
        assert made.success and made.data["exit_code"] == 0, made
        setuid = await session.call("shell_exec", {"command": ["chmod", "4755", "copied-sh"]})
        assert setuid.success and setuid.data["exit_code"] != 0, setuid
        listed = await session.call("shell_exec", {"command": ["ls", "-n", "copied-sh"]})
        assert listed.success and " 65534 65534 " in listed.data["stdout"], listed
    st = os.stat(workdir / "copied-sh")
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
    assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert stat.S_IMODE(os.stat(workdir).st_mode) == 0o700
