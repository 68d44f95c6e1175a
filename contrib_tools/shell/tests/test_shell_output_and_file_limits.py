"""What shell_exec says when one of the call's limits stopped it: through the real deck (schema,
runner with bubblewrap, policy, shell), real processes.

- A result larger than the deployment's ``execution.max_output_bytes`` (``seq 1 100000`` under
  10 000 bytes) came back as ``OUTPUT_TRUNCATED`` with empty details: no exit code, no word that
  the command had run, which invites running a non-idempotent command again.
- A command killed for writing a file over the runner's ``file_size_mb`` was told only "larger
  than the sandbox allows", and one out of CPU time got no number either: both limits are in the
  tool's own process, which the command inherits.
"""

from __future__ import annotations

import resource
import shutil
from typing import Any

import pytest
from tooldeck_tools_process import Capture, Completed
from tooldeck_tools_shell import SHELL_EXEC, plugin, tools

from tooldeck_hookspecs import ToolCall, ToolDefinition, ToolResult

tooldeck_testing = pytest.importorskip("tooldeck.testing")

bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


async def _yes(request: Any) -> bool:
    return True


def _deck(**config: Any) -> Any:
    runner = {"sandbox": "bubblewrap", **config.pop("runner", {})}
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "shell"],
        config={"runner": runner, **config},
    )


@bwrap
async def test_a_result_over_max_output_bytes_says_the_command_may_have_run(workdir) -> None:
    # Below what even the smallest kept output fits in (the tool keeps at least 1 KiB of each
    # stream, test_shell_output_fits_the_call): the result itself is dropped.
    async with _deck(tools={"shell_exec": {"execution": {"max_output_bytes": 1_500}}}) as deck:
        session = deck.session(workdir=workdir, confirm=_yes)
        big = await session.call("shell_exec", {"command": ["seq", "1", "100000"]})
        small = await session.call("shell_exec", {"command": ["seq", "1", "3"]})
    assert not big.success and big.error.code == "OUTPUT_TRUNCATED", big
    assert "probably run" in big.error.message and "may have changed files" in big.error.message
    assert "Do not simply run it again" in big.error.suggestion
    assert "1500 bytes" in big.error.suggestion
    assert big.error.details["command_may_have_run"] is True
    assert big.error.details["max_output_bytes"] == 1_500
    assert small.success and small.data["stdout"] == "1\n2\n3\n"


def test_other_tools_and_other_results_are_left_alone() -> None:
    other = ToolDefinition(name="other", description="d", category="c",
                           entrypoint="elsewhere:other")
    result = ToolResult.fail("OUTPUT_TRUNCATED", "too big")
    assert plugin.tooldeck_process_result(ToolCall(name="other"), other, result) is None
    shell = SHELL_EXEC
    ok = ToolResult.ok({"exit_code": 0})
    assert plugin.tooldeck_process_result(ToolCall(name="shell_exec"), shell, ok) is None
    once = plugin.tooldeck_process_result(ToolCall(name="shell_exec"), shell, result)
    assert once is not None and once.error.details["command_may_have_run"] is True
    # Run twice (a processor chain may see it again): the words are not repeated.
    assert plugin.tooldeck_process_result(ToolCall(name="shell_exec"), shell, once) is None


@bwrap
async def test_a_file_over_the_size_limit_is_named_with_the_limit(workdir) -> None:
    async with _deck(runner={"file_size_mb": 4}) as deck:
        session = deck.session(workdir=workdir, confirm=_yes)
        result = await session.call(
            "shell_exec", {"command": ["dd", "if=/dev/zero", "of=big", "bs=1M", "count=10"]}
        )
    assert result.success, result.error
    assert result.data["signal"] == "SIGXFSZ"
    assert f"larger than {4 * 1024 * 1024} bytes" in result.data["note"], result.data["note"]


def test_the_cpu_limit_is_named_with_its_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    real = resource.getrlimit

    def limits(which: int) -> tuple[int, int]:
        return (61, 62) if which == resource.RLIMIT_CPU else real(which)

    monkeypatch.setattr(resource, "getrlimit", limits)
    completed = Completed(exit_code=128 + 24, signal="SIGXCPU", stdout=Capture(10, 10),
                          stderr=Capture(10, 10), duration_s=1.0)
    notes = tools._notes(completed, tools.describe(completed, "text"), shell=False)
    assert any("61 CPU seconds" in note for note in notes), notes
