"""Fault tests with real processes: each hostile tool gets its structured error, leaves no
process behind, the host survives and the next call works.

Run under bubblewrap (when ``bwrap`` is installed) and in the degraded plain-process mode.
The tools live in ``runner_sandbox_tools.py`` next to this file and are imported by reference
inside the workers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_runner import ISOLATION_BWRAP, ISOLATION_PROCESS, RunnerExecutor

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
HAVE_BWRAP = ISOLATION_BWRAP if __import__("shutil").which("bwrap") else None

MODES = [
    pytest.param(
        "bubblewrap",
        marks=pytest.mark.skipif(HAVE_BWRAP is None, reason="bubblewrap is not installed"),
    ),
    "process",
]


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


async def assert_none_left(marker: str) -> None:
    # The kernel tears a PID namespace down asynchronously; allow it a moment.
    for _ in range(100):
        if not marked_pids(marker):
            return
        await trio.sleep(0.02)
    assert marked_pids(marker) == [], f"processes with {marker!r} were left behind"


def processes_in(directory: Path) -> list[int]:
    """Processes whose working directory is ``directory`` (the workers of its sandboxes)."""
    target = str(directory.resolve())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == target:
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture
async def executor(request: Any, tmp_path: Path) -> AsyncIterator[tuple[RunnerExecutor, Path]]:
    ex = RunnerExecutor.from_settings(
        {
            "runner": {
                "sandbox": request.param,
                "python_path": [TOOLS_DIR],
                "warm_workers": 1,
                "file_size_mb": 8,
            }
        }
    )
    yield ex, tmp_path
    await ex.aclose()
    # Warm workers (idle or still starting) do not outlive the executor.
    for _ in range(100):
        if not processes_in(tmp_path):
            break
        await trio.sleep(0.02)
    assert processes_in(tmp_path) == []


async def call(
    ex: RunnerExecutor, workdir: Path, tool: ToolDefinition, **arguments: Any
) -> ToolResult:
    context = ToolContext(session_id="faults", workdir=str(workdir), call_id=uuid.uuid4().hex)
    return await ex.run(tool, ToolCall(name=tool.name, arguments=arguments), context)


async def next_call_works(ex: RunnerExecutor, workdir: Path) -> None:
    result = await call(ex, workdir, sandboxed("echo"), after="fault")
    assert result.success, result.error
    assert result.data["arguments"] == {"after": "fault"}


FAULTS = [
    # (tool, arguments, execution, expected code, words in the message)
    ("allocate_gigabyte", {}, {}, "SANDBOX_MEMORY_LIMIT", "256 MiB"),
    ("segfault", {}, {}, "SANDBOX_CRASHED", "SIGSEGV"),
    ("abort", {}, {}, "SANDBOX_CRASHED", "SIGABRT"),
    ("busy_loop", {}, {"timeout_s": 1.0}, "TIMEOUT", "did not finish"),
    ("sleep_an_hour", {}, {"timeout_s": 1.0}, "TIMEOUT", "did not finish"),
    ("flood_stdout", {}, {}, "OUTPUT_TRUNCATED", "1000000 bytes"),
    ("huge_result", {}, {"max_output_bytes": 100_000}, "OUTPUT_TRUNCATED", "100000"),
    ("raise_value_error", {}, {}, "EXECUTION_ERROR", "ValueError: bad value 42"),
    ("exit_abruptly", {}, {}, "SANDBOX_CRASHED", "status 7"),
]


@pytest.mark.parametrize("executor", MODES, indirect=True)
@pytest.mark.parametrize(("name", "arguments", "execution", "code", "words"), FAULTS)
async def test_fault_gives_its_structured_error_and_the_next_call_works(
    executor: tuple[RunnerExecutor, Path],
    name: str,
    arguments: dict[str, Any],
    execution: dict[str, Any],
    code: str,
    words: str,
) -> None:
    ex, workdir = executor
    result = await call(ex, workdir, sandboxed(name, **execution), **arguments)
    assert not result.success and result.error is not None
    assert result.error.code == code, result.error
    assert words in result.error.message
    assert result.error.suggestion
    assert result.metadata["isolation"] in (ISOLATION_BWRAP, ISOLATION_PROCESS)
    await next_call_works(ex, workdir)


@pytest.mark.parametrize("executor", MODES, indirect=True)
async def test_killing_the_parent_does_not_kill_the_host(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    result = await call(ex, workdir, sandboxed("kill_parent"))
    # Under bubblewrap the parent is the namespace's init, which ignores the signal; in the
    # degraded mode it is the worker's monitor process. Either way this process is alive.
    assert result.success or result.error is not None
    await next_call_works(ex, workdir)


@pytest.mark.parametrize("executor", MODES, indirect=True)
async def test_daemons_do_not_outlive_the_call(executor: tuple[RunnerExecutor, Path]) -> None:
    ex, workdir = executor
    marker = f"tooldeck-daemon-{uuid.uuid4().hex}"
    result = await call(ex, workdir, sandboxed("daemons"), marker=marker)
    assert result.success, result.error
    await assert_none_left(marker)
    await next_call_works(ex, workdir)


@pytest.mark.slow
@pytest.mark.parametrize("executor", MODES, indirect=True)
async def test_a_thousand_children_are_all_reaped(executor: tuple[RunnerExecutor, Path]) -> None:
    ex, workdir = executor
    marker = f"tooldeck-child-{uuid.uuid4().hex}"
    result = await call(ex, workdir, sandboxed("thousand_children", timeout_s=20), marker=marker)
    if result.metadata["limits"]["max_processes"] is None:
        # No pids cgroup on this machine: reported as such, and all 1000 start.
        assert "unlimited" in result.metadata["limits"]["processes"]
        assert result.success and result.data == 1000, result.error
    else:
        # The call's process limit (cgroup pids.max) stops the bomb with a clear error.
        assert result.error is not None and result.error.code == "EXECUTION_ERROR"
        assert "limit of 256 processes" in result.error.message
    await assert_none_left(marker)
    await next_call_works(ex, workdir)


@pytest.mark.parametrize("executor", MODES, indirect=True)
async def test_a_gigabyte_to_a_file_stops_at_the_file_size_limit(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    target = workdir / "big.bin"
    result = await call(ex, workdir, sandboxed("flood_file", writes=True), path=str(target))
    assert result.error is not None and result.error.code == "TOO_LARGE"
    assert "file size limit" in result.error.message
    assert target.stat().st_size <= 8 * 1024 * 1024
    await next_call_works(ex, workdir)


@pytest.mark.parametrize("executor", MODES, indirect=True)
async def test_timeout_and_cancellation_kill_the_process_tree(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    marker = f"tooldeck-cancel-{uuid.uuid4().hex}"
    # Children that sleep for an hour while the tool itself sleeps: killed on timeout...
    tool = sandboxed("thousand_children_then_sleep", timeout_s=2.0)
    result = await call(ex, workdir, tool, marker=marker, count=5)
    assert result.error is not None and result.error.code == "TIMEOUT"
    await assert_none_left(marker)
    # ... and on the caller's cancellation, which propagates as trio.Cancelled.
    marker = f"tooldeck-cancel-{uuid.uuid4().hex}"
    outcome: list[str] = []
    caller = trio.CancelScope()
    async with trio.open_nursery() as nursery:

        async def go() -> None:
            with caller:
                tool = sandboxed("thousand_children_then_sleep")
                await call(ex, workdir, tool, marker=marker, count=5)
                outcome.append("returned")
            outcome.append("cancelled" if caller.cancelled_caught else "not cancelled")

        nursery.start_soon(go)
        with trio.fail_after(30):
            while len(marked_pids(marker)) < 5:
                await trio.sleep(0.02)
        caller.cancel()
    assert outcome == ["cancelled"]
    await assert_none_left(marker)
    await next_call_works(ex, workdir)


@pytest.mark.parametrize("executor", MODES, indirect=True)
async def test_cancel_session_kills_a_sandboxed_call(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    marker = f"tooldeck-session-{uuid.uuid4().hex}"
    results: list[ToolResult] = []
    async with trio.open_nursery() as nursery:

        async def go() -> None:
            tool = sandboxed("thousand_children_then_sleep")
            results.append(await call(ex, workdir, tool, marker=marker, count=3))

        nursery.start_soon(go)
        while len(marked_pids(marker)) < 3:
            await trio.sleep(0.02)
        assert ex.cancel_session("faults") == 1
    assert results[0].error is not None and results[0].error.code == "CANCELLED"
    await assert_none_left(marker)
    await next_call_works(ex, workdir)


@pytest.mark.parametrize("mode", ["bubblewrap", "process"])
async def test_closing_while_replacements_start_leaves_nothing(mode: str, tmp_path: Path) -> None:
    if mode == "bubblewrap" and HAVE_BWRAP is None:
        pytest.skip("bubblewrap is not installed")
    # aclose() right after a call catches the pool's replacement worker mid-start (a bwrap
    # being set up is the delicate case). Repeated, as the timing varies.
    for _ in range(3):
        ex = RunnerExecutor.from_settings(
            {"runner": {"sandbox": mode, "python_path": [TOOLS_DIR], "warm_workers": 2}}
        )
        result = await call(ex, tmp_path, sandboxed("echo"))
        assert result.success
        await ex.aclose()
    for _ in range(100):
        if not processes_in(tmp_path):
            break
        await trio.sleep(0.02)
    assert processes_in(tmp_path) == []
