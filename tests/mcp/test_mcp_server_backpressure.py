"""What one ``tooldeck serve mcp`` connection can hold: bounded, on both transports.

A client used to get every request it sent served at once, and every answer it did not read
kept: 1,600 reads of a 1 MB file ran together over stdio (2.5 GB and growing), 300 unread HTTP
answers held 2 GB. Now at most ``MAX_IN_FLIGHT`` requests of a connection (an MCP session over
HTTP) are served at once; over stdio later ones wait in order up to a bound and past it are
refused (``SERVER_BUSY``, "send it again"), over HTTP they are refused at once (429). A stdio
client that leaves its answers unread stops being read. Responses and notifications are never
held back. Every check is on counts, none on timing.
"""

from __future__ import annotations

import fcntl
import json
import os
import termios
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import tooldeck_mcp._stdio as stdio_module
import trio
import trio.testing
from mcp.server.lowlevel import NotificationOptions
from tooldeck_mcp._stdio import (
    MAX_IN_FLIGHT,
    MAX_WAITING,
    SERVER_BUSY,
    StdioConnection,
)
from tooldeck_mcp.server import DeckMcpServer, McpServerSettings

from tooldeck import Deck
from tooldeck.testing import make_deck
from tooldeck_hookspecs import SecurityConfig, SecurityLevel, ToolDefinition

#: A guard against a hang, not a timing claim.
HANG_GUARD_S = 120

_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}
_BIG_ANSWER = 64 * 1024


class _Gate:
    """Calls of ``hold`` run until the test opens the gate; how many ran, and at once."""

    def __init__(self) -> None:
        self.open = trio.Event()
        self.entered = 0
        self.running = 0
        self.most_at_once = 0

    async def hold(self, arguments: Mapping[str, Any], context: Any) -> dict[str, bool]:
        self.entered += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await self.open.wait()
        finally:
            self.running -= 1
        return {"held": True}


def _deck(gate: _Gate, big_calls: list[int]) -> Deck:
    def big(arguments: Mapping[str, Any], context: Any) -> str:
        big_calls.append(1)
        return "x" * _BIG_ANSWER

    def tool(name: str, execute: Any) -> ToolDefinition:
        return ToolDefinition(
            name=name, description=f"The {name} tool of the test.", category="demo",
            parameters=_NO_ARGS, execute=execute,
            security=SecurityConfig(level=SecurityLevel.SAFE),
        )

    return make_deck(
        load_entry_points=["schema", "runner", "policy"],
        tools=[tool("hold", gate.hold), tool("big", big)],
        # The runner's own queue per category must not be what bounds the calls here.
        config={"runner": {"concurrency": {"demo": 1000}}},
    )


def _line(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _call(request_id: int, name: str) -> bytes:
    return _line({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                  "params": {"name": name, "arguments": {}}})


def _initialize(version: str = "2025-06-18") -> bytes:
    return _line({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}},
    })


_INITIALIZE = _initialize()
_INITIALIZED = _line({"jsonrpc": "2.0", "method": "notifications/initialized"})


class _Client:
    """The client's ends of a stdio connection served in this process."""

    def __init__(self) -> None:
        self.server_reads, self.writes = os.pipe()
        self.reads, self.server_writes = os.pipe()
        self._buffer = b""

    async def send(self, data: bytes, *, abandon: bool = False) -> None:
        await trio.to_thread.run_sync(
            stdio_module._write_all, self.writes, data, abandon_on_cancel=abandon
        )

    async def receive(self) -> Any:
        while b"\n" not in self._buffer:
            chunk = await trio.to_thread.run_sync(
                os.read, self.reads, 1 << 20, abandon_on_cancel=True
            )
            assert chunk, "the server closed its output"
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def unread_by_server(self) -> int:
        """Bytes the client wrote that the server has not read yet."""
        count = bytearray(4)
        fcntl.ioctl(self.server_reads, termios.FIONREAD, count)
        return int.from_bytes(count, "little")

    def close(self) -> None:
        for fd in (self.writes, self.reads, self.server_reads, self.server_writes):
            try:
                os.close(fd)
            except OSError:
                pass


@asynccontextmanager
async def _stdio(
    tmp_path: Path, gate: _Gate, big_calls: list[int], version: str = "2025-06-18"
) -> AsyncIterator[
    tuple[_Client, StdioConnection, trio.CancelScope]
]:
    client = _Client()
    deck = _deck(gate, big_calls)
    try:
        async with deck, trio.open_nursery() as nursery:
            server = DeckMcpServer(deck, workdir=str(tmp_path))
            options = server.server.create_initialization_options(NotificationOptions())
            connection = StdioConnection(read_fd=client.server_reads,
                                         write_fd=client.server_writes)
            nursery.start_soon(
                connection.serve, lambda read, write: server.server.run(read, write, options)
            )
            await client.send(_initialize(version))
            assert (await client.receive())["id"] == 1
            await client.send(_INITIALIZED)
            yield client, connection, nursery.cancel_scope
            gate.open.set()
            nursery.cancel_scope.cancel()
    finally:
        client.close()


