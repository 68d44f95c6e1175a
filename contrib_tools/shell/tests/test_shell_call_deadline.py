"""A deployment that gives shell_exec a lower ``execution.timeout_s`` than the call's own
``timeout_s``: the tool sees its call's deadline (``ToolContext.seconds_left()``, sent across the
sandbox wire) and stops the command first, so the model gets TIMEOUT with the output so far and
the limit that applied, instead of a generic timeout with nothing."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

PY = "python3"  # the system interpreter, inside the sandbox's read-only /usr
#: The deployment's limit for the tool, far below the call's own timeout_s (60 s by default).
LOWERED_S = 2.5


def _deck(zygote: bool) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "shell"],
        config={
            "runner": {"sandbox": "bubblewrap", "zygote": zygote},
            "tools": {"shell_exec": {"execution": {"timeout_s": LOWERED_S}}},
        },
    )


async def _yes(request: Any) -> bool:
    return True


@pytest.mark.parametrize("zygote", [True, False], ids=["zygote", "single-use"])
async def test_a_lowered_tool_timeout_keeps_the_partial_output(workdir, zygote: bool) -> None:
    script = "import time; print('start', flush=True); time.sleep(30); print('never')"
    async with _deck(zygote) as deck:
        session = deck.session(workdir=workdir, confirm=_yes)
        result = await session.call("shell_exec", {"command": [PY, "-c", script]})
    assert not result.success and result.error.code == "TIMEOUT", result.error
    details = result.error.details
    # The tool's own answer, not the runner's: the output so far and the limit that applied.
    assert details.get("limited_by") == "call deadline", result.error
    assert details["partial"]["stdout"] == "start\n"
    # The model gave no timeout_s: the deployment's limit is the command's (not the pack's 60 s).
    assert details["timeout_s"] == LOWERED_S and details["deployment_timeout"] is True
    assert "set by the deployment" in result.error.message
    assert 0 < details["effective_timeout_s"] < LOWERED_S
    assert "time limit" in result.error.message and "timeout_s" in result.error.suggestion


async def test_the_own_timeout_still_rules_when_it_is_the_smaller(workdir) -> None:
    async with _deck(zygote=True) as deck:
        session = deck.session(workdir=workdir, confirm=_yes)
        result = await session.call(
            "shell_exec",
            {"command": [PY, "-c", "print('a', flush=True); import time; time.sleep(30)"],
             "timeout_s": 0.5},
        )
    assert not result.success and result.error.code == "TIMEOUT", result.error
    assert "limited_by" not in result.error.details
    assert result.error.details["partial"]["stdout"] == "a\n"
    assert "within 0.5 s" in result.error.message


def test_within_call_takes_the_earlier_deadline_minus_a_margin() -> None:
    from tooldeck_tools_process import ANSWER_MARGIN_S, within_call

    assert within_call(60.0, None) == (60.0, False)  # no deadline told: the tool's own
    assert within_call(5.0, 300.0) == (5.0, False)  # the tool's own comes first
    limit, by_call = within_call(60.0, 20.0)
    assert by_call and limit == 20.0 - ANSWER_MARGIN_S
    limit, by_call = within_call(60.0, 2.0)
    assert by_call and limit == 1.5  # the margin is at least 0.5 s
    assert within_call(60.0, -1.0) == (0.05, True)  # already past: stop at once


def test_an_omitted_timeout_follows_the_deployments_limit_for_the_tool() -> None:
    from tooldeck_tools_process import default_timeout

    own = 315.0  # shell_exec's own execution.timeout_s
    assert default_timeout(60.0, own, {}) == (60.0, False)
    assert default_timeout(60.0, own, None) == (60.0, False)
    assert default_timeout(60.0, own, {"timeout_s": own}) == (60.0, False)  # not configured
    assert default_timeout(60.0, own, {"timeout_s": 600}) == (600.0, True)  # raised
    assert default_timeout(60.0, own, {"timeout_s": 2.5}) == (2.5, True)  # lowered
    for junk in (True, float("nan"), float("inf"), -1, 0, "600", [600]):
        assert default_timeout(60.0, own, {"timeout_s": junk}) == (60.0, False), junk
