"""``tooldeck serve mcp`` answers every JSON-RPC message a client can write.

Over stdio, the real command with raw lines on its stdin: batches, ids that are not strings or
integers, JSON that is not an object, lines past the size cap, malformed responses to the
server's own requests. Each used to go unanswered (the client waited forever) or got an
answer it should not have. Over HTTP, the same bodies POSTed raw.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_mcp.server import DeckMcpServer

from tooldeck.testing import make_deck

#: How long a read waits before the test fails: a guard against a hang, not a timing claim.
HANG_GUARD_S = 120


def _initialize(version: str, request_id: Any = 1, **capabilities: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0", "id": request_id, "method": "initialize",
        "params": {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class RawClient:
    """``tooldeck serve mcp`` over stdio, written to and read from line by line."""

    def __init__(self, workdir: Path, config: str | None = None) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss"}
        env.pop("TOOLDECK_CONFIG", None)
        if config is not None:
            (workdir / "tooldeck.toml").write_text(config)
            env["TOOLDECK_CONFIG"] = str(workdir / "tooldeck.toml")
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

    def write(self, line: bytes | dict[str, Any] | list[Any]) -> None:
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

    def ask(self, line: bytes | dict[str, Any] | list[Any]) -> Any:
        self.write(line)
        return self.read()

    def start(self, version: str, **capabilities: Any) -> None:
        assert self.ask(_initialize(version, **capabilities))["result"]["protocolVersion"] == (
            version
        )
        self.write(INITIALIZED)

    def ping(self, request_id: Any) -> None:
        """A ping answered next: every earlier line was answered (or was not to be)."""
        assert self.ask({"jsonrpc": "2.0", "id": request_id, "method": "ping"}) == {
            "jsonrpc": "2.0", "id": request_id, "result": {},
        }

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(timeout=HANG_GUARD_S)


@pytest.fixture
def raw_client(tmp_path: Path) -> Any:
    clients: list[RawClient] = []

    def start(config: str | None = None) -> RawClient:
        clients.append(RawClient(tmp_path, config))
        return clients[-1]

    yield start
    for client in clients:
        if client.process.poll() is None:
            client.process.kill()
            client.process.wait()


def _invalid_request(answer: Any, request_id: Any = None) -> None:
    assert answer["jsonrpc"] == "2.0" and answer["id"] == request_id, answer
    assert answer["error"]["code"] == -32600, answer


BAD_IDS = [
    b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":2.0,"method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
    b'{"jsonrpc":"2.0","id":[1],"method":"ping"}',
    b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
    b'{"jsonrpc":"2.0","\\u0069d":false,"method":"ping"}',  # the key written with an escape
]


def test_requests_whose_id_is_not_a_string_or_an_integer_get_invalid_request(
    raw_client: Any,
) -> None:
    """pydantic ignores an unknown key, so these read as notifications and went unanswered."""
    client = raw_client()
    client.start("2025-06-18")
    for line in BAD_IDS:
        _invalid_request(client.ask(line))
    client.ping(2)
    assert client.close() == 0


def test_the_preface_does_not_answer_a_request_with_a_bad_id(raw_client: Any) -> None:
    """The messages served before the SDK loads (initialize, ping, tools/list) are checked
    the same way: an initialize with id 1.5 was answered as if 1.5 were an id."""
    client = raw_client()
    # An id no UTF-8 answer can carry: the preface crashed the server trying to echo it.
    surrogate = json.dumps(_initialize("2025-06-18", request_id="\ud800")).encode()
    answer = client.ask(surrogate)
    assert answer["id"] is None and answer["error"]["code"] in (-32600, -32700), answer
    _invalid_request(client.ask(_initialize("2025-06-18", request_id=1.5)))
    _invalid_request(client.ask(_initialize("2025-06-18", request_id=None)))
    client.start("2025-06-18")
    _invalid_request(client.ask(b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}'))
    _invalid_request(client.ask(b'{"jsonrpc":"2.0","id":{},"method":"ping"}'))
    listed = client.ask({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert {"file_read", "list_dir"} <= {t["name"] for t in listed["result"]["tools"]}
    assert client.close() == 0


def test_json_that_is_not_a_message_gets_an_error_with_a_null_id(raw_client: Any) -> None:
    client = raw_client()
    client.start("2025-06-18")
    for line in (b"5", b'"ping"', b"null", b"true",
                 b'{"jsonrpc":"2.0","method":7}',
                 b'{"jsonrpc":"2.0","method":"notifications/x","params":[1]}'):
        _invalid_request(client.ask(line))
    answer = client.ask(b"{not json")
    assert answer["id"] is None and answer["error"]["code"] == -32700
    # Where the id can still be read, the client is told which request failed.
    answer = client.ask(b'{"jsonrpc":"2.0","id":4,')
    assert answer["id"] == 4 and answer["error"]["code"] == -32700
    unknown = client.ask({"jsonrpc": "2.0", "id": 5, "method": "no/such"})
    assert unknown["id"] == 5 and unknown["error"]["code"] == -32601
    wrong = client.ask({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": 6}})
    assert wrong["id"] == 6 and wrong["error"]["code"] == -32602
    client.ping(7)
    assert client.close() == 0


def test_batches_are_answered_with_one_array_on_2025_03_26(raw_client: Any) -> None:
    client = raw_client()
    client.start("2025-03-26")
    answers = client.ask([
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "id": "three", "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
         "params": {"name": "file_read", "arguments": {"path": "missing.txt"}}},
        {"jsonrpc": "2.0", "id": 5, "method": "no/such"},
        {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
        7,
    ])
    assert isinstance(answers, list)
    by_id = {a["id"]: a for a in answers if a["id"] is not None}
    assert set(by_id) == {2, "three", 4, 5}
    assert by_id[2]["result"] == {}
    assert "file_read" in {t["name"] for t in by_id["three"]["result"]["tools"]}
    assert by_id[4]["result"]["isError"] is True
    assert by_id[5]["error"]["code"] == -32601
    nulls = [a for a in answers if a["id"] is None]
    assert len(nulls) == 2 and all(a["error"]["code"] == -32600 for a in nulls)

    # A batch of notifications is answered with nothing: the next line is the ping's.
    client.write([{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}])
    client.ping(8)
    _invalid_request(client.ask([]))
    [nested] = client.ask([[{"jsonrpc": "2.0", "id": 9, "method": "ping"}]])
    _invalid_request(nested)
    [again] = client.ask([_initialize("2025-03-26", request_id=10)])
    _invalid_request(again, 10)
    twice = client.ask([{"jsonrpc": "2.0", "id": 11, "method": "ping"}] * 2)
    assert twice == [{"jsonrpc": "2.0", "id": 11, "result": {}}] * 2
    assert client.close() == 0


@pytest.mark.parametrize("version", [None, "2025-06-18", "2025-11-25"])
def test_batches_are_refused_where_the_protocol_has_none(
    raw_client: Any, version: str | None
) -> None:
    """2025-06-18 removed batches; before initialize there is no version to allow them."""
    client = raw_client()
    if version is not None:
        client.start(version)
    answer = client.ask([{"jsonrpc": "2.0", "id": 2, "method": "ping"}])
    _invalid_request(answer)
    assert "batch" in answer["error"]["message"]
    if version is None:
        client.start("2025-06-18")
    client.ping(3)
    assert client.close() == 0


def test_a_line_past_the_cap_is_skipped_unread_and_answered(raw_client: Any) -> None:
    from tooldeck_mcp._stdio import MAX_LINE_BYTES

    client = raw_client()
    client.start("2025-06-18")
    padding = b" " * (MAX_LINE_BYTES + 1)
    answer = client.ask(b'{"jsonrpc":"2.0","id":12,"method":"ping","params":{"x":"' + padding
                        + b'"}}')
    _invalid_request(answer, 12)
    assert "larger than" in answer["error"]["message"]
    client.ping(13)
    assert client.close() == 0


ELICIT = """
[session]
grants = ["filesystem"]

