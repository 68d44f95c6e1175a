"""Repository-wide test hooks: tests marked ``exclusive`` run alone under pytest-xdist.

`nox -s tests` runs the suite on two xdist workers (noxfile.py). A few tests only mean something
when the machine's cores are free, e.g. two busy threads that must spend CPU time faster than the
clock inside a call's timeout: with the other worker busy beside them they fail for want of CPU,
not for a defect. Such a test is marked ``@pytest.mark.exclusive``; while it runs (setup, call
and teardown), no other worker runs a test, and it waits for the test the other worker is in.

A readers-writer lock on a file shared by the workers: every test holds it shared, an exclusive
test holds it alone. A turnstile lock in front keeps the exclusive test from waiting forever
while the other worker takes the shared lock again test after test. Without xdist (a plain
`pytest`, or `-n 0`) nothing is locked. Only the standard library: the isolated nox sessions load
this file too.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest


def _lock_dir(config: pytest.Config) -> Path | None:
    """The folder the workers of this run share, or None when xdist is not running workers."""
    # An xdist worker has ``workerinput``; not the environment variable, which a pytest that a
    # test starts in a subprocess inherits.
    if not hasattr(config, "workerinput"):
        return None
    # Each worker's basetemp is <run's basetemp>/popen-gwN: the parent is the same for every
    # worker of one run and differs between runs.
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return None
    return Path(factory.getbasetemp()).parent


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    folder = _lock_dir(item.config)
    if folder is None:
        return (yield)
    exclusive = item.get_closest_marker("exclusive") is not None
    with (
        open(folder / "tooldeck-tests.turnstile", "a") as turnstile,
        open(folder / "tooldeck-tests.lock", "a") as lock,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
