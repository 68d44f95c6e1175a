"""``mcp.list = "hand"``: tools/list shows a hand plus search_tools (in-process SDK client).

A tiny keyword retriever stands in for FAISS so that the listing logic is tested without loading
the embedding model; the real retriever is exercised in test_mcp_server_search.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from tooldeck_mcp.server import DeckMcpServer, McpServerSettings

from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck
from tooldeck_hookspecs import ConfigError


def tooldeck_retriever(settings: Any) -> KeywordRetriever:
    return KeywordRetriever()


async def test_hand_mode_lists_a_hand_and_search_tools(workdir: Path, mcp_payload: Any) -> None:
    deck = make_deck(
        inline_plugin(tooldeck_retriever, name="keywords"),
        load_entry_points=["schema", "runner", "policy", "fs"],
        config={"mcp": {"list": "hand"}, "hand": {"pinned": ["list_dir"]}},
    )
    async with deck:
        server = DeckMcpServer(deck, workdir=str(workdir))
        async with Client(server.server) as client:
            before = [t.name for t in (await client.list_tools(cache_mode="refresh")).tools]
            assert before == ["list_dir", "search_tools"]
            found = await client.call_tool("search_tools", {"task": "read a file", "limit": 3})
            names = [t["name"] for t in mcp_payload(found)["data"]["tools"]]
            assert "file_read" in names and len(names) <= 3
            after = [t.name for t in (await client.list_tools(cache_mode="refresh")).tools]
            # The hand of the last search, pinned tools first, then search_tools.
            assert after[0] == "list_dir" and "file_read" in after
            assert after[-1] == "search_tools"
            read = await client.call_tool("file_read", {"path": "notes.txt"})
            assert mcp_payload(read)["data"]["content"] == "hello from the workdir\n"


def test_server_settings_are_checked() -> None:
    assert McpServerSettings.from_settings({}).list == "all"
    settings = McpServerSettings.from_settings(
        {"mcp": {"list": "hand", "allow_approvals": True, "servers": {}}}
    )
    assert settings.list == "hand" and settings.allow_approvals
    for bad in ({"list": "some"}, {"allow_approvals": "yes"}, {"search_limit": 0}):
        with pytest.raises(ConfigError):
            McpServerSettings.from_settings({"mcp": bad})