[tools.file_write.security]
level = "dangerous"

[mcp]
confirm = "elicit"
confirm_timeout_s = 3600
"""


def test_a_malformed_answer_to_an_elicitation_fails_it_at_once(
    raw_client: Any, tmp_path: Path
) -> None:
    """The client answers the server's elicitation/create with a response the SDK cannot
    read: the elicitation fails now (the call goes back CONFIRMATION_REQUIRED) instead of
    waiting an hour, and the client is not sent an error for an id that is the server's."""
    client = raw_client(ELICIT)
    client.start("2025-06-18", elicitation={})
    client.write({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "file_write", "arguments": {"path": "o.txt", "content": "x"}}})
    asked = client.read()
    assert asked["method"] == "elicitation/create", asked
    client.write({"jsonrpc": "2.0", "id": asked["id"], "result": "not an object"})
    answer = client.read()
    assert answer["id"] == 2, answer
    error = json.loads(answer["result"]["content"][0]["text"])["error"]
    assert error["code"] == "CONFIRMATION_REQUIRED"
    assert not (tmp_path / "o.txt").exists()
    client.ping(3)
    assert client.close() == 0


HTTP_HEADERS = {"accept": "application/json, text/event-stream",
                "content-type": "application/json"}


@asynccontextmanager
async def _http_server(
    tmp_path: Path, config: dict[str, Any] | None = None
) -> AsyncIterator[tuple[str, Any]]:
    """A deck's MCP server over HTTP on loopback, and a client for it: (url, client)."""
    import httpx2

    deck = make_deck(load_entry_points=["schema", "runner", "policy", "fs"], config=config)
    async with deck, trio.open_nursery() as nursery:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        stop = trio.Event()
        url = await nursery.start(lambda task_status: server.run_http(
            "127.0.0.1", 0, token=None, shutdown=stop, task_status=task_status
        ))
        async with httpx2.AsyncClient(timeout=HANG_GUARD_S) as http:
            yield url, http
        stop.set()


