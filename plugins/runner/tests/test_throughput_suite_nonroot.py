"""``test_nonroot`` again, with ``zygote = true`` as the default: the same hostile
tools and limits, every sandboxed call forked inside a zygote instead of a single-use worker.

Left out (``_SKIP``): tests that count a single-use worker's processes or warm workers;
``test_throughput_zygote.py`` checks the same properties for zygotes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
from tooldeck_runner._config import RunnerSettings

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "_zygote_rerun_test_nonroot", _HERE / "test_nonroot.py"
)
assert _spec is not None and _spec.loader is not None
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
_SKIP: tuple[str, ...] = ("test_every_process_of_the_sandbox_is_unprivileged_on_the_host",)
globals().update(
    {k: v for k, v in vars(_suite).items() if not k.startswith("__") and k not in _SKIP}
)


@pytest.fixture(autouse=True)
def _zygote_by_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    defaults = RunnerSettings.__init__.__kwdefaults__  # attrs' generated keyword defaults
    monkeypatch.setitem(defaults, "zygote", True)
    yield
