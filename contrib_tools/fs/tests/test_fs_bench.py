"""Benchmarks of the fs tools: figures are printed, never asserted (machines are noisy)."""

from __future__ import annotations

import time

from tooldeck_tools_fs import file_read, file_write, list_dir


def _per_call_us(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def test_fs_call_costs_are_reported(sandbox, resolve_mode):
    ctx = sandbox.context
    (sandbox.allowed / "src" / "pkg").mkdir(parents=True)
    (sandbox.allowed / "src" / "pkg" / "m.py").write_text("x = 1\n" * 100)
    for i in range(50):
        (sandbox.allowed / f"f{i}.txt").write_text("x")
    read_us = _per_call_us(lambda: file_read({"path": "src/pkg/m.py"}, ctx), 2000)
    list_us = _per_call_us(lambda: list_dir({"path": "."}, ctx), 300)
    write_us = _per_call_us(
        lambda: file_write({"path": "src/out.txt", "content": "y" * 1000}, ctx), 50)
    print(f"\nfs [{resolve_mode}]: file_read {read_us:.0f} us, list_dir(52 entries) "
          f"{list_us:.0f} us, file_write(1 kB, fsync) {write_us:.0f} us")
    assert file_read({"path": "src/out.txt"}, ctx)["content"] == "y" * 1000
