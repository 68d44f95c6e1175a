"""``serve_mcp_cli`` refusals that need no client: bad transport, bad workdir, public address."""

from __future__ import annotations

from pathlib import Path

import pytest
from tooldeck_mcp.server import serve_mcp_cli


@pytest.fixture
def quiet_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLDECK_DISABLE_PLUGINS", "faiss,mcp")
    monkeypatch.delenv("TOOLDECK_CONFIG", raising=False)
    return tmp_path


def test_refuses_a_public_address_without_allow_remote(
    quiet_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve_mcp_cli("http", "0.0.0.0", 0) == 2
    assert "plain HTTP" in capsys.readouterr().err


def test_refuses_bad_transport_and_workdir(
    quiet_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve_mcp_cli("carrier-pigeon", "127.0.0.1", 0) == 2
    assert "unknown transport" in capsys.readouterr().err
    assert serve_mcp_cli("stdio", "127.0.0.1", 0, workdir=str(quiet_config / "nope")) == 2
    assert "not a directory" in capsys.readouterr().err
