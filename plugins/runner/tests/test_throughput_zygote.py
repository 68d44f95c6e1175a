"""``zygote = true``: sandboxed calls forked inside one long-lived sandbox per session and mount
set, each in namespaces and a cgroup of its own (see the runner README, "Zygote").

Real bubblewrap, real cgroups, real hostile tools (``runner_sandbox_tools.py``); behaviour only,
no timings (``tooldeck_runner.bench.bench_sandbox_throughput`` measures).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_runner import RunnerExecutor

from tooldeck.testing import marked_pids
from tooldeck_hookspecs import (
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
)

TOOLS_DIR = str(Path(__file__).resolve().parent)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


def executor(**runner: Any) -> RunnerExecutor:
    return RunnerExecutor.from_settings(
        {
            "runner": {
                "sandbox": "bubblewrap",
                "python_path": [TOOLS_DIR],
                "zygote": True,
                **runner,
            }
        }
    )


def sandboxed(
    name: str, *, writes: bool = False, network: bool = False, **execution: Any
) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description="a hostile test tool",
        category="code",
        entrypoint=f"runner_sandbox_tools:{name}",
        security=SecurityConfig(sandbox=True, writes_workdir=writes, network=network),
        execution=ExecutionConfig(**execution),
    )


async def call(
    ex: RunnerExecutor, workdir: Path, tool: ToolDefinition, session: str = "s", **arguments: Any
) -> ToolResult:
    context = ToolContext(session_id=session, workdir=str(workdir))
    return await ex.run(tool, ToolCall(name=tool.name, arguments=arguments), context)


def host_status(pid: int) -> dict[str, str]:
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


def zygote_usable(ex: RunnerExecutor) -> None:
    stats = ex.sandbox_pool().statistics()
    if not stats.cgroups.startswith("cgroup"):
        pytest.skip(f"no per-call cgroups here: {stats.cgroups}")


async def test_one_zygote_per_session_and_workdir_serves_every_call(tmp_path: Path) -> None:
    ex = executor()
    zygote_usable(ex)
    other = tmp_path / "other"
    other.mkdir()
    try:
        first = await call(ex, tmp_path, sandboxed("echo"), x=1)
        again = await call(ex, tmp_path, sandboxed("echo"), x=2)
        elsewhere = await call(ex, other, sandboxed("echo"), x=3)
        other_session = await call(ex, tmp_path, sandboxed("echo"), session="t", x=4)
        for result in (first, again, elsewhere, other_session):
            assert result.success, result.error
            assert result.metadata["limits"]["sandbox"].startswith("forked in the session's")
        assert first.metadata["warm"] is False and again.metadata["warm"] is True
        assert elsewhere.metadata["warm"] is False and other_session.metadata["warm"] is False
        stats = ex.sandbox_pool().statistics()
        # Never shared across sessions or workdirs: three zygotes for three (session, workdir).
        assert stats.zygotes == 3 and stats.spawned == 3 and stats.served_zygote == 4
        assert stats.zygote_fallback == ""
    finally:
        await ex.aclose()


async def test_every_call_gets_a_fresh_tmp_and_dev_shm(tmp_path: Path) -> None:
    ex = executor()
    zygote_usable(ex)
    script = "ls -A /tmp /dev/shm; echo x > /tmp/left; echo y > /dev/shm/left"
    try:
        results = [
            await call(ex, tmp_path, sandboxed("run_program"), argv=["sh", "-c", script])
            for _ in range(3)
        ]
    finally:
        await ex.aclose()
    for result in results:
        assert result.success and result.data["returncode"] == 0, result
        assert "left" not in result.data["stdout"], result.data
    assert all(r.metadata["limits"]["sandbox"].startswith("forked") for r in results)


async def test_a_workdir_under_tmp_stays_visible_and_writable(tmp_path: Path) -> None:
    # pytest's tmp_path is under /tmp: the call's fresh /tmp must carry the workdir's mount.
    assert str(tmp_path).startswith("/tmp/")
    ex = executor()
    zygote_usable(ex)
    try:
        wrote = await call(
            ex,
            tmp_path,
            sandboxed("run_program", writes=True),
            argv=["sh", "-c", f"echo hi > {tmp_path}/out.txt && cat {tmp_path}/out.txt"],
        )
        ro = await call(
            ex,
            tmp_path,
            sandboxed("run_program"),
            argv=["sh", "-c", f"echo no > {tmp_path}/ro.txt"],
        )
    finally:
        await ex.aclose()
    assert wrote.success and wrote.data["stdout"] == "hi\n", wrote
    assert (tmp_path / "out.txt").read_text() == "hi\n"
    assert ro.success and ro.data["returncode"] != 0 and "Read-only" in ro.data["stderr"], ro
    assert not (tmp_path / "ro.txt").exists()


async def test_faults_end_in_their_call_and_the_zygote_serves_the_next(tmp_path: Path) -> None:
    ex = executor(max_processes=64)
    zygote_usable(ex)
    marker = f"tooldeck-zygote-{uuid.uuid4().hex}"
    try:
        crash = await call(ex, tmp_path, sandboxed("segfault"))
        memory = await call(ex, tmp_path, sandboxed("allocate_gigabyte", memory_mb=256))
        bomb = await call(ex, tmp_path, sandboxed("thousand_children"), marker=marker)
        daemons = await call(ex, tmp_path, sandboxed("daemons"), marker=marker)
        with trio.move_on_after(1):
            await call(ex, tmp_path, sandboxed("sleep_marked"), marker=marker)
        for _ in range(200):  # the killed cgroups' processes take a moment to be reaped
            if not marked_pids(marker):
                break
            await trio.sleep(0.02)
        left = marked_pids(marker)
        after = await call(ex, tmp_path, sandboxed("echo"), x=1)
        stats = ex.sandbox_pool().statistics()
    finally:
        await ex.aclose()
    assert crash.error is not None and crash.error.code == "SANDBOX_CRASHED", crash
    assert "SIGSEGV" in crash.error.message
    assert memory.error is not None and memory.error.code == "SANDBOX_MEMORY_LIMIT", memory
    assert bomb.error is not None and bomb.error.details.get("limit") == "max_processes", bomb
    assert daemons.success, daemons
    assert left == [], "daemons, fork-bomb children or a cancelled call's processes survived"
    assert after.success and after.metadata["warm"] is True, after
    assert stats.zygotes == 1 and stats.spawned == 1  # the faults did not cost the zygote


async def test_the_call_runs_unprivileged_in_its_own_cgroup_and_namespaces(
    tmp_path: Path,
) -> None:
    ex = executor()
    zygote_usable(ex)
    marker = f"tooldeck-zygote-{uuid.uuid4().hex}"
    seen: dict[int, dict[str, str]] = {}
    cgroups: dict[int, str] = {}
    user_ns: dict[int, str] = {}
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: call(ex, tmp_path, sandboxed("sleep_marked"), marker=marker))
            for _ in range(500):
                pids = marked_pids(marker)
                if pids:
                    break
                await trio.sleep(0.02)
            assert pids, "the sandboxed process never appeared"
            pid = pids[0]
            # Up through its parents while inside the sandbox (NSpid has 2+ levels): the child,
            # the tool's process (T), the call's PID 1 (P1), the zygote.
            while True:
                status = host_status(pid)
                if len(status["NSpid"].split()) < 2:
                    break
                seen[pid] = status
                with open(f"/proc/{pid}/cgroup") as fh:
                    cgroups[pid] = fh.read()
                user_ns[pid] = os.readlink(f"/proc/{pid}/ns/user")
                pid = int(status["PPid"])
            nursery.cancel_scope.cancel()
    finally:
        await ex.aclose()
    assert len(seen) == 4, seen
    levels = [len(s["NSpid"].split()) for s in seen.values()]
    # The child and T are one PID namespace deeper than the zygote: the call's own.
    assert levels[0] == levels[1] == levels[3] + 1 and levels[2] == levels[0], seen
    for status in seen.values():
        assert status["Uid"].split()[0] != "0" and status["Groups"] == "", status
        assert status["CapEff"] == status["CapPrm"] == "0000000000000000", status
    child, tool, _p1, zygote = list(seen)
    call_cgroup = [line for line in cgroups[child].splitlines() if ":memory:" in line]
    assert call_cgroup == [line for line in cgroups[tool].splitlines() if ":memory:" in line]
    assert call_cgroup != [line for line in cgroups[zygote].splitlines() if ":memory:" in line]
    assert call_cgroup and "tooldeck-sbx-" in call_cgroup[0]
    assert user_ns[tool] != user_ns[zygote]  # the call's own user namespace


async def test_a_call_cannot_reach_the_zygotes_or_its_pid_1s_plumbing(tmp_path: Path) -> None:
    ex = executor()
    zygote_usable(ex)
    probe = (
        "import json, os\n"
        "me = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n"
        "parent = int(me[1])\n"  # T (PID 2 of the call's own PID namespace and /proc)
        "grand = int(open(f'/proc/{parent}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "out = {}\n"
        "for pid in sorted({1, parent, grand}):\n"
        "    for what in ('fd', 'mem', 'environ'):\n"
        "        try:\n"
        "            (os.listdir if what == 'fd' else open)(f'/proc/{pid}/{what}')\n"
        "            out[f'{pid}/{what}'] = 'reached'\n"
        "        except OSError as exc:\n"
        "            out[f'{pid}/{what}'] = exc.strerror\n"
        "print(json.dumps(out))\n"
    )
    try:
        result = await call(ex, tmp_path, sandboxed("run_program"), argv=["python3", "-c", probe])
    finally:
        await ex.aclose()
    assert result.success and result.data["returncode"] == 0, result
    import json

    report = json.loads(result.data["stdout"])
    # The zygote is not even in the call's /proc (its own PID namespace's): P1 and T are all
    # there is of the plumbing, and neither's descriptors, memory or environment is readable.
    expected = [f"{pid}/{what}" for pid in (1, 2) for what in ("environ", "fd", "mem")]
    assert sorted(report) == expected, report
    assert all(v == "Permission denied" for v in report.values()), report


async def test_nothing_is_left_behind_after_aclose(tmp_path: Path) -> None:
    ex = executor()
    zygote_usable(ex)
    results = []
    async with trio.open_nursery() as nursery:

        async def one(i: int) -> None:
            results.append(await call(ex, tmp_path, sandboxed("echo"), x=i))

        for i in range(12):
            nursery.start_soon(one, i)
    assert all(r.success for r in results) and len(results) == 12
    pool = ex.sandbox_pool()
    zygote_pids = [z.worker.process.pid for z in pool._zygotes.values()]
    await ex.aclose()
    assert pool.statistics().zygotes == 0
    for pid in zygote_pids:
        assert not os.path.exists(f"/proc/{pid}") or host_status(pid)["State"].startswith("Z")
    mine = f"tooldeck-sbx-{os.getpid()}-"
    support = pool._cgroups
    assert support is not None
    for parent in support.parents.values():
        assert not [n for n in os.listdir(parent) if n.startswith(mine)]


async def test_a_replaced_workdir_or_a_new_protected_path_retires_the_zygote(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    ex = executor()
    zygote_usable(ex)
    writer = sandboxed("run_program", writes=True)
    try:
        first = await call(ex, workdir, writer, argv=["sh", "-c", "echo 1 > a.txt"])
        # Deleted and recreated: another directory, which the zygote has not mounted.
        shutil.rmtree(workdir)
        workdir.mkdir()
        second = await call(ex, workdir, writer, argv=["sh", "-c", "cat a.txt; echo 2 > b.txt"])
        # A protected path appears (from the host): the zygote's read-only binds are stale.
        (workdir / "tooldeck.toml").write_text("[runner]\n")
        third = await call(ex, workdir, writer, argv=["sh", "-c", "echo x >> tooldeck.toml"])
        stats = ex.sandbox_pool().statistics()
    finally:
        await ex.aclose()
    assert first.success and second.success and third.success, (first, second, third)
    assert second.metadata["warm"] is False and "No such file" in second.data["stderr"]
    assert (workdir / "b.txt").read_text() == "2\n"
    assert third.metadata["warm"] is False and third.data["returncode"] != 0
    assert "Read-only" in third.data["stderr"] and (workdir / "tooldeck.toml").read_text() == (
        "[runner]\n"
    )
    assert stats.discarded_stale == 2 and stats.spawned == 3


# The default (a root deck's sandboxes run as uid 65534, which does not map the host's root) and
# uid = "deck" (bubblewrap maps the deck's uid, root on a root deck: it covers parts of its
# /proc, and the pool gives the zygote a hidden uncovered proc). A deck that is not root runs
# these as the first kind (test_nonroot_deck_suite runs them so).
UIDS = pytest.mark.parametrize("uid", [{}, {"uid": "deck"}], ids=["default-uid", "uid-deck"])


@UIDS
async def test_a_call_cannot_see_a_concurrent_calls_processes_in_proc(
    tmp_path: Path, uid: dict[str, Any]
) -> None:
    ex = executor(**uid)
    zygote_usable(ex)
    marker = f"tooldeck-hidden-{uuid.uuid4().hex}"
    try:
        async with trio.open_nursery() as nursery:
            # The same session and workdir: the same zygote, the other call runs meanwhile.
            nursery.start_soon(lambda: call(ex, tmp_path, sandboxed("sleep_marked"), marker=marker))
            for _ in range(500):
                if marked_pids(marker):
                    break
                await trio.sleep(0.02)
            assert marked_pids(marker), "the other call's process never appeared"
            listing = await call(ex, tmp_path, sandboxed("proc_listing"))
            still_running = bool(marked_pids(marker))
            nursery.cancel_scope.cancel()
        stats = ex.sandbox_pool().statistics()
    finally:
        await ex.aclose()
    assert listing.success, listing.error
    assert still_running and stats.served_zygote >= 1 and stats.zygote_fallback == ""
    processes = listing.data["processes"]
    # A /proc of the call's own PID namespace: its PID 1, itself (PID 2, what /proc/self and
    # getpid() agree on), nothing of the zygote, its spares or the other call.
    assert listing.data["self"] == str(listing.data["pid"]) == "2", listing.data
    assert set(processes) == {"1", "2"}, processes
    assert not any(marker in cmdline for cmdline in processes.values()), processes


async def test_random_differs_between_calls(tmp_path: Path) -> None:
    ex = executor()
    zygote_usable(ex)
    tool = sandboxed("random_draws")
    try:
        # runner_sandbox_tools (which imports random) is preloaded in the zygote after the
        # first call: the later calls inherit the same generator state by fork.
        draws = [await call(ex, tmp_path, tool) for _ in range(4)]
        stats = ex.sandbox_pool().statistics()
    finally:
        await ex.aclose()
    assert all(r.success for r in draws), draws
    assert stats.served_zygote == 4
    values = [tuple(r.data) for r in draws]
    assert len(set(values)) == 4, values


@UIDS
async def test_the_calls_proc_keeps_host_wide_knobs_read_only(
    tmp_path: Path, uid: dict[str, Any]
) -> None:
    ex = executor(**uid)
    zygote_usable(ex)
    try:
        results = [await call(ex, tmp_path, sandboxed("proc_writability")) for _ in range(2)]
        stats = ex.sandbox_pool().statistics()
    finally:
        await ex.aclose()
    assert all(r.success for r in results), results
    # Forked calls, both of them (the first one starts the zygote): no fallback.
    assert stats.served_zygote == 2 and stats.zygote_fallback == "", stats
    for result in results:
        read_only = result.data["read_only"]
        # /proc/sys is always there; each knob that exists is on a read-only mount.
        assert "sys" in read_only and all(read_only.values()), read_only
        # A sysctl cannot be written (EROFS from the cover; never "written").
        assert result.data["sysctl_write"].startswith("refused"), result.data
        # The deck's own proc that a uid = "deck" zygote keeps is reachable by no path.
        assert result.data["other_procs"] == [], result.data


@pytest.mark.parametrize(("seccomp", "mode", "filters"), [(True, "2", "2"), (False, "0", "0")])
async def test_every_call_is_born_under_the_zygotes_filter_and_its_user_namespace_guard(
    tmp_path: Path, seccomp: bool, mode: str, filters: str
) -> None:
    # The zygote installs the filter on itself before any call process exists, without the
    # user-namespace rules (it makes one per call); each call's PID 1, forked ahead of its
    # call, stacks those once its namespaces exist. So two filters, neither installed on the
    # call's path; with seccomp = false there is none at all.
    ex = executor(seccomp=seccomp)
    zygote_usable(ex)
    argv = ["sh", "-c", "grep -E '^Seccomp(_filters)?:' /proc/self/status"]
    try:
        results = [
            await call(ex, tmp_path, sandboxed("run_program"), argv=argv) for _ in range(2)
        ]
        stats = ex.sandbox_pool().statistics()
    finally:
        await ex.aclose()
    assert stats.served_zygote == 2 and stats.zygote_fallback == "", stats
    for result in results:
        assert result.success and result.data["returncode"] == 0, result
        status = dict(line.split(":\t") for line in result.data["stdout"].splitlines())
        assert status == {"Seccomp": mode, "Seccomp_filters": filters}, status
        assert result.metadata["limits"]["seccomp"] == ("on" if seccomp else "off")
