"""Modules a tool must not plant where Python imports from.

A folder on ``sys.path`` that a tool can write to is code the host runs: a ``json.py``,
``trio.py`` or ``numpy/__init__.py`` written at its top shadows the real module for every Python
process that puts the folder first on its path. That is the deck itself when it runs as
``python -m tooldeck`` or ``python agent.py`` from its workdir (Python puts the current folder,
or the script's, first), on its next start and at its next lazy import (FAISS, the encoders),
and every script a developer starts there. The protected path rules of
:mod:`tooldeck_hookspecs.protected` are static names; these are not, so a session adds them for
its workdir (:func:`shadow_rules`).

Which folders: every folder this process imports from that lies in the workdir, and always the
workdir's top and this process's current folder when it lies in the workdir, whether or not
this process imports from them: the next start there may be another way in (a session under
the ``tooldeck`` command, then ``python -m tooldeck`` or ``python agent.py`` started in the same
folder, or an MCP server started by the deck with that folder as its current one).

Which names: every module name importable from *somewhere else* (the standard library, the
other folders on ``sys.path``, modules already imported from elsewhere), and every top-level
name this process looked for and did not find (optional dependencies such as ``tornado``, or
``org`` that ``copy`` tries: a file of that name would be found next time), each in the forms
the import system takes: ``name.py``, a package's ``name/__init__.py`` (the whole ``name/``
folder for a namespace package such as ``google``, whose portions join, and for a name nothing
provides, whose first portion would be the module) and any extension module (``*.so``). A plain
folder named like a module (a site's ``html/``) shadows nothing. Changing a module that lives
only in that folder (the project's own code, which the developer runs on purpose like any
script of theirs) is not shadowing and stays allowed; a name that also exists elsewhere is
refused there, since the folder comes first.

Node programs the deck runs on the host resolve their optional dependencies the same way, from
every ``node_modules/`` above them: :func:`node_rules` protects those folders above a virtual
environment kept in the workdir (Playwright's driver). Other programs the deck starts on the
host no longer start in its current folder unless configured to (MCP stdio servers:
``tooldeck_mcp``'s ``NEUTRAL_CWD``), so what their launchers read there (``npx``'s
``node_modules/.bin/``, ``uv.toml``, ``.python-version``) stays the project's own business.

:func:`tooldeck._cwd.drop_cwd_for_dash_m` is the other half: ``python -m tooldeck`` must not
import its own dependencies (``trio``, ``attrs``, ...) from the folder it was started in.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence

from ._cwd import DROPPED as _DROPPED
from ._cwd import MISSED as _MISSED
from ._cwd import drop_cwd_for_dash_m

__all__ = ["drop_cwd_for_dash_m", "import_roots", "missed_modules", "node_rules", "shadow_rules"]

#: Names no library imports: CPython's own test suite and demos, and the folders a broken wheel
#: installs at the top of site-packages (``tests/``, ``docs/``). A project's ``test.py`` or
#: ``tests/__init__.py`` is source its developer runs on purpose, and shadows nothing else.
_NEVER_IMPORTED = frozenset({
    "test", "this", "antigravity", "idlelib", "turtledemo", "__hello__", "__phello__",
    "tests", "testing", "docs", "doc", "examples", "example", "scripts", "benchmarks", "bench",
})

_LOCK = threading.Lock()
_CACHE: dict[tuple[object, ...], tuple[str, ...]] = {}


def missed_modules() -> list[str]:
    """Top-level module names this process looked for and found nowhere, so far."""
    return [n for n in list(_MISSED.names) if n.isidentifier()]


def import_roots() -> list[str]:
    """The real paths of the folders this process imports from (and :data:`_DROPPED`)."""
    roots: list[str] = []
    for entry in (*sys.path, *_DROPPED):
        if not isinstance(entry, str):
            continue
        try:
            path = os.path.realpath(entry or os.getcwd())
        except OSError:
            continue
        if path not in roots and os.path.isdir(path):
            roots.append(path)
    return roots


def _module_name(entry: str) -> str | None:
    name, dot, suffix = entry.partition(".")
    if not name.isidentifier():
        return None
    if not dot or suffix == "py" or suffix == "so" or suffix.endswith(".so"):
        return name  # a package or namespace folder, a module, an extension module
    return None


def _names_in(root: str) -> dict[str, bool]:
    """Top-level module names ``root`` provides, each with whether it is a namespace package.

    A folder counts when it is a regular package, or anywhere in a site folder (namespace
    packages such as ``google``): a project's ``docs/`` on the path is no module anyone imports.
    """
    site = os.path.basename(root) in ("site-packages", "dist-packages")
    found: dict[str, bool] = {}
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                name = _module_name(entry.name)
                if name is None:
                    continue
                namespace = False
                if "." not in entry.name:
                    if not entry.is_dir():
                        continue
                    regular = os.path.exists(os.path.join(entry.path, "__init__.py"))
                    if not regular and not site:
                        continue
                    namespace = not regular
                found[name] = found.get(name, False) or namespace
    except OSError:
        return {}
    return found


def _loaded_from_elsewhere(root: str) -> dict[str, bool]:
    """Top-level modules already imported (each with whether it is a namespace package),
    unless they were imported from ``root`` itself."""
    names: dict[str, bool] = {}
    prefix = root.rstrip("/") + "/"
    for name, module in list(sys.modules.items()):
        if "." in name or name == "__main__" or not name.isidentifier():
            continue
        file = getattr(module, "__file__", None)
        path = getattr(module, "__path__", None)
        where = file or next(iter(path or ()), None)
        if isinstance(where, str):
            try:
                if os.path.realpath(where).startswith(prefix):
                    continue
            except OSError:
                pass
        names[name] = file is None and path is not None
    return names


def _within(path: str, folder: str) -> str | None:
    """``path`` relative to ``folder`` ("" for the folder itself), or None when outside."""
    if path == folder:
        return ""
    prefix = folder.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else None


def node_rules(base: str, roots: Sequence[str]) -> list[str]:
    """Rules (anchored at the workdir ``base``) for the ``node_modules/`` folders above the
    deck's installed packages, where those lie in the workdir (a virtual environment there).

    Node resolves a bare ``require`` from every ``node_modules/`` above the requiring file, up
    to ``/``. A Node program installed in such an import root and run by the deck on the host
    (Playwright's driver, ``site-packages/playwright/driver/``: it looks for ``bufferutil``
    and ``utf-8-validate`` at every start) would load ``node_modules/bufferutil/index.js``
    planted anywhere above it: ``venv/node_modules/``, ``venv/lib/node_modules/``, ... and the
    workdir's top. Every such folder inside the workdir is protected, from the import root's
    parent up to the top (the root's own ``node_modules/`` is under ``site-packages/``
    already). Only import roots of the installed kind (``site-packages``, ``dist-packages``):
    a project's ``src/`` holds no Node program of the deck's. ``node_modules/`` of the
    project's subfolders stays writable (``npm install`` in ``frontend/``).
    """
    rules: list[str] = []
    for root in roots:
        if os.path.basename(root) not in ("site-packages", "dist-packages"):
            continue
        inside = _within(os.path.dirname(root), base)
        if inside is None:
            continue
        parts = inside.split("/") if inside else []
        for depth in range(len(parts), -1, -1):
            rel = "/".join(parts[:depth])
            rules.append(f"/{rel}/node_modules/" if rel else "/node_modules/")
    return rules


def shadow_rules(workdir: str, roots: Sequence[str] | None = None) -> tuple[str, ...]:
    """Protected path rules (anchored at ``workdir``) against shadowing importable modules.

    :param workdir: the session's working folder.
    :param roots: the import folders (:func:`import_roots` when None).
    :returns: rules for the workdir's top, this process's current folder when it lies in the
        workdir, and every import folder in the workdir; then :func:`node_rules`.
    """
    try:
        base = os.path.realpath(workdir)
    except (OSError, TypeError, ValueError):
        return ()
    roots = list(import_roots() if roots is None else roots)
    here: list[str] = [base]
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = base
    if cwd not in here and _within(cwd, base) is not None:
        here.append(cwd)
    here.extend(r for r in roots if r not in here)
    inside = [(root, rel) for root in here if (rel := _within(root, base)) is not None]
    missed = missed_modules()
    key = (base, cwd, tuple(roots), len(sys.modules), len(missed))
    with _LOCK:
        cached = _CACHE.get(key)
    if cached is not None:
        return cached
    common = dict.fromkeys(set(sys.stdlib_module_names) | set(sys.builtin_module_names), False)
    # A name nothing provides: any form planted becomes the module, a plain folder included
    # (the first namespace portion found is the package).
    common.update(dict.fromkeys(missed, True))
    by_root = {root: _names_in(root) for root in roots}
    rules: list[str] = []
    for root, rel in inside:
        names = dict(common)
        for other, found in by_root.items():
            if other != root:
                for name, namespace in found.items():
                    names[name] = names.get(name, False) or namespace
        # The folder's own modules are not in it unless they shadow one of those already:
        # changing them is changing the project's code, not shadowing anything.
        for name, namespace in _loaded_from_elsewhere(root).items():
            names[name] = names.get(name, False) or namespace
        prefix = f"/{rel}/" if rel else "/"
        for name in sorted(set(names) - _NEVER_IMPORTED):
            rules.append(f"{prefix}{name}.py")
            # A folder without __init__.py is a namespace portion: it never hides a regular
            # package or a module found later on the path (a project's html/ or json/ folder
            # shadows nothing), but it joins a namespace package (google/) ahead of the rest.
            rules.append(f"{prefix}{name}/" if names[name] else f"{prefix}{name}/__init__.py")
        # Extension modules, and packages whose __init__ is one (name.cpython-311-*.so).
        rules.extend((f"{prefix}*.so", f"{prefix}*/__init__.so", f"{prefix}*/__init__.*.so"))
    rules.extend(node_rules(base, roots))
    out = tuple(dict.fromkeys(rules))
    with _LOCK:
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = out
    return out
