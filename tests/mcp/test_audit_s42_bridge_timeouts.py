"""The time a bridged MCP call gets is the time it was configured for, not a hidden constant.

- Over streamable HTTP with ``headers`` (a bearer token: how a deck reaches another tooldeck
  server), the bridge's HTTP client had httpx's 5 s read timeout: every remote call slower than
  5 s failed as a lost connection ("the server may have crashed") and the server was restarted,
  whatever ``timeout_s`` said (measured: an 8 s call with ``timeout_s = 20`` failed at 5.05 s).
- A deployment's ``[tools.NAME.execution] timeout_s`` for one bridged tool was cut to the
  server's ``timeout_s``: with ``timeout_s = 3`` and the tool given 8 s, a 5 s call failed at
  3.04 s; a lower one was the executor's generic TIMEOUT, without the server's name.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio
from tooldeck_mcp import parse_servers, remote_server
from tooldeck_mcp.server import DeckMcpServer

from tooldeck import Deck
from tooldeck.testing import make_deck
from tooldeck_hookspecs import ToolDefinition

TOKEN = "bridge-token-s42-0123456789"


def _nap(arguments: dict[str, Any], context: Any) -> float:
    started = time.monotonic()
    time.sleep(float(arguments["seconds"]))
    return time.monotonic() - started


NAP = ToolDefinition(
    name="nap",
    description="Sleep for the given number of seconds and say how long it slept.",
    category="timing",
    parameters={"type": "object", "properties": {"seconds": {"type": "number"}},
                "required": ["seconds"]},
    execute=_nap,
)


@asynccontextmanager
async def _bridged(workdir: Path, remote: dict[str, Any],
                   tools: dict[str, Any] | None = None
                   ) -> AsyncIterator[tuple[Deck, dict[str, Any]]]:
    """A deck serving ``nap`` over HTTP (bearer token), and a deck bridging it."""
    served = make_deck(load_entry_points=["schema", "runner", "policy"], tools=[NAP])
    async with served, trio.open_nursery() as nursery:
        server = DeckMcpServer(served, workdir=str(workdir),
                               session_options={"grants": ("timing",)})
        stop = trio.Event()
        url = await nursery.start(
            lambda task_status: server.run_http("127.0.0.1", 0, token=TOKEN, shutdown=stop,
                                                task_status=task_status)
        )
        table = {"url": url, "trust_annotations": True,
                 "headers": {"Authorization": f"Bearer {TOKEN}"}, **remote}
        config: dict[str, Any] = {"mcp": {"servers": {"remote": table}}}
        if tools:
            config["tools"] = tools
        # Registration blocks until the server answers, and it runs on this loop.
        client = await trio.to_thread.run_sync(
            partial(make_deck, config=config, load_entry_points=["schema", "runner", "mcp"])
        )
        try:
            async with client:
                yield client, config
        finally:
            for connection in (remote_server(c) for c in parse_servers(config)):
                await trio.to_thread.run_sync(connection.close)
            stop.set()


async def test_an_http_call_with_headers_outlives_httpx_default_read_timeout(workdir) -> None:
    # 5.5 s: past httpx's 5 s default read timeout, within the configured 20 s.
    async with _bridged(workdir, {"timeout_s": 20}) as (client, config):
        session = client.session(grants={"mcp_remote"})
        result = await session.call("remote__nap", {"seconds": 5.5})
        assert result.success, result.error
        assert result.data["data"] >= 5.5
        # Not taken for a lost connection: the server was never restarted.
        stats = remote_server(parse_servers(config)[0]).statistics()
        assert (stats.starts, stats.crashes) == (1, 0)


async def test_a_deployment_gives_one_bridged_tool_more_time_than_its_server(workdir) -> None:
    tools = {"remote__nap": {"execution": {"timeout_s": 6}}}
    async with _bridged(workdir, {"timeout_s": 1}, tools) as (client, _):
        session = client.session(grants={"mcp_remote"})
        # 2 s: past the server's timeout_s (1 s), within the tool's configured 6 s.
        result = await session.call("remote__nap", {"seconds": 2})
        assert result.success, result.error
        # Past the tool's own time: the bridge's TIMEOUT (naming the server), not a hidden 1 s.
        late = await session.call("remote__nap", {"seconds": 30})
        assert late.error is not None and late.error.code == "TIMEOUT", late.error
        assert "'remote'" in late.error.message
        assert 1 < late.error.details["timeout_s"] <= 6


async def test_a_deployment_lowering_a_bridged_tool_gets_the_bridges_answer(workdir) -> None:
    tools = {"remote__nap": {"execution": {"timeout_s": 1.5}}}
    async with _bridged(workdir, {"timeout_s": 30}, tools) as (client, _):
        session = client.session(grants={"mcp_remote"})
        late = await session.call("remote__nap", {"seconds": 30})
        assert late.error is not None and late.error.code == "TIMEOUT", late.error
        # The bridge's own answer (server named, within the tool's 1.5 s), not the executor's.
        assert "MCP server 'remote'" in late.error.message, late.error
        assert 0 < late.error.details["timeout_s"] <= 1.5
        assert "queued" not in late.error.details
