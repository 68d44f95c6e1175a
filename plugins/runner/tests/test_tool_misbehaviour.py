"""In-process tools that misbehave, driven through the executor directly: retry waits a tool
asks for that no one can honour, and exceptions it raises that pass for trio's own.

Virtual time (trio's autojump clock) where waits matter: a wait is measured, never slept, and
a call that would hang fails its ``fail_after`` instead of blocking the run.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
from tooldeck_runner import RunnerExecutor, RunnerSettings

from tooldeck_hookspecs import (
    ErrorCode,
    ExecutionConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolFailure,
    ToolResult,
)


def make_tool(fn: Any, **execution: Any) -> ToolDefinition:
    return ToolDefinition(
        name=getattr(fn, "__name__", "tool"),
        description="a misbehaving test tool",
        category="code",
        execute=fn,
        execution=ExecutionConfig(**execution),
    )


async def run(ex: RunnerExecutor, tool: ToolDefinition) -> ToolResult:
    context = ToolContext(session_id="s1", workdir="/tmp")
    return await ex.run(tool, ToolCall(name=tool.name, arguments={}), context)


@pytest.mark.parametrize(
    "wait", [math.nan, math.inf, -5.0, "soon"], ids=["nan", "inf", "negative", "text"]
)
@pytest.mark.parametrize("how", ["raised", "returned"])
async def test_a_retry_after_no_one_can_honour_falls_back_to_the_backoff(
    autojump_clock: Any, wait: Any, how: str
) -> None:
    calls: list[float] = []

    async def throttled(arguments: Any, context: ToolContext) -> Any:
        calls.append(trio.current_time())
        if len(calls) < 3:
            if how == "raised":
                raise ToolFailure("RATE_LIMIT_EXCEEDED", "429", retryable=True,
                                  retry_after_s=wait)
            return ToolResult.fail("RATE_LIMIT_EXCEEDED", "429", retryable=True,
                                   retry_after_s=wait)
        return "served"

    with trio.fail_after(600):
        result = await run(RunnerExecutor(), make_tool(throttled, retryable=True,
                                                       max_retries=3))
    # Before: the executor raised ("deadline must not be NaN", "`seconds` must be
    # non-negative"; the deck's PLUGIN_ERROR) on the first retry, or slept forever (inf).
    assert result.success and result.data == "served", result.error
    assert result.metadata["attempts"] == 3


@pytest.mark.parametrize("wait", [1e9, 86_400.0], ids=["1e9", "a-day"])
async def test_a_retry_after_longer_than_an_attempt_is_handed_back_not_slept(
    autojump_clock: Any, wait: float
) -> None:
    calls: list[float] = []

    async def throttled(arguments: Any, context: ToolContext) -> Any:
        calls.append(trio.current_time())
        raise ToolFailure("RATE_LIMIT_EXCEEDED", "429", retryable=True, retry_after_s=wait)

    started = trio.current_time()
    with trio.fail_after(3_600):  # virtual: fails (not hangs) if the wait were slept
        result = await run(RunnerExecutor(RunnerSettings(retry_max_s=8.0)),
                           make_tool(throttled, retryable=True, max_retries=3, timeout_s=30))
    # The caller decides about a day's wait: the error comes back at once, with its wait.
    assert len(calls) == 1 and trio.current_time() - started < 1
    assert result.error is not None and result.error.code is ErrorCode.RATE_LIMIT_EXCEEDED
    assert result.error.retry_after_s == wait


async def test_a_retry_after_within_an_attempts_time_is_still_honoured(
    autojump_clock: Any,
) -> None:
    calls: list[float] = []

    async def throttled(arguments: Any, context: ToolContext) -> Any:
        calls.append(trio.current_time())
        if len(calls) == 1:
            raise ToolFailure("RATE_LIMIT_EXCEEDED", "429", retryable=True, retry_after_s=20)
        return "served"

    result = await run(RunnerExecutor(RunnerSettings(retry_max_s=8.0)),
                       make_tool(throttled, retryable=True, max_retries=2, timeout_s=30))
    assert result.data == "served"
    assert calls[1] - calls[0] >= 20


async def test_a_tool_failure_with_odd_attributes_is_still_its_structured_error() -> None:
    async def odd(arguments: Any, context: ToolContext) -> Any:
        failure = ToolFailure("EXECUTION_ERROR", "odd")
        failure.details = [1, 2]  # type: ignore[assignment]
        failure.message = object()  # type: ignore[assignment]
        failure.retry_after_s = math.nan
        raise failure

    result = await run(RunnerExecutor(), make_tool(odd))
    assert result.error is not None and result.error.code is ErrorCode.EXECUTION_ERROR
    assert isinstance(result.error.message, str)
    assert result.error.retry_after_s is None
    assert dict(result.error.details)
