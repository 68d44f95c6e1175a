"""Values at the boundary: what a tool returns, what a model sends, what an error echoes.

Three guards the call path applies so that a failure stays a ``ToolResult``:

- :func:`json_safe` turns an in-process tool's return value into plain JSON (the sandbox's wire
  format already does this for sandboxed tools), so ``result_messages()``, the MCP server and the
  caches never meet bytes, sets, tuple keys, NaN or an object whose ``__str__`` raises;
- :func:`too_deep` finds arguments nested deeper than any tool schema needs, before the cache key,
  the approval hash or a validator recurses into them (``RecursionError`` at ~1,000 levels);
- :func:`shorten` bounds what an error message echoes back from the input.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from tooldeck_hookspecs import printable_int, shorten
from tooldeck_hookspecs.content import Content

__all__ = [
    "MAX_ARGUMENT_DEPTH", "MAX_ARGUMENT_ITEMS", "json_safe", "json_safe_sized", "json_size",
    "shorten", "too_deep",
]

#: Deeper arguments are refused with INVALID_ARGUMENTS. JSON Schemas of real tools nest a few
#: levels; 64 leaves room for generous ones and stays far below every recursion limit.
MAX_ARGUMENT_DEPTH = 64
#: Arguments are refused with INVALID_ARGUMENTS beyond this many items, counted over every
#: nested dict and list (the deck's ``_argument_excess``); a model's argument text with more JSON
#: values than this is refused before it is parsed (:func:`tooldeck_hookspecs.json_values`).
MAX_ARGUMENT_ITEMS = 100_000
#: Beyond this depth a return value is cut (with a marker) rather than walked further.
_MAX_RESULT_DEPTH = 200

_SCALARS = (str, int, bool, type(None))


_LEAF_TYPES = frozenset({str, int, float, bool, type(None)})


def too_deep(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (iterative: never recurses)."""
    if type(value) is dict and limit >= 1:
        # The usual arguments: a flat dict of JSON scalars, checked by exact type (no ABCs).
        for child in value.values():
            if type(child) not in _LEAF_TYPES:
                break
        else:
            return False
    children: Iterable[Any]
    if isinstance(value, Mapping):
        children = value.values()
    elif isinstance(value, list | tuple):
        children = value
    else:
        return False
    # Fast path: the usual arguments are flat.
    if not any(isinstance(c, Mapping | list | tuple) for c in children):
        return limit < 1
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        items: Iterable[Any]
        if isinstance(item, Mapping):
            items = item.values()
        elif isinstance(item, list | tuple):
            items = item
        else:
            continue
        for child in items:
            if isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1))
    return False


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except BaseException as exc:  # a __str__ that raises (even BaseException) must not escape
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"<unprintable {type(value).__name__}>"


