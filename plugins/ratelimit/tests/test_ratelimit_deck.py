"""tooldeck-ratelimit inside a real deck: the third call in a window gets RATE_LIMIT_EXCEEDED."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tooldeck_hookspecs import ErrorCode, RateLimit, SecurityConfig, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")


async def test_deck_refuses_calls_over_the_limit_with_retry_after(tmp_path: Path) -> None:
    ran: list[int] = []

    def ping(arguments: Any, context: Any) -> str:
        ran.append(1)
        return "pong"

    tool = ToolDefinition(
        name="ping_service",
        description="Ping the service.",
        category="api",
        security=SecurityConfig(rate_limit=RateLimit(max_calls=2, window_s=60)),
        execute=ping,
    )
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "ratelimit"],
        tools=[tool],
        config={"ratelimit": {"global_factor": 1.5}},  # 3 across sessions
    )
    async with deck:
        one = deck.session(workdir=tmp_path)
        two = deck.session(workdir=tmp_path)
        results = [await one.call("ping_service", {}) for _ in range(3)]
        other = [await two.call("ping_service", {}) for _ in range(2)]
    assert [r.success for r in results] == [True, True, False]
    refused = results[2]
    assert refused.error is not None
    assert refused.error.code == ErrorCode.RATE_LIMIT_EXCEEDED
    assert refused.error.retry_after_s is not None and refused.error.retry_after_s > 0
    # the second session has its own window, but the cross-session one holds 3 in all
    assert [r.success for r in other] == [True, False]
    assert "across sessions" in (other[1].error.message if other[1].error else "")
    assert len(ran) == 3


async def test_a_stalled_remote_storage_does_not_hold_a_call_past_its_timeout() -> None:
    """A Redis that accepts connections and never answers: the call ends at its own timeout,
    not at the client's socket timeout (set to a minute here), and the deck goes on."""
    import socket
    import threading

    import trio

    from tooldeck_hookspecs import ExecutionConfig

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[object] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept())
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    port = server.getsockname()[1]
    schema = {"type": "object", "properties": {}}
    limited = ToolDefinition(
        name="limited", description="a limited tool", category="api", parameters=schema,
        security=SecurityConfig(rate_limit=RateLimit(max_calls=100, window_s=60)),
        execution=ExecutionConfig(timeout_s=1), execute=lambda arguments, context: "ran",
    )
    plain = ToolDefinition(name="plain", description="a plain tool", category="api",
                           parameters=schema, execute=lambda arguments, context: "ran")
    uri = f"redis://127.0.0.1:{port}/0?socket_timeout=60&socket_connect_timeout=60"
    try:
        async with tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "ratelimit"],
                             tools=[limited, plain],
                             config={"ratelimit": {"storage_uri": uri, "fail_open": False}}
                             ) as deck:
            session = deck.session()
            with trio.fail_after(30):  # far below the storage's 60 s: not a timing figure
                result = await session.call("limited", {})
                assert not result.success and result.error is not None
                assert (await session.call("plain", {})).success
    finally:
        server.close()
