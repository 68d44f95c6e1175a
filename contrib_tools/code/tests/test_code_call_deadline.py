"""code_execute under a deployment's lower ``execution.timeout_s``: the tool stops the snippet
before the runner gives up on the call, and reports TIMEOUT with what it printed."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

LOWERED_S = 2.5


def _deck(zygote: bool) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "code"],
        config={
            "runner": {"sandbox": "bubblewrap", "zygote": zygote},
            "tools": {"code_execute": {"execution": {"timeout_s": LOWERED_S}}},
        },
    )


@pytest.mark.parametrize("zygote", [True, False], ids=["zygote", "single-use"])
async def test_a_lowered_tool_timeout_keeps_the_partial_output(workdir, zygote: bool) -> None:
    code = "import time\nprint('start', flush=True)\ntime.sleep(30)\nprint('never')\n"
    async with _deck(zygote) as deck:
        session = deck.session(workdir=workdir, grants={"code"})
        result = await session.call("code_execute", {"code": code})
    assert not result.success and result.error.code == "TIMEOUT", result.error
    details = result.error.details
    assert details["limited_by"] == "call deadline", result.error
    assert details["partial"]["stdout"] == "start\n"
    assert 0 < details["effective_timeout_s"] < LOWERED_S
    assert "time limit" in result.error.message
    assert details["timeout_s"] == LOWERED_S and details["deployment_timeout"] is True


#: Past code_execute's own default of 30 s, within the deployment's raised limit.
RAISED_S = 45.0


@pytest.mark.slow
async def test_a_raised_tool_timeout_lets_a_snippet_run_past_the_packs_default(workdir) -> None:
    """The family of "sandboxed calls die at 10 s": a deployment that gives code_execute more
    time than the pack's default gets it for snippets that do not ask for a timeout_s."""
    from tooldeck_tools_code.tools import DEFAULT_TIMEOUT_S

    work_s = DEFAULT_TIMEOUT_S + 3
    code = f"import time\ntime.sleep({work_s})\nprint('done')\n"
    async with tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "code"],
        config={
            "runner": {"sandbox": "bubblewrap"},
            "tools": {"code_execute": {"execution": {"timeout_s": RAISED_S}}},
        },
    ) as deck:
        session = deck.session(workdir=workdir, grants={"code"})
        result = await session.call("code_execute", {"code": code})
    assert result.success, result.error
    assert result.data["stdout"] == "done\n"
