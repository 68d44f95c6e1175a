"""Read-only JSON containers: the catalog's copy of each tool's parameter schema, and the
``attributes`` and ``environment`` of the :class:`~tooldeck_hookspecs.SessionInfo` snapshots
policy and filter hooks read (see :meth:`tooldeck.Session.info`).

Every hook that receives a :class:`~tooldeck_hookspecs.ToolDefinition` (validators, filters,
policy, result processors, retrievers, executors, observers of the catalog) gets the catalog's
own object: ``ToolDefinition`` is a frozen attrs class, but its ``parameters`` were a plain
``dict``, so one plugin's ``tool.parameters["required"].append(...)`` changed the schema every
later session exported and every later hook read. The catalog's schema is therefore built from
these two classes: ``dict`` and ``list`` subclasses (so ``isinstance`` checks, ``json``,
``orjson`` and schema compilers read them as before) whose every in-place change raises
:class:`TypeError` naming what to do instead. A copy (``copy.deepcopy``, ``pickle``) is plain,
mutable JSON again; so are ``dict(schema)`` / ``schema.copy()`` one level deep.

A plugin that really wants to bypass this (``dict.__setitem__(schema, ...)``) can: plugins run
in the host's process. This guards against the accident and the casual edit, and makes the
failure name the plugin instead of corrupting other sessions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = ["ReadOnlyDict", "ReadOnlyList", "freeze_schema"]

#: Deeper than any schema the register stage admits (it refuses them by depth): below this a
#: hostile schema's levels are shared rather than copied, so freezing never recurses out.
_FREEZE_DEPTH = 200

_MESSAGE = (
    "read-only: shared by the deck (a registered tool's parameters, a session snapshot's "
    "attributes or environment); edit a copy (copy.deepcopy(...)) instead"
)


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(_MESSAGE)


class ReadOnlyDict(dict[str, Any]):
    """A ``dict`` whose in-place changes raise :class:`TypeError` (see the module docstring)."""

    __slots__ = ()

    def __reduce__(self) -> Any:
        # copy.deepcopy and pickle rebuild a plain dict: a copy is the caller's to edit.
        return (dict, (dict(self),))

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse


class ReadOnlyList(list[Any]):
    """A ``list`` whose in-place changes raise :class:`TypeError` (see the module docstring)."""

    __slots__ = ()

    def __reduce__(self) -> Any:
        return (list, (list(self),))

    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    append = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    clear = _refuse
    sort = _refuse
    reverse = _refuse


def freeze_schema(value: Any, depth: int = 0) -> Any:
    """A read-only copy of the dicts and lists of a JSON-like value (other objects shared).

    A level that is read-only already is returned as it is: nothing below it can have been
    changed without going around the class (``dict.__setitem__``), so a catalog of thousands
    of registered tools is not copied twice.
    """
    kind = type(value)
    if depth > _FREEZE_DEPTH or kind is ReadOnlyDict or kind is ReadOnlyList:
        return value
    if isinstance(value, Mapping):
        # Keys as they are (a schema's are strings; the register stage says so otherwise).
        return ReadOnlyDict({k: freeze_schema(v, depth + 1) for k, v in value.items()})
    if isinstance(value, list):
        return ReadOnlyList([freeze_schema(v, depth + 1) for v in value])
    if type(value) is tuple:
        return tuple(freeze_schema(v, depth + 1) for v in value)
    return value
