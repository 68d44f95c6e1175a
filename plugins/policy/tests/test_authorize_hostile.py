"""The authorize hook against a model that picks the worst arguments for an always-allowed tool."""

from __future__ import annotations

from pathlib import Path

import pytest
from tooldeck_policy import plugin

from tooldeck_hookspecs import (
    Decision,
    SecurityConfig,
    SessionInfo,
    ToolCall,
    ToolDefinition,
)


def _shell_tool() -> ToolDefinition:
    return ToolDefinition(
        name="shell_exec",
        description="Run a command.",
        category="shell",
        security=SecurityConfig(level="dangerous", command_params="command"),
    )


def _decide(workdir: Path, command: str) -> Decision | None:
    # Always allowed: the destructive check is all that stands between the model and the home.
    session = SessionInfo(session_id="s1", workdir=str(workdir), always_allow={"shell_exec"})
    call = ToolCall(name="shell_exec", arguments={"command": command})
    return plugin.tooldeck_authorize_call(call=call, tool=_shell_tool(), session=session)


HOME_SUBTREES = [
    "rm -rf ~/.ssh",
    "rm -rf ~/.config",
    "rm -r ~/src/other-project",
    "rm -rf $HOME/.gnupg",
    'rm -rf "$HOME"/.aws',
    "rm -rf ~/.ssh/",
    "rm -fr ~/.local/share",
    "find ~/.config -delete",
    "find ~/.ssh -exec rm {} +",
    "rsync -a --delete empty/ ~/.ssh",
]


@pytest.mark.parametrize("command", HOME_SUBTREES)
def test_deleting_a_tree_in_the_home_asks_even_for_an_always_allowed_tool(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / "ada"
    monkeypatch.setenv("HOME", str(home))
    decision = _decide(tmp_path / "work" / "proj", command)
    assert decision is not None and decision.action == "ask", command
    assert "home" in decision.reason


def test_deleting_a_tree_of_another_users_home_by_absolute_path_asks(tmp_path: Path) -> None:
    decision = _decide(tmp_path / "work", "rm -rf /home/ada/.ssh")
    assert decision is not None and decision.action == "ask"


@pytest.mark.parametrize(
    "command", ["rm -rf build", "rm -rf ~/proj/build", "rm -rf ./node_modules", "ls ~/.ssh"]
)
def test_a_workdir_in_the_home_keeps_its_own_trees_deletable(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / "ada"
    monkeypatch.setenv("HOME", str(home))
    assert _decide(home / "proj", command) is None, command


def test_the_workdir_itself_by_its_home_path_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / "ada"
    monkeypatch.setenv("HOME", str(home))
    decision = _decide(home / "proj2", "rm -rf ~/proj2")
    assert decision is not None and decision.action == "ask"
