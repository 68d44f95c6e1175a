"""``tooldeck serve mcp`` answers before the slow parts have loaded.

``initialize`` and the first ``tools/list`` over stdio are answered before the MCP SDK is even
imported (:class:`StdioPreface`), and the retriever's model loads in the background: listing
never waits for it, a search does. A gated retriever stands in for the model, so "not loaded
yet" is a state the test holds, not a race it hopes to win.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio
import trio.testing
from mcp import Client, types
from mcp.server.lowlevel import NotificationOptions
from tooldeck_mcp.server import _HANDSHAKE_VERSIONS, DeckMcpServer, StdioPreface

from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck
from tooldeck_hookspecs import ToolDefinition

CORE_PLUGINS = ["schema", "runner", "policy", "fs"]


class GatedRetriever(KeywordRetriever):
    """A keyword retriever whose "model" loads only once the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.loaded = False

    async def warm_up(self) -> None:
        await trio.to_thread.run_sync(self.gate.wait)
        self.loaded = True

    async def index(self, tools: Sequence[ToolDefinition]) -> None:
        await trio.to_thread.run_sync(self.gate.wait)  # indexing needs the model too
        self.loaded = True
        await super().index(tools)


def _gated_deck(retriever: GatedRetriever, config: dict[str, Any] | None = None) -> Any:
    def tooldeck_retriever(settings: Any) -> GatedRetriever:
        return retriever

    return make_deck(
        inline_plugin(tooldeck_retriever, name="gated"),
        load_entry_points=CORE_PLUGINS,
        config=config or {},
    )


def _names(listed: types.ListToolsResult) -> list[str]:
    return [t.name for t in listed.tools]


async def test_tools_list_answers_while_the_model_loads_and_search_waits(
    tmp_path: Path,
) -> None:
    retriever = GatedRetriever()
    deck = _gated_deck(retriever)
    async with deck, trio.open_nursery() as nursery:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        nursery.start_soon(server.warm_selection)
        async with Client(server.server) as client:
            listed = _names(await client.list_tools(cache_mode="refresh"))
            assert {"file_read", "list_dir", "search_tools"} <= set(listed)
            # Answered while the model is still loading.
            assert not retriever.loaded and not server.selection_ready.is_set()

            found: list[Any] = []

            async def search() -> None:
                found.append(await client.call_tool("search_tools", {"task": "read a file"}))

            nursery.start_soon(search)
            await trio.testing.wait_all_tasks_blocked()
            assert found == []  # the search waits for the model
            retriever.gate.set()
            with trio.fail_after(60):  # a hang guard, not a timing assertion
                await server.selection_ready.wait()
                while not found:
                    await trio.sleep(0.01)
            assert retriever.loaded
            tools = found[0].structured_content["data"]["tools"]
            assert tools[0]["name"] == "file_read"


