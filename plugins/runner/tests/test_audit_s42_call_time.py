"""A tool is told the time its call was configured for (``ToolContext.limits["timeout_s"]``),
in process and in the sandbox (zygote and single-use), a deployment's override included: a
tool with a time limit of its own (a pack's default, an MCP server's ``timeout_s``) can tell
that the deployment changed it, where the deadline alone cannot (it also counts the queue)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tooldeck.testing import make_deck
from tooldeck_hookspecs import ExecutionConfig, SecurityConfig, ToolDefinition

TOOLS_DIR = str(Path(__file__).resolve().parent)
CONFIGURED_S = 7.0


def _in_process(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"limits": dict(context.limits), "seconds_left": context.seconds_left()}


def _tool(name: str, sandbox: bool) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description="Says what it is told of its call's time.",
        category="timing",
        security=SecurityConfig(sandbox=sandbox),
        execution=ExecutionConfig(timeout_s=30.0),
        execute=None if sandbox else _in_process,
        entrypoint="runner_sandbox_tools:call_time" if sandbox else None,
    )


@pytest.mark.parametrize(
    ("sandbox", "zygote"),
    [(False, False),
     pytest.param(True, True, marks=pytest.mark.skipif(
         shutil.which("bwrap") is None, reason="bubblewrap not installed")),
     pytest.param(True, False, marks=pytest.mark.skipif(
         shutil.which("bwrap") is None, reason="bubblewrap not installed"))],
    ids=["in-process", "zygote", "single-use"],
)
async def test_the_tool_is_told_its_configured_time(tmp_path: Path, sandbox: bool,
                                                    zygote: bool, monkeypatch: Any) -> None:
    # The schema plugin imports a sandboxed tool's entrypoint on the host too.
    monkeypatch.syspath_prepend(TOOLS_DIR)
    name = "call_time_tool"
    config = {
        "runner": {"sandbox": "bubblewrap" if sandbox else "auto", "zygote": zygote,
                   "python_path": [TOOLS_DIR]},
        "tools": {name: {"execution": {"timeout_s": CONFIGURED_S}}},
    }
    deck = make_deck(config=config, load_entry_points=["schema", "runner", "policy"],
                     tools=[_tool(name, sandbox)])
    async with deck:
        result = await deck.session(workdir=str(tmp_path), grants={"timing"}).call(name, {})
    assert result.success, result.error
    assert result.data["limits"]["timeout_s"] == CONFIGURED_S
    assert 0 < result.data["seconds_left"] <= CONFIGURED_S