async def _until(condition: Any) -> None:
    """Wait for ``condition()`` to hold (a checkpoint loop under the test's hang guard)."""
    while not condition():
        await trio.sleep(0.01)


async def test_stdio_serves_a_bounded_number_of_requests_and_refuses_past_the_queue(
    tmp_path: Path,
) -> None:
    gate, big_calls = _Gate(), []
    extra = 3
    total = MAX_IN_FLIGHT + MAX_WAITING + extra
    with trio.fail_after(HANG_GUARD_S):
        async with _stdio(tmp_path, gate, big_calls) as (client, connection, _):
            await client.send(b"".join(_call(100 + i, "hold") for i in range(total)))
            # The requests past the queue are answered at once, and did not run.
            refused = [await client.receive() for _ in range(extra)]
            assert [answer["id"] for answer in refused] == [100 + total - extra + i
                                                            for i in range(extra)]
            for answer in refused:
                assert answer["error"]["code"] == SERVER_BUSY
                assert "send it again" in answer["error"]["message"]
            await _until(lambda: gate.entered == MAX_IN_FLIGHT)
            await trio.testing.wait_all_tasks_blocked()
            assert gate.entered == MAX_IN_FLIGHT  # the others wait for their turn
            stats = connection.statistics()
            assert (stats.in_flight, stats.waiting, stats.refused) == (
                MAX_IN_FLIGHT, MAX_WAITING, extra)
            # Notifications are never held back: cancelling a waiting request drops it.
            cancelled = 100 + MAX_IN_FLIGHT + MAX_WAITING - 1
            await client.send(_line({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                     "params": {"requestId": cancelled}}))
            await _until(lambda: connection.statistics().waiting == MAX_WAITING - 1)
            gate.open.set()
            answered = {}
            while len(answered) < MAX_IN_FLIGHT + MAX_WAITING - 1:
                answer = await client.receive()
                answered[answer["id"]] = answer
            assert cancelled not in answered
            assert all(not answer["result"]["isError"] for answer in answered.values())
            assert gate.most_at_once == MAX_IN_FLIGHT
            assert gate.entered == MAX_IN_FLIGHT + MAX_WAITING - 1
            await client.send(_line({"jsonrpc": "2.0", "id": 7, "method": "ping"}))
            assert await client.receive() == {"jsonrpc": "2.0", "id": 7, "result": {}}
            assert connection.statistics().in_flight == 0


async def test_stdio_a_batch_waits_for_turns_and_is_answered_whole(tmp_path: Path) -> None:
    """A batch (2025-03-26) of more requests than run at once: its elements take turns like
    any request, one cancelled while it waits is left out, and one array answers the rest."""
    gate, big_calls = _Gate(), []
    size = MAX_IN_FLIGHT + 8
    with trio.fail_after(HANG_GUARD_S):
        async with _stdio(tmp_path, gate, big_calls, "2025-03-26") as (client, connection, _):
            batch = [json.loads(_call(100 + i, "hold")) for i in range(size)]
            await client.send(json.dumps(batch).encode() + b"\n")
            await _until(lambda: gate.entered == MAX_IN_FLIGHT
                         and connection.statistics().waiting == size - MAX_IN_FLIGHT)
            await client.send(_line({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                     "params": {"requestId": 100 + size - 1}}))
            await _until(lambda: connection.statistics().waiting == size - MAX_IN_FLIGHT - 1)
            gate.open.set()
            answers = await client.receive()
            assert sorted(answer["id"] for answer in answers) == list(range(100, 100 + size - 1))
            assert all(answer["result"]["structuredContent"]["data"] == {"held": True}
                       for answer in answers)
            assert gate.most_at_once == MAX_IN_FLIGHT


