"""A bridged MCP call gets its whole ``timeout_s``, even when it has to restart the server first.

Through the real deck (schema, runner, policy) and a real stdio MCP server (raw JSON-RPC, a
subprocess). The executor used to wait ``timeout_s`` + 2 s for the whole call; the first call
after a crash restarts the server inside that time, so a slow restart ate the call's own
seconds, and the executor's generic TIMEOUT ("did not finish within 6s") came before the
promised ``timeout_s`` had run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tooldeck_mcp import McpBridge, McpServerConfig

from tooldeck.testing import make_deck

pytest.importorskip("mcp")

_SERVER = r'''
import json, os, sys, time
flag = sys.argv[1]
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
if os.path.exists(flag):  # a slow (re)start: the flag file holds its seconds
    time.sleep(float(open(flag).read()))
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("id") is None:
        continue
    method, mid = msg["method"], msg["id"]
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "slow", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
            {"name": "work", "inputSchema": {"type": "object",
                                             "properties": {"seconds": {"type": "number"}}}},
            {"name": "crash", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        if msg["params"]["name"] == "crash":
            os._exit(3)
        time.sleep(msg["params"]["arguments"]["seconds"])
        send({"jsonrpc": "2.0", "id": mid,
              "result": {"content": [{"type": "text", "text": "worked"}]}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
'''

ENTRY_POINTS = ["schema", "runner", "policy"]
#: The server's per-call limit, and what a call of ``work`` and a restart take (each below it,
#: both together above it plus the old 2 s of grace).
CALL_TIMEOUT_S = 4.0
WORK_S = 3.0
RESTART_S = 3.0


async def test_a_call_that_restarts_the_server_still_gets_its_timeout(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(_SERVER)
    flag = tmp_path / "slow-start"
    config = McpServerConfig(
        name="slowstart",
        command=(sys.executable, str(script), str(flag)),
        timeout_s=CALL_TIMEOUT_S,
        startup_timeout_s=10.0,
        stderr="discard",
    )
    async with make_deck(McpBridge([config]), load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"mcp_slowstart"})
        warm = await session.call("slowstart__work", {"seconds": WORK_S})
        assert warm.success and warm.data == "worked", warm.error
        crashed = await session.call("slowstart__crash", {})
        assert not crashed.success and crashed.error.code == "EXECUTION_ERROR"
        flag.write_text(str(RESTART_S))
        # Restarted by this call (3 s), then 3 s of work: within its 4 s once started.
        after = await session.call("slowstart__work", {"seconds": WORK_S})
    assert after.success, after.error
    assert after.data == "worked"


async def test_a_call_past_its_timeout_gets_the_bridges_own_answer(tmp_path: Path) -> None:
    # The longer wait changes no limit: a call past timeout_s is stopped at timeout_s, and the
    # answer names the server and its timeout_s.
    script = tmp_path / "server.py"
    script.write_text(_SERVER)
    config = McpServerConfig(
        name="slowcall",
        command=(sys.executable, str(script), str(tmp_path / "no-flag")),
        timeout_s=1.0,
        startup_timeout_s=10.0,
        stderr="discard",
    )
    async with make_deck(McpBridge([config]), load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"mcp_slowcall"})
        late = await session.call("slowcall__work", {"seconds": 8})
    assert not late.success and late.error.code == "TIMEOUT", late.error
    assert "'slowcall'" in late.error.message and "within 1 s" in late.error.message
    assert late.metadata["duration_s"] < 7
