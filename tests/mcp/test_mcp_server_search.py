"""``search_tools`` over stdio with the real retriever (loads the embedding model once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.mark.slow  # loads the embedding model in the server process
async def test_search_tools_returns_the_fs_tools_for_a_file_task(
    workdir: Path, open_stdio: Any, make_server_env: Any, mcp_payload: Any
) -> None:
    env = make_server_env(TOOLDECK_DISABLE_PLUGINS="")
    async with open_stdio(workdir, env=env) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        search = listed["search_tools"]
        assert search.annotations is not None and search.annotations.read_only_hint is True
        assert search.input_schema["required"] == ["task"]

        found = await session.call_tool(
            "search_tools", {"task": "read the contents of the text file notes.txt", "limit": 5}
        )
        assert not found.is_error, mcp_payload(found)
        data = mcp_payload(found)["data"]
        tools = {t["name"]: t for t in data["tools"]}
        assert len(tools) <= 5
        assert "file_read" in tools
        assert tools["file_read"]["inputSchema"] == listed["file_read"].input_schema
        assert tools["file_read"]["annotations"]["readOnlyHint"] is True
        assert all(isinstance(t["score"], float) for t in data["tools"])

        # "all" mode: the search does not narrow what the connection may call.
        listing = await session.call_tool("list_dir", {"path": "."})
        assert not listing.is_error, mcp_payload(listing)

        bad = await session.call_tool("search_tools", {"task": "", "limit": 0})
        error = mcp_payload(bad)["error"]
        assert error["code"] == "INVALID_ARGUMENTS"
        assert {e["path"] for e in error["details"]["errors"]} == {"$.task", "$.limit"}
