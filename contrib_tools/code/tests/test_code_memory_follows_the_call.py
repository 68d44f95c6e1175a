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


async def test_under_a_memory_cgroup_the_snippet_gets_the_calls_memory(workdir) -> None:
    # The cgroup bounds the whole call; the runner says how much through context.limits (the
    # sandbox shows no such limit otherwise), so the snippet's backstop grows past it instead of
    # refusing 1500 MB of a 2048 MiB call at its own 1 GiB.
    async with tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "code"],
        config={"runner": {"sandbox": "bubblewrap"},
                "tools": {"code_execute": {"execution": {"memory_mb": 2048}}}},
    ) as deck:
        session = deck.session(workdir=workdir, grants={"code"})
        fits = await session.call("code_execute", {"code": ALLOC.format(mb=1500)})
        over = await session.call("code_execute", {"code": ALLOC.format(mb=3000)})
    if fits.metadata["limits"]["memory"] != "cgroup":
        pytest.skip("no memory cgroup here")
    assert fits.success, fits.error
    assert fits.data["stdout"] == "start\nallocated 1500\n", fits.data
    assert not over.success and over.error.code == "SANDBOX_MEMORY_LIMIT", over
    assert "256 MiB" not in over.error.message


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
