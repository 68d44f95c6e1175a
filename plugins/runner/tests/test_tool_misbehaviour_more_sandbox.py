"""More sandboxed tools that misbehave: a result that is an un-awaited coroutine, metadata that
only the host may write (``cached``, ``committed_late``, ``isolation``, ``limits``, ``output``),
written by the tool or forged on its response channel, and an ``async def`` that swallows its
cancellation. Each gets the answer it would get in process.

The tools live in ``runner_misbehaviour_tools.py`` and are imported by reference.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
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
BWRAP = pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")
MODES = [pytest.param("bubblewrap", marks=BWRAP), "process"]


def sandboxed(entrypoint: str, **execution: Any) -> ToolDefinition:
    return ToolDefinition(
        name=entrypoint.rpartition(":")[2],
        description="a misbehaving test tool",
        category="code",
        entrypoint=entrypoint,
        security=SecurityConfig(sandbox=True),
        execution=ExecutionConfig(**execution),
    )


def ours(name: str, **execution: Any) -> ToolDefinition:
    return sandboxed(f"runner_misbehaviour_tools:{name}", **execution)


async def call(
    ex: RunnerExecutor, workdir: Path, tool: ToolDefinition, **arguments: Any
) -> ToolResult:
    context = ToolContext(session_id="more", workdir=str(workdir), call_id=uuid.uuid4().hex)
    with trio.fail_after(60):  # a hang fails the test
        return await ex.run(tool, ToolCall(name=tool.name, arguments=arguments), context)


async def next_call_works(ex: RunnerExecutor, workdir: Path) -> None:
    result = await call(ex, workdir, sandboxed("runner_sandbox_tools:echo"), after="more")
    assert result.success, result.error


@pytest.fixture
async def executor(request: Any, tmp_path: Path) -> AsyncIterator[tuple[RunnerExecutor, Path]]:
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": request.param, "python_path": [TOOLS_DIR], "warm_workers": 1}}
    )
    yield ex, tmp_path
    await ex.aclose()


@pytest.mark.parametrize("executor", MODES, indirect=True)
async def test_a_coroutine_result_is_an_execution_error_in_the_sandbox_too(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    result = await call(ex, workdir, ours("returns_a_coroutine"))
    # Before: success with data "<coroutine object _later at 0x...>", and the worker's
    # "coroutine '_later' was never awaited" warning in the call's output.
    assert result.error is not None and result.error.code == ErrorCode.EXECUTION_ERROR
    assert "coroutine" in result.error.message and "_later" in result.error.message
    assert "never awaited" not in str(result.metadata.get("output", ""))
    await next_call_works(ex, workdir)


@pytest.mark.parametrize("executor", ["process"], indirect=True)
async def test_a_sync_tool_returning_a_coroutine_gets_it_awaited_in_the_sandbox(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    result = await call(ex, workdir, ours("sync_returns_a_coroutine"))
    assert result.success and result.data == "awaited", result.error


@pytest.mark.parametrize("executor", MODES, indirect=True)
async def test_a_sandboxed_tool_cannot_claim_what_the_host_says(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    result = await call(ex, workdir, ours("claims_host_metadata"))
    assert result.success and result.data == "x", result.error
    metadata = result.metadata
    # Before: "cached": True and "committed_late": "timeout" came through as the tool said,
    # and "output" stood for what the process printed.
    for key in ("cached", "committed_late", "output"):
        assert key not in metadata, key
    assert metadata["isolation"] != "none" and metadata["warm"] in (True, False)
    assert metadata["limits"]["memory_mb"] == 256 and metadata["attempts"] == 1
    assert metadata["mine"] == "kept"


@BWRAP
async def test_a_result_forged_on_the_channel_is_made_consistent_and_owned_by_the_host(
    tmp_path: Path,
) -> None:
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": "bubblewrap", "python_path": [TOOLS_DIR]}}
    )
    forged = {
        "success": False,
        "data": None,
        "error": None,
        "metadata": {"cached": True, "committed_late": "cancelled", "output": "forged"},
    }
    try:
        result = await call(
            ex,
            tmp_path,
            sandboxed("runner_sandbox_tools:write_on_channel"),
            payload=json.dumps(forged),
        )
    finally:
        await ex.aclose()
    # Before: a failure without an error (which result_messages() rejects), claiming a cache
    # hit and a late commit.
    assert result.success is False and result.error is not None
    assert result.error.code == ErrorCode.EXECUTION_ERROR
    for key in ("cached", "committed_late"):
        assert key not in result.metadata, key
    assert result.metadata.get("output") != "forged"


@pytest.mark.parametrize("executor", MODES, indirect=True)
async def test_a_sandboxed_tool_that_swallows_its_cancellation_ends_at_its_deadline(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    started = time.monotonic()
    result = await call(ex, workdir, ours("swallows_cancellation", timeout_s=1.0))
    # (Its process is killed at the deadline: this held before, and must go on holding.)
    assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
    assert time.monotonic() - started < 5
    await next_call_works(ex, workdir)
