"""The executor without a sandbox: calling conventions, errors, queues, timeouts, cancellation,
retries."""

from __future__ import annotations

from typing import Any

import pytest
import stamina
import trio
import trio.testing
from tooldeck_runner import ISOLATION_IN_PROCESS, RunnerExecutor, RunnerSettings
from tooldeck_runner import plugin as runner_plugin

from tooldeck_hookspecs import (
    ConfigError,
    ExecutionConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolFailure,
    ToolResult,
)


def make_tool(fn: Any, *, category: str = "code", **execution: Any) -> ToolDefinition:
    return ToolDefinition(
        name=getattr(fn, "__name__", "tool"),
        description="a test tool",
        category=category,
        execute=fn,
        execution=ExecutionConfig(**execution),
    )


def ctx(session_id: str = "s1", call_id: str = "") -> ToolContext:
    return ToolContext(session_id=session_id, workdir="/tmp", call_id=call_id)


async def run(ex: RunnerExecutor, tool: ToolDefinition, **arguments: Any) -> ToolResult:
    return await ex.run(tool, ToolCall(name=tool.name, arguments=arguments), ctx())


# -- calling conventions and results ---------------------------------------------------------


async def test_sync_tool_runs_in_a_worker_thread() -> None:
    import threading

    main = threading.get_ident()

    def where(arguments: Any, context: ToolContext) -> dict[str, Any]:
        return {"thread": threading.get_ident() != main, "x": arguments["x"]}

    result = await run(RunnerExecutor(), make_tool(where), x=3)
    assert result.success
    assert result.data == {"thread": True, "x": 3}
    assert result.metadata["attempts"] == 1
    assert result.metadata["isolation"] == ISOLATION_IN_PROCESS
    assert result.metadata["duration_s"] >= 0


async def test_async_tool_is_awaited_and_kwargs_style_gets_the_context() -> None:
    async def add(a: int, b: int, ctx: ToolContext) -> int:
        await trio.sleep(0)
        assert ctx.session_id == "s1"
        return a + b

    tool = ToolDefinition(
        name="add",
        description="adds",
        category="math",
        execute=add,
        call_style="kwargs",
        context_param="ctx",
    )
    result = await run(RunnerExecutor(), tool, a=2, b=5)
    assert result.success and result.data == 7


async def test_a_returned_tool_result_is_kept_and_gets_metadata() -> None:
    def explicit(arguments: Any, context: ToolContext) -> ToolResult:
        return ToolResult.ok("payload", custom=1)

    result = await run(RunnerExecutor(), make_tool(explicit))
    assert result.data == "payload"
    assert result.metadata["custom"] == 1 and result.metadata["attempts"] == 1


async def test_tool_failure_becomes_its_structured_error() -> None:
    def refuse(arguments: Any, context: ToolContext) -> None:
        raise ToolFailure("PATH_NOT_ALLOWED", "outside", suggestion="stay in", details={"p": 1})

    result = await run(RunnerExecutor(), make_tool(refuse))
    assert not result.success and result.error is not None
    assert result.error.code == "PATH_NOT_ALLOWED"
    assert result.error.suggestion == "stay in" and result.error.details == {"p": 1}


async def test_other_exceptions_become_execution_error_without_traceback(caplog: Any) -> None:
    import logging

    async def broken(arguments: Any, context: ToolContext) -> None:
        raise KeyError("missing-key")

    context = ToolContext(session_id="s", workdir="/tmp", logger=logging.getLogger("t.broken"))
    with caplog.at_level(logging.WARNING, logger="t.broken"):
        result = await RunnerExecutor().run(make_tool(broken), ToolCall(name="broken"), context)
    assert result.error is not None and result.error.code == "EXECUTION_ERROR"
    assert result.error.message == "KeyError: 'missing-key'"
    assert "Traceback" not in result.error.message
    assert result.error.suggestion  # the model is told what to do next
    assert any(r.exc_info for r in caplog.records)  # the traceback went to the log instead


async def test_keyboard_interrupt_raised_by_a_sync_tool_is_its_failure() -> None:
    """A plain def tool raising KeyboardInterrupt in its worker thread (a real Ctrl-C only ever
    reaches the main thread) gets EXECUTION_ERROR; unwrapped as is, it took the host down."""

    def interrupting(arguments: Any, context: ToolContext) -> None:
        raise KeyboardInterrupt("from the tool")

    ex = RunnerExecutor()
    for _ in range(2):  # and the worker thread serves the next call
        result = await run(ex, make_tool(interrupting))
        assert result.error is not None and result.error.code == "EXECUTION_ERROR"
        assert "KeyboardInterrupt" in result.error.message
    assert (await run(ex, make_tool(lambda arguments, context: 7))).data == 7


