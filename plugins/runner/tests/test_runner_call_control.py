"""A running tool sees its call's deadline and whether the runner gave up on it, and commits its
irreversible step against that (``ToolContext.seconds_left / cancelled / commit``).

The runner answers TIMEOUT or CANCELLED without waiting for a sync tool's thread (it cannot be
stopped). A tool that calls ``commit()`` after that is refused (``CallAbandoned``), so a change
the caller was told failed never lands; a tool that committed before is waited for a bounded
grace and its real result returned, or the failure says the change may have landed.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_runner import RunnerExecutor, RunnerSettings

from tooldeck_hookspecs import (
    CallAbandoned,
    ErrorCode,
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
)

TOOLS_DIR = str(Path(__file__).resolve().parent)
#: Generous: nothing here waits for it unless a test is broken.
LONG_S = 60.0


def _tool(execute: Any, timeout_s: float, **execution: Any) -> ToolDefinition:
    return ToolDefinition(
        name="t",
        description="t",
        category="default",
        execute=execute,
        execution=ExecutionConfig(timeout_s=timeout_s, **execution),
    )


def _context() -> ToolContext:
    return ToolContext(session_id="s", workdir="/", call_id="c1")


async def _until(flag: threading.Event) -> None:
    with trio.fail_after(LONG_S):
        while not flag.is_set():
            await trio.sleep(0.01)


def test_a_context_outside_any_executor_is_a_no_op() -> None:
    context = _context()
    assert context.deadline is None and context.seconds_left() is None
    assert context.cancelled() is False
    context.commit()  # never raises
    assert context.control is None


async def test_a_sync_tool_sees_its_call_deadline() -> None:
    seen: dict[str, Any] = {}

    def tool(arguments: Any, context: ToolContext) -> str:
        seen["left"] = context.seconds_left()
        seen["deadline"] = context.deadline
        seen["cancelled"] = context.cancelled()
        return "ok"

    executor = RunnerExecutor()
    try:
        result = await executor.run(_tool(tool, 30.0), ToolCall(name="t"), _context())
    finally:
        await executor.aclose()
    assert result.success, result.error
    assert 0 < seen["left"] <= 30.0 and seen["deadline"] is not None
    assert seen["cancelled"] is False


async def test_an_abandoned_sync_tool_is_refused_its_commit() -> None:
    given_up = threading.Event()
    seen: dict[str, Any] = {}

    def tool(arguments: Any, context: ToolContext) -> str:
        given_up.wait(LONG_S)  # slowed until the runner has answered
        seen["cancelled"] = context.cancelled()
        try:
            context.commit()
        except CallAbandoned as exc:
            seen["refused"] = exc
            raise
        seen["committed"] = True
        return "landed"

    executor = RunnerExecutor()
    try:
        result = await executor.run(_tool(tool, 0.2), ToolCall(name="t"), _context())
        given_up.set()
        with trio.fail_after(LONG_S):
            while executor.statistics()["default"].abandoned_threads:
                await trio.sleep(0.01)
    finally:
        given_up.set()
        await executor.aclose()
    assert not result.success and result.error.code is ErrorCode.TIMEOUT, result.error
    assert "may have landed" not in result.error.message
    assert seen["cancelled"] is True
    assert isinstance(seen["refused"], CallAbandoned) and "committed" not in seen


def _committing_tool(committed: threading.Event) -> Callable[[Any, ToolContext], str]:
    """A tool that starts its commit, then keeps going (until cancelled) for a long while."""

    def tool(arguments: Any, context: ToolContext) -> str:
        context.commit()
        committed.set()
        # The irreversible step is still going on when the runner's deadline passes.
        for _ in range(int(LONG_S * 100)):
            if context.cancelled():
                break
            threading.Event().wait(0.01)
        return "landed"

    return tool


async def test_a_commit_under_way_at_the_timeout_is_waited_for_and_reported() -> None:
    committed = threading.Event()
    tool = _committing_tool(committed)

    executor = RunnerExecutor(RunnerSettings(commit_grace_s=LONG_S))
    try:
        result = await executor.run(_tool(tool, 0.3), ToolCall(name="t"), _context())
    finally:
        await executor.aclose()
    assert committed.is_set()
    assert result.success and result.data == "landed", result.error
    assert result.metadata["committed_late"] == "timeout"


async def test_a_commit_that_outlasts_the_grace_says_the_change_may_have_landed() -> None:
    release = threading.Event()
    calls = []

    def tool(arguments: Any, context: ToolContext) -> str:
        calls.append(1)
        context.commit()
        release.wait(LONG_S)  # a commit stuck on a slow disk
        return "landed"

    executor = RunnerExecutor(RunnerSettings(commit_grace_s=0.2, retry_initial_s=0.01,
                                             retry_max_s=0.01, retry_jitter_s=0))
    # Retryable: a change that may have landed is still not made twice.
    tool_def = _tool(tool, 0.3, retryable=True, max_retries=2)
    try:
        result = await executor.run(tool_def, ToolCall(name="t"), _context())
        assert executor.statistics()["default"].abandoned_threads == 1
    finally:
        release.set()
        await executor.aclose()
    assert not result.success and result.error.code is ErrorCode.TIMEOUT
    assert "may have landed" in result.error.message
    assert result.error.details["may_have_landed"] is True
    assert result.error.details["commit_started"] is True
    assert result.metadata["attempts"] == 1 and calls == [1]


async def test_cancel_call_during_a_commit_returns_the_real_result() -> None:
    committed = threading.Event()
    tool = _committing_tool(committed)

    executor = RunnerExecutor(RunnerSettings(commit_grace_s=LONG_S))
    results = []

    async def call() -> None:
        results.append(await executor.run(_tool(tool, LONG_S), ToolCall(name="t"), _context()))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await _until(committed)
            assert executor.cancel_call("s", "c1")
    finally:
        await executor.aclose()
    (result,) = results
    assert result.success and result.data == "landed", result.error
    assert result.metadata["committed_late"] == "cancelled"


async def test_cancel_call_before_the_commit_refuses_it() -> None:
    started = threading.Event()
    given_up = threading.Event()
    seen: dict[str, Any] = {}

    def tool(arguments: Any, context: ToolContext) -> str:
        started.set()
        given_up.wait(LONG_S)
        try:
            context.commit()
        except CallAbandoned:
            seen["refused"] = True
            raise
        return "landed"

    executor = RunnerExecutor()
    results = []

    async def call() -> None:
        results.append(await executor.run(_tool(tool, LONG_S), ToolCall(name="t"), _context()))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await _until(started)
            assert executor.cancel_call("s", "c1")
        given_up.set()
        with trio.fail_after(LONG_S):
            while "refused" not in seen:
                await trio.sleep(0.01)
    finally:
        given_up.set()
        await executor.aclose()
    (result,) = results
    assert not result.success and result.error.code is ErrorCode.CANCELLED


async def test_an_async_tool_sees_its_cancellation_even_shielded() -> None:
    seen: dict[str, Any] = {}

    async def tool(arguments: Any, context: ToolContext) -> str:
        seen["before"] = context.cancelled()
        seen["left"] = context.seconds_left()
        with trio.CancelScope(shield=True):
            with trio.fail_after(LONG_S):
                while not context.cancelled():
                    await trio.sleep(0.01)
            # From a thread of the tool's own too.
            seen["in_thread"] = await trio.to_thread.run_sync(context.cancelled)
            try:
                await trio.to_thread.run_sync(context.commit)
            except CallAbandoned:
                seen["refused"] = True
                raise
        return "landed"

    executor = RunnerExecutor()
    try:
        result = await executor.run(_tool(tool, 0.3), ToolCall(name="t"), _context())
    finally:
        await executor.aclose()
    assert seen["before"] is False and 0 < seen["left"] <= 0.3
    assert seen["in_thread"] is True and seen["refused"] is True
    # The tool let CallAbandoned propagate: the call is reported as the timeout it was.
    assert not result.success and result.error.code is ErrorCode.TIMEOUT
    assert "did not finish within" in result.error.message


async def test_each_retry_gets_its_own_control() -> None:
    controls = []

    def tool(arguments: Any, context: ToolContext) -> Any:
        controls.append(context.control)
        from tooldeck_hookspecs import ToolFailure

        raise ToolFailure(ErrorCode.TIMEOUT, "upstream slow", retryable=True)

    executor = RunnerExecutor(RunnerSettings(retry_initial_s=0.001, retry_max_s=0.001,
                                             retry_jitter_s=0))
    try:
        result = await executor.run(
            _tool(tool, 30.0, retryable=True, max_retries=2), ToolCall(name="t"), _context()
        )
    finally:
        await executor.aclose()
    assert result.metadata["attempts"] == 3
    assert len({id(c) for c in controls}) == 3 and None not in controls


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
@pytest.mark.parametrize("zygote", [True, False], ids=["zygote", "single-use"])
async def test_a_sandboxed_tool_sees_its_call_deadline(zygote: bool, tmp_path: Path) -> None:
    tool = ToolDefinition(
        name="call_control",
        description="t",
        category="code",
        entrypoint="runner_sandbox_tools:call_control",
        security=SecurityConfig(sandbox=True),
        execution=ExecutionConfig(timeout_s=40.0),
    )
    executor = RunnerExecutor.from_settings(
        {"runner": {"sandbox": "bubblewrap", "python_path": [TOOLS_DIR], "zygote": zygote}}
    )
    try:
        context = ToolContext(session_id="deadline", workdir=str(tmp_path))
        result = await executor.run(tool, ToolCall(name=tool.name), context)
    finally:
        await executor.aclose()
    assert result.success, result.error
    assert 0 < result.data["seconds_left"] <= 40.0
    assert result.data["cancelled"] is False
