"""What code_execute says when one of the call's limits stopped it: through the real deck with
bubblewrap.

- A result larger than the deployment's ``execution.max_output_bytes`` came back as
  ``OUTPUT_TRUNCATED`` with empty details, no word that the program had run.
- A snippet killed for writing a file over the runner's ``file_size_mb`` was told only "larger
  than allowed": the limit is the sandbox's RLIMIT_FSIZE, which the tool can read.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from tooldeck_tools_code import CODE_EXECUTE, plugin

from tooldeck_hookspecs import ToolCall, ToolDefinition, ToolResult

tooldeck_testing = pytest.importorskip("tooldeck.testing")

bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


def _deck(**config: Any) -> Any:
    runner = {"sandbox": "bubblewrap", **config.pop("runner", {})}
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "code"],
        config={"runner": runner, **config},
    )


@bwrap
async def test_a_result_over_max_output_bytes_says_the_program_ran(workdir) -> None:
    async with _deck(tools={"code_execute": {"execution": {"max_output_bytes": 5000}}}) as deck:
        session = deck.session(workdir=workdir, grants={"code"})
        big = await session.call("code_execute", {"code": "print('x' * 100_000)"})
        small = await session.call("code_execute", {"code": "print(6 * 7)"})
    assert not big.success and big.error.code == "OUTPUT_TRUNCATED", big
    assert "probably run" in big.error.message
    assert "5000 bytes" in big.error.suggestion
    assert big.error.details["program_may_have_run"] is True
    assert big.error.details["max_output_bytes"] == 5000
    assert small.success and small.data["stdout"] == "42\n"


def test_other_tools_and_other_results_are_left_alone() -> None:
    other = ToolDefinition(name="other", description="d", category="c",
                           entrypoint="elsewhere:other")
    truncated = ToolResult.fail("OUTPUT_TRUNCATED", "too big")
    assert plugin.tooldeck_process_result(ToolCall(name="other"), other, truncated) is None
    ok = ToolResult.ok({"exit_code": 0})
    assert plugin.tooldeck_process_result(ToolCall(name="code_execute"), CODE_EXECUTE, ok) is None
    once = plugin.tooldeck_process_result(ToolCall(name="code_execute"), CODE_EXECUTE, truncated)
    assert once is not None and once.error.details["program_may_have_run"] is True
    assert plugin.tooldeck_process_result(ToolCall(name="code_execute"), CODE_EXECUTE,
                                          once) is None


@bwrap
async def test_a_file_over_the_size_limit_is_named_with_the_limit(workdir) -> None:
    code = (
        "import signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: die of it\n"
        "with open('big.bin', 'wb') as fh:\n"
        "    for _ in range(10): fh.write(bytes(1 << 20)); fh.flush()\n"
    )
    async with _deck(runner={"file_size_mb": 4}) as deck:
        session = deck.session(workdir=workdir, grants={"code"})
        result = await session.call("code_execute", {"code": code})
    assert result.success, result.error
    assert result.data["signal"] == "SIGXFSZ", result.data
    assert f"larger than {4 * 1024 * 1024} bytes" in result.data["note"], result.data["note"]
