"""The MCP server over streamable HTTP on 127.0.0.1 (Hypercorn's trio worker)."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import trio
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from tooldeck_mcp.server import DeckMcpServer

from tooldeck import Deck


def authorized_transport(url: str, token: str) -> Any:
    """The official client's HTTP transport sending ``Authorization: Bearer <token>``."""
    import httpx2

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx2.Timeout(30, read=300))
    return streamable_http_client(url, http_client=http)


async def _serve_http(
    nursery: trio.Nursery, deck: Deck, workdir: Path
) -> tuple[DeckMcpServer, trio.Event, str]:
    """A server on a free loopback port without auth: (server, its stop event, its URL)."""
    server = DeckMcpServer(deck, workdir=str(workdir))
    stop = trio.Event()
    url = await nursery.start(
        lambda task_status: server.run_http(
            "127.0.0.1", 0, token=None, shutdown=stop, task_status=task_status
        )
    )
    return server, stop, url


async def test_http_one_deck_session_per_mcp_session(
    workdir: Path, mcp_payload: Any, closed_sessions: tuple[Deck, list[str | None]]
) -> None:
    deck, closed = closed_sessions
    async with deck, trio.open_nursery() as nursery:
        server, stop, url = await _serve_http(nursery, deck, workdir)
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")

        async def legacy_client(path: str) -> dict[str, Any]:
            async with (
                streamable_http_client(url) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert tools["file_read"].annotations.read_only_hint is True  # type: ignore[union-attr]
                result = await session.call_tool("file_read", {"path": path})
                return mcp_payload(result)  # type: ignore[no-any-return]

        results: dict[str, dict[str, Any]] = {}

        async def run(path: str) -> None:
            results[path] = await legacy_client(path)

        async with trio.open_nursery() as clients:
            clients.start_soon(run, "notes.txt")
            clients.start_soon(run, "../secret.txt")
        assert results["notes.txt"]["data"]["content"] == "hello from the workdir\n"
        assert results["../secret.txt"]["error"]["code"] == "PATH_NOT_ALLOWED"
        # Two MCP sessions (mcp-session-id), two deck sessions, each closed when its client
        # ended the MCP session (the official client sends DELETE on exit).
        assert len(set(closed)) == 2
        assert not [k for k in server.sessions if k != "default"]

        # The 2026 stateless protocol works too (no session id: the shared session).
        async with Client(url) as modern:
            result = await modern.call_tool("list_dir", {"path": "."})
            assert not result.is_error, result
            names = [e["name"] for e in mcp_payload(result)["data"]["entries"]]
            assert "notes.txt" in names
        opened = {session.id for session in server.sessions.values()} | set(closed)
        stop.set()
    # Stopping the server ends its deck sessions (packs release per-session resources).
    assert set(closed) == opened and len(opened) == 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_http_cli_serves_until_sigterm(
    workdir: Path, serve_cmd: Any, make_server_env: Any, mcp_payload: Any
) -> None:
    port = _free_port()
    command = serve_cmd(
        "--transport", "http", "--port", str(port), "--workdir", str(workdir),
        "--grant", "filesystem",
    )
    token = "sigterm-test-token-0123456789"
    process = await trio.lowlevel.open_process(
        command, env=make_server_env(TOOLDECK_MCP_TOKEN=token), cwd=str(workdir),
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        with trio.fail_after(60):
            while True:
                try:
                    async with Client(authorized_transport(url, token)) as client:
                        listed = await client.list_tools()
                        result = await client.call_tool("file_read", {"path": "notes.txt"})
                        wrote = await client.call_tool(
                            "file_write", {"path": "new.txt", "content": "granted"}
                        )
                    break
                except Exception:  # not listening yet
                    assert process.returncode is None, "the server exited"
                    await trio.sleep(0.2)
        assert "file_read" in {t.name for t in listed.tools}
        assert mcp_payload(result)["data"]["content"] == "hello from the workdir\n"
        assert not wrote.is_error, mcp_payload(wrote)
        assert (workdir / "new.txt").read_text() == "granted"
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_http_request_bodies_over_the_cap_are_refused_unread(
    workdir: Path, mcp_payload: Any, closed_sessions: tuple[Deck, list[str | None]],
    monkeypatch: Any,
) -> None:
    """The SDK reads a POST body of any size into memory; the server now reads at most
    MAX_REQUEST_BYTES (declared or streamed) and answers 413 with a JSON-RPC error."""
    import httpx2
    import tooldeck_mcp.server as server_module

    monkeypatch.setattr(server_module, "MAX_REQUEST_BYTES", 64 * 1024)
    deck, _ = closed_sessions
    async with deck, trio.open_nursery() as nursery:
        server, stop, url = await _serve_http(nursery, deck, workdir)
        big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "file_write", "arguments": {"path": "big.txt",
                                                              "content": "x" * 200_000}}}
        headers = {"accept": "application/json, text/event-stream",
                   "content-type": "application/json"}
        async with httpx2.AsyncClient(timeout=30) as http:
            declared = await http.post(url, json=big, headers=headers)

            async def chunks() -> Any:  # no content-length: streamed in pieces
                for _ in range(20):
                    yield b"x" * 8192

            streamed = await http.post(url, content=chunks(), headers=headers)
        for answer in (declared, streamed):
            assert answer.status_code == 413, answer.text
            assert answer.json()["error"]["code"] == -32600
            assert "larger than 65536 bytes" in answer.json()["error"]["message"]
        assert not (workdir / "big.txt").exists()
        # Requests under the cap work as before.
        async with Client(url) as client:
            result = await client.call_tool("file_read", {"path": "notes.txt"})
            assert mcp_payload(result)["data"]["content"] == "hello from the workdir\n"
        stop.set()
