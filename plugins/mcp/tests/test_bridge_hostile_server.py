"""The MCP client bridge against a remote server that answers what it likes.

The remote is a raw JSON-RPC server over stdio (no SDK on its side, so it sends what the SDK
would refuse to build). Its scenario says what it lists and, per tool, the exact frames it
writes for a ``tools/call`` (``"$ID"`` stands for the request's id, ``"$TOKEN"`` for its
progress token); every message it receives is appended to a log file the test reads.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_mcp import McpServerConfig, remote_server

from tooldeck.testing import make_deck

ENTRY_POINTS = ["schema", "runner", "policy", "mcp"]

_SERVER = r'''
import json, sys
with open(sys.argv[1]) as f:
    scenario = json.load(f)
received = open(sys.argv[2], "a")
def send(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
def fill(frame, mid, token):
    text = frame if isinstance(frame, str) else json.dumps(frame)
    return text.replace('"$ID"', json.dumps(mid)).replace('"$TOKEN"', json.dumps(token))
for line in sys.stdin:
    received.write(line)
    received.flush()
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if not isinstance(msg, dict) or msg.get("id") is None or "method" not in msg:
        continue
    method, mid = msg["method"], msg["id"]
    if method == "initialize":
        send(json.dumps({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}}))
    elif method == "tools/list":
        send(json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"tools": scenario["list"]}}))
    elif method == "tools/call":
        params = msg["params"]
        token = (params.get("_meta") or {}).get("progressToken")
        default = [{"jsonrpc": "2.0", "id": "$ID",
                    "result": {"content": [{"type": "text", "text": "ok"}]}}]
        for frame in scenario.get("call", {}).get(params["name"], default):
            if isinstance(frame, dict) and "huge" in frame:
                # One line of frame["huge"] bytes streamed in 1 MiB writes; without a
                # newline the server then waits (an endless line, as the client sees it).
                head = '{"jsonrpc":"2.0","id":%s,' % json.dumps(mid) if frame["id"] else "{"
                sys.stdout.write(head + '"result":{"content":[{"type":"text","text":"')
                for _ in range(frame["huge"] >> 20):
                    sys.stdout.write("x" * (1 << 20))
                if frame["newline"]:
                    sys.stdout.write('"}]}}\n')
                    sys.stdout.flush()
                else:
                    sys.stdout.flush()
                    sys.stdin.readline()
            elif isinstance(frame, dict) and "latin1" in frame:
                # The frame's text written in Latin-1: bytes that are not UTF-8.
                sys.stdout.flush()
                text = fill(frame["latin1"], mid, token) + "\n"
                sys.stdout.buffer.write(text.encode("latin-1"))
                sys.stdout.buffer.flush()
            elif isinstance(frame, dict) and "repeat" in frame:
                text = fill(frame["frame"], mid, token)
                sys.stdout.write((text + "\n") * frame["repeat"])
                sys.stdout.flush()
            else:
                send(fill(frame, mid, token))
    else:
        send(json.dumps({"jsonrpc": "2.0", "id": mid, "result": {}}))
'''


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": f"the {name} tool",
            "inputSchema": {"type": "object", "properties": {}}, **extra}


def _ok(text: str = "ok") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": "$ID",
            "result": {"content": [{"type": "text", "text": text}]}}


class Remote:
    """A raw server's configuration, and what it received so far."""

    def __init__(self, tmp_path: Path, scenario: dict[str, Any]) -> None:
        script = tmp_path / "raw_server.py"
        script.write_text(_SERVER)
        scenario_file = tmp_path / "scenario.json"
        scenario_file.write_text(json.dumps(scenario))
        self.log = tmp_path / "received.jsonl"
        self.log.touch()
        self.table = {
            "command": [sys.executable, str(script), str(scenario_file), str(self.log)],
            # a distinct configuration per test: the bridge shares one connection per config
            "env": {"TOOLDECK_TEST": str(tmp_path)},
            "stderr": "discard",
        }

    @property
    def config(self) -> McpServerConfig:
        return McpServerConfig.from_table("raw", self.table)

    def deck(self) -> Any:
        return make_deck(
            config={"mcp": {"servers": {"raw": self.table}}}, load_entry_points=ENTRY_POINTS
        )

    def received(self) -> list[Any]:
        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append(line)
        return out


@pytest.fixture(autouse=True)
def _close_bridge_connections() -> Iterator[None]:
    """Stop the MCP servers a test's bridge started (they live per process otherwise)."""
    yield
    client = sys.modules.get("tooldeck_mcp._client")
    if client is not None:
        client.shutdown()