async def test_stdio_a_client_that_reads_no_answers_stops_being_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client asks and reads nothing: the server queues a bounded amount of answers,
    then stops reading the client (its writes block) instead of serving every request it
    sends and keeping every answer."""
    bound = 1 << 20
    monkeypatch.setattr(stdio_module, "MAX_QUEUED_OUT_BYTES", bound, raising=False)
    gate, big_calls = _Gate(), []
    first, many = 20, 4000  # 20 answers are more than the bound
    with trio.fail_after(HANG_GUARD_S):
        async with _stdio(tmp_path, gate, big_calls) as (client, connection, _):
            await client.send(b"".join(_call(100 + i, "big") for i in range(first)))
            await _until(lambda: len(big_calls) == first)
            await trio.testing.wait_all_tasks_blocked()
            done = trio.Event()

            async def flood() -> None:
                await client.send(
                    b"".join(_call(1000 + i, "big") for i in range(many)), abandon=True
                )
                done.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                # Either the server read it all (what it must not do), or it stopped reading
                # and what the client writes stays in the pipe.
                await _until(lambda: done.is_set() or client.unread_by_server() >= 32 * 1024)
                assert not done.is_set(), "a client that reads nothing was read to the end"
                await trio.testing.wait_all_tasks_blocked()
                line = 2 * _BIG_ANSWER + 4096  # an answer carries its data twice (text, JSON)
                # What ran: the answers queued, and those in flight (each holding its answer).
                assert len(big_calls) <= bound // line + 2 + MAX_IN_FLIGHT
                assert client.unread_by_server() >= 32 * 1024
                stats = connection.statistics()
                assert stats.queued_out_bytes <= bound + line
                assert stats.in_flight <= MAX_IN_FLIGHT
                assert stats.waiting <= MAX_WAITING
                assert stats.admitted + stats.waiting + stats.refused < first + many
                nursery.cancel_scope.cancel()  # the client gives up


# ---------------------------------------------------------------------- HTTP

TOKEN = "backpressure-token-0123456789abcdef"
_ACCEPT = {"Accept": "application/json, text/event-stream",
           "Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}


@asynccontextmanager
async def _http(tmp_path: Path, gate: _Gate) -> AsyncIterator[str]:
    deck = _deck(gate, [])
    async with deck, trio.open_nursery() as nursery:
        server = DeckMcpServer(deck, workdir=str(tmp_path), settings=McpServerSettings())
        stop = trio.Event()
        url = await nursery.start(lambda task_status: server.run_http(
            "127.0.0.1", 0, token=TOKEN, shutdown=stop, task_status=task_status
        ))
        try:
            yield url
        finally:
            gate.open.set()
            stop.set()


async def _session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    opened = await http.post(url, headers=_ACCEPT, content=_INITIALIZE)
    assert opened.status_code == 200, opened.text
    headers = {**_ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"],
               "mcp-protocol-version": "2025-06-18"}
    await http.post(url, headers=headers, content=_INITIALIZED)
    return headers


def _answer(response: httpx2.Response) -> Any:
    if "event-stream" in response.headers.get("content-type", ""):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


async def test_http_a_session_has_a_bounded_number_of_requests_in_flight(
    tmp_path: Path,
) -> None:
    gate = _Gate()
    limits = httpx2.Limits(max_connections=4 * MAX_IN_FLIGHT)
    with trio.fail_after(HANG_GUARD_S):
        async with _http(tmp_path, gate) as url, httpx2.AsyncClient(
            timeout=HANG_GUARD_S, limits=limits
        ) as http:
            headers = await _session(http, url)
            other = await _session(http, url)
            held: list[httpx2.Response] = []

            async def call(request_id: int, into: list[httpx2.Response]) -> None:
                into.append(await http.post(url, headers=headers,
                                            content=_call(request_id, "hold")))

            async with trio.open_nursery() as calls:
                for i in range(MAX_IN_FLIGHT):
                    calls.start_soon(call, 100 + i, held)
                await _until(lambda: gate.entered == MAX_IN_FLIGHT)
                # One more request of this session: refused at once, it did not run.
                late: list[httpx2.Response] = []
                calls.start_soon(call, 999, late)
                await _until(lambda: late or gate.entered > MAX_IN_FLIGHT)
                assert gate.entered == MAX_IN_FLIGHT and late
                refused = late[0]
                assert refused.status_code == 429
                assert refused.headers.get("retry-after") == "1"
                assert refused.json()["id"] == 999
                assert refused.json()["error"]["code"] == SERVER_BUSY
                # The client's notifications still get through; another session is served.
                noted = await http.post(url, headers=headers, content=_line({
                    "jsonrpc": "2.0", "method": "notifications/roots/list_changed"}))
                assert noted.status_code == 202
                pinged = await http.post(url, headers=other, content=_line(
                    {"jsonrpc": "2.0", "id": 5, "method": "ping"}))
                assert pinged.status_code == 200 and _answer(pinged)["result"] == {}
                gate.open.set()
            assert [response.status_code for response in held] == [200] * MAX_IN_FLIGHT
            assert gate.most_at_once == MAX_IN_FLIGHT
            # Turns are given back: the session is served again.
            again = await http.post(url, headers=headers, content=_call(1000, "hold"))
            assert again.status_code == 200
            assert _answer(again)["result"]["structuredContent"]["data"] == {"held": True}
