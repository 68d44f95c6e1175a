"""The zygote and isolation suites again, with the deck itself not root (issue 16).

A real deck that is not root, not a patched ``os.geteuid``: pytest runs those suites as a
dedicated uid (``DECK_UID``) in a child process. That deck has user namespaces and bubblewrap
like any user's, and memory and pids cgroups delegated to it (chowned to it, as systemd does with
``Delegate=yes``), so that the zygote is used there as it is for a root deck. Only a root test
run can start it; elsewhere the test is skipped (a deck that is not root runs the suites
themselves).

The interpreter may sit where that uid cannot enter (``/root/.pyenv``): the child then runs in
a private mount namespace where the one closed directory above it is a traversable view holding
only the path that leads to the interpreter.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tooldeck_hookspecs import cgroups as _cgroup

HERE = Path(__file__).resolve().parent
SUITES = ("test_throughput_zygote.py", "test_runner_sandbox_isolation.py")
#: No account of the host: a uid only this test uses.
DECK_UID = 64123

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("setpriv") is None
    or shutil.which("unshare") is None,
    reason="needs root (to start a deck that is not), bubblewrap, setpriv and unshare",
)


def _closed_ancestor(path: Path) -> tuple[Path, Path] | None:
    """``(closed, child)``: the one ancestor of ``path`` that others may not enter, and its
    child on the way to ``path``; None when every ancestor is open. More than one: skip."""
    found = []
    parts = path.parts
    for depth in range(1, len(parts)):
        ancestor = Path(*parts[:depth])
        if not os.stat(ancestor).st_mode & stat.S_IXOTH:
            found.append((ancestor, Path(*parts[: depth + 1])))
    if len(found) > 1:
        pytest.skip(f"more than one closed directory above the interpreter: {found}")
    return found[0] if found else None


def test_the_zygote_suites_pass_for_a_deck_that_is_not_root() -> None:
    support = _cgroup.detect()
    if support.version != "v1":
        pytest.skip(f"delegating cgroups to the test's deck is done for cgroup v1 only: {support}")
    scratch = Path(tempfile.mkdtemp(prefix="tooldeck-nonroot-deck-"))
    groups = []
    try:
        for parent in support.parents.values():
            group = Path(parent) / f"tooldeck-nonroot-deck-{os.getpid()}"
            group.mkdir()
            groups.append(group)
            for entry in [group, *group.iterdir()]:
                os.chown(entry, DECK_UID, DECK_UID)
        for sub in ("home", "tmp"):
            (scratch / sub).mkdir()
        for entry in [scratch, *scratch.iterdir()]:
            os.chown(entry, DECK_UID, DECK_UID)
        script = ""
        closed = _closed_ancestor(Path(sys.base_prefix).resolve())
        if closed is not None:
            top, child = closed
            view = scratch / "view"
            (view / child.name).mkdir(parents=True)
            view.chmod(0o755)
            script += f"mount --bind '{child}' '{view / child.name}' && "
            script += f"mount --rbind '{view}' '{top}' && "
        script += 'exec setpriv --reuid "$0" --regid "$0" --clear-groups "$@"'
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(scratch / "home"),
            "TMPDIR": str(scratch / "tmp"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_HUB_OFFLINE": "1",
            "TOOLDECK_HISTORY_FILE": "off",
        }
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
        command += [str(DECK_UID), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["--basetemp", str(scratch / "tmp" / "pytest"), *(str(HERE / s) for s in SUITES)]

        def join() -> None:  # in the child, before it runs anything: into the deck's cgroups
            for group in groups:
                with open(group / "cgroup.procs", "w") as fh:
                    fh.write(str(os.getpid()))

        done = subprocess.run(
            command, cwd=scratch, env=env, preexec_fn=join, capture_output=True, text=True,
            timeout=900,
        )
    finally:
        for group in groups:  # what the deck made below is removed by the deck itself
            for sub in sorted(group.glob("*/"), reverse=True):
                if sub.is_dir():
                    sub.rmdir()
            group.rmdir()
        shutil.rmtree(scratch, ignore_errors=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    # Every test passed and none was skipped (a zygote test skips where it has no cgroups).
    assert done.returncode == 0 and re.fullmatch(r"\d+ passed in .*", summary), (
        done.stdout[-6000:] + done.stderr[-3000:]
    )
