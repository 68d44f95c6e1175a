"""Test helpers of the runner: run a test module again under another default of a setting.

Used by ``plugins/runner/tests/test_single_use_suite_*.py``, which re-run the sandbox suites with
``zygote = false`` (single-use workers) while the suites themselves run with the default
(``zygote = true``). A module of the package rather than of the tests folder: pytest imports
test files in ``importlib`` mode here, where a test file cannot import a sibling helper.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._config import RunnerSettings

if TYPE_CHECKING:
    import pytest

__all__ = ["rerun_suite"]


def rerun_suite(
    namespace: MutableMapping[str, Any],
    suite: str | Path,
    *,
    skip: Sequence[str] = (),
    **defaults: Any,
) -> None:
    """Load the test module ``suite`` (a path) and copy its tests and fixtures into
    ``namespace`` (the calling test module's ``globals()``), minus the names in ``skip``, with
    an autouse fixture that changes :class:`RunnerSettings`' defaults (``zygote=False``, say)
    for every test of the module: settings a test passes explicitly still win.
    """
    import pytest  # here: a test helper, and pytest is no dependency of the runner

    path = Path(suite)
    unknown = set(defaults) - set(RunnerSettings.__init__.__kwdefaults__ or {})
    if unknown:
        raise TypeError(f"RunnerSettings has no setting(s) {sorted(unknown)}")
    name = f"_rerun_{'_'.join(f'{k}_{v}' for k, v in sorted(defaults.items()))}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the test suite {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = set(skip) - set(vars(module))
    if missing:  # a renamed test must not silently come back
        raise NameError(f"{path.name} has no {sorted(missing)} to skip")
    namespace.update(
        {k: v for k, v in vars(module).items() if not k.startswith("__") and k not in skip}
    )

    @pytest.fixture(autouse=True)
    def _rerun_defaults(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        kwdefaults = RunnerSettings.__init__.__kwdefaults__  # attrs' generated defaults
        for key, value in defaults.items():
            monkeypatch.setitem(kwdefaults, key, value)
        yield

    namespace["_rerun_defaults"] = _rerun_defaults
