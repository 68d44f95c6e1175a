"""A bridged MCP server that stops answering is restarted; a slow tool is not taken for one.

Found by freezing the server (SIGSTOP, as a deadlock or a held event loop would): every call
timed out at its deadline (3 s under ``timeout_s = 3``), the connection stayed "connected", and
the server was never restarted, for as long as the process lived. A call that times out now
asks the server for ``tools/list``; when even that gets no answer, the server is stopped and
the next call starts a new one. ``test_bridge_times_out_a_slow_call_and_keeps_the_server``
(test_mcp_bridge.py) keeps a slow tool from restarting a live server.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_mcp import McpServerConfig, remote_server

from tooldeck.testing import make_deck

ENTRY_POINTS = ["schema", "runner", "policy", "mcp"]


def _table(helper: Path, test: str, **options: Any) -> dict[str, Any]:
    return {"command": [sys.executable, str(helper)], "env": {"TOOLDECK_TEST": test},
            "stderr": "discard", **options}


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """Pids a test stopped; killed at the end whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


async def _freeze(session: Any, stopped: list[int]) -> int:
    answer = await session.call("helper__server_pid", {})
    assert answer.success, answer.error
    data = answer.data
    pid = int(data["result"] if isinstance(data, dict) else data)
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    return pid


async def test_a_frozen_server_is_stopped_and_the_next_call_starts_a_new_one(
    helper_server: Path, stopped: list[int]
) -> None:
    table = _table(helper_server, "frozen-s44", timeout_s=2)
    async with make_deck(config={"mcp": {"servers": {"helper": table}}},
                         load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(grants={"mcp_helper"})
        pid = await _freeze(session, stopped)
        with trio.fail_after(60):  # not a timing figure: a hang ends the test here
            frozen = await session.call("helper__echo", {"text": "anyone?"})
            assert frozen.error is not None and frozen.error.code == "TIMEOUT", frozen
            assert "no longer answered at all" in frozen.error.message, frozen.error
            assert frozen.error.details.get("server_restarted") is True
            again = await session.call("helper__echo", {"text": "back"})
        assert again.data == {"result": "back"}, again
        assert not _running(pid)  # stopped for good, not left frozen beside the new one
        stats = remote_server(McpServerConfig.from_table("helper", table)).statistics()
        assert (stats.starts, stats.crashes) == (2, 1)


async def test_a_frozen_server_is_restarted_even_when_the_caller_gave_up_first(
    helper_server: Path, stopped: list[int]
) -> None:
    """The deployment's limit for the tool equals the server's: the executor may end the call
    at the same instant; the check still runs to its end, and the next call gets a new
    server."""
    table = _table(helper_server, "frozen-cut-s44", timeout_s=2)
    config = {"mcp": {"servers": {"helper": table}},
              "tools": {"helper__echo": {"execution": {"timeout_s": 2}}}}
    async with make_deck(config=config, load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(grants={"mcp_helper"})
        await _freeze(session, stopped)
        server = remote_server(McpServerConfig.from_table("helper", table))
        with trio.fail_after(60):
            cut = await session.call("helper__echo", {"text": "anyone?"})
            assert cut.error is not None and cut.error.code == "TIMEOUT", cut
            while server.statistics().crashes == 0:  # the check, finishing after the call
                await trio.sleep(0.1)
            again = await session.call("helper__echo", {"text": "back"})
        assert again.data == {"result": "back"}, again