async def test_hand_mode_lists_pinned_tools_until_the_model_is_ready(tmp_path: Path) -> None:
    retriever = GatedRetriever()
    config = {
        "mcp": {"list": "hand", "default_task": "read a file"},
        "hand": {"pinned": ["list_dir"]},
    }
    deck = _gated_deck(retriever, config)
    async with deck, trio.open_nursery() as nursery:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        nursery.start_soon(server.warm_selection)
        async with Client(server.server) as client:
            before = _names(await client.list_tools(cache_mode="refresh"))
            assert before == ["list_dir", "search_tools"]
            assert not retriever.loaded
            retriever.gate.set()
            with trio.fail_after(60):
                await server.selection_ready.wait()
            after = _names(await client.list_tools(cache_mode="refresh"))
            assert after[0] == "list_dir" and "file_read" in after
            assert after[-1] == "search_tools"


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _initialize(version: str = "2025-06-18", request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0", "id": request_id, "method": "initialize",
        "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }


async def _sdk_answers(server: DeckMcpServer, messages: list[dict[str, Any]]) -> list[Any]:
    """What the SDK itself answers to ``messages``, in its stdio wire form."""
    import mcp_types
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    to_sdk, sdk_reads = create_context_streams[Any](len(messages))
    sdk_writes, from_sdk = create_context_streams[Any](len(messages))
    answers = []
    options = server.server.create_initialization_options(
        NotificationOptions(tools_changed=server._hand_mode)
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.server.run, sdk_reads, sdk_writes, options)
        for message in messages:
            parsed = mcp_types.jsonrpc_message_adapter.validate_json(
                json.dumps(message), by_name=False
            )
            await to_sdk.send(SessionMessage(parsed))
            if "id" in message:
                reply = await from_sdk.receive()
                # As the SDK's stdio transport writes it.
                answers.append(
                    json.loads(reply.message.model_dump_json(by_alias=True, exclude_unset=True))
                )
        nursery.cancel_scope.cancel()
    return answers


def _run_preface(server: DeckMcpServer, data: bytes) -> tuple[StdioPreface, list[dict[str, Any]]]:
    """Run the preface on a pipe holding ``data`` (closed after it); return its answers."""
    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    os.write(write_in, data)
    os.close(write_in)
    try:
        preface = StdioPreface(
            server, server._new_session(), read_fd=read_in, write_fd=write_out
        ).run()
    finally:
        os.close(read_in)
        os.close(write_out)
    with os.fdopen(read_out, "rb") as answers:
        return preface, [json.loads(line) for line in answers.read().splitlines()]


async def test_preface_answers_exactly_as_the_sdk_and_hands_over_the_rest(
    tmp_path: Path,
) -> None:
    import mcp_types.version

    assert _HANDSHAKE_VERSIONS == mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS
    deck = make_deck(load_entry_points=CORE_PLUGINS, config={"mcp": {"allow_approvals": True}})
    async with deck:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        call = _line({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                      "params": {"name": "list_dir", "arguments": {}}})
        initialized = _line({"jsonrpc": "2.0", "method": "notifications/initialized"})
        data = (
            _line(_initialize()) + initialized
            + _line({"jsonrpc": "2.0", "id": 2, "method": "ping"})
            + _line({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}) + call
        )
        preface, answers = _run_preface(server, data)
        assert [a["id"] for a in answers] == [1, 2, 3]
        assert answers[1]["result"] == {}
        # Exactly what the SDK itself answers.
        sdk = await _sdk_answers(server, [
            _initialize(), json.loads(initialized),
            {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        ])
        assert answers[0] == sdk[0]
        assert answers[2] == sdk[1]
        listed = answers[2]["result"]["tools"]
        assert "approve_call" in {t["name"] for t in listed}
        # The SDK is handed the handshake (its own answer to it is dropped) and the rest.
        assert preface.replay == [_line(_initialize()).strip(), initialized.strip(), call.strip()]
        assert preface.answered_ids == [1]
        assert not preface.closed


async def test_preface_negotiates_like_the_sdk_and_leaves_other_eras_alone(
    tmp_path: Path,
) -> None:
    import mcp_types.version

    deck = make_deck(load_entry_points=CORE_PLUGINS)
    async with deck:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        for version in ("1999-01-01", "2024-11-05", "2026-07-28"):
            _, answers = _run_preface(server, _line(_initialize(version)))
            assert answers == await _sdk_answers(server, [_initialize(version)])
        assert answers[0]["result"]["protocolVersion"] == mcp_types.version.LATEST_HANDSHAKE_VERSION
        # A first message that is not initialize (another protocol era, garbage): all for the
        # SDK, nothing answered here.
        for first in (b'{"jsonrpc": "2.0", "id": 9, "method": "tools/list"}\n', b"not json\n"):
            preface, answers = _run_preface(server, first)
            assert answers == [] and preface.replay == [first.strip()]


def _serve_stdio(workdir: Path) -> subprocess.Popen[bytes]:
    """``tooldeck serve mcp`` over stdio in ``workdir`` (faiss off), pipes open."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss"}
    env.pop("TOOLDECK_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "tooldeck", "serve", "mcp", "--workdir", str(workdir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=env, cwd=str(workdir),
    )


def test_stdio_server_lists_the_same_before_and_after_the_sdk_took_over(
    tmp_path: Path,
) -> None:
    """The real command: the first tools/list (the preface's) equals the second (the SDK's),
    and calls run through the SDK afterwards."""
    (tmp_path / "notes.txt").write_text("hello\n")
    process = _serve_stdio(tmp_path)
    assert process.stdin is not None and process.stdout is not None
    try:
        def ask(message: dict[str, Any]) -> dict[str, Any]:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(_line(message))
            process.stdin.flush()
            if "id" not in message:
                return {}
            return dict(json.loads(process.stdout.readline()))

        assert ask(_initialize())["result"]["serverInfo"]["name"] == "tooldeck"
        ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
        first = ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]
        second = ask({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})["result"]
        assert first == second and {"file_read", "list_dir"} <= {t["name"] for t in first["tools"]}
        read = ask({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": "file_read", "arguments": {"path": "notes.txt"}}})
        assert read["result"]["structuredContent"]["data"]["content"] == "hello\n"
    finally:
        process.stdin.close()
        process.wait(timeout=120)
    assert process.returncode == 0


def test_stdio_server_answers_requests_the_sdk_cannot_read(tmp_path: Path) -> None:
    """Lines the SDK's reader refuses (a lone surrogate, a 5,000-digit integer, deep nesting,
    a method that is not a string, list params) each get a JSON-RPC error for their id: the
    client waited forever before. The server then serves on."""
    process = _serve_stdio(tmp_path)
    assert process.stdin is not None and process.stdout is not None
    call = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_dir",'
    bad = {
        3: b'{"jsonrpc":"2.0","id":3,"method":123}',
        4: b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":[1,2]}',
        5: call % 5 + b'"arguments":' + b'{"a":' * 400 + b"1" + b"}" * 400 + b"}}",
        6: call % 6 + b'"arguments":{"path":1' + b"0" * 5000 + b"}}}",
        7: call % 7 + b'"arguments":{"path":"\\ud800"}}}',
        8: b'{"jsonrpc":"2.0","id":"eight","method":"tools/call","params":{"x":' + b"0" * 5000
           + b"}}",
    }
    try:
        def send(line: bytes) -> dict[str, Any]:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(line + b"\n")
            process.stdin.flush()
            return dict(json.loads(process.stdout.readline()))

        assert send(_line(_initialize()).strip())["result"]["serverInfo"]["name"] == "tooldeck"
        send(b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}')
        for request_id, line in bad.items():
            answer = send(line)
            expected = "eight" if request_id == 8 else request_id
            assert answer["id"] == expected and answer["error"]["code"] in (-32600, -32700)
        after = send(b'{"jsonrpc":"2.0","id":9,"method":"tools/list"}')
        assert after["id"] == 9 and after["result"]["tools"]
    finally:
        process.stdin.close()
        process.wait(timeout=120)
    assert process.returncode == 0


def test_the_command_line_and_the_server_module_import_no_sdk(tmp_path: Path) -> None:
    """Adding ``serve mcp`` (the plugin, every ``tooldeck`` run) and importing the server module
    load no MCP SDK: it comes with the first message the preface hands over."""
    script = """
import json, sys
from tooldeck import cli
parser = cli.build_parser()
cli._add_plugin_commands(parser, ["serve", "mcp"])
args = parser.parse_args(["serve", "mcp", "--transport", "http", "--port", "0"])
import tooldeck_mcp.server
loaded = sorted(m for m in ("mcp", "mcp_types", "pydantic") if m in sys.modules)
print("PROBE=" + json.dumps({"loaded": loaded, "plugin": cli._LOADED is not None,
      "handler": args.func.__module__, "port": args.port}))
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("TOOLDECK_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )
    probe = [line for line in done.stdout.splitlines() if line.startswith("PROBE=")]
    assert probe, done.stderr
    assert json.loads(probe[0].removeprefix("PROBE=")) == {
        "loaded": [],
        "plugin": True,
        "handler": "tooldeck_mcp._command",
        "port": 0,
    }
