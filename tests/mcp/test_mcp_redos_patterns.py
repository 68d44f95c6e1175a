"""Catastrophic ``pattern``s of tools from outside the code base never stall validation.

Through a real MCP server (stdio, the official SDK's low-level server with raw input schemas)
bridged by tooldeck-mcp, and through ``Deck.add_tools``: every pattern runs on RE2, so a value
crafted to backtrack is answered ``INVALID_ARGUMENTS`` at once (``trio.fail_after`` is a hang
guard, not a timing assertion). Patterns RE2 cannot run: a remote tool's is dropped with a
warning (the server validates its own input); a local one keeps Python's ``re`` when it cannot
backtrack catastrophically, and is refused at registration when it can.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import trio

from tooldeck.testing import make_deck
from tooldeck_hookspecs import RegistrationError, SecurityConfig, SecurityLevel, ToolDefinition

#: (pattern, a value that makes Python's `re` backtrack exponentially and does not match).
CATASTROPHIC = [
    (r"^(a+)+$", "a" * 30 + "!"),
    (r"(a|aa)+$", "a" * 30 + "!"),
    (r"(.*a){20}", "a" * 19 + "x" * 30),
    (r"^(\w+\s?)*$", "a" * 30 + "!"),
    (r"^([a-zA-Z0-9]+\s?)+$", "ab1 " * 12 + "!"),
]

_SERVER = '''
import json, sys
import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

PATTERNS = json.loads(sys.argv[1])

def schema(pattern):
    return {
        "type": "object",
        "properties": {"value": {"type": "string", "pattern": pattern}},
        "patternProperties": {pattern: {"type": "string"}},
        "required": ["value"],
        "additionalProperties": False,
    }

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[
        types.Tool(name=f"p{i}", description=f"pattern {p}", input_schema=schema(p),
                   annotations=types.ToolAnnotations(read_only_hint=True))
        for i, p in enumerate(PATTERNS)
    ])

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="accepted")])

server = Server("redos", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
'''

#: Patterns RE2 cannot run: lookaround, a backreference, and one that also nests quantifiers.
NOT_RE2 = [r"^(?=.*\d)\w+$", r"^(a)\1$", r"^((a+)+)\1$"]
ENTRY_POINTS = ["schema", "runner", "policy", "mcp"]


async def test_remote_mcp_patterns_run_time_safe(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = tmp_path / "redos_server.py"
    script.write_text(_SERVER)
    patterns = [p for p, _ in CATASTROPHIC] + NOT_RE2
    config = {"mcp": {"servers": {"evil": {
        "command": [sys.executable, str(script), json.dumps(patterns)],
        "env": {"TOOLDECK_TEST": "redos"}, "stderr": "discard", "trust_annotations": True,
    }}}}
    with caplog.at_level(logging.WARNING, logger="tooldeck.mcp"):
        deck = make_deck(config=config, load_entry_points=ENTRY_POINTS)
    with trio.fail_after(30):  # hang guard only: a stalled regex would never return
        async with deck:
            session = deck.session()
            for index, (pattern, evil) in enumerate(CATASTROPHIC):
                name = f"evil__p{index}"
                refused = await session.call(name, {"value": evil})
                assert refused.error is not None, pattern
                assert refused.error.code == "INVALID_ARGUMENTS", refused.error
                assert "$.value" in refused.error.message
                # A hostile *key* goes through patternProperties (and its explanation) too.
                keyed = await session.call(name, {"value": "a", evil: "x"})
                assert keyed.error is not None and keyed.error.code == "INVALID_ARGUMENTS"
            fine = await session.call("evil__p0", {"value": "aaaa"})
            assert fine.success, fine.error
            assert fine.data == "accepted"
            # Patterns RE2 cannot run: the remote tool still registers, its constraint dropped
            # (and said so); the remote server checks its own input.
            first = len(CATASTROPHIC)
            for offset, pattern in enumerate(NOT_RE2):
                tool = deck.catalog.get(f"evil__p{first + offset}")
                assert tool is not None, pattern
                assert "pattern" not in tool.parameters["properties"]["value"]
                assert "additionalProperties" not in tool.parameters
                assert any(repr(pattern) in r.getMessage() and "dropped" in r.getMessage()
                           for r in caplog.records), pattern
                passed = await session.call(tool.name, {"value": "anything"})
                assert passed.success, passed.error


def _tool(name: str, pattern: str) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=f"Takes a value matching {pattern}.",
        category="demo",
        parameters={
            "type": "object",
            "properties": {"value": {"type": "string", "pattern": pattern}},
            "patternProperties": {pattern: {"type": "integer"}},
            "required": ["value"],
            "additionalProperties": False,
        },
        execute=lambda arguments, context: {"ok": True},
        security=SecurityConfig(level=SecurityLevel.SAFE),
    )


async def test_add_tools_patterns_run_time_safe() -> None:
    deck = make_deck(load_entry_points=["schema", "runner", "policy"])
    with trio.fail_after(30):
        async with deck:
            await deck.add_tools(
                [_tool(f"catastrophic_{i}", p) for i, (p, _) in enumerate(CATASTROPHIC)]
            )
            session = deck.session()
            for index, (_, evil) in enumerate(CATASTROPHIC):
                result = await session.call(f"catastrophic_{index}", {"value": evil})
                assert result.error is not None and result.error.code == "INVALID_ARGUMENTS"
                assert result.error.suggestion
                keyed = await session.call(f"catastrophic_{index}", {"value": "a", evil: 1})
                assert keyed.error is not None and keyed.error.code == "INVALID_ARGUMENTS"
            assert (await session.call("catastrophic_0", {"value": "aaa"})).success

            # Needs Python's engine and nests quantifiers: refused, naming tool and field.
            with pytest.raises(RegistrationError) as refused:
                await deck.add_tools([_tool("backref_nested", r"^((a+)+)\1$")])
            message = str(refused.value)
            assert "backref_nested" in message and "parameters" in message
            assert "nested quantifiers" in message
            assert "backref_nested" not in deck.catalog

            # Needs Python's engine but cannot backtrack badly: still enforced, never dropped.
            await deck.add_tools([_tool("backref", r"^(a)\1$")])
            assert (await session.call("backref", {"value": "aa"})).success
            wrong = await session.call("backref", {"value": "ab"})
            assert wrong.error is not None and wrong.error.code == "INVALID_ARGUMENTS"

