"""Fixtures of the shell pack's tests: a workdir. ``loopback_server`` and ``host_secret``
come from ``tooldeck.testing`` (a pytest plugin)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tdsh-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
