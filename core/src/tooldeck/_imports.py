"""Modules a tool must not plant where Python imports from.

A folder on ``sys.path`` that a tool can write to is code the host runs: a ``json.py``,
``trio.py`` or ``numpy/__init__.py`` written at its top shadows the real module for every Python
process that puts the folder first on its path. That is the deck itself when it runs as
``python -m tooldeck`` or ``python agent.py`` from its workdir (Python puts the current folder,
or the script's, first), on its next start and at its next lazy import (FAISS, the encoders),
and every script a developer starts there. The protected path rules of
:mod:`tooldeck_hookspecs.protected` are static names; these are not, so a session adds them for
its workdir (:func:`shadow_rules`): for each folder this process imports from that lies in the
workdir, every module name importable from *somewhere else* (the standard library, the other
folders on ``sys.path``, modules already imported from elsewhere) in each form the import
system takes there: ``name.py``, a package's ``name/__init__.py`` (the whole ``name/`` folder
for a namespace package such as ``google``, whose portions join) and any extension module
(``*.so``). A plain folder named like a module (a site's ``html/``) shadows nothing.
Changing a module that lives only in that folder (the project's own code, which the developer
runs on purpose like any script of theirs) is not shadowing and stays allowed; a name that also
exists elsewhere is refused there, since the folder comes first.

:func:`drop_cwd_for_dash_m` is the other half: ``python -m tooldeck`` must not import its own
dependencies (``trio``, ``attrs``, ...) from the folder it was started in.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence

__all__ = ["drop_cwd_for_dash_m", "import_roots", "shadow_rules"]

#: Folders this process no longer imports from but that Python put first on its path, and will
#: again at the next start (the current folder of ``python -m tooldeck``).
_DROPPED: list[str] = []

#: Standard-library names no library imports: CPython's own test suite and demos. A project's
#: ``test.py`` shadows nothing anyone runs.
_NEVER_IMPORTED = frozenset({
    "test", "this", "antigravity", "idlelib", "turtledemo", "__hello__", "__phello__",
})

_LOCK = threading.Lock()
_CACHE: dict[tuple[object, ...], tuple[str, ...]] = {}


def drop_cwd_for_dash_m() -> None:
    """Under ``python -m``, stop importing from the current folder (as ``python -P`` would).

    Called first thing by ``tooldeck/__init__.py``: while ``python -m`` locates the package,
    ``sys.argv[0]`` is ``"-m"`` and ``sys.path[0]`` the current folder, so nothing of ours or of
    our dependencies has been imported from it yet. The folder is remembered
    (:func:`import_roots`): the next ``python -m`` puts it first again.
    """
    if sys.argv[:1] != ["-m"] or not sys.path or sys.flags.safe_path:
        return
    first = sys.path[0]
    try:
        here = os.path.realpath(os.getcwd())
        same = os.path.realpath(first or ".") == here
    except OSError:
        return
    if same:
        del sys.path[0]
        _DROPPED.append(here)


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


def shadow_rules(workdir: str, roots: Sequence[str] | None = None) -> tuple[str, ...]:
    """Protected path rules (anchored at ``workdir``) against shadowing importable modules.

    :param workdir: the session's working folder.
    :param roots: the import folders (:func:`import_roots` when None).
    :returns: no rules when no import folder lies in ``workdir`` (the usual case: a deck
        started elsewhere, or a sandbox-only workdir).
    """
    try:
        base = os.path.realpath(workdir)
    except (OSError, TypeError, ValueError):
        return ()
    roots = list(import_roots() if roots is None else roots)
    inside = [(root, rel) for root in roots if (rel := _within(root, base)) is not None]
    if not inside:
        return ()
    key = (base, tuple(roots), len(sys.modules))
    with _LOCK:
        cached = _CACHE.get(key)
    if cached is not None:
        return cached
    common = dict.fromkeys(set(sys.stdlib_module_names) | set(sys.builtin_module_names), False)
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
    out = tuple(dict.fromkeys(rules))
    with _LOCK:
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = out
    return out
