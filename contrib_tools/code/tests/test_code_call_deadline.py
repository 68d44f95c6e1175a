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
