"""More in-process tools that misbehave, driven through the executor directly: a result that is
an un-awaited coroutine, an ``async def`` that swallows its cancellation, a late result (after
the deadline, during the commit grace) that a tool built badly, and metadata the host owns.

Real time here (not trio's autojump clock): a tool that swallows its cancellation loops without
ever letting a virtual clock jump. Every call is guarded by ``fail_after``: a hang fails the
test instead of blocking the run.
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
from typing import Any

import pytest
import trio
from tooldeck_runner import RunnerExecutor, RunnerSettings
from tooldeck_runner._unwind import _ABANDONED, UNWIND_GRACE_S

from tooldeck_hookspecs import (
    ErrorCode,
    ExecutionConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    nonblocking,
)

TIMEOUT_S = 0.2
#: The longest a call of a tool that swallows its cancellation may take.
BOUND_S = TIMEOUT_S + UNWIND_GRACE_S + 1.0


def make_tool(fn: Any, **execution: Any) -> ToolDefinition:
    return ToolDefinition(
        name=getattr(fn, "__name__", "tool"),
        description="a misbehaving test tool",
        category="code",
        execute=fn,
        execution=ExecutionConfig(**execution),
    )


def context(call_id: str = "c1") -> ToolContext:
    return ToolContext(session_id="s1", workdir="/tmp", call_id=call_id)


async def run(ex: RunnerExecutor, tool: ToolDefinition, call_id: str = "c1") -> ToolResult:
    with trio.fail_after(30):  # a hang fails the test
        return await ex.run(tool, ToolCall(name=tool.name, arguments={}), context(call_id))


async def next_call_works(ex: RunnerExecutor) -> None:
    async def fine(arguments: Any, context: ToolContext) -> str:
        await trio.sleep(0)
        return "fine"

    assert (await run(ex, make_tool(fine))).data == "fine"


# -- a result that is a coroutine nobody awaited ----------------------------------------------


async def _later() -> str:
    await trio.sleep(0)
    return "awaited"


async def suspending_forgot_await(arguments: Any, context: ToolContext) -> Any:
    await trio.sleep(0)
    return _later()


async def inline_forgot_await(arguments: Any, context: ToolContext) -> Any:
    return _later()  # no await in the body: runs inline


def sync_coroutine_of_a_coroutine(arguments: Any, context: ToolContext) -> Any:
    async def outer() -> Any:
        return _later()

    return outer()


@nonblocking
def nonblocking_coroutine_of_a_coroutine(arguments: Any, context: ToolContext) -> Any:
    async def outer() -> Any:
        return _later()

    return outer()


@pytest.mark.parametrize(
    "function",
    [
        suspending_forgot_await,
        inline_forgot_await,
        sync_coroutine_of_a_coroutine,
        nonblocking_coroutine_of_a_coroutine,
    ],
)
async def test_a_coroutine_result_is_an_execution_error_without_a_warning(function: Any) -> None:
    ex = RunnerExecutor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = await run(ex, make_tool(function))
        gc.collect()  # an un-awaited coroutine warns when it is collected
    # Before: success, with data "<coroutine object _later at 0x...>" and a RuntimeWarning
    # "coroutine '_later' was never awaited".
    assert not result.success and result.error is not None
    assert result.error.code is ErrorCode.EXECUTION_ERROR
    assert "coroutine" in result.error.message and "_later" in result.error.message
    assert not [w for w in caught if "never awaited" in str(w.message)]
    await next_call_works(ex)
    await ex.aclose()


async def test_a_sync_tool_returning_a_coroutine_still_gets_it_awaited() -> None:
    def lazy(arguments: Any, context: ToolContext) -> Any:
        return _later()

    result = await run(RunnerExecutor(), make_tool(lazy))
    assert result.success and result.data == "awaited"


# -- async tools that swallow their cancellation ----------------------------------------------


async def swallow_cancelled_forever(arguments: Any, context: ToolContext) -> None:
    while True:
        try:
            await trio.sleep(0.01)
        except trio.Cancelled:
            pass


async def swallow_everything_forever(arguments: Any, context: ToolContext) -> None:
    # GeneratorExit too: this one can only be abandoned.
    while True:
        try:
            await trio.sleep(0.01)
        except BaseException:
            pass


async def swallow_while_parked(arguments: Any, context: ToolContext) -> None:
    never = trio.Event()
    while True:
        try:
            with trio.move_on_after(100), trio.CancelScope():  # left open when abandoned
                await never.wait()  # registered in a parking lot
        except BaseException:
            pass


@pytest.mark.parametrize(
    "function",
    [swallow_cancelled_forever, swallow_everything_forever, swallow_while_parked],
    ids=["cancelled", "base-exception", "parked-in-scopes"],
)
async def test_a_tool_that_never_lets_its_cancellation_through_still_times_out(
    function: Any,
) -> None:
    ex = RunnerExecutor()
    ticks = 0

    async def other_session() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_session)
        started = time.monotonic()
        with trio.fail_after(10):
            # Before: this call never returned (the tool catches every Cancelled trio raises).
            result = await ex.run(
                make_tool(function, timeout_s=TIMEOUT_S),
                ToolCall(name=function.__name__),
                context(),
            )
        took = time.monotonic() - started
        nursery.cancel_scope.cancel()
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT, result
    assert TIMEOUT_S <= took < BOUND_S
    assert ticks > 5  # the loop kept serving others meanwhile
    # The caller's task is sound: its cancel scopes still work, and so does the next call.
    with trio.move_on_after(0.01) as scope:
        await trio.sleep(5)
    assert scope.cancelled_caught
    await next_call_works(ex)
    await ex.aclose()


async def test_an_abandoned_tool_is_never_run_again() -> None:
    steps: list[float] = []

    async def stubborn(arguments: Any, context: ToolContext) -> None:
        while True:
            try:
                await trio.sleep(0.01)
            except BaseException:
                steps.append(time.monotonic())

    ex = RunnerExecutor()
    before = len(_ABANDONED)
    result = await run(ex, make_tool(stubborn, timeout_s=TIMEOUT_S))
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert len(_ABANDONED) == before + 1
    seen = len(steps)
    gc.collect()  # collected, it would be closed again: the tool's loop would run (for ever)
    await trio.sleep(0.1)
    assert len(steps) == seen


async def test_a_tool_holding_a_nursery_is_not_abandoned_but_trio_stays_sound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Giving up a nursery from outside would corrupt trio's state (its nursery stack): such a
    # tool is run on until it ends, here after a second of swallowing.
    async def swallow_in_a_nursery(arguments: Any, context: ToolContext) -> str:
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            try:
                async with trio.open_nursery():
                    await trio.sleep(0.01)
            except BaseException:
                pass
        return "gave up swallowing"

    ex = RunnerExecutor()
    async with trio.open_nursery():  # the caller's own nursery closes cleanly afterwards
        result = await run(ex, make_tool(swallow_in_a_nursery, timeout_s=TIMEOUT_S))
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert "cannot be abandoned safely" in caplog.text
    await next_call_works(ex)


@pytest.mark.parametrize("ending", ["returns", "raises", "tool-failure"])
async def test_a_tool_that_turns_its_cancellation_into_an_answer_still_times_out(
    ending: str,
) -> None:
    async def answers_anyway(arguments: Any, context: ToolContext) -> Any:
        try:
            await trio.sleep(30)
        except trio.Cancelled:
            if ending == "returns":
                return "done anyway"
            if ending == "raises":
                raise ValueError("not a timeout, says the tool") from None
            raise ToolFailure("EXECUTION_ERROR", "not a timeout") from None
        return "slept"

    started = time.monotonic()
    result = await run(RunnerExecutor(), make_tool(answers_anyway, timeout_s=TIMEOUT_S))
    # Before: success with "done anyway" (or the tool's own error) after the timeout fired.
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT, result
    assert time.monotonic() - started < TIMEOUT_S + 1.0


async def test_cancel_call_of_a_tool_that_swallows_it_returns_cancelled() -> None:
    ex = RunnerExecutor()
    results: list[ToolResult] = []
    tool = make_tool(swallow_everything_forever, timeout_s=60)

    async def call() -> None:
        results.append(await run(ex, tool, call_id="c9"))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await trio.sleep(0.1)
            assert ex.cancel_call("s1", "c9")
    (result,) = results
    assert result.error is not None and result.error.code is ErrorCode.CANCELLED


async def test_a_tool_that_committed_then_swallowed_its_timeout_reports_its_change() -> None:
    async def committed(arguments: Any, context: ToolContext) -> str:
        context.commit()
        try:
            await trio.sleep(30)
        except trio.Cancelled:
            pass
        return "landed"

    result = await run(RunnerExecutor(), make_tool(committed, timeout_s=TIMEOUT_S))
    # As for a sync tool whose commit outlived the timeout: its real answer, said to be late.
    assert result.success and result.data == "landed", result.error
    assert result.metadata["committed_late"] == "timeout"


async def test_well_behaved_cancellation_handling_is_unchanged() -> None:
    cleaned: list[bool] = []

    async def cleans_up(arguments: Any, context: ToolContext) -> None:
        try:
            await trio.sleep(30)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.05)
            cleaned.append(True)
            raise

    async def own_timeouts(arguments: Any, context: ToolContext) -> str:
        for _ in range(3):
            with trio.move_on_after(0.01):
                await trio.sleep(1)
        return "kept going"

    ex = RunnerExecutor()
    result = await run(ex, make_tool(cleans_up, timeout_s=TIMEOUT_S))
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert cleaned == [True]
    result = await run(ex, make_tool(own_timeouts, timeout_s=5))
    assert result.success and result.data == "kept going"


# -- a late result (after the deadline, within the commit grace) ------------------------------


def _late_tool(answer: str) -> Any:
    def late(arguments: Any, context: ToolContext) -> Any:
        context.commit()
        deadline = time.monotonic() + 30
        while not context.cancelled() and time.monotonic() < deadline:
            threading.Event().wait(0.01)  # the commit outlasts the call's timeout
        if answer == "raises":
            raise ToolFailure("EXECUTION_ERROR", "m" * 100_000, suggestion="s" * 100_000)
        return ToolResult(
            success=False,
            error=None if answer == "no-error" else ToolResult.fail(
                "EXECUTION_ERROR",
                "m" * 100_000,
                suggestion="s" * 100_000,
                details={"blob": "d" * 100_000},
            ).error,
            metadata={"cached": True, "isolation": "bubblewrap", "when": {1, 2}},
        )

    return late


@pytest.mark.parametrize("answer", ["built", "raises", "no-error"])
async def test_a_late_result_is_bounded_like_any_other(answer: str) -> None:
    cap = 1_000
    ex = RunnerExecutor(RunnerSettings(commit_grace_s=30))
    result = await run(ex, make_tool(_late_tool(answer), timeout_s=TIMEOUT_S, max_output_bytes=cap))
    assert result.metadata["committed_late"] == "timeout"
    error = result.error
    assert not result.success and error is not None
    # Before: a 100,000-character message and suggestion, the details whole, and the tool's
    # own "cached" claim, all straight from the grace path.
    assert len(error.message) < cap + 100 and len(error.suggestion or "") < cap + 100
    assert len(repr(dict(error.details))) < cap
    assert "cached" not in result.metadata
    assert result.metadata["isolation"] == "in-process"
    if answer != "raises":
        assert result.metadata["when"] == [1, 2]
    await ex.aclose()


async def test_an_in_process_tool_cannot_claim_what_the_host_says() -> None:
    def boastful(arguments: Any, context: ToolContext) -> ToolResult:
        return ToolResult.ok(
            "x",
            cached=True,
            committed_late="timeout",
            warm=True,
            limits={"memory_mb": 1_000_000},
            mine="kept",
        )

    result = await run(RunnerExecutor(), make_tool(boastful))
    assert result.success and result.data == "x"
    for key in ("cached", "committed_late", "warm", "limits"):
        assert key not in result.metadata, key
    assert result.metadata["mine"] == "kept"
