"""shell_exec says the true reason when a limit stops a command: through the real deck (schema,
runner with bubblewrap, policy, shell), real processes and threads.

- ``pids.max`` counts threads: a Python program starting a pool of 300 threads was told it hit
  "its limit of 256 processes", with a suggestion about ``-j2``.
- The call's time limit counts its time in the category's queue: a command that waited 5 s of an
  8 s limit behind another one was told it had been stopped after 2.3 s by a limit "set for
  shell_exec by the deployment", with no word of the wait.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import trio

tooldeck_testing = pytest.importorskip("tooldeck.testing")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

PY = "python3"  # the system interpreter, inside the sandbox's read-only /usr


async def _yes(request: Any) -> bool:
    return True


def _deck(**config: Any) -> Any:
    runner = {"sandbox": "bubblewrap", **config.pop("runner", {})}
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "shell"],
        config={"runner": runner, **config},
    )


async def test_a_thread_pool_over_the_process_limit_is_told_threads_count(workdir) -> None:
    script = (
        "import concurrent.futures as cf, time\n"
        "with cf.ThreadPoolExecutor(300) as pool:\n"
        "    print(sum(pool.map(lambda i: (time.sleep(0.3), i)[1], range(300))))\n"
    )
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_yes)
        result = await session.call("shell_exec", {"command": [PY, "-c", script]})
    if result.metadata["limits"]["max_processes"] is None:
        pytest.skip("no pids cgroup here: threads are not limited")
    assert not result.success and result.error.code == "EXECUTION_ERROR", result
    assert "256 processes and threads" in result.error.message
    assert "thread" in result.error.suggestion
    assert result.error.details["limit"] == "max_processes"
    assert "can't start new thread" in result.error.details["result"]["stderr"]


#: The deployment's limit for shell_exec, and how long the first command holds the only slot.
LIMIT_S = 8.0
FIRST_S = 5.0


async def test_time_spent_queued_is_named_when_it_cut_the_command_short(workdir) -> None:
    results: dict[str, Any] = {}
    async with _deck(
        runner={"concurrency": {"shell": 1}},
        tools={"shell_exec": {"execution": {"timeout_s": LIMIT_S}}},
    ) as deck:
        session = deck.session(workdir=workdir, confirm=_yes)

        async def call(name: str, command: list[str]) -> None:
            results[name] = await session.call("shell_exec", {"command": command})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "first", ["sleep", str(FIRST_S)])
            await trio.sleep(0.3)  # the first has the slot
            nursery.start_soon(
                call, "second", [PY, "-c", "import time; print('go', flush=True); time.sleep(30)"]
            )
    assert results["first"].success, results["first"].error
    second = results["second"]
    assert not second.success and second.error.code == "TIMEOUT", second
    details = second.error.details
    assert details["limited_by"] == "call deadline" and details["partial"]["stdout"] == "go\n"
    # It could not start before the first finished: at most 8 - (5 - 0.3) s were left.
    assert details["seconds_left_at_start"] <= LIMIT_S - FIRST_S + 0.5
    assert "queue" in second.error.message and "left when the command started" in (
        second.error.message
    )
    assert "waited" in second.error.suggestion
