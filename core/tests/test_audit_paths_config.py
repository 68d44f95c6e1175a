"""Findings of an audit of the file tools' boundary (a model with only the ``filesystem``
grant), each through the real deck: the configuration file the deck was loaded from, plugin
metadata and a home folder's start-up files are protected; a path the kernel would refuse is
refused at once instead of being walked on the event loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from tooldeck import Deck
from tooldeck_hookspecs import protected_rule

STAGES = ["schema", "runner", "policy", "fs"]


def _deck(config: Path) -> Deck:
    return Deck.load(str(config), entry_points=STAGES)


async def test_the_named_config_file_cannot_be_rewritten_by_the_model(tmp_path: Path) -> None:
    """TOOLDECK_CONFIG / --config / Deck.load(path) may name any file: rewritten by a model,
    it would configure the next deck (grants, MCP servers it starts)."""
    config = tmp_path / "agent-config.toml"
    config.write_text('[session]\ngrants = ["filesystem"]\n')
    deck = _deck(config)
    assert "agent-config.toml" in deck.protected_paths
    async with deck:
        session = deck.session(workdir=str(tmp_path), grants=["filesystem"])
        for path in ("agent-config.toml", str(config), "sub/AGENT-CONFIG.TOML"):
            result = await session.call(
                "file_write",
                {"path": path, "content": '[mcp.servers.x]\ncommand = ["sh"]\n',
                 "create_dirs": True},
            )
            assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED", path
        assert (await session.call("file_write", {"path": "notes.toml", "content": "x"})).success
    assert config.read_text() == '[session]\ngrants = ["filesystem"]\n'


@pytest.mark.parametrize(
    "path",
    [
        "evil_pack-1.0.dist-info/entry_points.txt",
        "src/evil.egg-info/entry_points.txt",
        ".config/git/config",
        ".ssh/authorized_keys",
        ".config/systemd/user/x.service",
        ".config/autostart/x.desktop",
        ".config/fish/config.fish",
        ".local/lib/python3.11/site-packages/x.pth.py",
        ".local/state/tooldeck/selection-history.json",
        ".cache/tooldeck/embeddings/v.npy",
    ],
)
def test_plugin_metadata_and_home_start_up_files_are_protected(path: str) -> None:
    assert protected_rule(path) is not None


@pytest.mark.parametrize("path", ["notes/.config/gitx", "src/pkg/dist_info.py", "ssh/x"])
def test_ordinary_files_stay_writable(path: str) -> None:
    assert protected_rule(path) is None


async def test_hostile_paths_are_refused_at_once_and_cleanly(tmp_path: Path) -> None:
    """A 1 MB path of 500k components took 7.8 s of the event loop in the path check (every
    session stalled); a lone surrogate crashed the policy hook (PLUGIN_ERROR + traceback)."""
    config = tmp_path / "tooldeck.toml"
    config.write_text("")
    async with _deck(config) as deck:
        session = deck.session(workdir=str(tmp_path), grants=["filesystem"])
        long = await session.call("file_read", {"path": "a/" * 500_000 + "x"})
        assert long.error is not None and long.error.code == "PATH_NOT_ALLOWED"
        assert "longer than 4096" in long.error.message
        for name, args in (("file_write", {"path": "\ud800", "content": "x"}),
                           ("file_read", {"path": "ok/\ud800x"})):
            result = await session.call(name, args)
            assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED", result
            assert "not valid text" in result.error.message
