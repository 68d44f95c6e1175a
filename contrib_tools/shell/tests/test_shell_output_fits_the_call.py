"""shell_exec keeps what fits the call's ``max_output_bytes`` (``context.limits``), so a long
output comes back cut, with its exit code, instead of a refused result.

With ``max_output_bytes = 10000``, ``seq 1 100000`` used to end in ``OUTPUT_TRUNCATED`` with no
exit code and no sign that the command had run (which invites running it again).
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


async def _yes(request: Any) -> bool:
    return True


def _deck(most: int) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "shell"],
        config={"tools": {"shell_exec": {"execution": {"max_output_bytes": most}}}},
    )


@pytest.mark.parametrize("most", [10_000, 40_000])
async def test_a_long_output_is_cut_to_fit_and_keeps_its_exit_code(tmp_path, most: int) -> None:
    async with _deck(most) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"shell"}, confirm=_yes)
        result = await session.call("shell_exec", {"command": ["seq", "1", "100000"]})
    assert result.success, result.error
    assert result.data["exit_code"] == 0
    assert result.data["truncated_stdout"] is True
    assert result.data["stdout"].startswith("1\n2\n3\n")
    assert len(result.data["stdout"]) < most


def test_the_caps_shrink_only_below_the_default() -> None:
    from tooldeck_tools_shell.tools import STDERR_CAP_BYTES, STDOUT_CAP_BYTES, fitted_caps

    default = (STDOUT_CAP_BYTES, STDERR_CAP_BYTES)
    assert fitted_caps(None) == default and fitted_caps({}) == default
    assert fitted_caps({"max_output_bytes": 50_000_000}) == default
    out, err = fitted_caps({"max_output_bytes": 10_000})
    assert 1024 <= err <= out < STDOUT_CAP_BYTES
