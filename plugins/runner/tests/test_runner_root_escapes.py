"""A sandboxed call cannot leave root behind, nor turn the deck's fix-ups against the host.

Found by a hostile audit, each with the real sandbox (bubblewrap, id-mapped workdir as root):

- a call copied python3, made itself uid 0 of a nested user namespace and set a file capability
  (``cap_setuid``) on the copy: valid on the host, it gave root to any local user;
- a second call in the same workdir swapped a folder for a link to a host folder between the
  after-call scan and its fix-ups, which then (as the deck, root) removed or moved host files;
- a call that made 50,001 files, or a folder chain deeper than the scan, hid what it planted;
- 318,000 empty files fitted in the workdir's write budget (bytes only).
"""

from __future__ import annotations

import errno
import os
import shutil
import textwrap
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from tooldeck_runner import RunnerExecutor
from tooldeck_runner._sandbox import (
    _clear_setid_bits,
    _move_back_beneath,
    _remove_beneath,
)

from tooldeck_hookspecs import (
    DEFAULT_PROTECTED_PATHS,
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
)

TOOLS_DIR = str(Path(__file__).resolve().parent)
HAVE_BWRAP = shutil.which("bwrap") is not None
AS_ROOT = os.geteuid() == 0

NESTED_USERNS = textwrap.dedent(
    """
    import ctypes, errno, os, shutil
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}
    rc = libc.unshare(0x10000000)  # CLONE_NEWUSER
    out["unshare"] = "done" if rc == 0 else errno.errorcode[ctypes.get_errno()]
    shutil.copy("/bin/sh", "copied")
    try:
        os.setxattr("copied", "security.capability", b"\\x01" * 20)
        out["setxattr"] = "done"
    except OSError as exc:
        out["setxattr"] = errno.errorcode[exc.errno]
    try:
        os.setxattr("copied", "user.note", b"x")
        out["user_xattr"] = "done"
    except OSError as exc:
        out["user_xattr"] = errno.errorcode[exc.errno]
    import subprocess
    out["child"] = subprocess.run(["/bin/sh", "-c", "echo ok"], capture_output=True,
                                  text=True).stdout.strip()
    print(out)
    """
)


def sandboxed(name: str, **execution: Any) -> ToolDefinition:
    execution.setdefault("timeout_s", 60)
    return ToolDefinition(
        name=name,
        description="a hostile test tool",
        category="code",
        entrypoint=f"runner_sandbox_tools:{name}",
        security=SecurityConfig(sandbox=True, writes_workdir=True),
        execution=ExecutionConfig(**execution),
    )


async def run(ex: RunnerExecutor, workdir: Path, argv: list[str], **extra: Any) -> ToolResult:
    context = ToolContext(session_id="escapes", workdir=str(workdir), call_id=uuid.uuid4().hex)
    context = attrs.evolve(context, protected_paths=DEFAULT_PROTECTED_PATHS)
    tool = sandboxed("run_program", **extra)
    return await ex.run(tool, ToolCall(name=tool.name, arguments={"argv": argv}), context)


@pytest.fixture
async def bwrap() -> AsyncIterator[RunnerExecutor]:
    if not HAVE_BWRAP:
        pytest.skip("bubblewrap is not installed")
    ex = RunnerExecutor.from_settings({"runner": {
        "sandbox": "bubblewrap", "python_path": [TOOLS_DIR], "warm_workers": 1,
        "workdir_max_new_entries": 2000,
    }})
    yield ex
    await ex.aclose()


async def test_no_nested_user_namespace_and_no_extended_attributes(bwrap, tmp_path):
    result = await run(bwrap, tmp_path, ["python3", "-c", NESTED_USERNS])
    assert result.success, result.error
    seen = eval(result.data["stdout"])  # the tool's own dict literal
    assert seen["unshare"] == "EPERM"
    # EOPNOTSUPP and ENOTSUP are one number on Linux (errorcode names it ENOTSUP).
    assert seen["setxattr"] == seen["user_xattr"] == errno.errorcode[errno.EOPNOTSUPP]
    assert seen["child"] == "ok"  # processes still start (clone3 falls back to clone)
    assert os.listxattr(tmp_path / "copied") == []
    # The zygote (which makes a user namespace per call) still serves the calls.
    assert "zygote_fallback" not in result.metadata["limits"], result.metadata["limits"]
    assert result.metadata["limits"]["seccomp"] == "on"


@pytest.mark.skipif(not AS_ROOT, reason="setting security.capability needs root")
def test_the_after_call_sweep_removes_file_capabilities(tmp_path):
    started = time.time()
    planted = tmp_path / "deep" / "pyroot"
    planted.parent.mkdir()
    shutil.copy("/bin/sh", planted)
    # VFS_CAP_REVISION_2, cap_setuid permitted + effective.
    capability = (0x02000001).to_bytes(4, "little") + (1 << 7).to_bytes(4, "little") + bytes(12)
    os.setxattr(planted, "security.capability", capability)
    assert "security.capability" in os.listxattr(planted)
    cleared = _clear_setid_bits(str(tmp_path), started)
    assert cleared == ["deep/pyroot"]
    assert "security.capability" not in os.listxattr(planted)


