"""The README's custom policy, combined with the default policy in a real deck.

The policy is taken from the README itself (so the documentation cannot rot) and loaded next to the
``policy`` entry point. The tools record what they would do; nothing runs a shell.
"""

from __future__ import annotations

import inspect
import re
import types
from pathlib import Path
from typing import Any

import pytest

from tooldeck_hookspecs import (
    ErrorCode,
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
    call_tool_function,
    hookimpl,
)

tooldeck_testing = pytest.importorskip("tooldeck.testing")

README = Path(__file__).resolve().parents[1] / "README.md"


def _custom_policy() -> types.ModuleType:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- custom-policy -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert match, "the README lost its custom policy example"
    code = match.group(1)
    assert len(code.strip().splitlines()) <= 14  # "about ten lines"
    module = types.ModuleType("readme_custom_policy")
    exec(compile(code, str(README), "exec"), module.__dict__)
    return module


class _RecordingExecutor:
    """Runs in-process tools directly; enough for a policy test (the runner has its own tests)."""

    async def run(self, tool: ToolDefinition, call: ToolCall, context: ToolContext) -> ToolResult:
        value = call_tool_function(tool, call.arguments, context)
        if inspect.isawaitable(value):
            value = await value
        return ToolResult.ok(value)

    async def aclose(self) -> None:
        return None


class _ExecutorPlugin:
    __tooldeck_name__ = "test-executor"

    @hookimpl
    def tooldeck_executor(self, settings: Any) -> _RecordingExecutor:
        return _RecordingExecutor()


def _tools(commands: list[str]) -> list[ToolDefinition]:
    def file_write(arguments: Any, context: ToolContext) -> str:
        target = Path(context.workdir) / arguments["path"]
        target.write_text(arguments["content"], encoding="utf-8")
        return str(target)

    def shell_exec(arguments: Any, context: ToolContext) -> str:
        commands.append(arguments["command"])  # recorded, never run
        return "recorded"

    schema_path = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    }
    schema_cmd = {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    }
    return [
        ToolDefinition(
            name="file_write",
            description="Write a text file in the workdir.",
            category="filesystem",
            parameters=schema_path,
            security=SecurityConfig(level="moderate", path_params="path"),
            execution=ExecutionConfig(),
            execute=file_write,
        ),
        ToolDefinition(
            name="shell_exec",
            description="Run one shell command.",
            category="shell",
            parameters=schema_cmd,
            security=SecurityConfig(level="dangerous", command_params="command"),
            execute=shell_exec,
        ),
    ]


async def _approve(request: Any) -> bool:
    return True


async def test_policy_custom_policy_combines_with_defaults(tmp_path: Path) -> None:
    commands: list[str] = []
    deck = tooldeck_testing.make_deck(
        _custom_policy(),
        _ExecutorPlugin(),
        load_entry_points=["schema", "policy"],
        tools=_tools(commands),
    )
    async with deck:
        bob = deck.session(
            workdir=tmp_path,
            grants={"filesystem"},
            attributes={"user": "bob", "admins": ["alice"]},
            confirm=_approve,
        )
        ok = await bob.call("file_write", {"path": "notes.txt", "content": "hi"})
        assert ok.success, ok.error
        assert (tmp_path / "notes.txt").read_text() == "hi"

        # The custom rule refuses .env files ...
        env = await bob.call("file_write", {"path": "config/.env", "content": "X=1"})
        assert env.error is not None and env.error.code == ErrorCode.PATH_NOT_ALLOWED
        assert "secrets" in env.error.message
        assert not (tmp_path / "config").exists()
        # ... the default guard still refuses traversal ...
        out = await bob.call("file_write", {"path": "../escape.txt", "content": "x"})
        assert out.error is not None and out.error.code == ErrorCode.PATH_NOT_ALLOWED
        assert not (tmp_path.parent / "escape.txt").exists()
        # ... and grants still apply.
        nogrant = deck.session(workdir=tmp_path, attributes={"user": "alice", "admins": ["alice"]})
        denied = await nogrant.call("file_write", {"path": "a.txt", "content": "x"})
        assert denied.error is not None and denied.error.code == ErrorCode.PERMISSION_DENIED
        assert "--grant filesystem" in denied.error.message

        # Dangerous tools: bob is refused outright (deny beats the default's ask, and the
        # confirm callback is never consulted) ...
        refused = await bob.call("shell_exec", {"command": "ls"})
        assert refused.error is not None and refused.error.code == ErrorCode.PERMISSION_DENIED
        assert "administrators" in refused.error.message
        # ... alice is asked (here: approved by the callback), and the shell guard still holds.
        alice = deck.session(
            workdir=tmp_path,
            attributes={"user": "alice", "admins": ["alice"]},
            confirm=_approve,
        )
        ran = await alice.call("shell_exec", {"command": "ls -la"})
        assert ran.success, ran.error
        injected = await alice.call("shell_exec", {"command": "ls; id"})
        assert injected.error is not None and injected.error.code == ErrorCode.COMMAND_INJECTION
        # Without a confirm callback the call waits for an approval.
        pending = deck.session(workdir=tmp_path, attributes={"user": "alice", "admins": ["alice"]})
        waiting = await pending.call("shell_exec", {"command": "ls"})
        assert waiting.error is not None
        assert waiting.error.code == ErrorCode.CONFIRMATION_REQUIRED
    assert commands == ["ls -la"]


async def test_policy_filter_hook_in_deck(tmp_path: Path) -> None:
    deck = tooldeck_testing.make_deck(
        _ExecutorPlugin(), load_entry_points=["schema", "policy"], tools=_tools([])
    )
    async with deck:
        session = deck.session(workdir=tmp_path, excluded_categories={"shell"}, confirm=_approve)
        result = await session.call("shell_exec", {"command": "ls"})
        assert result.error is not None and result.error.code == ErrorCode.PERMISSION_DENIED
        assert "category 'shell' excluded by session" in result.error.message
