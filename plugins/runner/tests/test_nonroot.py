"""Sandboxed code does not run as the host's root (issue 12, item 4).

Real bubblewrap, real user namespaces and id-mapped mounts, real files. A deck running as root
starts its sandboxes as an unprivileged uid (``runner.uid``, 65534 by default): seen from the
host (``/proc/<pid>/status``, which no mount can remap) every process of the sandbox has that
uid and gid and no supplementary group, while the files it writes in the workdir belong to the
deck's uid, and the workdir's files look like the tool's own from inside. Where that cannot be
done (the deck is not root, ``uid = "deck"``, a file system without id-mapped mounts) the
sandbox keeps the previous mapping and ``metadata["limits"]`` says why.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_runner import RunnerExecutor, RunnerSettings

from tooldeck.testing import marked_pids
from tooldeck_hookspecs import (
    ConfigError,
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
)

TOOLS_DIR = str(Path(__file__).resolve().parent)
HAVE_BWRAP = shutil.which("bwrap") is not None
pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")


def _why_not_here() -> str:
    """Why this machine cannot give sandboxes their own uid (in a fresh process), or ""."""
    code = "import sys; from tooldeck_runner._idmap import probe; print(probe(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", code, tempfile.gettempdir()], capture_output=True, text=True
    )
    if done.returncode:
        return f"the probe failed: {done.stderr.strip()[-300:]}"
    return done.stdout.strip()


def deck_mapping(ex: RunnerExecutor, result: ToolResult) -> str:
    """The ``uid_map`` a tool that keeps the deck's uid sees. A single-use worker: bubblewrap's
    ``0 <deck uid> 1``. A call forked in a zygote: its own namespace's map over the zygote's,
    the same number on both sides; a root deck's zygote names its sandbox 65534 instead of 0
    (``_sandbox._ZYGOTE_ROOT_INSIDE_UID``: a call may not map uid 0 of its parent). With
    ``zygote`` on and cgroups here, the call must have been forked: the zygote serves these
    decks too (runner README, "Zygote")."""
    if not (ex.settings.zygote and ex.sandbox_pool().statistics().cgroups.startswith("cgroup")):
        return f"0 {os.getuid()} 1"
    assert result.metadata["limits"]["sandbox"].startswith("forked in the session's zygote")
    inside = 65534 if os.getuid() == 0 else os.getuid()
    assert f"uid {inside} inside" in result.metadata["limits"]["uid"]
    return f"{inside} {inside} 1"


#: A root deck on a kernel that has id-mapped mounts and lets it make a mount namespace (not a
#: container without CAP_SYS_ADMIN): the tests below then insist; elsewhere they are skipped,
#: and test_the_result_states_the_identity_really_applied checks that the fallback is reported.
WHY_NOT = _why_not_here() if HAVE_BWRAP else "no bubblewrap"
needs_idmap = pytest.mark.skipif(bool(WHY_NOT), reason=f"no id-mapped sandboxes: {WHY_NOT}")


def sandboxed(name: str, *, writes: bool = False) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description="a test tool",
        category="code",
        entrypoint=f"test_nonroot_tools:{name}",
        security=SecurityConfig(sandbox=True, writes_workdir=writes),
        execution=ExecutionConfig(timeout_s=30),
    )


def executor(**runner: Any) -> RunnerExecutor:
    settings = {"sandbox": "bubblewrap", "python_path": [TOOLS_DIR], "warm_workers": 1}
    return RunnerExecutor.from_settings({"runner": {**settings, **runner}})


async def call(ex: RunnerExecutor, workdir: Path, tool: ToolDefinition, **args: Any) -> ToolResult:
    context = ToolContext(session_id="nonroot", workdir=str(workdir), call_id=uuid.uuid4().hex)
    return await ex.run(tool, ToolCall(name=tool.name, arguments=args), context)


@pytest.fixture
async def ex() -> AsyncIterator[RunnerExecutor]:
    ex = executor()
    yield ex
    await ex.aclose()


@pytest.fixture
def root_only(tmp_path: Path) -> Path:
    """A workdir only root may enter (``0700`` in a ``0700`` parent), with a ``0600`` file."""
    parent = tmp_path / "private"
    parent.mkdir(mode=0o700)
    workdir = parent / "project"
    workdir.mkdir(mode=0o700)
    (workdir / "notes.txt").write_text("root's notes")
    os.chmod(workdir / "notes.txt", 0o600)
    return workdir


def host_status(pid: int) -> dict[str, str]:
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            fields[name] = " ".join(value.split())
    return fields


# -- the sandbox's processes, seen from the host ---------------------------------------------


@needs_idmap
@pytest.mark.parametrize("uid,gid", [(None, None), (4242, 4343)])
async def test_every_process_of_the_sandbox_is_unprivileged_on_the_host(
    tmp_path: Path, uid: int | None, gid: int | None
) -> None:
    settings = {} if uid is None else {"uid": uid, "gid": gid}
    want_uid, want_gid = (65534, 65534) if uid is None else (uid, gid)
    # A single-use worker's process tree (a zygote's: test_throughput_zygote).
    ex = executor(zygote=False, **settings)
    linger = sandboxed("linger")
    marker = f"tooldeck-nonroot-{uuid.uuid4().hex}"
    seen: dict[int, dict[str, str]] = {}
    try:
        async with trio.open_nursery() as nursery:
            results: list[ToolResult] = []

            async def run() -> None:
                results.append(await call(ex, tmp_path, linger, marker=marker))

            nursery.start_soon(run)
            for _ in range(500):  # the sandbox's cold start, bounded
                pids = marked_pids(marker)
                if pids:
                    break
                await trio.sleep(0.02)
            assert pids, f"the sandboxed process never appeared: {results}"
            # From the lingering child up through its parents while they are in the sandbox's
            # PID namespace (NSpid has two levels there): the tool's process, the worker (the
            # sandbox's PID 1). Read from the host: no mount or namespace can remap these.
            pid = pids[0]
            while True:
                status = host_status(pid)
                if len(status["NSpid"].split()) < 2:
                    break
                seen[pid] = status
                pid = int(status["PPid"])
            nursery.cancel_scope.cancel()
    finally:
        await ex.aclose()
    assert len(seen) == 3, seen  # the child, the tool's process, the worker (monitor)
    for status in seen.values():
        assert status["Uid"] == " ".join([str(want_uid)] * 4), status
        assert status["Gid"] == " ".join([str(want_gid)] * 4), status
        assert status["Groups"] == "", status
        assert status["CapEff"] == status["CapPrm"] == "0000000000000000", status


@needs_idmap
async def test_the_tool_sees_itself_owning_the_workdir_and_reports_its_host_uid(
    ex: RunnerExecutor, root_only: Path
) -> None:
    result = await call(ex, root_only, sandboxed("who_am_i"))
    assert result.success, result.error
    data = result.data
    assert data["uid"] == data["gid"] == 65534 and data["groups"] == []
    assert data["uid_map"] == "65534 65534 1"
    # root's 0600 file in root's 0700 folder: the tool's own, through the id-mapped mount.
    assert data["owners"] == {"notes.txt": [65534, 65534]}
    limits = result.metadata["limits"]
    assert limits["host_uid"] == limits["host_gid"] == 65534
    assert "uid 65534 / gid 65534 on the host" in limits["uid"]
    assert "uid_fallback" not in limits
    # A warm worker (started in the background) is the same.
    again = await call(ex, root_only, sandboxed("who_am_i"))
    assert again.success and again.metadata["warm"] is True
    assert again.data["uid"] == 65534 and again.metadata["limits"]["host_uid"] == 65534


def _spawner_mounts(stage: str) -> list[str]:
    import threading

    spawner = next(t for t in threading.enumerate() if t.name == "tooldeck-sandbox-spawner")
    with open(f"/proc/self/task/{spawner.native_id}/mountinfo") as fh:
        return [line for line in fh if f" {stage}/" in line]


@needs_idmap
async def test_the_id_mapped_trees_never_show_on_the_host_and_are_detached(
    root_only: Path,
) -> None:
    from tooldeck_runner import _idmap
    from tooldeck_runner._sandbox import _on_spawner

    ex = executor()
    try:
        for _ in range(3):
            result = await call(ex, root_only, sandboxed("write_tree", writes=True))
            assert result.success, result.error
            (root_only / "made-dir" / "inner").unlink()
            (root_only / "made-dir").rmdir()
        stage = _idmap._state.stage
        assert stage and _spawner_mounts(stage), "nothing staged in the spawner's namespace"
        # The host (this thread's namespace): an empty directory, no mount under it.
        assert os.listdir(stage) == []
        with open("/proc/self/mountinfo") as fh:
            assert not [line for line in fh if stage in line]
    finally:
        await ex.aclose()
    await _on_spawner(lambda: None)  # after the clean-ups aclose() queued there
    assert _spawner_mounts(stage) == []


# -- files -------------------------------------------------------------------------------------


@needs_idmap
async def test_files_it_writes_belong_to_the_deck_on_the_host(
    ex: RunnerExecutor, root_only: Path
) -> None:
    tool = sandboxed("write_tree", writes=True)
    result = await call(ex, root_only, tool, append="notes.txt")
    assert result.success, result.error
    assert result.data["child"] == 0 and result.data["appended"] == len(" appended")
    # Inside: its own files. On the host: the deck's, not the sandbox's uid.
    assert set(result.data["owners"].values()) == {65534}
    for name in ("made-file", "made-dir", "made-dir/inner", "made-by-child", "notes.txt"):
        st = os.stat(root_only / name)
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), name
    assert (root_only / "notes.txt").read_text() == "root's notes appended"
    assert stat.S_IMODE(os.stat(root_only / "notes.txt").st_mode) == 0o600


@needs_idmap
async def test_protected_paths_stay_readable_and_read_only(
    ex: RunnerExecutor, root_only: Path
) -> None:
    git = root_only / ".git"
    git.mkdir(mode=0o700)
    (git / "config").write_text("[core]\n")
    os.chmod(git / "config", 0o600)
    tool = sandboxed("read_and_try_write", writes=True)
    result = await call(ex, root_only, tool, path=".git/config")
    assert result.success, result.error
    assert result.data == {"read": "[core]\n", "write": "refused: EROFS"}
    assert (git / "config").read_text() == "[core]\n"


@needs_idmap
async def test_no_setid_file_is_left_and_none_is_the_hosts_root_setuid(
    ex: RunnerExecutor, tmp_path: Path
) -> None:
    # The file lands as root on disk (the deck's uid): the filter must still refuse the bits.
    tool = ToolDefinition(
        name="setid_attempts",
        description="x",
        category="code",
        entrypoint="runner_sandbox_tools:setid_attempts",
        security=SecurityConfig(sandbox=True, writes_workdir=True),
        execution=ExecutionConfig(timeout_s=30),
    )
    result = await call(ex, tmp_path, tool)
    assert result.success, result.error
    assert result.metadata["limits"]["host_uid"] == 65534
    for name, outcome in result.data.items():
        assert "refused" in outcome or "exit 1" in outcome, (name, outcome)
    for path in tmp_path.rglob("*"):
        st = path.lstat()
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), path
        assert st.st_uid == os.getuid(), path


async def test_kernel_keyrings_are_out_of_reach(ex: RunnerExecutor, tmp_path: Path) -> None:
    result = await call(ex, tmp_path, sandboxed("session_keyring"))
    assert result.success, result.error
    assert result.data == "refused: EPERM"


# -- fallbacks and configuration ----------------------------------------------------------------


async def test_the_result_states_the_identity_really_applied(
    ex: RunnerExecutor, tmp_path: Path
) -> None:
    # Runs everywhere: where the machine cannot (WHY_NOT), the fallback must be reported, not
    # the unprivileged uid claimed.
    result = await call(ex, tmp_path, sandboxed("who_am_i"))
    assert result.success, result.error
    limits = result.metadata["limits"]
    host_uid = int(result.data["status"]["Uid"].split()[0])
    if WHY_NOT:
        assert limits["uid_fallback"] and limits["host_uid"] == os.getuid()
        assert result.data["uid_map"] == f"0 {os.getuid()} 1"
    else:
        assert "uid_fallback" not in limits and limits["host_uid"] == 65534
        # /proc/self/status inside shows the namespace's view; with the same number inside and
        # out it is the host's uid too (test_every_process_... reads it from the host).
        assert host_uid == 65534


async def test_uid_deck_keeps_the_previous_mapping_and_says_so(tmp_path: Path) -> None:
    ex = executor(uid="deck")
    try:
        result = await call(ex, tmp_path, sandboxed("who_am_i"))
        assert result.success, result.error
        assert result.data["uid_map"] == deck_mapping(ex, result)
    finally:
        await ex.aclose()
    limits = result.metadata["limits"]
    assert limits["host_uid"] == os.getuid()
    assert "disabled" in limits["uid_fallback"]


@needs_idmap
async def test_a_file_system_without_id_mapped_mounts_falls_back_and_says_so(
    ex: RunnerExecutor,
) -> None:
    # sysfs refuses id-mapped mounts (no FS_ALLOW_IDMAP): a read-only call there still runs,
    # with the deck's uid, and the result says so instead of claiming the unprivileged uid.
    workdir = Path("/sys/kernel/mm")
    if not workdir.is_dir():
        pytest.skip("no /sys/kernel/mm")
    result = await call(ex, workdir, sandboxed("who_am_i"))
    assert result.success, result.error
    limits = result.metadata["limits"]
    assert limits["host_uid"] == os.getuid()
    assert "no id-mapped mount of the workdir" in limits["uid_fallback"]
    assert result.data["uid_map"] == deck_mapping(ex, result)


@pytest.mark.parametrize("value", [0, -1, True, "root", 2**32, 1.5])
def test_bad_uids_are_configuration_errors(value: object) -> None:
    with pytest.raises(ConfigError, match="runner].uid"):
        RunnerSettings.from_settings({"runner": {"uid": value}})
    if value != "root":
        with pytest.raises(ConfigError, match="runner].gid"):
            RunnerSettings.from_settings({"runner": {"gid": value}})


def test_uid_settings() -> None:
    assert RunnerSettings.from_settings({}).uid == 65534
    assert RunnerSettings.from_settings({}).gid is None
    assert RunnerSettings.from_settings({"runner": {"uid": "deck"}}).uid is None
    custom = RunnerSettings.from_settings({"runner": {"uid": 1000, "gid": 100}})
    assert (custom.uid, custom.gid) == (1000, 100)


async def test_a_deck_that_is_not_root_keeps_its_own_uid_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the deck's euid is looked at (a real non-root run needs an interpreter that uid can
    # read, which this machine's /root/.pyenv is not): the decision and its report.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    ex = executor()
    try:
        result = await call(ex, tmp_path, sandboxed("who_am_i"))
        assert result.success, result.error
        assert result.data["uid_map"] == deck_mapping(ex, result)
    finally:
        await ex.aclose()
    limits = result.metadata["limits"]
    assert "the deck is not root (uid 1000)" in limits["uid_fallback"]
    assert limits["host_uid"] == os.getuid()
