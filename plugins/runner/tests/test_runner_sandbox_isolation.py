"""What a sandboxed tool can see and do: environment, files, network, output, warm workers."""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_runner import ISOLATION_BWRAP, ISOLATION_PROCESS, RunnerExecutor
from tooldeck_runner.bench import bench_sandbox

from tooldeck_hookspecs import (
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
)

TOOLS_DIR = str(Path(__file__).resolve().parent)
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def sandboxed(name: str, **security: Any) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description="a test tool",
        category="code",
        entrypoint=f"runner_sandbox_tools:{name}",
        security=SecurityConfig(sandbox=True, **security),
        execution=ExecutionConfig(timeout_s=20),
    )


async def call(
    ex: RunnerExecutor, workdir: Path | str, tool: ToolDefinition, **arguments: Any
) -> ToolResult:
    context = ToolContext(session_id="iso", workdir=str(workdir), call_id="c1")
    return await ex.run(tool, ToolCall(name=tool.name, arguments=arguments), context)


@pytest.fixture
async def bwrap_executor() -> AsyncIterator[RunnerExecutor]:
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": "bubblewrap", "python_path": [TOOLS_DIR], "warm_workers": 1}}
    )
    yield ex
    await ex.aclose()


@pytest.fixture
async def process_executor() -> AsyncIterator[RunnerExecutor]:
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": "process", "python_path": [TOOLS_DIR], "warm_workers": 1}}
    )
    yield ex
    await ex.aclose()


@pytest.fixture
async def any_executor(request: Any) -> AsyncIterator[RunnerExecutor]:
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": request.param, "python_path": [TOOLS_DIR], "warm_workers": 1}}
    )
    yield ex
    await ex.aclose()


MODES = [pytest.param("bubblewrap", marks=needs_bwrap), "process"]