def test_fix_ups_never_follow_a_folder_swapped_for_a_link(tmp_path):
    work, host = tmp_path / "work", tmp_path / "host"
    (host / ".git").mkdir(parents=True)
    (host / ".git" / "config").write_text("the host's own")
    (work / "x").mkdir(parents=True)
    # The scan saw work/x/.git; a concurrent call then swapped x for a link to the host.
    os.rmdir(work / "x")
    (work / "x").symlink_to(host)
    _remove_beneath(str(work), "x/.git")
    assert (host / ".git" / "config").read_text() == "the host's own"
    # Moving a "moved" protected folder back must not pull a host folder in either.
    (host / ".claude").mkdir()
    (host / ".claude" / "creds.json").write_text("secret")
    (work / "a").mkdir()
    _move_back_beneath(str(work), "x/.claude", "a/.claude")
    assert not (work / "a" / ".claude").exists()
    assert (host / ".claude" / "creds.json").read_text() == "secret"
    # Without a link on the way, the fix-ups do their work.
    (work / "real" / ".git").mkdir(parents=True)
    _remove_beneath(str(work), "real/.git")
    assert not (work / "real" / ".git").exists()


async def test_many_empty_files_go_over_the_new_entries_budget(bwrap, tmp_path):
    result = await run(bwrap, tmp_path, ["python3", "-c", (
        "import os\n"
        "os.mkdir('many')\n"
        "for i in range(20000): open(f'many/{i}', 'w').close()\n"
    )])
    assert not result.success and result.error.code == "TOO_LARGE", result
    assert result.error.details["workdir_max_new_entries"] == 2000
    assert result.metadata["limits"]["workdir_max_new_entries"] == 2000


async def test_a_protected_path_planted_deep_down_is_found_and_removed(bwrap, tmp_path):
    # The scan used to stop at 64 levels: this .git was reported as "incomplete" and stayed.
    deep = "/".join(["d"] * 70)
    result = await run(bwrap, tmp_path, ["/bin/sh", "-c", (
        f"mkdir -p {deep}/.git && echo '[core] fsmonitor = evil' > {deep}/.git/config"
    )])
    assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
    assert result.error.details["protected"] == [{"path": f"{deep}/.git", "rule": ".git/"}]
    assert not (tmp_path / deep / ".git").exists()


async def test_a_protected_path_planted_past_path_max_fails_the_call(bwrap, tmp_path):
    # A folder whose path is longer than PATH_MAX cannot be listed by path: the scan skipped
    # it silently and the call succeeded, the .envrc below it unseen.
    name = "n" * 200
    script = f"for i in $(seq 25); do mkdir {name} && cd {name}; done; echo evil > .envrc"
    result = await run(bwrap, tmp_path, ["/bin/sh", "-c", script])
    assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
    assert result.error.details["protected_scan"] == "incomplete"


TOGGLE = textwrap.dedent(
    """
    import ctypes, os, time
    libc = ctypes.CDLL(None, use_errno=True)
    for i in range(8):
        os.makedirs(f"x{i}/.git", exist_ok=True)
        if not os.path.lexists(f"y{i}"):
            os.symlink("/nonexistent", f"y{i}")
    open("toggling", "w").close()
    started = time.time()
    while time.time() - started < 6:
        for i in range(8):  # renameat2(RENAME_EXCHANGE): x{i} and y{i} trade places
            libc.syscall(316, -100, f"x{i}".encode(), -100, f"y{i}".encode(), 2)
    """
)


async def test_one_session_cannot_switch_every_session_off_the_zygote(bwrap, tmp_path):
    import trio

    hostile, victim = tmp_path / "hostile", tmp_path / "victim"
    hostile.mkdir()
    victim.mkdir()

    async def call(session: str, workdir: Path, argv: list[str]) -> ToolResult:
        context = ToolContext(session_id=session, workdir=str(workdir), call_id=uuid.uuid4().hex)
        context = attrs.evolve(context, protected_paths=DEFAULT_PROTECTED_PATHS)
        tool = sandboxed("run_program")
        return await bwrap.run(tool, ToolCall(name=tool.name, arguments={"argv": argv}), context)

    before = await call("victim", victim, ["true"])
    assert "zygote" in before.metadata["limits"]["sandbox"]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "hostile", hostile, ["python3", "-c", TOGGLE])
        with trio.fail_after(30):
            while not (hostile / "toggling").exists():
                await trio.sleep(0.05)
        for _ in range(10):
            await call("hostile", hostile, ["true"])
    for session in ("victim", "newcomer"):
        after = await call(session, victim, ["true"])
        assert after.success, after.error
        assert "zygote" in after.metadata["limits"].get("sandbox", ""), (session, after.metadata)
