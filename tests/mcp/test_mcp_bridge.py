"""The MCP client bridge (tooldeck-mcp) against a real MCP server written with the official SDK.

Each test gives its server a distinct environment, so each gets its own connection (the bridge
shares one connection per configuration for the whole process).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_mcp import McpBridge, McpServerConfig, remote_server

from tooldeck.testing import make_deck
from tooldeck_hookspecs import RegistrationError, SecurityLevel, ToolFailure

ENTRY_POINTS = ["schema", "runner", "policy", "mcp"]


def _servers(helper: Path, test: str, **options: Any) -> dict[str, Any]:
    table = {
        "command": [sys.executable, str(helper)],
        "env": {"TOOLDECK_TEST": test},
        "stderr": "discard",
        **options,
    }
    return {"mcp": {"servers": {"helper": table}}}


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    except (FileNotFoundError, ProcessLookupError):
        # Gone before we looked, or reaped between the open and the read (ESRCH).
        return False


async def test_bridge_registers_remote_tools_with_mapped_levels(helper_server: Path) -> None:
    config = _servers(helper_server, "levels")
    config["mcp"]["servers"]["trusted"] = {**config["mcp"]["servers"]["helper"],
                                           "trust_annotations": True, "category": "helper_ro"}
    deck = make_deck(config=config, load_entry_points=ENTRY_POINTS)
    async with deck:
        tools = {t.name: t for t in deck.catalog}
        assert {
            "helper__echo", "helper__add", "helper__wipe_records", "helper__server_pid",
            "helper__explode",
        } <= set(tools)
        level = {name: tool.security.level for name, tool in tools.items()}
        # A read-only hint is not believed by default: the tool stays moderate.
        assert level["helper__echo"] is SecurityLevel.MODERATE
        assert level["helper__add"] is SecurityLevel.MODERATE
        assert level["helper__wipe_records"] is SecurityLevel.DANGEROUS
        assert level["trusted__echo"] is SecurityLevel.SAFE
        assert level["trusted__wipe_records"] is SecurityLevel.DANGEROUS
        assert tools["helper__echo"].category == "mcp_helper"
        assert tools["trusted__echo"].category == "helper_ro"
        assert tools["helper__add"].parameters["required"] == ["a", "b"]
        assert tools["helper__echo"].description == "Return the text unchanged."


async def test_bridge_forwards_calls_through_the_pipeline(helper_server: Path) -> None:
    deck = make_deck(config=_servers(helper_server, "calls"), load_entry_points=ENTRY_POINTS)
    async with deck:
        session = deck.session(grants={"mcp_helper"})
        echo = await session.call("helper__echo", {"text": "hi"})
        assert echo.success and echo.data == {"result": "hi"}
        added = await session.call("helper__add", {"a": 2, "b": 3})
        assert added.data == {"sum": 5}

        failed = await session.call("helper__explode", {"reason": "boom"})
        assert failed.error is not None and failed.error.code == "EXECUTION_ERROR"
        assert "exploded: boom" in failed.error.message
        assert failed.error.details["server"] == "helper"

        # Validated by the deck against the remote schema: never forwarded.
        invalid = await session.call("helper__add", {"a": "two"})
        assert invalid.error is not None and invalid.error.code == "INVALID_ARGUMENTS"
        assert {p["path"] for p in invalid.error.details["errors"]} == {"$.a", "$.b"}

        dangerous = await session.call("helper__wipe_records", {"table": "users"})
        assert dangerous.error is not None and dangerous.error.code == "CONFIRMATION_REQUIRED"

        ungranted = deck.session()
        refused = await ungranted.call("helper__echo", {"text": "hi"})
        assert refused.error is not None and refused.error.code == "PERMISSION_DENIED"


async def test_bridge_restarts_a_killed_server(helper_server: Path) -> None:
    deck = make_deck(config=_servers(helper_server, "restart"), load_entry_points=ENTRY_POINTS)
    async with deck:
        session = deck.session(grants={"mcp_helper"})
        first = await session.call("helper__server_pid", {})
        pid = first.data["result"]
        os.kill(pid, signal.SIGKILL)
        with trio.fail_after(10):
            while _running(pid):  # wait for the kill to land, however long that takes
                await trio.sleep(0.02)

        lost = await session.call("helper__echo", {"text": "anyone?"})
        assert not lost.success and lost.error is not None
        assert lost.error.code == "EXECUTION_ERROR"
        assert lost.error.retryable
        assert "restarted on the next call" in lost.error.message

        again = await session.call("helper__server_pid", {})
        assert again.success, again.error
        assert again.data["result"] != pid
        echo = await session.call("helper__echo", {"text": "back"})
        assert echo.data == {"result": "back"}
        stats = remote_server(McpServerConfig.from_table(
            "helper", _servers(helper_server, "restart")["mcp"]["servers"]["helper"]
        )).statistics()
        assert (stats.starts, stats.crashes, stats.consecutive_failures) == (2, 1, 0)


async def test_bridge_times_out_a_slow_call_and_keeps_the_server(helper_server: Path) -> None:
    config = _servers(helper_server, "timeout", timeout_s=1)
    deck = make_deck(config=config, load_entry_points=ENTRY_POINTS)
    async with deck:
        session = deck.session(grants={"mcp_helper"})
        slow = await session.call("helper__nap", {"seconds": 60})
        assert slow.error is not None and slow.error.code == "TIMEOUT"
        assert slow.error.retryable and "'helper'" in slow.error.message
        # A timeout is not a crash: the same server answers the next call.
        fine = await session.call("helper__echo", {"text": "still here"})
        assert fine.data == {"result": "still here"}
        stats = remote_server(
            McpServerConfig.from_table("helper", config["mcp"]["servers"]["helper"])
        ).statistics()
        assert (stats.starts, stats.crashes) == (1, 0)


async def test_bridge_server_that_cannot_start(tmp_path: Path) -> None:
    broken = {"command": [sys.executable, "-c", "import sys; sys.exit(3)"], "stderr": "discard",
              "env": {"TOOLDECK_TEST": "broken"}, "startup_timeout_s": 20}
    # Optional (the default): the deck loads without its tools.
    deck = make_deck(config={"mcp": {"servers": {"gone": broken}}},
                     load_entry_points=ENTRY_POINTS)
    assert not [t for t in deck.catalog if t.name.startswith("gone__")]
    # Required: a start-up error naming the server.
    with pytest.raises(RegistrationError, match="'gone2'"):
        make_deck(
            config={"mcp": {"servers": {"gone2": {**broken, "required": True}}}},
            load_entry_points=ENTRY_POINTS,
        )


async def test_bridge_backs_off_after_repeated_failures() -> None:
    config = McpServerConfig(
        name="flaky",
        command=(sys.executable, "-c", "import sys; sys.exit(3)"),
        env=(("TOOLDECK_TEST", "backoff"),),
        stderr="discard",
        backoff_initial_s=60.0,
    )
    remote = remote_server(config)
    messages = []
    for _ in range(3):
        with pytest.raises(ToolFailure) as caught:
            await remote.call("anything", {})
        assert caught.value.retryable
        messages.append(caught.value.message)
    # Two immediate attempts, then the third waits out the backoff instead of relaunching.
    assert messages[0].startswith("could not start MCP server 'flaky'")
    assert messages[1].startswith("could not start MCP server 'flaky'")
    assert "next restart is in" in messages[2]
    assert remote.statistics().starts == 0


async def test_bridge_as_an_inline_plugin(helper_server: Path) -> None:
    table = _servers(helper_server, "inline")["mcp"]["servers"]["helper"]
    bridge = McpBridge([McpServerConfig.from_table("inline", {**table, "include": ["add"]})])
    deck = make_deck(bridge, load_entry_points=["schema", "runner", "policy"])
    async with deck:
        assert [t.name for t in deck.catalog] == ["inline__add"]
        result = await deck.session(grants={"mcp_inline"}).call("inline__add", {"a": 1, "b": 1})
        assert result.data == {"sum": 2}


async def test_bridge_forwards_remote_progress_and_images(helper_server: Path) -> None:
    import base64

    deck = make_deck(config=_servers(helper_server, "progress"), load_entry_points=ENTRY_POINTS)
    seen: list[dict[str, Any]] = []
    async with deck:
        session = deck.session(grants={"mcp_helper"})
        done = await session.call("helper__slow_steps", {"steps": 3},
                                  on_progress=lambda event: seen.append(dict(event)))
        await trio.sleep(0.05)  # events cross from the bridge's loop thread soon after
        picture = await session.call("helper__tiny_picture", {})
    assert done.success, done.error
    assert [(e["progress"], e.get("total"), e.get("message")) for e in seen] == [
        (1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")
    ]
    assert picture.success, picture.error
    image = picture.data if isinstance(picture.data, dict) else picture.data[0]
    assert image["$content"] == "image" and image["mimeType"] == "image/png"
    assert base64.b64decode(image["data"]).startswith(b"\x89PNG")
