"""The HTTP transport's bearer token: no token, a wrong one or another scheme never runs a tool.

Real HTTP on 127.0.0.1, the official ``mcp`` client, and ``tooldeck serve mcp`` subprocesses
for where the token comes from (configuration, environment, generated) and ``--no-auth``.
"""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tooldeck_mcp import server as mcp_server
from tooldeck_mcp.server import DeckMcpServer, McpServerSettings, resolve_token

from tooldeck.testing import make_deck

TOKEN = "a-test-token-of-enough-length-0123456789"

_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "0"},
    },
}
_ACCEPT = {"Accept": "application/json, text/event-stream"}


def _transport(url: str, headers: Mapping[str, str] | None) -> Any:
    http = httpx2.AsyncClient(headers=dict(headers or {}), timeout=httpx2.Timeout(30, read=60))
    return streamable_http_client(url, http_client=http)


async def _write(url: str, headers: Mapping[str, str] | None, name: str) -> Any:
    async with Client(_transport(url, headers)) as client:
        return await client.call_tool("file_write", {"path": name, "content": "ran"})


@asynccontextmanager
async def _served(workdir: Path, token: str | None) -> AsyncIterator[str]:
    deck = make_deck(load_entry_points=["schema", "runner", "policy", "fs"])
    async with deck, trio.open_nursery() as nursery:
        server = DeckMcpServer(deck, workdir=str(workdir),
                               session_options={"grants": {"filesystem"}})
        stop = trio.Event()
        url = await nursery.start(lambda task_status: server.run_http(
            "127.0.0.1", 0, token=token, shutdown=stop, task_status=task_status
        ))
        try:
            yield url
        finally:
            stop.set()


async def test_requests_without_the_right_token_get_401_and_run_nothing(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = mcp_server.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(mcp_server.hmac, "compare_digest", spy)
    marker = workdir / "marker.txt"
    refused: list[dict[str, str] | None] = [
        None,
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},  # a prefix
        {"Authorization": f"Bearer {TOKEN}x"},  # an extension
        {"Authorization": f"Basic {TOKEN}"},  # another scheme
        {"Authorization": TOKEN},  # no scheme
        {"Authorization": "Bearer"},
        {"X-Authorization": f"Bearer {TOKEN}"},
    ]
    with trio.fail_after(60):  # hang guard only
        async with _served(workdir, TOKEN) as url:
            for headers in refused:
                with pytest.raises(Exception):  # noqa: B017 - the client's own error kinds
                    await _write(url, headers, "marker.txt")
            assert not marker.exists()

            async with httpx2.AsyncClient(timeout=30) as http:
                for method in ("POST", "GET", "DELETE"):
                    answer = await http.request(
                        method, url, json=_INITIALIZE if method == "POST" else None,
                        headers=_ACCEPT,
                    )
                    assert answer.status_code == 401, method
                    assert answer.headers["www-authenticate"].startswith("Bearer ")
                    assert "mcp-session-id" not in answer.headers
                wrong = await http.post(
                    url, json=_INITIALIZE, headers={**_ACCEPT, "Authorization": "Bearer nope"}
                )
                assert wrong.status_code == 401
                assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
                # curl -H "Authorization: Bearer $TOKEN": the scheme is case-insensitive.
                right = await http.post(
                    url, json=_INITIALIZE, headers={**_ACCEPT, "Authorization": f"bearer {TOKEN}"}
                )
                assert right.status_code == 200, right.text
                assert right.headers.get("mcp-session-id")

            result = await _write(url, {"Authorization": f"Bearer {TOKEN}"}, "marker.txt")
            assert not result.is_error, result
    assert marker.read_text() == "ran"
    # Every decision went through the constant-time comparison, the wrong ones included.
    assert (b"wrong", TOKEN.encode()) in compared
    assert (TOKEN.encode(), TOKEN.encode()) in compared
    assert (b"", TOKEN.encode()) in compared  # missing header: compared too, one code path


async def test_no_token_serves_everyone(workdir: Path) -> None:
    with trio.fail_after(60):
        async with _served(workdir, None) as url:
            result = await _write(url, None, "open.txt")
    assert not result.is_error, result
    assert (workdir / "open.txt").read_text() == "ran"


def test_token_sources_config_then_env_then_generated() -> None:
    configured = McpServerSettings.from_settings({"mcp": {"token": f" {TOKEN} "}})
    assert resolve_token(configured, {"TOOLDECK_MCP_TOKEN": "from-env-0123456789"}) == (
        TOKEN, "config"
    )
    unset = McpServerSettings.from_settings({})
    assert resolve_token(unset, {"TOOLDECK_MCP_TOKEN": "from-env-0123456789"}) == (
        "from-env-0123456789", "env"
    )
    first, source = resolve_token(unset, {"TOOLDECK_MCP_TOKEN": "  "})
    second, _ = resolve_token(unset, {})
    assert source == "generated" and first != second and len(first) >= 40
    assert TOKEN not in repr(configured)
    with pytest.raises(mcp_server.ConfigError):
        McpServerSettings.from_settings({"mcp": {"token": 12345}})
    with pytest.raises(ValueError, match="empty"):
        mcp_server.bearer_auth(object(), "")


