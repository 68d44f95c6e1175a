"""A peer on the Redis port that does not answer like Redis: replies that never end, that
trickle, that announce gigabytes. The client stays bounded in memory and in time."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_redis import RedisConnection, RedisUnavailable, redis_settings

from tooldeck_hookspecs import ExecutionConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

#: What a fake server does with one connection once a command arrived: (socket, stop) -> None.
Handler = Callable[[socket.socket, threading.Event], None]


class FakeServer:
    """A TCP server on loopback running ``handler`` for each connection's first command."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.stop = threading.Event()
        self.closed_by_client = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()
        self._listener.close()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.05)
        with conn:
            while not self.stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not data:
                    break
                try:
                    self.handler(conn, self.stop)
                except OSError:
                    break  # the client closed the connection
                return_when_idle(conn, self.stop)
                break
        self.closed_by_client.set()

    def close(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(5)


def return_when_idle(conn: socket.socket, stop: threading.Event) -> None:
    """Hold the connection open until the client closes it (or the test ends)."""
    while not stop.is_set():
        try:
            if not conn.recv(65536):
                return
        except TimeoutError:
            continue
        except OSError:
            return


@pytest.fixture
def fake_server() -> Iterator[Callable[[Handler], FakeServer]]:
    servers: list[FakeServer] = []

    def start(handler: Handler) -> FakeServer:
        servers.append(FakeServer(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _connection(url: str, **table: Any) -> RedisConnection:
    parsed = redis_settings({"redis": {"url": url, "namespace": "hostile", **table}})
    assert parsed is not None
    return RedisConnection(parsed)


def huge_bulk(conn: socket.socket, stop: threading.Event) -> None:
    # Announces ~1 TB and streams it (throttled: without the bound, the client buffers it all).
    conn.sendall(b"$999999999999\r\n")
    while not stop.is_set():
        conn.sendall(b"x" * 65536)
        time.sleep(0.01)


def endless_line(conn: socket.socket, stop: threading.Event) -> None:
    # A status line that never ends: no length announced, only the buffer bound can stop it.
    conn.sendall(b"+")
    while not stop.is_set():
        conn.sendall(b"y" * 65536)
        time.sleep(0.01)


def huge_array(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"*999999999\r\n")
    while not stop.is_set():
        conn.sendall(b":1\r\n" * 4096)
        time.sleep(0.01)


def trickle(conn: socket.socket, stop: threading.Event) -> None:
    # A valid reply that never completes: one byte of a 100 kB bulk string every 50 ms.
    conn.sendall(b"$100000\r\n")
    while not stop.is_set():
        conn.sendall(b"z")
        time.sleep(0.05)


def nested_trickle(conn: socket.socket, stop: threading.Event) -> None:
    # The audit's "slowdrip": arrays nested ever deeper, a few bytes every 0.1 s.
    while not stop.is_set():
        conn.sendall(b"*1\r\n")
        time.sleep(0.1)


def silent(conn: socket.socket, stop: threading.Event) -> None:
    pass


@pytest.mark.parametrize("handler", [huge_bulk, endless_line, huge_array])
async def test_a_reply_over_the_bound_drops_the_connection(
    fake_server: Callable[[Handler], FakeServer], handler: Handler
) -> None:
    """Before, the reply buffer grew without bound (3 GB in seconds), even after every caller
    had given up; the socket timeout never fired while bytes kept coming."""
    server = fake_server(handler)
    # The socket timeout is long: only the size bound can answer.
    connection = _connection(server.url, socket_timeout_s=30, cache={"max_entry_bytes": 1000})
    with trio.fail_after(20):  # a hang guard, not a timing assertion
        with pytest.raises(RedisUnavailable, match="max_entry_bytes") as failed:
            await connection.execute("cache get", ["GET", "k"])
    assert "ConnectionError" in str(failed.value)
    assert connection.is_down
    # The client hung up: the peer stops streaming into this process.
    assert await trio.to_thread.run_sync(server.closed_by_client.wait, 10)
    await connection.aclose()


@pytest.mark.parametrize("handler", [trickle, nested_trickle])
async def test_a_trickling_reply_is_overdue_after_socket_timeout_s(
    fake_server: Callable[[Handler], FakeServer], handler: Handler
) -> None:
    """Before, socket_timeout_s only fired on total silence: a reply that never completes but
    gains a byte every 50 ms held the caller until its own deadline, and Redis never counted
    as down."""
    server = fake_server(handler)
    connection = _connection(server.url, socket_timeout_s=0.3, retry_interval_s=30)
    with trio.fail_after(20):  # a hang guard, not a timing assertion
        with pytest.raises(RedisUnavailable, match="socket_timeout_s") as failed:
            await connection.execute("cache get", ["GET", "k"])
    assert "TimeoutError" in str(failed.value)
    assert connection.is_down
    with pytest.raises(RedisUnavailable, match="not retried"):
        await connection.execute("cache get", ["GET", "k"])
    await connection.aclose()


async def test_a_callers_deadline_expiring_opens_the_circuit(
    fake_server: Callable[[Handler], FakeServer],
) -> None:
    """Before, a caller whose deadline expired waiting for Redis left no trace: with a socket
    timeout longer than the callers' deadlines, every call waited its whole deadline."""
    server = fake_server(silent)
    connection = _connection(server.url, socket_timeout_s=60, retry_interval_s=60)
    with trio.move_on_after(0.3) as waited:
        await connection.execute("cache get", ["GET", "k"])
    assert waited.cancelled_caught
    assert connection.is_down and connection.failures == 1
    # The next caller is answered at once by the breaker instead of waiting its deadline too.
    with trio.fail_after(20), pytest.raises(RedisUnavailable, match="caller's deadline"):
        await connection.execute("cache get", ["GET", "k"])
    await connection.aclose()


async def test_a_cancelled_caller_is_not_a_failure(
    fake_server: Callable[[Handler], FakeServer],
) -> None:
    server = fake_server(silent)
    connection = _connection(server.url, socket_timeout_s=60, retry_interval_s=60)
    async with trio.open_nursery() as nursery:

        async def give_up() -> None:
            await trio.sleep(0.3)
            nursery.cancel_scope.cancel()  # not a deadline: the caller changed its mind

        nursery.start_soon(give_up)
        await connection.execute("cache get", ["GET", "k"])
    assert not connection.is_down and connection.failures == 0
    await connection.aclose()


async def test_a_reply_that_waited_while_this_process_was_busy_is_not_overdue(
    fake_server: Callable[[Handler], FakeServer],
) -> None:
    def late_pong(conn: socket.socket, stop: threading.Event) -> None:
        time.sleep(0.1)
        conn.sendall(b"+PONG\r\n")

    server = fake_server(late_pong)
    connection = _connection(server.url, socket_timeout_s=0.2)
    replies: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def call() -> None:
            replies.extend(await connection.execute("ping", ["PING"]))

        nursery.start_soon(call)
        while connection._pipe is None or not connection._pipe.pending or (
            connection._pipe.pending[0].sent_at == float("inf")
        ):
            await trio.sleep(0.005)
        # Sent; the event loop now blocks past socket_timeout_s while the reply arrives.
        time.sleep(0.6)
    assert replies == [b"PONG"]
    assert connection.failures == 0
    await connection.aclose()


def _lookup(arguments: Any, context: Any) -> str:
    return "fresh"


LOOKUP = ToolDefinition(
    name="lookup", description="Cached echo.", category="api",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    execution=ExecutionConfig(cacheable=True, cache_ttl_s=60, timeout_s=5), execute=_lookup,
)


async def test_a_deck_on_a_trickling_redis_serves_locally_and_says_redis_is_down(
    fake_server: Callable[[Handler], FakeServer], tmp_path: Path
) -> None:
    """The audit's scenario: before, each call waited its deadline twice (probe and put) with
    ``redis_down`` False throughout."""
    server = fake_server(nested_trickle)
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache", "redis"],
        tools=[LOOKUP],
        config={"redis": {"url": server.url, "namespace": "hostile", "socket_timeout_s": 0.3,
                          "retry_interval_s": 30}},
    )
    async with deck:
        session = deck.session(workdir=tmp_path)
        first = await session.call("lookup", {"text": "a"})
        assert first.success and first.data == "fresh"
        assert deck.cache.statistics().redis_down
        # Redis counts as down: the next call is served by the local fallback, a hit.
        again = await session.call("lookup", {"text": "a"})
        assert again.success and again.metadata["cached"] is True
        stats = deck.cache.statistics()
        assert stats.local_hits == 1 and stats.errors >= 1