def _orjson_size(value: Any) -> int | None:
    """The length of orjson's encoding of ``value``, or None when orjson cannot encode it."""
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError, RecursionError):
        return None


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON data: dicts with string keys, lists, str, int, finite float, bool,
    None. Bytes become base64 text (``{"$bytes_base64": ...}``), sets sorted lists when they can
    be sorted, NaN and infinities ``None``, other objects their ``str()``. Never raises.

    Plain JSON (the common case) is returned as is, checked by one orjson pass.
    """
    if isinstance(value, _SCALARS):
        if type(value) is int:
            return printable_int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            return value
        return printable_int(int(value))  # an int subclass (IntEnum) as the plain number it is
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if type(value) in (dict, list) and _orjson_size(value) is not None and not _exotic(value):
        return value
    return _convert(value)


def json_safe_sized(value: Any, cap: int) -> tuple[Any, int]:
    """``(json_safe(value), json_size(that, cap))`` with one encoding of a plain container, and
    no walk of one whose encoding is already over ``cap`` (it is dropped anyway): what the call
    path needs for every result."""
    if type(value) in (dict, list):
        size = _orjson_size(value)
        if size is not None and (size > cap or not _exotic(value)):
            return value, size
        # json_safe's own check just failed: convert without encoding and walking again.
        safe = _convert(value)
    else:
        safe = json_safe(value)
    return safe, json_size(safe, cap)


def json_size(value: Any, cap: int) -> int:
    """The UTF-8 JSON size of plain JSON ``value`` in bytes; strings count their text (no
    quotes), so a tool returning text may use the whole cap. Stops early above ``cap`` for
    strings (the one shape that is commonly huge): the result is then only known to be > cap."""
    if isinstance(value, str):
        if len(value) * 4 <= cap or len(value) > cap:
            # Within the cap whatever its characters, or over it already by its characters
            # alone (each is at least one byte): encoding a 200 MB string to learn that took
            # ~150 ms of the event loop and 200 MB more memory.
            return len(value)
        return len(value.encode("utf-8", "surrogatepass"))
    if value is None or isinstance(value, bool | int | float):
        return 8
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return len(str(value))


#: Exact types of plain JSON leaves besides float (which must also be finite).
_PLAIN_LEAVES = frozenset({str, int, bool, type(None)})
_PLAIN_OR_FLOAT = _PLAIN_LEAVES | {float}


def _exotic(value: dict[Any, Any] | list[Any]) -> bool:
    """Whether a container orjson can encode holds anything but exact dicts, lists, str, int,
    bool, None and finite floats. orjson also writes tuples, datetimes, UUIDs, enums, dataclasses
    and subclasses of str, int, dict and list, and NaN as null: json_safe converts those, so that
    a consumer's ``json.dumps`` never meets them. Iterative; the types of a container's children
    are collected in C (``set(map(type, ...))``), so flat data costs little per item."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            if not set(map(type, item)) <= {str}:
                return True
            children: Any = item.values()
        elif kind is list:
            children = item
        elif kind is float:
            if not math.isfinite(item):
                return True
            continue
        elif kind in _PLAIN_LEAVES:
            continue
        else:
            return True
        kinds = set(map(type, children))
        if kinds <= _PLAIN_LEAVES:
            continue
        if kinds <= _PLAIN_OR_FLOAT:
            # NaN and infinities: orjson writes them as null, json.dumps as invalid JSON.
            if not all(map(math.isfinite, (c for c in children if type(c) is float))):
                return True
            continue
        stack.extend(children)
    return False


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None:
        return orjson.dumps(key).decode()
    if isinstance(key, int):  # orjson refuses more than 64 bits, str() more than 4,300 digits
        return str(printable_int(int(key)))
    if isinstance(key, float):
        return orjson.dumps(float(key)).decode()
    return _safe_str(key)


def _distinct(taken: Mapping[str, Any], text: str, key: Any) -> str:
    """A text key for ``key`` that is not in ``taken``: two keys that read the same as text
    (``1`` and ``"1"``, ``None`` and ``"null"``) must not overwrite each other's value."""
    candidate = f"{text} ({type(key).__name__})"
    number = 2
    while candidate in taken:
        candidate = f"{text} ({type(key).__name__} {number})"
        number += 1
    return candidate


def _convert(value: Any, depth: int = 0) -> Any:
    # Recursion bounded by _MAX_RESULT_DEPTH (far below Python's limit).
    if depth > _MAX_RESULT_DEPTH:
        return f"<cut: nested deeper than {_MAX_RESULT_DEPTH} levels>"
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return printable_int(int(value))
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes_base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        try:
            items = list(value.items())
        except Exception:
            return _safe_str(value)
        out: dict[str, Any] = {}
        for k, v in items:
            key = _key(k)
            if key in out:
                key = _distinct(out, key, k)
            out[key] = _convert(v, depth + 1)
        return out
    if isinstance(value, set | frozenset | list | tuple):
        try:
            members = list(value)  # a subclass's __iter__ is the tool's code: it may raise
        except Exception:
            return _safe_str(value)
        converted = [_convert(v, depth + 1) for v in members]
        if not isinstance(value, set | frozenset):
            return converted
        try:
            return sorted(converted)
        except TypeError:
            return sorted(converted, key=lambda v: orjson.dumps(v))
    if isinstance(value, Content):  # an image, audio clip, resource: its tagged JSON form
        try:
            return value.to_json()
        except Exception:
            return _safe_str(value)
    try:
        model_dump = getattr(value, "model_dump", None)
    except Exception:  # a __getattr__ that raises something else than AttributeError
        model_dump = None
    if callable(model_dump) and not isinstance(value, type):
        try:  # a pydantic model, as FastMCP and Pydantic AI return them: its JSON form
            return _convert(model_dump(mode="json"), depth + 1)
        except Exception:
            pass
    try:
        # Dataclasses, datetimes, UUIDs, enums, numpy scalars: what orjson knows how to write.
        return orjson.loads(orjson.dumps(value))
    except Exception:
        pass
    return _safe_str(value)
