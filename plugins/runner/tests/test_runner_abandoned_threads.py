"""Abandoned threads (sync tools that timed out and keep running) starve nobody else."""

from __future__ import annotations

import threading

import trio
from tooldeck_runner import RunnerExecutor

from tooldeck_hookspecs import ErrorCode, ExecutionConfig, ToolCall, ToolContext, ToolDefinition

RELEASE = threading.Event()


def _stuck(arguments, context):
    RELEASE.wait(60)  # a tool stuck in a blocking call (time.sleep(60) in the issue)
    return "late"


def _quick(arguments, context):
    return "ok"


def _tool(name, execute, category, timeout_s):
    return ToolDefinition(
        name=name,
        description=name,
        category=category,
        execute=execute,
        execution=ExecutionConfig(timeout_s=timeout_s),
    )


async def test_abandoned_threads_starve_neither_other_tools_nor_other_categories():
    RELEASE.clear()
    executor = RunnerExecutor()
    stuck = _tool("stuck", _stuck, "default", 0.2)
    same_category = _tool("quick", _quick, "default", 5)
    other_category = _tool("file_read_like", _quick, "filesystem", 5)
    context = ToolContext(session_id="s", workdir="/")
    try:
        with trio.fail_after(60):
            # Far more abandoned threads than trio's default pool of 40 holds.
            async with trio.open_nursery() as nursery:
                for i in range(60):
                    nursery.start_soon(
                        executor.run, stuck, ToolCall(name="stuck", arguments={}, id=f"c{i}"),
                        context,
                    )
            stats = executor.statistics()
            assert stats["default"].abandoned_threads == 16  # its own pool, full of them
            for tool in (same_category, other_category):
                result = await executor.run(tool, ToolCall(name=tool.name, arguments={}), context)
                assert result.success and result.data == "ok", result.error
                # trio's shared pool (used by everything else) is untouched.
                assert (await trio.to_thread.run_sync(lambda: "free")) == "free"
            # The stuck tool's next call says why it never started.
            again = await executor.run(stuck, ToolCall(name="stuck", arguments={}), context)
            assert again.error.code is ErrorCode.TIMEOUT
            assert "never started" in again.error.message
            assert again.error.details["abandoned_threads"] == 16
    finally:
        RELEASE.set()
    # Once the threads really end, they are no longer counted.
    with trio.fail_after(30):
        while executor.statistics()["default"].abandoned_threads:
            await trio.sleep(0.05)
    await executor.aclose()
