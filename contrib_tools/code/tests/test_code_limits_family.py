"""code_execute says why a snippet stopped: through the real deck and a real bubblewrap sandbox.

- A snippet that died of its memory limit through a subclass of MemoryError (numpy's
  ``_ArrayMemoryError``: "Unable to allocate ...") came back as a successful call with exit code
  1, not as ``SANDBOX_MEMORY_LIMIT``: only a last traceback line starting with ``MemoryError``
  counted.
- The call's time limit counts its time in the category's queue: a snippet that waited behind
  another was told its limit had been "set for code_execute by the deployment", with no word of
  the wait.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import trio

tooldeck_testing = pytest.importorskip("tooldeck.testing")
pytest.importorskip("numpy")  # imported by the snippet, from the interpreter tooldeck runs on

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


def _deck(**config: Any) -> Any:
    runner = {"sandbox": "bubblewrap", **config.pop("runner", {})}
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "code"],
        config={"runner": runner, **config},
    )


async def test_numpy_running_out_of_memory_is_the_memory_limit(workdir) -> None:
    code = "import numpy as np\nprint('start', flush=True)\na = np.ones((20000, 20000))\n"
    async with _deck() as deck:
        session = deck.session(workdir=workdir, grants={"code"})
        result = await session.call("code_execute", {"code": code})
        # A snippet that catches it and goes on is a normal result, as before.
        caught = await session.call(
            "code_execute",
            {"code": "import numpy as np\ntry:\n    np.ones((20000, 20000))\nexcept MemoryError:"
                     "\n    print('too big')\n"},
        )
        # Another exception whose message names MemoryError is not the memory limit.
        other = await session.call(
            "code_execute", {"code": "raise ValueError('MemoryError is only a word here')"}
        )
    assert not result.success and result.error.code == "SANDBOX_MEMORY_LIMIT", result
    details = result.error.details
    assert details["result"]["stdout"] == "start\n"
    assert "_ArrayMemoryError" in details["result"]["stderr"]
    assert details["result"]["exit_code"] == 1
    assert caught.success and caught.data["stdout"] == "too big\n", caught.error
    assert other.success and other.data["exit_code"] == 1, other.error


#: The deployment's limit for code_execute, and how long the first snippet holds the only slot.
LIMIT_S = 8.0
FIRST_S = 5.0


async def test_time_spent_queued_is_named_when_it_cut_the_snippet_short(workdir) -> None:
    results: dict[str, Any] = {}
    async with _deck(
        runner={"concurrency": {"code": 1}},
        tools={"code_execute": {"execution": {"timeout_s": LIMIT_S}}},
    ) as deck:
        session = deck.session(workdir=workdir, grants={"code"})

        async def call(name: str, code: str) -> None:
            results[name] = await session.call("code_execute", {"code": code})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "first", f"import time; time.sleep({FIRST_S})")
            await trio.sleep(0.3)  # the first has the slot
            nursery.start_soon(call, "second", "import time; print('go'); time.sleep(30)")
    assert results["first"].success, results["first"].error
    second = results["second"]
    assert not second.success and second.error.code == "TIMEOUT", second
    details = second.error.details
    assert details["limited_by"] == "call deadline" and details["partial"]["stdout"] == "go\n"
    # It could not start before the first finished: at most 8 - (5 - 0.3) s were left.
    assert details["seconds_left_at_start"] <= LIMIT_S - FIRST_S + 0.5
    assert "queue" in second.error.message and "left when the program started" in (
        second.error.message
    )
    assert "waited" in second.error.suggestion
