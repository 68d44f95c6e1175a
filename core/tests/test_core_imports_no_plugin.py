"""The core stays small: nothing under ``core/src`` imports a plugin (issue 15).

An AST walk of every module of the core: ``import x`` / ``from x import y`` anywhere (module level
or lazily inside a function) and ``importlib.import_module("x")`` / ``__import__("x")`` with a
literal name must not reach a package of the ``plugins/`` or ``contrib_tools/`` distributions.
The packages are found from the repository's own layout (``<dist>/src/<package>/``), so a new
plugin is covered without editing this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "src"


def _plugin_packages() -> set[str]:
    found = set()
    for family in ("plugins", "contrib_tools"):
        for package in (ROOT / family).glob("*/src/*/__init__.py"):
            found.add(package.parent.name)
    return found


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Every absolute module name the tree imports, with its line."""
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else None
            )
            first = node.args[0]
            if (
                called in {"import_module", "__import__"}
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                names.append((node.lineno, first.value))
    return names


def _violations() -> list[str]:
    plugins = _plugin_packages()
    found = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in _imported_names(tree):
            if name.split(".", 1)[0] in plugins:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return found


def test_the_walk_knows_the_plugin_packages_and_sees_lazy_imports():
    # Guards the guard: an empty package list or a walk blind to function bodies and
    # import_module strings would make the real test pass vacuously.
    assert {"tooldeck_faiss", "tooldeck_runner", "tooldeck_tools_fs"} <= _plugin_packages()
    source = (
        "def f():\n    import tooldeck_faiss.bench\n"
        "def g():\n    from tooldeck_redis import x\n"
        "importlib.import_module('tooldeck_runner')\n__import__('tooldeck_mcp._bridge')\n"
    )
    assert {n for _, n in _imported_names(ast.parse(source))} == {
        "tooldeck_faiss.bench",
        "tooldeck_redis",
        "tooldeck_runner",
        "tooldeck_mcp._bridge",
    }


def test_core_imports_no_plugin():
    assert _violations() == []
