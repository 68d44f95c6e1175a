"""A tool's own limits (``execution.timeout_s``, ``memory_mb``, ``max_output_bytes``,
``max_retries``) as the executor takes them: valid ones are honoured whatever their size, invalid
ones are refused with a structured error naming the field, before anything runs.

The schema plugin refuses such definitions at registration, but the executor is also used
without it (a stage swapped out, ``RunnerExecutor`` driven directly, a ``[tools.NAME]``
override such as ``timeout_s = inf``, valid TOML); ``run()`` never raises for them, and never
runs a tool without the limit it was configured with.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from tooldeck_runner import RunnerExecutor

from tooldeck_hookspecs import (
    ErrorCode,
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
)

TOOLS_DIR = str(Path(__file__).resolve().parent)
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


async def run(ex: RunnerExecutor, tool: ToolDefinition, workdir: str = "/tmp") -> ToolResult:
    context = ToolContext(session_id="limits", workdir=workdir)
    return await ex.run(tool, ToolCall(name=tool.name, arguments={"seconds": 0.01}), context)


def in_process(ran: list[int], **execution: Any) -> ToolDefinition:
    def counted(arguments: Any, context: ToolContext) -> str:
        ran.append(1)
        return "ran"

    return ToolDefinition(
        name="counted", description="a test tool", category="code", execute=counted,
        execution=ExecutionConfig(**execution),
    )


def sandboxed(**execution: Any) -> ToolDefinition:
    return ToolDefinition(
        name="sleep_for", description="a test tool", category="code",
        entrypoint="runner_sandbox_tools:sleep_for",
        security=SecurityConfig(sandbox=True), execution=ExecutionConfig(**execution),
    )


BAD_TIMEOUTS = [0, -1, -0.5, math.nan, "5", None, True]


@pytest.mark.parametrize("timeout_s", BAD_TIMEOUTS, ids=repr)
async def test_an_invalid_timeout_is_refused_clearly_and_nothing_runs(timeout_s: Any) -> None:
    ran: list[int] = []
    ex = RunnerExecutor()
    result = await run(ex, in_process(ran, timeout_s=timeout_s))
    assert not result.success and result.error is not None
    assert result.error.code == ErrorCode.EXECUTION_ERROR
    assert "execution.timeout_s" in result.error.message
    # Not the "timed out while queued: all slots were busy" a zero deadline used to give.
    assert "queued" not in result.error.message
    assert result.error.details["field"] == "execution.timeout_s"
    assert not result.error.retryable
    assert ran == []
    assert result.metadata["attempts"] == 0


@pytest.mark.parametrize("timeout_s", [math.inf, 1e30, 10**7], ids=repr)
async def test_a_huge_timeout_is_honoured_in_process(timeout_s: float) -> None:
    ran: list[int] = []
    result = await run(RunnerExecutor(), in_process(ran, timeout_s=timeout_s))
    assert result.success and result.data == "ran"
    assert ran == [1]


@pytest.mark.parametrize("max_retries", [-1, "3", 1.5, None], ids=repr)
async def test_invalid_retries_of_a_retryable_tool_are_refused(max_retries: Any) -> None:
    ran: list[int] = []
    tool = in_process(ran, retryable=True, max_retries=max_retries)
    result = await run(RunnerExecutor(), tool)
    assert not result.success and result.error is not None
    assert result.error.details["field"] == "execution.max_retries"
    assert ran == []


@needs_bwrap
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_mb", 0),
        ("memory_mb", -5),
        ("memory_mb", "12"),
        ("memory_mb", 1.5),
        ("max_output_bytes", -1),
        ("max_output_bytes", "1000"),
    ],
    ids=repr,
)
async def test_an_invalid_sandbox_limit_is_refused_rather_than_dropped(
    field: str, value: Any, tmp_path: Path
) -> None:
    # memory_mb = -5 used to run the tool with no memory limit at all (the cgroup refused the
    # value, RLIMIT_AS too, and both failures were only logged).
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": "bubblewrap", "python_path": [TOOLS_DIR]}}
    )
    try:
        result = await run(ex, sandboxed(**{field: value}), str(tmp_path))
    finally:
        await ex.aclose()
    assert not result.success and result.error is not None
    assert result.error.code == ErrorCode.EXECUTION_ERROR
    assert result.error.details["field"] == f"execution.{field}"
    assert f"execution.{field}" in result.error.message


@needs_bwrap
@pytest.mark.parametrize("zygote", [True, False])
@pytest.mark.parametrize("timeout_s", [math.inf, 1e30], ids=repr)
async def test_a_huge_timeout_is_honoured_in_the_sandbox(
    timeout_s: float, zygote: bool, tmp_path: Path
) -> None:
    # The CPU-time rlimit derived from the timeout used to overflow (an OverflowError raised
    # out of run() for inf, a crashed worker for 1e30).
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": "bubblewrap", "python_path": [TOOLS_DIR], "zygote": zygote}}
    )
    try:
        result = await run(ex, sandboxed(timeout_s=timeout_s), str(tmp_path))
    finally:
        await ex.aclose()
    assert result.success, result.error
    assert result.data == 0.01
