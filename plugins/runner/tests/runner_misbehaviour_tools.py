"""Tool functions ``test_tool_misbehaviour_more_sandbox.py`` imports BY REFERENCE inside sandbox
workers (this directory is on the workers' PYTHONPATH through ``runner.python_path``). Each takes
``(arguments, context)``."""

from __future__ import annotations

from typing import Any

from tooldeck_hookspecs import ToolResult


async def _later() -> str:
    import trio

    await trio.sleep(0)
    return "awaited"


async def returns_a_coroutine(arguments: dict[str, Any], context: Any) -> Any:
    """An ``async def`` that forgot an ``await``: its result is a coroutine."""
    import trio

    await trio.sleep(0)
    return _later()


def sync_returns_a_coroutine(arguments: dict[str, Any], context: Any) -> Any:
    """A plain function handing back a coroutine: awaited, as ``call_tool_function`` says."""
    return _later()


def claims_host_metadata(arguments: dict[str, Any], context: Any) -> ToolResult:
    """A result whose metadata claims what only the host may say."""
    return ToolResult.ok(
        "x",
        cached=True,
        committed_late="timeout",
        isolation="none",
        warm=True,
        limits={"memory_mb": 1_000_000},
        output="forged output",
        attempts=99,
        mine="kept",
    )


async def swallows_cancellation(arguments: dict[str, Any], context: Any) -> None:
    """Catch every ``BaseException`` in a loop: never ends by itself."""
    import trio

    while True:
        try:
            await trio.sleep(0.01)
        except BaseException:
            pass
