"""Files a model plants where the bridge starts an MCP server on the host.

A stdio server is a host process, outside every sandbox, and its launcher reads the folder it
starts in (and its parents): ``python -m pkg`` imports ``pkg.py`` from there, ``npx -y pkg``
runs ``node_modules/.bin/pkg`` from there, ``uv run`` reads ``uv.toml`` and ``.python-version``.
The bridge used to start servers without a ``cwd`` in the deck's own current folder, which is
the default workdir of every session: a model with the ``filesystem`` grant chose the program
the deck ran on the host. Servers without ``cwd`` now start in :data:`NEUTRAL_CWD`; an explicit
``cwd`` is honoured (with a warning when sessions may write it). Real servers, real launchers.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tooldeck_mcp import NEUTRAL_CWD, McpServerConfig

from tooldeck.testing import make_deck

# A raw MCP server (no SDK: quick to start) that records the folder it started in.
_SERVER = r'''
import json, os, sys
with open(sys.argv[1], "w") as f:
    f.write(os.getcwd())
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("id") is None:
        continue
    if msg["method"] == "initialize":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "s39", "version": "1"}}})
    elif msg["method"] == "tools/list":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": [
            {"name": "ping", "description": "answers pong",
             "inputSchema": {"type": "object", "properties": {}}}]}})
    else:
        send({"jsonrpc": "2.0", "id": msg["id"],
              "result": {"content": [{"type": "text", "text": "pong"}]}})
'''

ENTRY_POINTS = ["schema", "runner", "policy", "fs", "mcp"]


@pytest.fixture(autouse=True)
def _close_bridge_connections() -> Iterator[None]:
    """Stop the MCP servers a test's bridge started (they live per process otherwise)."""
    yield
    client = sys.modules.get("tooldeck_mcp._client")
    if client is not None:
        client.shutdown()


def _canary_code(canary: Path) -> str:
    return f"open({str(canary)!r}, 'w').write('planted code ran on the host\\n')\n"


async def _plant_with_file_write(workdir: Path, path: str, content: str) -> None:
    """What a model with only the ``filesystem`` grant does: a real ``file_write`` call."""
    async with make_deck(load_entry_points=["schema", "runner", "policy", "fs"]) as deck:
        session = deck.session(workdir=workdir, grants={"filesystem"})
        done = await session.call("file_write", {"path": path, "content": content})
    assert done.success, done.error  # a name this deck never imports: not a shadowing rule


def _server_table(lib: Path, report: Path, **extra: Any) -> dict[str, Any]:
    (lib / "s39_mcp_server.py").write_text(_SERVER)
    return {
        # `python -m` puts its current folder first on sys.path, before PYTHONPATH.
        "command": [sys.executable, "-m", "s39_mcp_server", str(report)],
        "env": {"PYTHONPATH": str(lib), "TOOLDECK_TEST": str(report)},
        "stderr": "discard",
        **extra,
    }


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The deck runs in its project folder, the sessions' default workdir."""
    work = tmp_path / "project"
    work.mkdir()
    (tmp_path / "lib").mkdir()
    monkeypatch.chdir(work)
    return work


async def test_a_module_planted_for_python_dash_m_does_not_run(project: Path) -> None:
    canary = project.parent / "canary"
    report = project.parent / "started-in"
    await _plant_with_file_write(project, "s39_mcp_server.py", _canary_code(canary))
    table = _server_table(project.parent / "lib", report)
    async with make_deck(config={"mcp": {"servers": {"s39": table}}},
                         load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(grants={"mcp_s39"})
        assert session.workdir == str(project)
        done = await session.call("s39__ping", {})
    assert not canary.exists(), "the planted module ran instead of the server"
    assert done.success and done.data == "pong", done.error
    assert report.read_text() == NEUTRAL_CWD


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
async def test_a_bin_planted_for_npx_does_not_run(project: Path) -> None:
    """``npx -y pkg`` prefers ``node_modules/.bin/pkg`` of the folder it starts in (planted
    here directly: a sandboxed ``shell_exec`` writing the workdir can set the mode)."""
    canary = project.parent / "canary"
    planted = project / "node_modules" / ".bin" / "s39-fake-mcp-server"
    planted.parent.mkdir(parents=True)
    planted.write_text(f"#!/bin/sh\necho planted > {canary}\n")
    planted.chmod(0o755)
    table = {"command": ["npx", "-y", "s39-fake-mcp-server"], "stderr": "discard",
             # offline: the real package is never fetched, so the start fails quickly
             "env": {"npm_config_offline": "true", "npm_config_update_notifier": "false"},
             "startup_timeout_s": 30, "max_restarts": 0}
    async with make_deck(config={"mcp": {"servers": {"npx": table}}},
                         load_entry_points=ENTRY_POINTS) as deck:
        assert not any(t.name.startswith("npx__") for t in deck.catalog)
    assert not canary.exists(), "npx ran the planted node_modules/.bin entry"


async def test_an_explicit_cwd_is_honoured_and_warned_about_inside_the_decks_folder(
    project: Path, caplog: pytest.LogCaptureFixture
) -> None:
    report = project.parent / "started-in"
    sub = project / "server-home"
    sub.mkdir()
    table = _server_table(project.parent / "lib", report, cwd=str(sub))
    with caplog.at_level(logging.WARNING, logger="tooldeck.mcp"):
        async with make_deck(config={"mcp": {"servers": {"s39": table}}},
                             load_entry_points=ENTRY_POINTS) as deck:
            done = await deck.session(grants={"mcp_s39"}).call("s39__ping", {})
    assert done.success, done.error
    assert report.read_text() == str(sub)
    warned = [r.getMessage() for r in caplog.records if "inside the deck's current folder"
              in r.getMessage()]
    assert len(warned) == 1 and "'s39'" in warned[0], warned


async def test_an_explicit_cwd_outside_the_decks_folder_is_not_warned_about(
    project: Path, caplog: pytest.LogCaptureFixture
) -> None:
    report = project.parent / "started-in"
    elsewhere = project.parent / "elsewhere"
    elsewhere.mkdir()
    table = _server_table(project.parent / "lib", report, cwd=str(elsewhere))
    with caplog.at_level(logging.WARNING, logger="tooldeck.mcp"):
        async with make_deck(config={"mcp": {"servers": {"s39": table}}},
                             load_entry_points=ENTRY_POINTS) as deck:
            assert any(t.name == "s39__ping" for t in deck.catalog)
    assert report.read_text() == str(elsewhere)
    assert not [r for r in caplog.records if "current folder" in r.getMessage()]


def test_the_start_folder_of_a_configuration() -> None:
    assert McpServerConfig(name="a", command=("x",)).start_folder == NEUTRAL_CWD
    assert McpServerConfig(name="a", command=("x",), cwd="sub").start_folder == "sub"
    assert os.path.isabs(NEUTRAL_CWD)
    # the documented table key still parses as before
    parsed = McpServerConfig.from_table("a", json.loads('{"command": ["x"], "cwd": "/srv"}'))
    assert parsed.start_folder == "/srv"
