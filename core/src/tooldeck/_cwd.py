"""The first thing ``python -m tooldeck`` does: stop importing from the folder it started in.

No ``from __future__`` line and no import but ``os`` and ``sys`` here, on purpose: both are loaded
before any user code runs, so importing them cannot find a planted ``os.py``; ``__future__`` (and
``threading``, ``collections``...) are not, and the current folder is still first on the path
while this module runs. See :mod:`tooldeck._imports` for the rules that keep such files out.
"""

import os
import sys

__all__ = ["DROPPED", "MISSED", "drop_cwd_for_dash_m"]

#: Folders this process no longer imports from but that Python put first on its path, and will
#: again at the next start (the current folder of ``python -m tooldeck``).
DROPPED: list[str] = []


#: Top-level names looked for and found nowhere, at most this many (a plugin importing names
#: taken from its input must not grow the set, or the rules, without bound).
_MAX_MISSED = 2048


class _MissRecorder:
    """The last finder on ``sys.meta_path``: asked only when every other one found nothing,
    it records the top-level name and finds nothing either. Installed here, before the
    dependencies load: their optional imports (cattrs' ``annotationlib``) are the names a
    planted file would answer at the next start (:func:`tooldeck._imports.shadow_rules`)."""

    def __init__(self) -> None:
        self.names: dict[str, None] = {}

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if path is None and "." not in name and len(self.names) < _MAX_MISSED:
            self.names[name] = None
        return None

    def invalidate_caches(self) -> None:
        """Nothing cached (the import system calls this on every finder)."""


def _recorder() -> _MissRecorder:
    for finder in sys.meta_path:
        if isinstance(finder, _MissRecorder):
            return finder
    recorder = _MissRecorder()
    sys.meta_path.append(recorder)
    return recorder


MISSED = _recorder()


def drop_cwd_for_dash_m() -> None:
    """Under ``python -m``, stop importing from the current folder (as ``python -P`` would).

    Called first thing by ``tooldeck/__init__.py``: while ``python -m`` locates the package,
    ``sys.argv[0]`` is ``"-m"`` and ``sys.path[0]`` the current folder, so nothing of ours or of
    our dependencies has been imported from it yet. The folder is remembered
    (:func:`tooldeck._imports.import_roots`): the next ``python -m`` puts it first again.
    """
    if sys.argv[:1] != ["-m"] or not sys.path:
        return
    first = sys.path[0]
    try:
        here = os.path.realpath(os.getcwd())
        same = os.path.realpath(first or ".") == here
    except OSError:
        return
    if same and not sys.flags.safe_path:
        del sys.path[0]
        DROPPED.append(here)
    # An entry further on may be the current folder too: Python turns an empty or relative
    # PYTHONPATH entry into it (``PYTHONPATH=$PYTHONPATH:/x`` with PYTHONPATH unset gives
    # ":/x"), and that made ``cd docs && python -m tooldeck`` import a planted
    # ``docs/pluggy.py``. Such entries go, as the first one did, unless PYTHONPATH names the
    # folder by its absolute path: that is the user's explicit choice (a plugin developed
    # there), and tooldeck._imports protects what it holds like any import root.
    if _named_outright(here):
        return
    for index in range(len(sys.path) - 1, -1, -1):
        entry = sys.path[index]
        if not isinstance(entry, str):
            continue
        try:
            is_here = os.path.realpath(entry or ".") == here
        except OSError:
            continue
        if is_here:
            del sys.path[index]
            if here not in DROPPED:
                DROPPED.append(here)


def _named_outright(here: str) -> bool:
    """Whether PYTHONPATH names ``here`` by an absolute path (ignored under ``python -E``)."""
    if sys.flags.ignore_environment:
        return False
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        try:
            if os.path.isabs(entry) and os.path.realpath(entry) == here:
                return True
        except (OSError, ValueError):
            continue
    return False