@pytest.mark.parametrize("any_executor", MODES, indirect=True)
async def test_host_secrets_in_the_environment_are_not_visible(
    any_executor: RunnerExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLDECK_TEST_SECRET", "hunter2")
    result = await call(any_executor, tmp_path, sandboxed("environment"))
    assert result.success, result.error
    assert "TOOLDECK_TEST_SECRET" not in result.data
    assert "hunter2" not in repr(result.data)
    assert result.data["HOME"] == "/tmp"
    assert set(result.data) <= {
        "PATH",
        "HOME",
        "LANG",
        "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONNOUSERSITE",
        "PWD",
        "LC_CTYPE",
    }


@needs_bwrap
async def test_the_workdir_is_read_only_unless_the_tool_writes_it(
    bwrap_executor: RunnerExecutor, tmp_path: Path
) -> None:
    (tmp_path / "in.txt").write_text("inside")
    result = await call(bwrap_executor, tmp_path, sandboxed("read_file"), path="in.txt")
    assert result.data == "inside"
    target = str(tmp_path / "out.txt")
    result = await call(bwrap_executor, tmp_path, sandboxed("write_file"), path=target, text="x")
    assert result.error is not None and result.error.code == "EXECUTION_ERROR"
    assert "Read-only file system" in result.error.message
    assert not (tmp_path / "out.txt").exists()
    tool = sandboxed("write_file", writes_workdir=True)
    result = await call(bwrap_executor, tmp_path, tool, path=target, text="written")
    assert result.success and (tmp_path / "out.txt").read_text() == "written"


@needs_bwrap
async def test_the_host_outside_the_workdir_is_not_visible(
    bwrap_executor: RunnerExecutor, tmp_path: Path
) -> None:
    # A file of the host next to (not inside) the workdir, and the host's /tmp.
    workdir = tmp_path / "work"
    workdir.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    result = await call(bwrap_executor, workdir, sandboxed("read_file"), path=str(secret))
    assert result.error is not None and "FileNotFoundError" in result.error.message
    # Paths of the host outside the mounts (the interpreter, /usr, a few /etc files, workdir).
    host_only = [p for p in ("/etc/shadow", "/home", "/var", "/opt", "/srv") if os.path.exists(p)]
    assert host_only
    for path in host_only:
        result = await call(bwrap_executor, workdir, sandboxed("read_file"), path=path)
        assert result.error is not None, path
        assert "FileNotFoundError" in result.error.message, result.error.message


@needs_bwrap
async def test_no_network_unless_the_tool_asks_for_it(
    bwrap_executor: RunnerExecutor, tmp_path: Path
) -> None:
    result = await call(bwrap_executor, tmp_path, sandboxed("network_probe"))
    assert result.data == ["lo"]
    result = await call(bwrap_executor, tmp_path, sandboxed("network_probe", network=True))
    assert result.data == sorted(name for _, name in socket.if_nameindex())


@needs_bwrap
async def test_the_sandboxs_own_root_file_system_is_read_only(
    bwrap_executor: RunnerExecutor, tmp_path: Path
) -> None:
    # bubblewrap builds the sandbox on a tmpfs of its own (no size) holding the mount points:
    # writable, it was storage no limit bounded and, in a zygote, shared by every later call of
    # the session (a file in /, an /etc/ld.so.preload for the next call's programs).
    for writes in (False, True):
        tool = sandboxed("root_file_system_writes", writes_workdir=writes)
        first = await call(bwrap_executor, tmp_path, tool, name=f"leftover-{writes}")
        assert first.success, first.error
        assert first.data["created"] == [], first.data
    second = await call(bwrap_executor, tmp_path, sandboxed("root_file_system_writes"), name="x")
    assert second.success and second.data["created"] == []
    assert not any(name.startswith("leftover") for name in second.data["root"])
    assert "etc" in second.data["root"] and "usr" in second.data["root"]


@needs_bwrap
async def test_pid_namespace_and_working_directory(
    bwrap_executor: RunnerExecutor, tmp_path: Path
) -> None:
    result = await call(bwrap_executor, tmp_path, sandboxed("echo"), x=1)
    assert result.success
    assert result.data["cwd"] == str(tmp_path.resolve())
    assert result.data["session_id"] == "iso"
    assert result.data["pid"] < 10  # a fresh PID namespace
    assert result.metadata["isolation"] == ISOLATION_BWRAP


async def test_degraded_mode_is_labelled(process_executor: RunnerExecutor, tmp_path: Path) -> None:
    result = await call(process_executor, tmp_path, sandboxed("echo"))
    assert result.success and result.metadata["isolation"] == ISOLATION_PROCESS


async def test_printed_output_is_captured_and_structured_failures_cross_the_boundary(
    process_executor: RunnerExecutor, tmp_path: Path
) -> None:
    result = await call(process_executor, tmp_path, sandboxed("printer"))
    assert result.data == "done"
    assert "hello from the tool" in result.metadata["output"]
    result = await call(process_executor, tmp_path, sandboxed("fail_structured"))
    assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED"
    assert result.error.suggestion == "stay home"
    result = await call(process_executor, tmp_path, sandboxed("async_echo"), v=2)
    assert result.data == {"arguments": {"v": 2}, "async": True}


async def test_second_call_is_served_by_a_warm_worker(
    process_executor: RunnerExecutor, tmp_path: Path
) -> None:
    first = await call(process_executor, tmp_path, sandboxed("echo"))
    # The replacement starts in the background; wait until the pool holds it.
    with trio.fail_after(30):
        while process_executor.statistics().sandbox.warm_idle < 1:  # type: ignore[union-attr]
            await trio.sleep(0.01)
    second = await call(process_executor, tmp_path, sandboxed("echo"))
    assert first.metadata["warm"] is False and second.metadata["warm"] is True
    assert first.data["pid"] != second.data["pid"]  # single use: a new process each time
    stats = process_executor.statistics().sandbox
    assert stats is not None and stats.served_warm == 1 and stats.served_cold == 1


async def test_a_missing_workdir_or_entrypoint_is_a_structured_error(
    process_executor: RunnerExecutor, tmp_path: Path
) -> None:
    missing = tmp_path / uuid.uuid4().hex
    result = await call(process_executor, missing, sandboxed("echo"))
    assert result.error is not None and "does not exist" in result.error.message

    def local(arguments: Any, context: Any) -> int:
        return 1

    tool = ToolDefinition(
        name="local",
        description="a closure",
        category="code",
        execute=local,
        security=SecurityConfig(sandbox=True),
    )
    result = await call(process_executor, tmp_path, tool)
    assert result.error is not None and "entrypoint" in result.error.message
    tool = sandboxed("no_such_function")
    result = await call(process_executor, tmp_path, tool)
    assert result.error is not None and "AttributeError" in result.error.message


async def test_aclose_leaves_no_worker_behind(tmp_path: Path) -> None:
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": "process", "python_path": [TOOLS_DIR], "warm_workers": 2}}
    )
    await call(ex, tmp_path, sandboxed("echo"))
    pool = ex.sandbox_pool()
    idle = [w.process for ws in pool._idle.values() for w in ws]
    assert len(idle) == 2
    await ex.aclose()
    assert all(p.returncode is not None for p in idle)
    assert not any(os.path.exists(f"/proc/{p.pid}/cmdline") for p in idle if p.pid)


@pytest.mark.slow
async def test_bench_sandbox_reports_its_figures() -> None:
    figures = await bench_sandbox(n=5)
    for key in (
        "sandbox_cold_p50_ms",
        "sandbox_cold_p95_ms",
        "sandbox_warm_p50_ms",
        "sandbox_warm_p95_ms",
    ):
        assert figures[key] > 0
    assert figures["isolation"] in (ISOLATION_BWRAP, ISOLATION_PROCESS)
