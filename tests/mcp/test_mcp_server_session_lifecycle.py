"""Deck sessions follow MCP sessions over real HTTP: busy ones are never evicted, ended ones close.

``max_sessions`` bounds the deck sessions of an HTTP server. A new MCP session may only push out
an *idle* one (no call in flight, no approval pending); when all are busy it is refused (HTTP 503
at ``initialize``, ``RATE_LIMIT_EXCEEDED`` for a call) and the running calls finish normally.
The MCP session's end (the client's DELETE, the idle timeout) closes its deck session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest
import trio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from tooldeck_mcp.server import DeckMcpServer, McpServerSettings

from tooldeck import Deck, observes
from tooldeck.testing import inline_plugin, make_deck
from tooldeck_hookspecs import Event, SecurityConfig, SecurityLevel, ToolDefinition, nonblocking

TOKEN = "session-lifecycle-token-0123456789"
_AUTH = {"Authorization": f"Bearer {TOKEN}"}
_ACCEPT = {"Accept": "application/json, text/event-stream", **_AUTH}
_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class _Gate:
    """A tool that runs until the test opens the gate (a call kept in flight on purpose)."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.open = trio.Event()

    def tool(self) -> Any:
        async def wait_for_gate(arguments: Mapping[str, Any], context: Any) -> dict[str, bool]:
            self.entered.set()
            await self.open.wait()
            return {"finished": True}

        return wait_for_gate


def _deck(gate: _Gate, closed: list[str | None]) -> Deck:
    @nonblocking  # a list append: on the loop, so the tests see it at once
    @observes("session.closed")
    def tooldeck_event(event: Event) -> None:
        closed.append(event.session_id)

    tools = [
        ToolDefinition(
            name="wait_for_gate", description="Waits until the test opens the gate.",
            category="demo", parameters=_NO_ARGS, execute=gate.tool(),
            security=SecurityConfig(level=SecurityLevel.SAFE),
        ),
        ToolDefinition(
            name="launch", description="Needs the user's approval.", category="demo",
            parameters=_NO_ARGS, execute=lambda arguments, context: {"launched": True},
            security=SecurityConfig(level=SecurityLevel.DANGEROUS),
        ),
        ToolDefinition(
            name="ping", description="Answers at once.", category="demo",
            parameters=_NO_ARGS, execute=lambda arguments, context: {"pong": True},
            security=SecurityConfig(level=SecurityLevel.SAFE),
        ),
    ]
    return make_deck(
        inline_plugin(tooldeck_event, name="closed-sessions"),
        load_entry_points=["schema", "runner", "policy"],
        tools=tools,
    )


@asynccontextmanager
async def _serving(
    deck: Deck, workdir: Path, **settings: Any
) -> AsyncIterator[tuple[DeckMcpServer, str]]:
    async with deck, trio.open_nursery() as nursery:
        server = DeckMcpServer(deck, workdir=str(workdir), settings=McpServerSettings(**settings))
        stop = trio.Event()
        url = await nursery.start(lambda task_status: server.run_http(
            "127.0.0.1", 0, token=TOKEN, shutdown=stop, task_status=task_status
        ))
        try:
            yield server, url
        finally:
            stop.set()


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[ClientSession]:
    http = httpx2.AsyncClient(headers=_AUTH, timeout=httpx2.Timeout(30, read=60))
    async with (
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def _initialize(http: httpx2.AsyncClient, url: str) -> httpx2.Response:
    return await http.post(url, headers=_ACCEPT, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}},
    })


def _keys(server: DeckMcpServer) -> list[str]:
    return [k for k in server.sessions if k != "default"]


async def test_a_session_with_a_call_in_flight_is_never_evicted(workdir: Path) -> None:
    gate, closed = _Gate(), []
    outcome: dict[str, Any] = {}
    with trio.fail_after(60):  # hang guard only
        async with _serving(_deck(gate, closed), workdir, max_sessions=1) as (server, url):
            async with _client(url) as first, trio.open_nursery() as nursery:

                async def long_call() -> None:
                    outcome["first"] = await first.call_tool("wait_for_gate", {})

                nursery.start_soon(long_call)
                await gate.entered.wait()
                (busy_key,) = _keys(server)
                busy = server.sessions[busy_key]
                # A second MCP session finds the only slot busy: refused, nothing cancelled.
                async with httpx2.AsyncClient(timeout=30) as http:
                    refused = await _initialize(http, url)
                assert refused.status_code == 503, refused.text
                assert "busy" in refused.json()["error"]["message"]
                assert refused.headers["retry-after"]
                assert server.sessions[busy_key] is busy and busy.id not in closed
                gate.open.set()
            result = outcome["first"]
            assert not result.is_error, result
            assert result.structured_content["data"] == {"finished": True}
            # The first client left (DELETE): its deck session closed with its MCP session.
            assert busy.id in closed and not _keys(server)


