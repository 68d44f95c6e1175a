"""The MCP client bridge registers remote tools leniently: a remote catalog strict registration
would refuse gets in, each change reported once, and calls reach the remote tool.

A real MCP server (the official SDK's low-level server over stdio, raw input schemas) bridged by
tooldeck-mcp. (The bridge keeps remote names provider-safe and unique itself.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tooldeck.testing import make_deck

pytest.importorskip("tooldeck_mcp")

_SERVER = '''
import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    # Python type names and a required key that is no property: strict registration refuses.
    types.Tool(name="lookup", description="Look a word up in the dictionary.",
               input_schema={"type": "object",
                             "properties": {"word": {"type": "str"}, "limit": {"type": "int"}},
                             "required": ["word", "language"]}),
]

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)

async def call_tool(ctx, params):
    word = (params.arguments or {}).get("word", "")
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"found {word}")])

server = Server("messy", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
'''

ENTRY_POINTS = ["schema", "runner", "policy", "mcp"]


async def test_remote_tools_strict_rules_refuse_are_admitted_and_called(tmp_path: Path) -> None:
    script = tmp_path / "messy_server.py"
    script.write_text(_SERVER)
    config = {"mcp": {"servers": {"dict-api": {
        "command": [sys.executable, str(script)], "env": {"TOOLDECK_TEST": "lenient"},
        "stderr": "discard", "trust_annotations": True}}}}
    deck = make_deck(config=config, load_entry_points=ENTRY_POINTS)
    async with deck:
        assert deck.failed_plugins == {}
        tool = deck.catalog.get("dict_api__lookup")
        assert tool is not None
        assert tool.parameters["required"] == ["word"]
        assert tool.parameters["properties"]["word"]["type"] == "string"
        assert tool.parameters["properties"]["limit"]["type"] == "integer"
        (warning,) = deck.registration_warnings
        assert warning.kind == "parameters_repaired" and warning.tool == "dict_api__lookup"
        assert warning.plugin == "mcp" and "'language'" in warning.message
        session = deck.session(grants={"mcp_dict_api"})  # remote tools are moderate
        result = await session.call("dict_api__lookup", {"word": "tree"})
        assert result.success, result.error
        assert result.data == "found tree"
        wrong = await session.call("dict_api__lookup", {"word": "tree", "limit": "ten"})
        assert wrong.error is not None and wrong.error.code == "INVALID_ARGUMENTS"
