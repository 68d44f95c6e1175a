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
system takes there: ``name.py``, a ``name/`` package and any extension module (``*.so``).
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


def _names_in(root: str) -> set[str]:
    """Top-level module names ``root`` provides. A folder counts when it is a regular package,
    or anywhere in a site folder (namespace packages such as ``google``): a project's
    ``docs/`` on the path is no module anyone imports."""
    site = os.path.basename(root) in ("site-packages", "dist-packages")
    found: set[str] = set()
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                name = _module_name(entry.name)
                if name is None:
                    continue
                if "." not in entry.name:
                    if not entry.is_dir():
                        continue
                    if not site and not os.path.exists(os.path.join(entry.path, "__init__.py")):
                        continue
                found.add(name)
    except OSError:
        return set()
    return found


def _loaded_from_elsewhere(root: str) -> set[str]:
    """Top-level modules already imported, unless they were imported from ``root`` itself."""
    names: set[str] = set()
    prefix = root.rstrip("/") + "/"
    for name, module in list(sys.modules.items()):
        if "." in name or name == "__main__" or not name.isidentifier():
            continue
        where = getattr(module, "__file__", None) or next(
            iter(getattr(module, "__path__", None) or ()), None
        )
        if isinstance(where, str):
            try:
                if os.path.realpath(where).startswith(prefix):
                    continue
            except OSError:
                pass
        names.add(name)
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
    common = (set(sys.stdlib_module_names) | set(sys.builtin_module_names)) - _NEVER_IMPORTED
    by_root = {root: _names_in(root) for root in roots}
    rules: list[str] = []
    for root, rel in inside:
        names = set(common)
        for other, found in by_root.items():
            if other != root:
                names |= found
        # The folder's own modules are not in it unless they shadow one of those already:
        # changing them is changing the project's code, not shadowing anything.
        names |= _loaded_from_elsewhere(root)
        names -= _NEVER_IMPORTED
        prefix = f"/{rel}/" if rel else "/"
        for name in sorted(names):
            rules.append(f"{prefix}{name}.py")
            rules.append(f"{prefix}{name}/")
        rules.append(f"{prefix}*.so")  # extension modules: name.cpython-311-x86_64-linux-gnu.so
    out = tuple(dict.fromkeys(rules))
    with _LOCK:
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = out
    return out
