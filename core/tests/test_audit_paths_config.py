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


_REWRITE = '[session]\ngrants = ["filesystem", "shell", "code"]\n'


async def _refused(session, path: str) -> bool:  # type: ignore[no-untyped-def]
    result = await session.call(
        "file_write", {"path": path, "content": _REWRITE, "create_dirs": True}
    )
    return result.error is not None and result.error.code == "PATH_NOT_ALLOWED"


async def test_a_named_config_reached_through_a_symbolic_link_is_protected_by_each_name(
    tmp_path: Path,
) -> None:
    """``deck.toml -> conf/base.toml``: the model rewrites the file under its real name."""
    (tmp_path / "conf").mkdir()
    real = tmp_path / "conf" / "base.toml"
    real.write_text('[session]\ngrants = ["filesystem"]\n')
    (tmp_path / "deck.toml").symlink_to("conf/base.toml")
    deck = _deck(tmp_path / "deck.toml")
    async with deck:
        session = deck.session(workdir=str(tmp_path), grants=["filesystem"])
        for path in ("deck.toml", "conf/base.toml", "other/base.toml"):
            assert await _refused(session, path), path
        assert (await session.call("file_write", {"path": "conf/x.toml", "content": "x"})).success
    assert real.read_text() == '[session]\ngrants = ["filesystem"]\n'


@pytest.mark.parametrize("name", ["deck[prod].toml", "deck*.toml", "deck?.toml", "deck].toml"])
async def test_a_named_config_with_glob_characters_is_protected_by_its_own_name(
    tmp_path: Path, name: str
) -> None:
    config = tmp_path / name
    config.write_text('[session]\ngrants = ["filesystem"]\n')
    deck = _deck(config)
    async with deck:
        session = deck.session(workdir=str(tmp_path), grants=["filesystem"])
        assert await _refused(session, name)
        # The name is literal: files its characters would match as a pattern stay writable.
        for other in ("deckp.toml", "deckxx.toml", "deck1.toml"):
            if other != name:
                assert not await _refused(session, other), other
    assert config.read_text() == '[session]\ngrants = ["filesystem"]\n'


@pytest.mark.parametrize(
    "path",
    [
        "home/u/.ssh/authorized_keys",
        "home/u/.config/git/config",
        "home/u/.config/systemd/user/x.service",
        "home/u/.local/state/tooldeck/selection-history.json",
        "home/u/.cache/tooldeck/embeddings/x",
        "home/u/.bashrc.d/evil.sh",
        "xdg/config/nvim/init.lua",
    ],
)
async def test_a_home_folder_below_the_workdirs_top_keeps_its_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A workdir of ``/`` or ``/home`` (a container's layout) holds the user's home deeper."""
    monkeypatch.setenv("HOME", str(tmp_path / "home" / "u"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg" / "config"))
    config = tmp_path / "elsewhere" / "deck.toml"
    config.parent.mkdir()
    config.write_text("")
    async with _deck(config) as deck:
        session = deck.session(workdir=str(tmp_path), grants=["filesystem"])
        assert await _refused(session, path)
        # Ordinary files next to them stay writable.
        assert not await _refused(session, "home/u/notes/todo.txt")
    assert not (tmp_path / path).exists()