async def test_http_refuses_batches_and_bad_ids_instead_of_accepting_them_silently(
    tmp_path: Path,
) -> None:
    """The SDK's HTTP transport answered 202 (a notification, never answered) to a request
    whose id is null, a float or a boolean, and a -32602 pydantic dump to a batch."""
    async with _http_server(tmp_path) as (url, http):
        opened = await http.post(url, headers=HTTP_HEADERS, json=_initialize("2025-03-26"))
        assert opened.status_code == 200
        session = {**HTTP_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-03-26"}
        await http.post(url, headers=session, json=INITIALIZED)
        for body in [*BAD_IDS, b"5", b"[]", b'[{"jsonrpc":"2.0","id":2,"method":"ping"}]']:
            answer = await http.post(url, headers=session, content=body)
            assert answer.status_code == 400, (body, answer.status_code)
            _invalid_request(answer.json())
        ping = await http.post(url, headers=session,
                               json={"jsonrpc": "2.0", "id": 3, "method": "ping"})
        assert ping.status_code == 200 and '"id":3' in ping.text


def test_a_batch_whose_request_the_client_cancels_is_answered_without_it(
    raw_client: Any, tmp_path: Path
) -> None:
    """A cancelled request is never answered (MCP): the batch holding it is answered once its
    other requests are, instead of waiting for an answer that never comes."""
    client = raw_client(ELICIT)
    client.start("2025-03-26", elicitation={})
    client.write([
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "file_write", "arguments": {"path": "o.txt", "content": "x"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    ])
    asked = client.read()  # the call waits for the user: the batch is not answered yet
    assert asked["method"] == "elicitation/create", asked
    client.write({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 2, "reason": "changed my mind"}})
    answer = client.read()
    if isinstance(answer, dict) and answer.get("method") == "notifications/cancelled":
        assert answer["params"]["requestId"] == asked["id"]  # the server gives up asking
        answer = client.read()
    assert answer == [{"jsonrpc": "2.0", "id": 3, "result": {}}]
    assert not (tmp_path / "o.txt").exists()
    client.ping(4)
    assert client.close() == 0


def _sse_messages(lines: list[str]) -> list[Any]:
    return [json.loads(line[len("data:"):]) for line in lines if line.startswith("data:")]


async def test_http_a_malformed_answer_to_an_elicitation_fails_it_at_once(
    tmp_path: Path,
) -> None:
    """Over HTTP the SDK refused the malformed response (400) and the elicitation waited for
    ``confirm_timeout_s`` (an hour here) with the tool call behind it."""
    config = {
        "session": {"grants": ["filesystem"]},
        "tools": {"file_write": {"security": {"level": "dangerous"}}},
        "mcp": {"confirm": "elicit", "confirm_timeout_s": 3600},
    }
    async with _http_server(tmp_path, config) as (url, http):
        opened = await http.post(
            url, headers=HTTP_HEADERS, json=_initialize("2025-06-18", elicitation={})
        )
        session = {**HTTP_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-06-18"}
        await http.post(url, headers=session, json=INITIALIZED)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "file_write", "arguments": {"path": "o.txt", "content": "x"}}}
        with trio.fail_after(HANG_GUARD_S):  # a hang guard, not a timing assertion
            async with http.stream("POST", url, headers=session, json=call) as stream:
                seen: list[str] = []
                lines = stream.aiter_lines()
                async for line in lines:
                    seen.append(line)
                    asked = [m for m in _sse_messages(seen) if m.get("method")]
                    if asked:
                        break
                assert asked[0]["method"] == "elicitation/create", asked
                bad = {"jsonrpc": "2.0", "id": asked[0]["id"], "result": "not an object"}
                reply = await http.post(url, headers=session, json=bad)
                assert reply.status_code < 500
                async for line in lines:
                    seen.append(line)
                    if any(m.get("id") == 2 for m in _sse_messages(seen)):
                        break
        [answer] = [m for m in _sse_messages(seen) if m.get("id") == 2]
        error = json.loads(answer["result"]["content"][0]["text"])["error"]
        assert error["code"] == "CONFIRMATION_REQUIRED"
    assert not (tmp_path / "o.txt").exists()
