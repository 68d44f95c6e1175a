"""``tooldeck serve mcp`` comes from this distribution (``tooldeck_register_commands``); without
it the core says what to install; ``tooldeck.mcp_server`` still finds the server, deprecated."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tooldeck_mcp.server

#: Runs the CLI as if tooldeck-mcp were not installed: its distribution's entry points are
#: filtered out of what importlib.metadata reports (every other distribution is real).
_WITHOUT_MCP = """
import importlib.metadata as md, sys
real = md.entry_points
def entry_points(**params):
    found = real(**params)
    return md.EntryPoints(ep for ep in found if ep.dist is None or ep.dist.name != "tooldeck-mcp")
md.entry_points = entry_points
from tooldeck.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_HISTORY_FILE": "off", **env}
    environ.pop("TOOLDECK_CONFIG", None)
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=environ, cwd=tmp_path,
        timeout=300,
    )


def test_serve_mcp_is_added_by_the_plugin_with_its_options(tmp_path: Path) -> None:
    helped = _run(tmp_path, "-m", "tooldeck", "serve", "mcp", "--help")
    assert helped.returncode == 0, helped.stderr
    for option in ("--transport {stdio,http}", "--host", "--port", "--workdir", "--grant",
                   "--no-auth"):
        assert option in helped.stdout
    listed = _run(tmp_path, "-m", "tooldeck", "serve", "--help")
    assert "as an MCP server (stdio or streamable HTTP)" in listed.stdout


def test_without_tooldeck_mcp_serve_mcp_says_what_to_install(tmp_path: Path) -> None:
    ran = _run(tmp_path, "-c", _WITHOUT_MCP, "serve", "mcp", "--transport", "http")
    assert ran.returncode == 2
    assert "tooldeck serve mcp needs tooldeck-mcp: pip install tooldeck-mcp" in ran.stderr
    assert 'pip install "tooldeck[mcp]"' in ran.stderr and "Traceback" not in ran.stderr
    helped = _run(tmp_path, "-c", _WITHOUT_MCP, "serve", "--help")
    assert helped.returncode == 0 and "not available: needs tooldeck-mcp" in helped.stdout


def test_disabled_plugin_serve_mcp_says_it_is_disabled(tmp_path: Path) -> None:
    ran = _run(tmp_path, "-m", "tooldeck", "serve", "mcp", TOOLDECK_DISABLE_PLUGINS="mcp")
    assert ran.returncode == 2
    assert "comes from plugin 'mcp' (tooldeck-mcp), and it is disabled" in ran.stderr


def test_the_core_compatibility_module_finds_the_server_through_its_entry_point() -> None:
    import tooldeck.mcp_server as compat

    with pytest.warns(DeprecationWarning, match="tooldeck_mcp.server.current_client"):
        current_client = compat.current_client
    assert current_client is tooldeck_mcp.server.current_client
    assert current_client() is None  # outside a call
    with pytest.warns(DeprecationWarning):
        assert compat.DeckMcpServer is tooldeck_mcp.server.DeckMcpServer
    with pytest.raises(AttributeError):
        compat.not_a_name  # noqa: B018
