"""Fixtures shared by the core's tests."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


def _install_plugin(root: Path, module: str, source: str) -> None:
    """A distribution ``module`` (one module, one ``tooldeck`` entry point of the same name) in
    ``root``: a ``.dist-info`` folder that ``importlib.metadata`` finds on ``PYTHONPATH`` as it
    finds pip's."""
    (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = root / f"{module}-0.1.dist-info"  # the folder name must not split at "-"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n",
        encoding="utf-8",
    )
    (info / "entry_points.txt").write_text(f"[tooldeck]\n{module} = {module}\n", encoding="utf-8")


@pytest.fixture
def install_plugin() -> Callable[[Path, str, str], None]:
    """``install_plugin(root, module, source)``: a one-module plugin distribution in ``root``."""
    return _install_plugin