async def test_sys_exit_in_a_tool_does_not_stop_the_host() -> None:
    import sys

    def quitter(arguments: Any, context: ToolContext) -> None:
        sys.exit(3)

    result = await run(RunnerExecutor(), make_tool(quitter))
    assert result.error is not None and result.error.code == "EXECUTION_ERROR"
    assert result.error.message.startswith("SystemExit")


# -- timeouts and queues ---------------------------------------------------------------------


async def test_timeout_of_a_running_async_tool() -> None:
    finished = []

    async def slow(arguments: Any, context: ToolContext) -> None:
        await trio.sleep(10)
        finished.append(True)

    result = await run(RunnerExecutor(), make_tool(slow, timeout_s=0.2))
    assert result.error is not None and result.error.code == "TIMEOUT"
    assert "did not finish" in result.error.message
    assert finished == []


async def test_timeout_of_a_sync_tool_returns_without_waiting_for_the_thread() -> None:
    import threading

    release = threading.Event()
    finished = threading.Event()

    def blocked(arguments: Any, context: ToolContext) -> str:
        release.wait(30)
        finished.set()
        return "late"

    result = await run(RunnerExecutor(), make_tool(blocked, timeout_s=0.1))
    assert result.error is not None and result.error.code == "TIMEOUT"
    # The answer came while the thread was still blocked (abandon_on_cancel).
    assert not finished.is_set()
    release.set()


async def test_a_call_that_times_out_in_the_queue_never_starts() -> None:
    ex = RunnerExecutor(RunnerSettings(concurrency={"default": 16, "browser": 1}))
    release = trio.Event()
    started: list[str] = []

    async def hold(arguments: Any, context: ToolContext) -> str:
        started.append(arguments["who"])
        await release.wait()
        return arguments["who"]

    first_tool = make_tool(hold, category="browser", timeout_s=30)
    queued_tool = make_tool(hold, category="browser", timeout_s=0.2)
    results: dict[str, ToolResult] = {}
    async with trio.open_nursery() as nursery:

        async def go(tool: ToolDefinition, who: str) -> None:
            results[who] = await run(ex, tool, who=who)

        nursery.start_soon(go, first_tool, "first")
        await trio.testing.wait_all_tasks_blocked()
        await go(queued_tool, "second")
        release.set()
    assert results["first"].success
    second = results["second"]
    assert second.error is not None and second.error.code == "TIMEOUT"
    assert "while queued" in second.error.message and second.error.details["queued"] is True
    assert started == ["first"]


async def test_category_limits_hold_and_the_high_water_mark_is_kept() -> None:
    ex = RunnerExecutor.from_settings({"runner": {"concurrency": {"browser": 2, "default": 3}}})
    release = trio.Event()

    async def hold(arguments: Any, context: ToolContext) -> None:
        await release.wait()

    browser = make_tool(hold, category="browser")
    other = make_tool(hold, category="search")
    async with trio.open_nursery() as nursery:
        for _ in range(6):
            nursery.start_soon(run, ex, browser)
        for _ in range(5):
            nursery.start_soon(run, ex, other)
        await trio.testing.wait_all_tasks_blocked()
        stats = ex.statistics()
        assert (stats["browser"].in_flight, stats["browser"].waiting) == (2, 4)
        assert (stats["search"].in_flight, stats["search"].waiting) == (3, 2)
        assert stats["browser"].limit == 2 and stats["search"].limit == 3
        release.set()
    stats = ex.statistics()
    assert stats["browser"].max_in_flight == 2 and stats["search"].max_in_flight == 3
    assert stats["browser"].completed == 6 and stats["browser"].in_flight == 0
    assert stats["browser"].waiting == 0


async def test_nested_calls_from_the_same_task_do_not_deadlock_the_limiter() -> None:
    ex = RunnerExecutor(RunnerSettings(concurrency={"default": 4}))

    async def inner(arguments: Any, context: ToolContext) -> str:
        return "inner"

    async def outer(arguments: Any, context: ToolContext) -> Any:
        result = await run(ex, make_tool(inner))
        return result.data

    result = await run(ex, make_tool(outer))
    assert result.data == "inner"


# -- cancellation ----------------------------------------------------------------------------


