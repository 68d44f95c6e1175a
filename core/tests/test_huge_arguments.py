"""Huge arguments a prompt-injected model sends, through a real deck (schema, policy, cache).

Everything before the tool is linear in the arguments (validation, the policy's guards, the
cache key and approval hashes). Big arguments are checked in a worker thread under the call's
deadline, so one session's megabytes never stall another session; arguments past the documented
caps, and integers Python cannot write as JSON, are INVALID_ARGUMENTS instead of a crash.
"""

from __future__ import annotations

import threading
from typing import Any

import trio

from tooldeck import Deck, ErrorCode, ToolDefinition
from tooldeck._deck import MAX_ARGUMENT_CHARS, MAX_ARGUMENT_ITEMS
from tooldeck_hookspecs import (
    Decision,
    ExecutionConfig,
    SecurityConfig,
    SessionInfo,
    ToolCall,
    hookimpl,
    nonblocking,
)

STAGES = ["schema", "runner", "policy", "cache"]


def _ok(arguments: Any, context: Any) -> str:
    return "ok"


def _tools() -> list[ToolDefinition]:
    strings = {"type": "array", "items": {"type": "string"}}
    return [
        ToolDefinition(
            name="bulk", description="Take many names.", category="app",
            parameters={"type": "object", "properties": {"names": strings}},
            execution=ExecutionConfig(cacheable=True), execute=_ok,
        ),
        ToolDefinition(
            name="read_many", description="Read many files.", category="filesystem",
            parameters={"type": "object", "properties": {"paths": strings}},
            security=SecurityConfig(path_params="paths"), execute=_ok,
        ),
        ToolDefinition(
            name="anything", description="Take any value.", category="app",
            parameters={"type": "object", "properties": {"data": {}}},
            execution=ExecutionConfig(cacheable=True), execute=_ok,
        ),
        ToolDefinition(
            name="ping", description="Answer at once.", category="app",
            parameters={"type": "object", "properties": {"x": {"type": "integer"}}},
            execute=_ok,
        ),
    ]


def _load(*plugins: object) -> Deck:
    return Deck.load({}, entry_points=STAGES, plugins=plugins, tools=_tools())


class _Gate:
    """A policy hook marked cheap (run on the loop for small arguments) that holds a big call
    until another session's call has completed: it can only complete if the loop is free."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.other_done = threading.Event()
        self.saw_other: bool | None = None

    @hookimpl
    @nonblocking
    def tooldeck_authorize_call(
        self, call: ToolCall, tool: ToolDefinition, session: SessionInfo
    ) -> Decision | None:
        if call.name == "bulk" and len(call.arguments.get("names", ())) > 1_000:
            self.entered.set()
            # Bounded: on the loop, the other call could never run; fail instead of hanging.
            self.saw_other = self.other_done.wait(5)
        return None


async def test_big_arguments_are_checked_while_other_sessions_calls_complete() -> None:
    gate = _Gate()
    async with _load(gate) as deck:
        big, other = deck.session(grants={"app"}), deck.session(grants={"app"})
        results: dict[str, Any] = {}

        async def big_call() -> None:
            results["big"] = await big.call("bulk", {"names": ["n"] * 5_000})

        async def other_call() -> None:
            while not gate.entered.is_set():
                await trio.sleep(0.001)
            results["other"] = await other.call("ping", {"x": 1})
            gate.other_done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(big_call)
            nursery.start_soon(other_call)
    assert results["other"].success
    assert gate.saw_other is True  # the other session's call completed meanwhile
    assert results["big"].success


async def test_big_arguments_keep_validation_policy_and_cache() -> None:
    async with _load() as deck:
        session = deck.session(grants={"app", "filesystem"})
        names = [f"n{i}" for i in range(5_000)]
        first = await session.call("bulk", {"names": names})
        again = await session.call("bulk", {"names": list(names)})
        assert first.success and again.success
        assert first.metadata["cached"] is False and again.metadata["cached"] is True

        invalid = await session.call("bulk", {"names": [*names, 7]})
        assert invalid.error is not None and invalid.error.code is ErrorCode.INVALID_ARGUMENTS
        assert "$.names[5000]" in invalid.error.message

        outside = await session.call("read_many", {"paths": ["a.txt"] * 2_000 + ["/etc/shadow"]})
        assert outside.error is not None and outside.error.code is ErrorCode.PATH_NOT_ALLOWED


async def test_arguments_over_the_item_cap_are_invalid() -> None:
    async with _load() as deck:
        session = deck.session(grants={"app"})
        result = await session.call("bulk", {"names": ["n"] * (MAX_ARGUMENT_ITEMS + 1)})
        assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGUMENTS
        assert f"{MAX_ARGUMENT_ITEMS:,} items" in result.error.message
        assert result.error.details["errors"][0]["path"] == "$"


async def test_arguments_over_the_text_cap_are_invalid() -> None:
    async with _load() as deck:
        session = deck.session(grants={"app"})
        result = await session.call("anything", {"data": "x" * (MAX_ARGUMENT_CHARS + 1)})
        assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGUMENTS
        assert "characters of text" in result.error.message


async def test_an_integer_python_cannot_print_is_invalid_not_a_plugin_error() -> None:
    async with _load() as deck:
        session = deck.session(grants={"app"})
        for arguments in ({"data": 3**20_000}, {"data": [1, {"n": -(7**9_000)}]}):
            result = await session.call("anything", arguments)
            assert result.error is not None
            assert result.error.code is ErrorCode.INVALID_ARGUMENTS, result.error.message
            assert "integer" in result.error.message
        # Wide integers that still print are arguments like any other.
        assert (await session.call("anything", {"data": 2**200})).success