async def test_one_malformed_tool_does_not_cost_the_others_their_registration(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote = Remote(tmp_path, {"list": [
        _tool("good"),
        {"name": "no_schema", "description": "inputSchema is missing"},
        _tool("string_schema", inputSchema={"type": "string"}),
        _tool("text_schema", inputSchema="not a schema"),
        {"name": 5, "inputSchema": {"type": "object"}},
        "not a tool at all",
        _tool("also_good"),
    ]})
    with caplog.at_level(logging.WARNING, logger="tooldeck.mcp"):
        deck = remote.deck()
        async with deck:
            assert {t.name for t in deck.catalog} == {"raw__good", "raw__also_good"}
            session = deck.session(grants={"mcp_raw"})
            done = await session.call("raw__good", {})
            assert done.success and done.data == "ok", done.error
            # Listing again (the bridge does when it checks a server is alive) reports nothing
            # new: each malformed tool is reported once.
            again = await trio.to_thread.run_sync(remote_server(remote.config).list_tools_blocking)
            assert [t.name for t in again] == ["good", "also_good"]
    reports = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    for name in ("'no_schema'", "'string_schema'", "'text_schema'", "at index 4", "at index 5"):
        found = [m for m in reports if name in m]
        assert len(found) == 1, (name, reports)
        assert "MCP server 'raw'" in found[0]
    assert len(reports) == 5
    assert "inputSchema" in next(m for m in reports if "'no_schema'" in m)
    stats = remote_server(remote.config).statistics()
    assert stats.malformed_tools == 5


def test_each_listed_tool_is_checked_as_the_sdk_checks_it_for_the_version_spoken() -> None:
    """A tool the SDK takes on one protocol version and refuses on another (an output schema
    that is not an object schema: refused before 2026-07-28) is kept or left out accordingly,
    checked with the page's own fields (a 2026-07-28 page carries more than its tools)."""
    from mcp import types
    from mcp.shared.message import SessionMessage
    from tooldeck_mcp._client import _ListingScreen

    typed = _tool("typed", outputSchema={"type": "string"})
    page = {"resultType": "complete", "cacheScope": "private", "ttlMs": 0}
    kept: dict[str | None, list[str]] = {}
    reported: list[str] = []
    for version in (None, "2025-11-25", "2026-07-28"):
        screen = _ListingScreen("raw", lambda name, problem: reported.append(name))
        meta = {"io.modelcontextprotocol/protocolVersion": version}
        screen.sent(SessionMessage(types.JSONRPCRequest(
            jsonrpc="2.0", id=7, method="tools/list",
            params={"_meta": meta} if version else {})))
        answer = screen.received(SessionMessage(types.JSONRPCResponse(
            jsonrpc="2.0", id=7, result={**page, "tools": [typed, _tool("plain")]})))
        kept[version] = [t["name"] for t in answer.message.result["tools"]]
    assert kept == {None: ["plain"], "2025-11-25": ["plain"], "2026-07-28": ["typed", "plain"]}
    assert reported == ["'typed'", "'typed'"]


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` memory figure (``VmRSS``, ``VmHWM``), in KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


@pytest.mark.parametrize("newline", [True, False], ids=["long line", "endless line"])
async def test_an_answer_over_the_line_limit_fails_its_call_at_once_in_bounded_memory(
    tmp_path: Path, newline: bool
) -> None:
    """The SDK's reader joined a line's chunks as text, quadratic in its length and all of it
    in memory: a 48 MiB answer tied the bridge up for half a minute, an endless one grew the
    host's memory until it died. The call now fails at once with the reason, and the next
    call on the same connection is answered."""
    import resource

    from tooldeck_mcp._stdio_client import MAX_LINE_BYTES

    size = MAX_LINE_BYTES + (16 << 20)
    remote = Remote(tmp_path, {
        "list": [_tool("huge"), _tool("fine")],
        "call": {"huge": [{"huge": size, "id": True, "newline": newline}]},
    })
    deck = remote.deck()
    async with deck:
        session = deck.session(grants={"mcp_raw"})
        # The baseline is taken once the deck is open and one call went through: the bridge's
        # connection, the SDK session and whatever the deck loads lazily are in it (a worker's
        # first deck grew the process by 75 MiB on CI, a line's worth of nothing).
        with trio.fail_after(120):
            warm = await session.call("raw__fine", {})
        assert warm.success, warm.error
        # This test's own peak, not the process's since it started: after a long run, memory
        # other tests left behind plus this call's 32 MiB buffer could pass the old peak by
        # more than the bound. Linux resets the peak (VmHWM) on "5" to clear_refs; without
        # it, the process peak.
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
            before = _status_kib("VmRSS")

            def peak() -> int:
                return _status_kib("VmHWM")
        except OSError:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB

            def peak() -> int:
                return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with trio.fail_after(120):  # a hang guard, not a timing assertion
            failed = await session.call("raw__huge", {})
        grown_mb = (peak() - before) / 1024
        assert not failed.success
        assert f"larger than {MAX_LINE_BYTES} bytes" in failed.error.message, failed.error
        if newline:  # the connection is still good
            with trio.fail_after(120):
                done = await session.call("raw__fine", {})
            assert done.success and done.data == "ok", done.error
    # The line is never held whole, let alone copied as text (the SDK: 3-4 copies of it).
    assert grown_mb < MAX_LINE_BYTES / (1 << 20) * 2, grown_mb


async def test_an_oversized_message_without_an_id_closes_the_connection_and_fails_the_call(
    tmp_path: Path,
) -> None:
    """With no id at its start, the answer cannot be matched to its request: the connection
    is closed (the pending call fails now, not at its timeout) and the next call starts the
    server again."""
    from tooldeck_mcp._stdio_client import MAX_LINE_BYTES

    remote = Remote(tmp_path, {
        "list": [_tool("huge"), _tool("fine")],
        "call": {"huge": [{"huge": MAX_LINE_BYTES + (4 << 20), "id": False, "newline": True}]},
    })
    deck = remote.deck()
    async with deck:
        session = deck.session(grants={"mcp_raw"})
        with trio.fail_after(120):
            failed = await session.call("raw__huge", {})
        assert not failed.success, failed
        with trio.fail_after(120):
            done = await session.call("raw__fine", {})
        assert done.success and done.data == "ok", done.error
    starts = [m for m in remote.received() if isinstance(m, dict)
              and m.get("method") == "initialize"]
    assert len(starts) == 2, starts


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


async def test_answers_the_sdk_cannot_read_end_their_call_at_once(tmp_path: Path) -> None:
    """The SDK dropped such a line: the call waited for its whole timeout (30 s by default)."""
    content = [{"type": "text", "text": "caf\u00e9"}]
    remote = Remote(tmp_path, {"list": [_tool("latin"), _tool("deep"), _tool("shapeless"),
                                        _tool("fine")], "call": {
        "latin": [{"latin1": json.dumps({"jsonrpc": "2.0", "id": "$ID",
                                         "result": {"content": content}},
                                        ensure_ascii=False)}],
        # structuredContent deeper than the SDK's parser goes
        "deep": [{"jsonrpc": "2.0", "id": "$ID", "result": {
            "content": [{"type": "text", "text": "deep"}],
            "structuredContent": _nested(250, 1)}}],
        # a result no MCP version has: content is not a list
        "shapeless": [{"jsonrpc": "2.0", "id": "$ID", "result": {"content": "just text"}}],
    }})
    remote.table["timeout_s"] = 20
    async with remote.deck() as deck:
        session = deck.session(grants={"mcp_raw"})
        with trio.fail_after(15):  # not a timing figure: far below the call's own timeout
            latin = await session.call("raw__latin", {})
            deep = await session.call("raw__deep", {})
            shapeless = await session.call("raw__shapeless", {})
            fine = await session.call("raw__fine", {})
    assert latin.success and "caf\ufffd" in json.dumps(latin.data, ensure_ascii=False), latin
    assert deep.success, deep.error
    assert shapeless.error is not None and shapeless.error.code != "TIMEOUT"
    assert "not valid MCP" in shapeless.error.message
    assert fine.success  # the connection is still in use


async def test_a_tool_too_deep_for_the_sdk_costs_its_server_no_other_tool(
    tmp_path: Path
) -> None:
    deep = {"type": "object", "properties": {"a": {"type": "string"}}}
    for _ in range(120):
        deep = {"type": "object", "properties": {"a": deep}}
    remote = Remote(tmp_path, {"list": [_tool("deep", inputSchema=deep), _tool("ok2")]})
    remote.table["startup_timeout_s"] = 60
    with trio.fail_after(30):
        async with remote.deck() as deck:
            assert "raw__ok2" in {t.name for t in deck.catalog}
            session = deck.session(grants={"mcp_raw"})
            assert (await session.call("raw__ok2", {})).success
