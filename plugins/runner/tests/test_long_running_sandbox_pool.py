"""The sandbox pool of a long-lived deck keeps bounded state whatever workdirs sessions had.

Every mount set (workdir, writable, network, protected rules) a sandboxed call ever used left
entries behind: its preload hint and its count of workers being started. A deck serving
thousands of sessions, each with a workdir of its own, grew one of each per session.
No process is started here: the spawns are stand-ins, what is measured is the bookkeeping.
"""

from __future__ import annotations

import types
from typing import Any

from tooldeck_runner import _sandbox
from tooldeck_runner._config import RunnerSettings
from tooldeck_runner._sandbox import PoolKey, SandboxPool


def _pool(**settings: Any) -> SandboxPool:
    return SandboxPool(
        RunnerSettings(sandbox="process", allow_degraded=True, cgroups=False, zygote=False,
                       **settings)
    )


async def test_warming_many_workdirs_leaves_no_spawn_counters(tmp_path, monkeypatch):
    pool = _pool(warm_workers=1, max_warm_keys=4)
    killed: list[Any] = []

    async def spawn(self: SandboxPool, key: PoolKey, preload: tuple[str, ...] = (),
                    **_: Any) -> Any:
        return types.SimpleNamespace(key=key, warm=False)

    async def kill(self: SandboxPool, worker: Any) -> None:
        killed.append(worker)

    # Class attributes: the pool is a slotted attrs class.
    monkeypatch.setattr(SandboxPool, "_spawn", spawn)
    monkeypatch.setattr(SandboxPool, "_kill", kill)
    for n in range(300):
        workdir = tmp_path / f"session-{n}"
        workdir.mkdir()
        await pool.prewarm(str(workdir))
    assert pool._spawning == {}
    assert len(pool._idle) == 4  # max_warm_keys: the other sets' workers were killed
    assert len(killed) == 296


async def test_failed_spawns_leave_no_spawn_counters(tmp_path, monkeypatch):
    pool = _pool(warm_workers=2)

    async def spawn(self: SandboxPool, key: PoolKey, preload: tuple[str, ...] = (),
                    **_: Any) -> Any:
        raise OSError("fork failed")

    monkeypatch.setattr(SandboxPool, "_spawn", spawn)
    for n in range(100):
        await pool.prewarm(str(tmp_path / f"gone-{n}"))
    assert pool._spawning == {}


def test_preload_hints_are_kept_for_recent_mount_sets_only():
    pool = _pool()
    keep = PoolKey("/work/kept", False, False)
    for n in range(3 * _sandbox._PRELOAD_KEYS):
        pool._remember_module(PoolKey(f"/work/session-{n}", False, False), "pack.tools")
        pool._remember_module(keep, f"pack.mod{n % 3}")  # used all along
    assert len(pool._preload) == _sandbox._PRELOAD_KEYS
    assert pool._preload[keep] == ["pack.mod0", "pack.mod1", "pack.mod2"]
