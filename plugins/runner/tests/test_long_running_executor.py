"""The executor of a long-lived deck does not keep something per tool ever registered.

Tools registered at run time (``Deck.add_tools``: an application's per-user tools, reloaded MCP
servers) bring new execute functions and names for weeks. The executor remembered, per
function, whether it may run inline (holding the function and what its closure holds), and
kept a thread pool object per tool name, long after the tools were gone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import trio
import trio.testing
from tooldeck_runner import RunnerExecutor, _executor

from tooldeck_hookspecs import ToolCall, ToolContext, ToolDefinition

_BOUND = 16


def _tool(n: int, execute: Callable[..., Any]) -> ToolDefinition:
    return ToolDefinition(
        name=f"user_tool_{n}", description="A tool registered for one user.", category="app",
        parameters={"type": "object", "properties": {}}, execute=execute,
    )


async def _close(executor: RunnerExecutor) -> None:
    """Close, then wait for the tools' threads to end (their pipes with them): a test after
    this one may count threads or descriptors."""
    await executor.aclose()
    for _ in range(2000):
        if not [t for t in threading.enumerate() if t.name.startswith("tooldeck-tool-user_")]:
            return
        await trio.sleep(0.005)


async def _run(executor: RunnerExecutor, tool: ToolDefinition) -> None:
    result = await executor.run(tool, ToolCall(name=tool.name, arguments={}),
                                ToolContext(session_id="s", workdir="."))
    assert result.success, result.error


async def test_inline_verdicts_of_functions_registered_over_time_stay_bounded(monkeypatch):
    monkeypatch.setattr(_executor, "_MAX_JUDGED", _BOUND, raising=False)
    executor = RunnerExecutor.from_settings({})
    for n in range(300):
        async def user_tool(arguments: Any, context: Any, n: int = n) -> int:
            return n  # never suspends: judged "inline"

        await _run(executor, _tool(n, user_tool))
        assert len(executor._inline) <= _BOUND
    await _close(executor)


async def test_thread_pools_of_tools_gone_are_dropped(monkeypatch):
    monkeypatch.setattr(_executor, "_MAX_POOLS", _BOUND, raising=False)
    # Idle threads end at once, so that a pool used once soon has no thread left.
    monkeypatch.setattr(_executor, "_IDLE_THREAD_MS", 1)
    executor = RunnerExecutor.from_settings({})
    for n in range(100):
        def user_tool(arguments: Any, context: Any, n: int = n) -> int:
            return n  # sync: runs in its tool's thread pool

        tool = _tool(n, user_tool)
        await _run(executor, tool)
        pool = executor._threads[tool.name]
        for _ in range(1000):  # its thread ends after 1 ms idle: wait for that, not for time
            if not pool.threads:
                break
            await trio.sleep(0.001)
        assert pool.threads == 0
        assert len(executor._threads) <= _BOUND
    stats = executor.statistics()
    assert stats["app"].completed == 100 and stats["app"].abandoned_threads == 0
    await _close(executor)


async def test_a_pool_in_use_is_kept(monkeypatch):
    monkeypatch.setattr(_executor, "_MAX_POOLS", 1, raising=False)
    executor = RunnerExecutor.from_settings({})
    release = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def slow(arguments: Any, context: Any) -> str:
        trio.from_thread.run(release.wait, trio_token=token)
        return "done"

    slow_tool = _tool(0, slow)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_run, executor, slow_tool)
        await trio.testing.wait_all_tasks_blocked()
        await _run(executor, _tool(1, lambda arguments, context: 1))  # makes a second pool
        assert slow_tool.name in executor._threads  # busy: not dropped
        release.set()
    await _close(executor)