# ---------------------------------------------------------------------- the CLI


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def _cli_server(
    workdir: Path, serve_cmd: Any, env: dict[str, str], *options: str
) -> AsyncIterator[tuple[str, trio.Process, list[str]]]:
    """``tooldeck serve mcp --transport http`` on a free port, listening; yields its stderr."""
    port = _free_port()
    command = serve_cmd("--transport", "http", "--port", str(port), "--workdir", str(workdir),
                        "--grant", "filesystem", *options)
    process = await trio.lowlevel.open_process(
        command, env=env, cwd=str(workdir.parent), stderr=-1, stdout=-3
    )
    assert process.stderr is not None
    lines: list[str] = []

    async def read_stderr() -> None:
        assert process.stderr is not None
        buffer = b""
        async for chunk in process.stderr:
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            lines.extend(line.decode(errors="replace") for line in done)

    url = f"http://127.0.0.1:{port}/mcp"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_stderr)
        try:
            with trio.fail_after(60):
                while True:
                    try:
                        stream = await trio.open_tcp_stream("127.0.0.1", port)
                        await stream.aclose()
                        break
                    except OSError:
                        assert process.returncode is None, "\n".join(lines)
                        await trio.sleep(0.1)
                # The banner is written right after the socket is bound.
                while process.returncode is None and not any("MCP server on" in x for x in lines):
                    await trio.sleep(0.05)
            yield url, process, lines
        finally:
            if process.returncode is None:
                process.terminate()
            with trio.move_on_after(30):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            nursery.cancel_scope.cancel()


async def test_cli_token_from_the_environment(
    workdir: Path, serve_cmd: Any, make_server_env: Any
) -> None:
    env = make_server_env(TOOLDECK_MCP_TOKEN=TOKEN)
    async with _cli_server(workdir, serve_cmd, env) as (url, _, lines):
        with pytest.raises(Exception):  # noqa: B017
            await _write(url, None, "env-no.txt")
        result = await _write(url, {"Authorization": f"Bearer {TOKEN}"}, "env-yes.txt")
        assert not result.is_error, result
    assert not (workdir / "env-no.txt").exists()
    assert (workdir / "env-yes.txt").read_text() == "ran"
    assert not any(TOKEN in line for line in lines)  # a chosen token is never printed


async def test_cli_token_from_the_configuration(
    workdir: Path, serve_cmd: Any, make_server_env: Any
) -> None:
    config = workdir.parent / "server-tooldeck.toml"
    config.write_text(f'[mcp]\ntoken = "{TOKEN}"\n')
    env = make_server_env(TOOLDECK_CONFIG=str(config), TOOLDECK_MCP_TOKEN="")
    async with _cli_server(workdir, serve_cmd, env) as (url, _, _lines):
        with pytest.raises(Exception):  # noqa: B017
            await _write(url, {"Authorization": "Bearer from-env-not-config"}, "cfg-no.txt")
        result = await _write(url, {"Authorization": f"Bearer {TOKEN}"}, "cfg-yes.txt")
        assert not result.is_error, result
    assert not (workdir / "cfg-no.txt").exists()
    assert (workdir / "cfg-yes.txt").exists()


async def test_cli_generates_and_prints_a_token_once(
    workdir: Path, serve_cmd: Any, make_server_env: Any
) -> None:
    async with _cli_server(workdir, serve_cmd, make_server_env()) as (url, _, lines):
        banner = "\n".join(lines)
        assert "generated bearer token" in banner and "Authorization: Bearer" in banner
        found = re.search(r"^  ([A-Za-z0-9_-]{40,})$", banner, re.MULTILINE)
        assert found, banner
        token = found.group(1)
        assert banner.count(token) == 1
        with pytest.raises(Exception):  # noqa: B017
            await _write(url, None, "gen-no.txt")
        result = await _write(url, {"Authorization": f"Bearer {token}"}, "gen-yes.txt")
        assert not result.is_error, result
    assert not (workdir / "gen-no.txt").exists()
    assert (workdir / "gen-yes.txt").exists()


async def test_cli_no_auth_is_explicit_and_warned(
    workdir: Path, serve_cmd: Any, make_server_env: Any
) -> None:
    async with _cli_server(workdir, serve_cmd, make_server_env(), "--no-auth") as (url, _, lines):
        result = await _write(url, None, "open.txt")
        assert not result.is_error, result
    assert (workdir / "open.txt").exists()
    assert any("WARNING: --no-auth" in line for line in lines)
    assert not any("bearer token" in line for line in lines)
