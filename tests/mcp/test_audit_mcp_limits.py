"""What one hostile peer can cost the MCP bridge and ``tooldeck serve mcp``: bounded.

Bridge: a remote server's answer of a million tiny values is refused before it is parsed, a
long answer is parsed off the bridge's shared loop and converted off the deck's, a single
``tools/list`` page is capped like many pages, and garbage on its stdout is logged at a
bounded rate. Server: every MCP session counts against ``max_sessions`` (an
``initialize``-only session is evicted like an idle deck session), an approval nobody can
give pins nothing, the approval question cuts long arguments before it redacts them (off the
loop), and one size limit and one value limit apply to HTTP bodies and stdio lines (and a
batch) before anything parses them. Every check is on behaviour, none on timing.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest
import tooldeck_mcp._bridge as bridge_module
import tooldeck_mcp._stdio_client as stdio_client_module
import tooldeck_mcp.server as server_module
import trio
from tooldeck_mcp import McpServerConfig, remote_server
from tooldeck_mcp._client import MAX_TOOLS
from tooldeck_mcp._stdio import MAX_BATCH, MAX_MESSAGE_VALUES
from tooldeck_mcp.server import DeckMcpServer, McpServerSettings

from tooldeck import Deck
from tooldeck.testing import make_deck
from tooldeck_hookspecs import SecurityConfig, SecurityLevel, ToolDefinition

#: A guard against a hang, not a timing claim.
HANG_GUARD_S = 120

# ---------------------------------------------------------------------- the bridge

_SERVER = r'''
import json, sys
TOOLS = int(sys.argv[1])
def send(obj):
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()
def text(mid, value, blocks=1):
    send({"jsonrpc": "2.0", "id": mid, "result": {
        "content": [{"type": "text", "text": value}] * blocks}})
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}})
    elif method == "tools/list":
        names = ["many_values", "long_text", "blocks", "garbage", "ok"]
        names += [f"t{i}" for i in range(TOOLS)]
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
            {"name": n, "inputSchema": {"type": "object"}} for n in names]}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "many_values":
            send('{"jsonrpc":"2.0","id":%s,"result":{"content":[%s]}}' % (
                json.dumps(mid), ",".join(['{"type":"text","text":""}'] * 200000)))
        elif name == "long_text":
            text(mid, "y" * 200000)
        elif name == "blocks":
            text(mid, "b", blocks=100)
        elif name == "garbage":
            for i in range(300):
                sys.stdout.write("garbage line %d\n" % i)
            text(mid, "after garbage")
        else:
            text(mid, "ok")
    else:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
'''


def _bridge_config(tmp_path: Path, tools: int = 0) -> McpServerConfig:
    script = tmp_path / "raw_server.py"
    script.write_text(_SERVER)
    return McpServerConfig(
        name="raw", command=(sys.executable, str(script), str(tools)),
        env=(("TOOLDECK_TEST", str(tmp_path)),), stderr="discard",
    )


def _bridge_deck(config: McpServerConfig) -> Deck:
    table = {"command": list(config.command or ()), "env": dict(config.env),
             "stderr": "discard"}
    return make_deck(config={"mcp": {"servers": {"raw": table}}},
                     load_entry_points=["schema", "runner", "policy", "mcp"])


async def test_a_result_of_too_many_values_is_refused_unread_and_the_server_kept(
    tmp_path: Path,
) -> None:
    config = _bridge_config(tmp_path)
    with trio.fail_after(HANG_GUARD_S):
        async with _bridge_deck(config) as deck:
            session = deck.session(grants={"mcp_raw"})
            refused = await session.call("raw__many_values", {})
            assert not refused.success and refused.error is not None
            assert f"more than {MAX_MESSAGE_VALUES} JSON values" in refused.error.message
            assert "raw" in refused.error.message  # the right server is named
            after = await session.call("raw__ok", {})
            assert after.success and after.data == "ok"
            assert remote_server(config).statistics().crashes == 0


async def test_long_answers_are_parsed_off_the_bridge_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    parse = stdio_client_module._message

    def spying(item: Any, *args: Any) -> Any:
        if isinstance(item, bytes) and len(item) > 100_000:
            threads.append(threading.current_thread().name)
        return parse(item, *args)

    monkeypatch.setattr(stdio_client_module, "_message", spying)
    with trio.fail_after(HANG_GUARD_S):
        async with _bridge_deck(_bridge_config(tmp_path)) as deck:
            result = await deck.session(grants={"mcp_raw"}).call("raw__long_text", {})
    assert result.success and result.data == "y" * 200000
    # The loop every server and call shares is the thread named tooldeck-mcp.
    assert threads and "tooldeck-mcp" not in threads


async def test_results_of_many_blocks_are_converted_off_the_deck_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    convert = bridge_module.convert_result

    def spying(*args: Any) -> Any:
        threads.append(threading.current_thread())
        return convert(*args)

    monkeypatch.setattr(bridge_module, "convert_result", spying)
    with trio.fail_after(HANG_GUARD_S):
        async with _bridge_deck(_bridge_config(tmp_path)) as deck:
            result = await deck.session(grants={"mcp_raw"}).call("raw__blocks", {})
            loop_thread = threading.current_thread()
    assert result.success and result.data == ["b"] * 100
    assert threads and loop_thread not in threads


async def test_one_page_of_more_than_max_tools_registers_max_tools(tmp_path: Path) -> None:
    with trio.fail_after(HANG_GUARD_S):
        async with _bridge_deck(_bridge_config(tmp_path, tools=MAX_TOOLS + 100)) as deck:
            registered = [t for t in deck.catalog if t.name.startswith("raw__")]
    assert len(registered) == MAX_TOOLS


async def test_garbage_on_a_servers_stdout_is_logged_at_a_bounded_rate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(HANG_GUARD_S):
        async with _bridge_deck(_bridge_config(tmp_path)) as deck:
            with caplog.at_level(logging.WARNING, logger="tooldeck.mcp"):
                result = await deck.session(grants={"mcp_raw"}).call("raw__garbage", {})
    assert result.success and result.data == "after garbage"
    warnings = [r.getMessage() for r in caplog.records if r.name == "tooldeck.mcp"]
    one_by_one = [w for w in warnings if "not a JSON-RPC message" in w]
    assert 1 <= len(one_by_one) <= 10
    assert any("were not JSON-RPC messages so far" in w for w in warnings)
    assert len(warnings) < 20


# ---------------------------------------------------------------------- the server, HTTP

TOKEN = "audit-limits-token-0123456789abcdef"
_AUTH = {"Authorization": f"Bearer {TOKEN}"}
_ACCEPT = {"Accept": "application/json, text/event-stream", **_AUTH}
_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def _server_deck() -> Deck:
    tools = [
        ToolDefinition(
            name="launch", description="Needs the user's approval.", category="demo",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
            execute=lambda arguments, context: {"launched": True},
            security=SecurityConfig(level=SecurityLevel.DANGEROUS),
        ),
        ToolDefinition(
            name="ping", description="Answers at once.", category="demo",
            parameters=_NO_ARGS, execute=lambda arguments, context: {"pong": True},
            security=SecurityConfig(level=SecurityLevel.SAFE),
        ),
        ToolDefinition(
            name="measure", description="Says how long its text is.", category="demo",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
            execute=lambda arguments, context: {"length": len(arguments.get("text", ""))},
            security=SecurityConfig(level=SecurityLevel.SAFE),
        ),
    ]
    return make_deck(load_entry_points=["schema", "runner", "policy"], tools=tools)


@asynccontextmanager
async def _serving(workdir: Path, **settings: Any) -> AsyncIterator[tuple[DeckMcpServer, str]]:
    deck = _server_deck()
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


async def _open(http: httpx2.AsyncClient, url: str) -> tuple[httpx2.Response, dict[str, str]]:
    opened = await http.post(url, headers=_ACCEPT, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}},
    })
    headers = {**_ACCEPT, "mcp-session-id": opened.headers.get("mcp-session-id", ""),
               "mcp-protocol-version": "2025-06-18"}
    if opened.status_code == 200:
        await http.post(url, headers=headers, json={
            "jsonrpc": "2.0", "method": "notifications/initialized"})
    return opened, headers


def _answer(response: httpx2.Response) -> Any:
    if "event-stream" in response.headers.get("content-type", ""):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


async def test_initialize_only_sessions_count_and_are_evicted(workdir: Path) -> None:
    with trio.fail_after(HANG_GUARD_S):
        async with _serving(workdir, max_sessions=3) as (server, url):
            async with httpx2.AsyncClient(timeout=30) as http:
                opened = [await _open(http, url) for _ in range(6)]
                # Nobody is locked out: each newcomer took the least recently used idle slot.
                assert [response.status_code for response, _ in opened] == [200] * 6
                pings = []
                for _, headers in opened:
                    pinged = await http.post(url, headers=headers, json={
                        "jsonrpc": "2.0", "id": 2, "method": "ping"})
                    pings.append(pinged.status_code)
                assert pings == [404, 404, 404, 200, 200, 200]
                manager = server._http_manager
                assert manager.max_sessions == 3  # the SDK enforces the same bound
                assert len(manager._server_instances) <= 3


async def test_approvals_nobody_can_give_do_not_pin_a_session(workdir: Path) -> None:
    with trio.fail_after(HANG_GUARD_S):
        # confirm = "error" and allow_approvals = false (the defaults): no approval path.
        async with _serving(workdir, max_sessions=1) as (server, url):
            async with httpx2.AsyncClient(timeout=30) as http:
                _, first = await _open(http, url)
                asked = await http.post(url, headers=first, json={
                    "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "launch", "arguments": {}}})
                error = json.loads(_answer(asked)["result"]["content"][0]["text"])["error"]
                assert error["code"] == "CONFIRMATION_REQUIRED"
                assert server.sessions[first["mcp-session-id"]].pending_approvals()
                newcomer, _ = await _open(http, url)
                assert newcomer.status_code == 200, newcomer.text


async def test_a_pending_approval_pins_its_session_for_confirm_timeout_at_most(
    workdir: Path,
) -> None:
    deck = _server_deck()

    def ctx(key: str) -> Any:
        return SimpleNamespace(request=SimpleNamespace(headers={"mcp-session-id": key}),
                               request_id=7)

    async with deck:
        server = DeckMcpServer(deck, workdir=str(workdir), settings=McpServerSettings(
            max_sessions=1, allow_approvals=True, confirm_timeout_s=60))
        asked = await server.call_tool("launch", {}, ctx("a"))
        assert asked.structured_content["error"]["code"] == "CONFIRMATION_REQUIRED"
        session = server.sessions["a"]
        assert session.pending_approvals() and not server._idle("a", session)
        assert not server.has_room()
        server._asked_at["a"] -= 61  # asked longer than confirm_timeout_s ago
        assert server._idle("a", session) and server.has_room()
        await server.aclose()


async def test_one_body_limit_and_a_value_limit_answer_json_rpc(workdir: Path) -> None:
    with trio.fail_after(HANG_GUARD_S):
        async with _serving(workdir) as (server, url):
            async with httpx2.AsyncClient(timeout=60) as http:
                _, headers = await _open(http, url)
                # 5 MiB: over the SDK's default 4 MiB, under the server's limit: served.
                served = await http.post(url, headers=headers, json={
                    "jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "measure", "arguments": {"text": "z" * (5 << 20)}}})
                assert served.status_code == 200, served.text[:200]
                result = json.loads(_answer(served)["result"]["content"][0]["text"])
                assert result["data"] == {"length": 5 << 20}
                # Few bytes, many values: refused before it is parsed, as JSON-RPC.
                values = ",".join(["{}"] * (MAX_MESSAGE_VALUES + 10))
                body = ('{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":'
                        f'"measure","arguments":{{"x":[{values}]}}}}}}').encode()
                refused = await http.post(url, headers=headers, content=body)
                assert refused.status_code == 413
                answer = refused.json()
                assert answer["error"]["code"] == -32600
                assert "JSON values" in answer["error"]["message"]


async def test_a_body_that_never_arrives_is_answered(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "_BODY_TIMEOUT_S", 0.3)
    with trio.fail_after(HANG_GUARD_S):
        async with _serving(workdir) as (_, url):
            port = int(url.rsplit(":", 1)[1].split("/")[0])

            def slow_client() -> bytes:
                with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD_S) as s:
                    s.sendall((
                        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                        "Accept: application/json, text/event-stream\r\n"
                        "Content-Length: 1000\r\n\r\n{\"jsonrpc\""
                    ).encode())
                    received = b""
                    while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        received += chunk
                    return received

            received = await trio.to_thread.run_sync(slow_client)
    assert received.startswith(b"HTTP/1.1 408")
    assert b'"code": -32600' in received


# ---------------------------------------------------------------------- the approval question

async def test_long_arguments_are_cut_before_they_are_redacted_off_the_loop(
    workdir: Path,
) -> None:
    deck = _server_deck()
    redacted: list[tuple[int, threading.Thread]] = []
    messages: list[str] = []
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"

    async def elicit_form(message: str, schema: Any, **_: Any) -> Any:
        messages.append(message)
        return SimpleNamespace(action="decline", content=None)

    ctx = SimpleNamespace(
        request=SimpleNamespace(headers={"mcp-session-id": "a"}), request_id=9,
        session=SimpleNamespace(
            client_capabilities=SimpleNamespace(elicitation=SimpleNamespace(form={})),
            elicit_form=elicit_form,
        ),
    )
    async with deck:
        chain = deck._redact_chain

        def spying(value: Any, *args: Any) -> Any:
            # Every redaction, Deck.redact's and Deck.aredact's, runs the hooks through here.
            redacted.append((len(json.dumps(value, default=str)), threading.current_thread()))
            return chain(value, *args)

        deck._redact_chain = spying  # type: ignore[method-assign]
        server = DeckMcpServer(deck, workdir=str(workdir), settings=McpServerSettings(
            confirm="elicit"))
        text = f"token {secret} " + "a" * 3_000_000 + " the end"
        with trio.fail_after(HANG_GUARD_S):
            result = await server.call_tool("launch", {"text": text}, ctx)
        await server.aclose()
    assert result.structured_content["error"]["code"] == "PERMISSION_DENIED"
    (message,) = messages
    assert secret not in message and "[REDACTED:" in message
    assert "characters of the arguments are NOT shown" in message and "the end" in message
    assert "hidden above" in message  # the user is told a secret-looking part is unseen
    # Only what is shown (with a margin) was redacted, never the 3 MB, and not on the loop.
    loop_thread = threading.current_thread()
    # (The call's id, a few dozen characters, is redacted where it is bounded: on the loop.)
    big = [(size, thread) for size, thread in redacted if size > 1_000]
    assert big and all(size < 100_000 for size, _ in redacted)
    assert all(thread is not loop_thread for _, thread in big)


# ---------------------------------------------------------------------- the server, stdio

class _RawStdio:
    """``tooldeck serve mcp`` over stdio, written to and read from line by line."""

    def __init__(self, workdir: Path) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss"}
        env.pop("TOOLDECK_CONFIG", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tooldeck", "serve", "mcp", "--workdir", str(workdir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, cwd=str(workdir),
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def write(self, line: bytes | Mapping[str, Any] | list[Any]) -> None:
        assert self.process.stdin is not None
        if not isinstance(line, bytes):
            line = json.dumps(line).encode()
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def read(self) -> Any:
        try:
            line = self._lines.get(timeout=HANG_GUARD_S)
        except queue.Empty:
            pytest.fail("the server did not answer")
        assert line, "the server closed its output"
        return json.loads(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def test_stdio_refuses_many_values_and_long_batches_before_parsing(workdir: Path) -> None:
    client = _RawStdio(workdir)
    try:
        client.write({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        assert client.read()["id"] == 1
        client.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        values = ",".join(["{}"] * (MAX_MESSAGE_VALUES + 10))
        client.write(('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":'
                      f'"file_read","arguments":{{"path":"notes.txt","x":[{values}]}}}}}}'
                      ).encode())
        refused = client.read()
        assert refused["id"] == 7 and refused["error"]["code"] == -32600
        assert "JSON values" in refused["error"]["message"]
        client.write([{"jsonrpc": "2.0", "id": 100 + i, "method": "ping"}
                      for i in range(MAX_BATCH + 1)])
        batch = client.read()
        assert isinstance(batch, dict), "a batch over the limit is one error, not answers"
        assert batch["id"] is None and batch["error"]["code"] == -32600
        assert str(MAX_BATCH) in batch["error"]["message"]
        client.write({"jsonrpc": "2.0", "id": 8, "method": "ping"})
        assert client.read() == {"jsonrpc": "2.0", "id": 8, "result": {}}
    finally:
        client.close()