async def test_idle_sessions_make_room_and_pending_approvals_keep_theirs(workdir: Path) -> None:
    gate, closed = _Gate(), []
    with trio.fail_after(60):
        # allow_approvals: an approval can be given, so a pending one keeps its session (without
        # an approval path it keeps nothing: see test_audit_mcp_limits.py).
        async with _serving(
            _deck(gate, closed), workdir, max_sessions=1, allow_approvals=True
        ) as (server, url):
            async with _client(url) as first:
                asked = await first.call_tool("launch", {})
                assert asked.structured_content["error"]["code"] == "CONFIRMATION_REQUIRED"
                (waiting_key,) = _keys(server)
                waiting = server.sessions[waiting_key]
                assert waiting.pending_approvals()
                async with httpx2.AsyncClient(timeout=30) as http:
                    assert (await _initialize(http, url)).status_code == 503
                assert waiting.id not in closed
                # Once the approval is gone the session is idle: a newcomer may take its slot.
                for approval_id in waiting.pending_approvals():
                    await waiting.deny(approval_id)
                async with _client(url) as second:
                    pong = await second.call_tool("ping", {})
                    assert not pong.is_error, pong
                    assert waiting.id in closed  # evicted: idle, least recently used
                    (second_key,) = _keys(server)
                    assert second_key != waiting_key


async def test_a_call_refused_when_all_sessions_are_busy_is_a_structured_error(
    workdir: Path,
) -> None:
    gate, closed = _Gate(), []
    deck = _deck(gate, closed)

    def ctx(key: str) -> Any:
        return SimpleNamespace(request=SimpleNamespace(headers={"mcp-session-id": key}),
                               request_id=7)

    with trio.fail_after(60):
        async with deck, trio.open_nursery() as nursery:
            server = DeckMcpServer(deck, workdir=str(workdir),
                                   settings=McpServerSettings(max_sessions=1))
            nursery.start_soon(server.call_tool, "wait_for_gate", {}, ctx("a"))
            await gate.entered.wait()
            assert not server.has_room()
            refused = await server.call_tool("ping", {}, ctx("b"))
            assert refused.is_error
            error = refused.structured_content["error"]
            assert error["code"] == "RATE_LIMIT_EXCEEDED" and error["retry_after_s"] > 0
            assert "busy" in error["message"] and error["suggestion"]
            assert list(server.sessions) == ["a"] and not closed
            # The shared default session (stdio, stateless HTTP) is not counted against the bound.
            assert not (await server.call_tool("ping", {}, None)).is_error
            gate.open.set()
        await server.aclose()


async def test_the_idle_timeout_and_delete_end_the_deck_session(workdir: Path) -> None:
    gate, closed = _Gate(), []
    with trio.fail_after(60):
        async with _serving(
            _deck(gate, closed), workdir, session_idle_timeout_s=0.3
        ) as (server, url):
            async with httpx2.AsyncClient(timeout=30) as http:
                sessions = []
                for _ in range(2):
                    opened = await _initialize(http, url)
                    session_id = opened.headers["mcp-session-id"]
                    headers = {**_ACCEPT, "mcp-session-id": session_id,
                               "mcp-protocol-version": "2025-06-18"}
                    await http.post(url, headers=headers, json={
                        "jsonrpc": "2.0", "method": "notifications/initialized"})
                    called = await http.post(url, headers=headers, json={
                        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                        "params": {"name": "ping", "arguments": {}}})
                    assert called.status_code == 200, called.text
                    sessions.append((session_id, headers, server.sessions[session_id].id))
                # DELETE ends the first one at once.
                (first_id, first_headers, first_deck), (second_id, _, second_deck) = sessions
                deleted = await http.delete(url, headers=first_headers)
                assert deleted.status_code in (200, 204), deleted.text
                assert first_deck in closed and first_id not in server.sessions
                # Nobody speaks on the second one: the SDK's idle timeout ends it.
                while second_deck not in closed:
                    await trio.sleep(0.05)
                assert second_id not in server.sessions
                gone = await http.post(url, headers=first_headers, json={
                    "jsonrpc": "2.0", "id": 3, "method": "tools/list"})
                assert gone.status_code == 404


def test_session_settings_are_validated() -> None:
    settings = McpServerSettings.from_settings(
        {"mcp": {"max_sessions": 3, "session_idle_timeout_s": 60}}
    )
    assert settings.max_sessions == 3 and settings.session_idle_timeout_s == 60.0
    for bad in ({"session_idle_timeout_s": 0}, {"session_idle_timeout_s": "1"},
                {"max_sessions": 0}, {"session_idle_timeout_s": float("inf")}):
        with pytest.raises(Exception, match="mcp\\."):
            McpServerSettings.from_settings({"mcp": bad})
