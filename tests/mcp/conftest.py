"""Fixtures of the MCP tests: launching ``tooldeck serve mcp`` and talking to it with the SDK.

Test modules are imported with importlib (no package), so the helpers reach them as fixtures.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from tooldeck import Deck, observes
from tooldeck.testing import inline_plugin, make_deck
from tooldeck_hookspecs import Event, nonblocking

HELPER_SERVER = Path(__file__).with_name("mcp_helper_server.py")


def serve_command(*options: str) -> list[str]:
    """``tooldeck serve mcp OPTIONS``, the command users run."""
    script = Path(sys.executable).with_name("tooldeck")
    if script.exists():
        return [str(script), "serve", "mcp", *options]
    return [sys.executable, "-m", "tooldeck", "serve", "mcp", *options]


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a server subprocess: offline, nothing read from the user's config."""
    env = {"HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss"}
    for key in ("VIRTUAL_ENV", "HF_HOME", "XDG_CACHE_HOME", "TMPDIR"):
        if key in os.environ:
            env[key] = os.environ[key]
    env.update(extra)
    return {k: v for k, v in env.items() if v != ""}


@asynccontextmanager
async def stdio_session(
    workdir: Path,
    *,
    env: Mapping[str, str] | None = None,
    config: str | None = None,
    **client_options: Any,
) -> AsyncIterator[ClientSession]:
    """An initialized official client session with ``tooldeck serve mcp`` over stdio.

    :param config: TOML written to ``tooldeck.toml`` in the server's cwd (a sibling of workdir).
    :param client_options: for ``ClientSession`` (e.g. ``elicitation_callback``).
    """
    home = workdir.parent / f"{workdir.name}-server"
    home.mkdir(exist_ok=True)
    environment = dict(env if env is not None else server_env())
    if config is not None:
        (home / "tooldeck.toml").write_text(config)
        environment["TOOLDECK_CONFIG"] = str(home / "tooldeck.toml")
    command = serve_command("--transport", "stdio", "--workdir", str(workdir))
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=environment, cwd=str(home)
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, **client_options) as session,
    ):
        await session.initialize()
        yield session


def payload(result: types.CallToolResult) -> dict[str, Any]:
    """The structured payload of a tooldeck result, checked against its text twin."""
    assert result.structured_content is not None
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    assert json.loads(text.text) == result.structured_content
    return result.structured_content


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A server workdir with one text file and a secret outside it."""
    root = tmp_path / "work"
    root.mkdir()
    (root / "notes.txt").write_text("hello from the workdir\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    return root


@pytest.fixture
def closed_sessions() -> tuple[Deck, list[str | None]]:
    """A deck (schema, runner, policy, fs) and the ids of the deck sessions it closed so far."""
    closed: list[str | None] = []

    @nonblocking  # a list append: on the loop, so the tests see it at once
    @observes("session.closed")
    def tooldeck_event(event: Event) -> None:
        closed.append(event.session_id)

    deck = make_deck(
        inline_plugin(tooldeck_event, name="closed-sessions"),
        load_entry_points=["schema", "runner", "policy", "fs"],
    )
    return deck, closed


@pytest.fixture
def open_stdio() -> Any:
    """:func:`stdio_session`: ``async with open_stdio(workdir, config=...) as session``."""
    return stdio_session


@pytest.fixture
def mcp_payload() -> Any:
    """:func:`payload`: the checked structured payload of a CallToolResult."""
    return payload


@pytest.fixture
def serve_cmd() -> Any:
    """:func:`serve_command`."""
    return serve_command


@pytest.fixture
def make_server_env() -> Any:
    """:func:`server_env`."""
    return server_env


@pytest.fixture
def helper_server() -> Path:
    """The path of the tiny MCP server used by the bridge tests."""
    return HELPER_SERVER


@pytest.fixture(autouse=True)
def _close_bridge_connections() -> Any:
    """Stop the MCP servers a test's bridge started (they live per process otherwise)."""
    yield
    client = sys.modules.get("tooldeck_mcp._client")
    if client is not None:
        client.shutdown()
