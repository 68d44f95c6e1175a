"""A tooldeck worker process for the multi-process Redis tests.

Builds a deck with ``make_deck(load_entry_points=["schema", "runner", "redis"], ...)`` and then
answers one JSON command per stdin line with one JSON line on stdout:

- ``{"op": "call", "name", "arguments", "session_id", "approval_id"?, "count"?}`` -> results
- ``{"op": "approve", "session_id", "approval_id"}`` -> bool
- ``{"op": "providers"}`` -> the deck's provider names
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from typing import Any

import trio

from tooldeck import ExecutionConfig, RateLimit, SecurityConfig, ToolDefinition
from tooldeck.testing import make_deck


def echo(arguments: Any, context: Any) -> dict[str, Any]:
    return {"text": arguments.get("text", ""), "pid": os.getpid()}


OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}

TOOLS = [
    ToolDefinition(
        name="limited_echo",
        description="Echo, at most 5 calls per minute per session.",
        category="api",
        parameters=OBJECT,
        security=SecurityConfig(rate_limit=RateLimit(max_calls=5, window_s=60)),
        execute=echo,
    ),
    ToolDefinition(
        name="cached_echo",
        description="Echo whose result is cached for a minute.",
        category="api",
        parameters=OBJECT,
        execution=ExecutionConfig(cacheable=True, cache_ttl_s=60),
        execute=echo,
    ),
    ToolDefinition(
        name="dangerous_echo",
        description="Echo that needs the user's approval.",
        category="api",
        parameters=OBJECT,
        security=SecurityConfig(level="dangerous"),
        execute=echo,
    ),
]


def summary(result: Any) -> dict[str, Any]:
    error = result.error
    return {
        "success": result.success,
        "data": result.data,
        "cached": result.metadata.get("cached"),
        "code": str(error.code) if error else None,
        "message": error.message if error else None,
        "approval_id": error.details.get("approval_id") if error else None,
    }


async def main(config: dict[str, Any], workdir: str | None) -> None:
    deck = make_deck(load_entry_points=["schema", "runner", "redis"], tools=TOOLS, config=config)
    # Processes of one deployment serve one working directory; an approval is bound to it.
    # A directory made here goes with the worker, or every run leaves some in /tmp.
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="tooldeck-redis-worker-")
            )
        await serve(deck, workdir)


async def serve(deck: Any, workdir: str) -> None:
    """Answer the commands on stdin, one JSON line each, until stdin closes."""
    sessions: dict[str, Any] = {}
    async with deck:

        def session(session_id: str) -> Any:
            if session_id not in sessions:
                sessions[session_id] = deck.session(
                    session_id=session_id, workdir=workdir, max_level="dangerous"
                )
            return sessions[session_id]

        print(json.dumps({"ready": os.getpid()}), flush=True)
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            op = command["op"]
            answer: Any
            if op == "call":
                answer = []
                for _ in range(command.get("count", 1)):
                    result = await session(command["session_id"]).call(
                        command["name"],
                        command.get("arguments", {}),
                        approval_id=command.get("approval_id"),
                    )
                    answer.append(summary(result))
            elif op == "approve":
                answer = await session(command["session_id"]).approve(command["approval_id"])
            elif op == "providers":
                answer = dict(deck.providers)
            else:
                answer = {"error": f"unknown op {op!r}"}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    trio.run(main, json.loads(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