async def test_caller_cancellation_stops_the_tool_and_propagates() -> None:
    ex = RunnerExecutor()
    cleaned_up = []

    async def forever(arguments: Any, context: ToolContext) -> None:
        try:
            await trio.sleep_forever()
        finally:
            cleaned_up.append(True)

    with trio.move_on_after(0.1) as scope:
        await run(ex, make_tool(forever))
        pytest.fail("the call should have been cancelled")
    assert scope.cancelled_caught  # trio.Cancelled reached the caller's scope
    assert cleaned_up == [True]
    assert ex.statistics()["code"].in_flight == 0


async def test_cancel_session_makes_running_and_queued_calls_return_cancelled() -> None:
    ex = RunnerExecutor(RunnerSettings(concurrency={"default": 1}))

    async def forever(arguments: Any, context: ToolContext) -> None:
        await trio.sleep_forever()

    async def quick(arguments: Any, context: ToolContext) -> str:
        return "other session"

    results: list[ToolResult] = []
    other: list[ToolResult] = []
    async with trio.open_nursery() as nursery:

        async def go(session: str, tool: ToolDefinition, sink: list[ToolResult]) -> None:
            sink.append(await ex.run(tool, ToolCall(name=tool.name), ctx(session)))

        nursery.start_soon(go, "doomed", make_tool(forever), results)  # running
        nursery.start_soon(go, "doomed", make_tool(forever), results)  # queued
        await trio.testing.wait_all_tasks_blocked()
        assert ex.cancel_session("doomed") == 2
        assert ex.cancel_session("nobody") == 0
        nursery.start_soon(go, "alive", make_tool(quick), other)
    assert [r.error.code for r in results if r.error] == ["CANCELLED", "CANCELLED"]
    assert other[0].data == "other session"


async def test_cancel_call_by_id() -> None:
    ex = RunnerExecutor()

    async def forever(arguments: Any, context: ToolContext) -> None:
        await trio.sleep_forever()

    results: list[ToolResult] = []
    async with trio.open_nursery() as nursery:

        async def go() -> None:
            tool = make_tool(forever)
            results.append(await ex.run(tool, ToolCall(name=tool.name), ctx("s", "call-7")))

        nursery.start_soon(go)
        await trio.testing.wait_all_tasks_blocked()
        assert not ex.cancel_call("s", "call-8")
        assert ex.cancel_call("s", "call-7")
    assert results[0].error is not None and results[0].error.code == "CANCELLED"


# -- retries ---------------------------------------------------------------------------------


def flaky(failures: int, *, retryable: bool = True, code: str = "EXECUTION_ERROR") -> Any:
    calls = []

    async def tool(arguments: Any, context: ToolContext) -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise ToolFailure(code, f"failure {len(calls)}", retryable=retryable)
        return f"ok after {len(calls)}"

    tool.calls = calls  # type: ignore[attr-defined]
    return tool


async def test_retryable_errors_are_retried_and_attempts_reported() -> None:
    fn = flaky(2)
    with stamina.set_testing(True, attempts=10, cap=True):
        result = await run(RunnerExecutor(), make_tool(fn, retryable=True, max_retries=3))
    assert result.success and result.data == "ok after 3"
    assert result.metadata["attempts"] == 3


async def test_retries_stop_at_max_retries_with_the_last_error() -> None:
    fn = flaky(10)
    with stamina.set_testing(True, attempts=10, cap=True):
        result = await run(RunnerExecutor(), make_tool(fn, retryable=True, max_retries=2))
    assert result.error is not None and result.error.message == "failure 3"
    assert result.metadata["attempts"] == 3 and len(fn.calls) == 3


async def test_non_retryable_errors_and_non_retryable_tools_run_once() -> None:
    with stamina.set_testing(True, attempts=10, cap=True):
        fn = flaky(1, retryable=False)
        result = await run(RunnerExecutor(), make_tool(fn, retryable=True, max_retries=3))
        assert result.metadata["attempts"] == 1 and len(fn.calls) == 1
        fn = flaky(1, retryable=True)
        result = await run(RunnerExecutor(), make_tool(fn, retryable=False, max_retries=3))
        assert result.metadata["attempts"] == 1 and len(fn.calls) == 1


async def test_timeouts_are_retryable_for_retryable_tools() -> None:
    calls = []

    async def slow_then_fast(arguments: Any, context: ToolContext) -> str:
        calls.append(1)
        if len(calls) == 1:
            await trio.sleep(10)
        return "fast"

    with stamina.set_testing(True, attempts=10, cap=True):
        tool = make_tool(slow_then_fast, retryable=True, max_retries=1, timeout_s=0.1)
        result = await run(RunnerExecutor(), tool)
    assert result.data == "fast" and result.metadata["attempts"] == 2


