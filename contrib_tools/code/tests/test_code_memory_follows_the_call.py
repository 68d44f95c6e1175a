"""code_execute's memory limits are the call's, never a number of its own: through the real deck
with bubblewrap and the runner's rlimit mode (``cgroups = false``), where the call's
``execution.memory_mb`` reaches each process as its address space.

The snippet used to get at most 1 GiB of address space whatever the call had (``min(1024,
the call's)``), and its memory error said "the call as a whole has 256 MiB" while the call had
2 GiB: a deployment giving code_execute 1.5 GiB saw a 1200 MB allocation fail.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

CALL_MB = 1536
ALLOC = ("print('start', flush=True)\nb = bytearray({mb} * 1024 * 1024)\n"
         "b[::4096] = b'x' * len(b[::4096])\nprint('allocated', len(b) >> 20)\n")


def _deck(**runner: Any) -> Any:
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "code"],
        config={"runner": {"sandbox": "bubblewrap", "cgroups": False, **runner},
                "tools": {"code_execute": {"execution": {"memory_mb": CALL_MB}}}},
    )


async def test_a_snippet_gets_the_calls_memory_and_is_told_that_limit(workdir) -> None:
    async with _deck() as deck:
        session = deck.session(workdir=workdir, grants={"code"})
        fits = await session.call("code_execute", {"code": ALLOC.format(mb=1200)})
        over = await session.call("code_execute", {"code": ALLOC.format(mb=CALL_MB + 200)})
    assert fits.metadata["limits"]["memory"] == "rlimit", fits.metadata["limits"]
    assert fits.metadata["limits"]["memory_mb"] == CALL_MB
    assert fits.success, fits.error
    assert fits.data["exit_code"] == 0 and fits.data["stdout"] == "start\nallocated 1200\n", (
        fits.data)
    assert not over.success and over.error.code == "SANDBOX_MEMORY_LIMIT", over
    assert f"{CALL_MB} MiB of address space" in over.error.message
    assert "execution.memory_mb" in over.error.message
    assert "256" not in over.error.message
    assert over.error.details["memory_mb"] == CALL_MB and over.error.details["scope"] == "call"
    assert over.error.details["result"]["stdout"] == "start\n"


async def test_without_a_limit_from_the_call_the_backstop_is_named_as_the_programs(
    workdir,
) -> None:
    # With a memory cgroup the sandbox shows no limit: the snippet keeps its 1 GiB backstop, and
    # the error says it is the program's own cap, not the call's memory.
    async with tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "code"],
        config={"runner": {"sandbox": "bubblewrap"},
                "tools": {"code_execute": {"execution": {"memory_mb": 2048}}}},
    ) as deck:
        session = deck.session(workdir=workdir, grants={"code"})
        result = await session.call("code_execute", {"code": ALLOC.format(mb=1500)})
    if result.metadata["limits"]["memory"] != "cgroup":
        pytest.skip("no memory cgroup here")
    assert not result.success and result.error.code == "SANDBOX_MEMORY_LIMIT", result
    assert "1024 MiB of address space" in result.error.message
    assert "own address space cap" in result.error.message
    assert "256 MiB" not in result.error.message
    assert result.error.details["scope"] == "program"


async def test_javascript_gets_a_heap_from_the_calls_memory(workdir) -> None:
    from tooldeck_tools_code import NODE_RESERVED_MB, node_path

    if node_path() is None:
        pytest.skip("node is not installed")
    heap_mb = "console.log(require('v8').getHeapStatistics().heap_size_limit >> 20)"
    async with _deck() as deck:
        session = deck.session(workdir=workdir, grants={"code"})
        result = await session.call("code_execute", {"language": "javascript", "code": heap_mb})
    assert result.success, result.error
    # V8's limit is its --max-old-space-size plus its young generation: at least the old space.
    assert int(result.data["stdout"]) >= CALL_MB - NODE_RESERVED_MB
