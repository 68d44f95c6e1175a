"""``lazy_exports``: a package's names that import their module on first read (PEP 562)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tooldeck_hookspecs import lazy_exports


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package ``lazypkg`` whose ``Heavy`` lives in ``_heavy`` (which counts its imports)."""
    root = tmp_path / "lazypkg"
    root.mkdir()
    (root / "__init__.py").write_text(textwrap.dedent("""
        from tooldeck_hookspecs import lazy_exports

        LIGHT = "here"
        __getattr__, __dir__ = lazy_exports(__name__, {
            "Heavy": "._heavy",
            "heavy_function": "lazypkg._heavy",
            "Missing": "._heavy",
        })
    """))
    (root / "_heavy.py").write_text(textwrap.dedent("""
        import builtins
        builtins.lazypkg_heavy_imports = getattr(builtins, "lazypkg_heavy_imports", 0) + 1

        class Heavy:
            pass

        def heavy_function():
            return 42
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "lazypkg"
    for name in [m for m in sys.modules if m == "lazypkg" or m.startswith("lazypkg.")]:
        del sys.modules[name]
    import builtins

    if hasattr(builtins, "lazypkg_heavy_imports"):
        del builtins.lazypkg_heavy_imports


def test_a_name_imports_its_module_on_first_read_only(package: str) -> None:
    import builtins

    pkg = importlib.import_module(package)
    assert f"{package}._heavy" not in sys.modules
    assert pkg.LIGHT == "here"
    heavy = pkg.Heavy
    assert heavy is sys.modules[f"{package}._heavy"].Heavy
    # Stored in the package: later reads do not go through __getattr__ again.
    assert vars(pkg)["Heavy"] is heavy
    assert pkg.heavy_function() == 42  # an absolute module name works too
    assert builtins.lazypkg_heavy_imports == 1  # type: ignore[attr-defined]


def test_dir_lists_lazy_names_and_unknown_names_fail(package: str) -> None:
    pkg = importlib.import_module(package)
    listed = dir(pkg)
    assert {"Heavy", "heavy_function", "LIGHT"} <= set(listed)
    assert listed == sorted(listed)
    assert f"{package}._heavy" not in sys.modules  # listing imports nothing
    with pytest.raises(AttributeError, match=r"module 'lazypkg' has no attribute 'nope'"):
        pkg.nope  # noqa: B018
    # A mapped name its module does not define fails as the module's own attribute would.
    with pytest.raises(AttributeError, match="Missing"):
        pkg.Missing  # noqa: B018
    with pytest.raises(ImportError):
        from lazypkg import nope  # type: ignore[attr-defined] # noqa: F401


def test_from_import_of_a_lazy_name(package: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import Heavy", namespace)
    assert namespace["Heavy"] is sys.modules[f"{package}._heavy"].Heavy


def test_the_functions_answer_for_the_module_they_were_made_for() -> None:
    getattr_, dir_ = lazy_exports(__name__, {"TOOLDECK_LAZY_TEST": "._nowhere"})
    assert "TOOLDECK_LAZY_TEST" in dir_()
    assert "test_the_functions_answer_for_the_module_they_were_made_for" in dir_()
    with pytest.raises(AttributeError, match="other"):
        getattr_("other")


@pytest.mark.parametrize(
    ("package", "name", "module"),
    [
        ("tooldeck_faiss", "FaissRetriever", "tooldeck_faiss._retriever"),
        ("tooldeck_redis", "RedisCache", "tooldeck_redis._cache"),
    ],
)
def test_plugin_packages_defer_their_providers(package: str, name: str, module: str) -> None:
    # A new process: another test may have imported the provider module already.
    pytest.importorskip(package)
    script = textwrap.dedent(f"""
        import sys
        import {package} as pkg
        before = {module!r} in sys.modules
        listed = {name!r} in dir(pkg)
        value = getattr(pkg, {name!r})
        print(before, listed, value is sys.modules[{module!r}].{name})
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "True"]