async def test_backoff_is_exponential_with_bounded_jitter(autojump_clock: Any) -> None:
    # Virtual time (trio's autojump clock): the waits are measured, not slept.
    fn = flaky(10)
    ex = RunnerExecutor(RunnerSettings(retry_jitter_s=0.5))
    assert not stamina.is_testing()
    started = trio.current_time()
    result = await run(ex, make_tool(fn, retryable=True, max_retries=3))
    waited = trio.current_time() - started
    assert result.metadata["attempts"] == 4
    assert 1 + 2 + 4 <= waited <= 1 + 2 + 4 + 3 * 0.5


async def test_a_retry_after_from_the_tool_sets_the_wait(autojump_clock: Any) -> None:
    calls = []

    async def throttled(arguments: Any, context: ToolContext) -> str:
        calls.append(trio.current_time())
        if len(calls) == 1:
            raise ToolFailure("EXECUTION_ERROR", "HTTP 429", retryable=True, retry_after_s=30)
        return "served"

    ex = RunnerExecutor(RunnerSettings(retry_jitter_s=0.5))
    result = await run(ex, make_tool(throttled, retryable=True, max_retries=2))
    assert result.data == "served" and result.metadata["attempts"] == 2
    # The server asked for 30 s; the exponential guess would have been about 1 s.
    assert calls[1] - calls[0] >= 30


# -- wiring ----------------------------------------------------------------------------------


def test_the_hook_builds_an_executor_from_the_runner_table() -> None:
    ex = runner_plugin.tooldeck_executor(
        settings={"runner": {"concurrency": {"shell": 2}, "sandbox": "process"}}
    )
    assert isinstance(ex, RunnerExecutor)
    # Configured categories override the defaults; the others keep theirs.
    assert ex.settings.concurrency == {"default": 16, "browser": 3, "shell": 2, "code": 4}
    assert ex.settings.sandbox == "process"


@pytest.mark.parametrize(
    "table",
    [
        {"concurrency": {"shell": 0}},
        {"sandbox": "docker"},
        {"warm_workers": -1},
        {"no_such_key": 1},
    ],
)
def test_bad_configuration_is_a_config_error(table: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="runner"):
        RunnerExecutor.from_settings({"runner": table})


async def test_a_closed_executor_answers_with_an_error() -> None:
    ex = RunnerExecutor()
    await ex.aclose()

    async def ok(arguments: Any, context: ToolContext) -> int:
        return 1

    result = await run(ex, make_tool(ok))
    assert result.error is not None and result.error.code == "EXECUTION_ERROR"


# -- inline calls (async tools that never suspend) ---------------------------------------------


async def _awaits(arguments: Any, context: ToolContext) -> int:
    await trio.sleep(0)
    return 1


async def _iterates(arguments: Any, context: ToolContext) -> int:
    async for _ in arguments["source"]:
        pass
    return 1


async def _enters(arguments: Any, context: ToolContext) -> int:
    async with arguments["manager"]:
        return 1


async def _comprehends(arguments: Any, context: ToolContext) -> list[int]:
    return [x async for x in arguments["source"]]


async def _plain(arguments: Any, context: ToolContext) -> int:
    def nested() -> int:  # a nested function is not part of the coroutine
        return 2

    return arguments["x"] + nested()


class _Methods:
    async def method(self, arguments: Any, context: ToolContext) -> int:
        return 3

    async def __call__(self, arguments: Any, context: ToolContext) -> int:
        return 4


def test_never_suspends_is_true_only_for_async_bodies_without_suspension_points() -> None:
    import functools

    from tooldeck_runner import never_suspends

    assert never_suspends(_plain)
    assert never_suspends(_Methods().method)
    for suspending in (_awaits, _iterates, _enters, _comprehends):
        assert not never_suspends(suspending), suspending.__name__
    # Not judged (False is always safe): sync functions, callable objects, partials, nothing.
    assert not never_suspends(lambda arguments, context: 1)
    assert not never_suspends(_Methods())
    assert not never_suspends(functools.partial(_plain))
    assert not never_suspends(None)


