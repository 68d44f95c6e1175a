"""The bridge over streamable HTTP, against tooldeck's own MCP server: one deck serving another."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import trio
from tooldeck_mcp import parse_servers, remote_server
from tooldeck_mcp.server import DeckMcpServer

from tooldeck.testing import make_deck
from tooldeck_hookspecs import SecurityLevel


async def test_bridge_over_http_to_a_tooldeck_server(workdir: Path) -> None:
    served = make_deck(load_entry_points=["schema", "runner", "policy", "fs"])
    async with served, trio.open_nursery() as nursery:
        server = DeckMcpServer(served, workdir=str(workdir), session_options={"grants": ()})
        stop = trio.Event()
        url = await nursery.start(
            lambda task_status: server.run_http("127.0.0.1", 0, token="bridge-token-0123456789",
                                                shutdown=stop, task_status=task_status)
        )
        # The bridge's `headers` carry the served deck's bearer token.
        remote = {"url": url, "trust_annotations": True,
                  "headers": {"Authorization": "Bearer bridge-token-0123456789"}}
        config = {"mcp": {"servers": {"remote": remote}}}
        # Registration blocks until the server answers, and the server runs on this trio loop:
        # load the client deck from a worker thread.
        client = await trio.to_thread.run_sync(
            partial(make_deck, config=config, load_entry_points=["schema", "runner", "mcp"])
        )
        async with client:
            tools = {t.name: t for t in client.catalog}
            assert tools["remote__file_read"].security.level is SecurityLevel.SAFE
            assert tools["remote__file_write"].security.level is SecurityLevel.MODERATE
            assert tools["remote__file_read"].category == "mcp_remote"
            session = client.session(grants={"mcp_remote"})
            read = await session.call("remote__file_read", {"path": "notes.txt"})
            assert read.success, read.error
            assert read.data["ok"] is True
            assert read.data["data"]["content"] == "hello from the workdir\n"
            # The serving deck's own policy still applies behind the bridge.
            escape = await session.call("remote__file_read", {"path": "../secret.txt"})
            assert escape.error is not None and escape.error.code == "EXECUTION_ERROR"
            assert "PATH_NOT_ALLOWED" in escape.error.message
        for remote in (remote_server(c) for c in parse_servers(config)):
            await trio.to_thread.run_sync(remote.close)
        stop.set()