async def test_a_never_suspending_tool_runs_inline_with_the_same_results() -> None:
    ex = RunnerExecutor()
    ok = await run(ex, make_tool(_plain), x=1)
    assert ok.success and ok.data == 3
    assert ok.metadata["attempts"] == 1 and ok.metadata["isolation"] == ISOLATION_IN_PROCESS
    assert ok.metadata["duration_s"] >= 0

    async def explicit(arguments: Any, context: ToolContext) -> ToolResult:
        return ToolResult.ok("payload", custom=1)

    async def refuse(arguments: Any, context: ToolContext) -> None:
        raise ToolFailure("PATH_NOT_ALLOWED", "outside", suggestion="stay in")

    async def broken(arguments: Any, context: ToolContext) -> None:
        raise KeyError("missing-key")

    kept = await run(ex, make_tool(explicit))
    assert kept.data == "payload" and kept.metadata["custom"] == 1
    assert kept.metadata["attempts"] == 1
    refused = await run(ex, make_tool(refuse))
    assert refused.error is not None and refused.error.code == "PATH_NOT_ALLOWED"
    assert refused.error.suggestion == "stay in"
    failed = await run(ex, make_tool(broken))
    assert failed.error is not None and failed.error.message == "KeyError: 'missing-key'"
    stats = ex.statistics()["code"]
    assert stats.completed == 4 and stats.in_flight == 0 and stats.max_in_flight == 1


async def test_an_inline_tool_waits_for_a_slot_when_its_category_is_full() -> None:
    ex = RunnerExecutor(RunnerSettings(concurrency={"code": 1}))
    release = trio.Event()
    order: list[str] = []

    async def hold(arguments: Any, context: ToolContext) -> None:
        order.append("hold")
        await release.wait()

    async def quick(arguments: Any, context: ToolContext) -> str:
        order.append("quick")
        return "done"

    results: list[ToolResult] = []

    async def run_quick() -> None:
        results.append(await run(ex, make_tool(quick)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, ex, make_tool(hold))
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(run_quick)
        await trio.testing.wait_all_tasks_blocked()
        # The single slot is held: the inline-able call queued instead of running beside it.
        assert order == ["hold"]
        assert ex.statistics()["code"].waiting == 1
        release.set()
    assert order == ["hold", "quick"]
    assert results[0].data == "done"
    assert ex.statistics()["code"].max_in_flight == 1


async def test_retryable_never_suspending_tools_keep_their_retries() -> None:
    attempts: list[int] = []

    async def flaky_inline(arguments: Any, context: ToolContext) -> str:
        attempts.append(1)
        if len(attempts) < 2:
            raise ToolFailure("EXECUTION_ERROR", "try again", retryable=True)
        return "ok"

    ex = RunnerExecutor(RunnerSettings(retry_initial_s=0.001, retry_max_s=0.001, retry_jitter_s=0))
    result = await run(ex, make_tool(flaky_inline, retryable=True, max_retries=2))
    assert result.success and result.data == "ok"
    assert result.metadata["attempts"] == 2


async def test_an_unhashable_callable_tool_runs_on_the_queued_path() -> None:
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return self is other

        def __call__(self, arguments: Any, context: ToolContext) -> int:
            return 5

    tool = ToolDefinition(name="odd", description="odd", category="code", execute=Unhashable())
    result = await run(RunnerExecutor(), tool)
    assert result.success and result.data == 5


async def test_cancel_session_during_a_retry_backoff_returns_cancelled() -> None:
    ex = RunnerExecutor(RunnerSettings(retry_initial_s=30, retry_max_s=30, retry_jitter_s=0))
    tool = make_tool(flaky(5), retryable=True, max_retries=3)
    results: list[ToolResult] = []

    async def go() -> None:
        results.append(await ex.run(tool, ToolCall(name=tool.name), ctx("doomed")))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(go)
            await trio.testing.wait_all_tasks_blocked()  # failed once, now backing off 30 s
            assert tool.execute.calls == [1]  # type: ignore[union-attr]
            assert ex.cancel_session("doomed") == 1
    assert results[0].error is not None and results[0].error.code == "CANCELLED"


async def test_a_timeout_and_a_cancel_of_the_same_call_are_told_apart() -> None:
    # One scope carries both the deadline and cancel_session(); the result says which fired.
    ex = RunnerExecutor()

    async def forever(arguments: Any, context: ToolContext) -> None:
        await trio.sleep_forever()

    timed = make_tool(forever, timeout_s=0.05)
    result = await ex.run(timed, ToolCall(name="forever"), ctx("s"))
    assert result.error is not None and result.error.code == "TIMEOUT"
    assert result.error.details["queued"] is False

    cancelled: list[ToolResult] = []

    async def go() -> None:
        cancelled.append(await ex.run(make_tool(forever), ToolCall(name="forever"), ctx("s")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(go)
        await trio.testing.wait_all_tasks_blocked()
        ex.cancel_session("s")
    assert cancelled[0].error is not None and cancelled[0].error.code == "CANCELLED"
