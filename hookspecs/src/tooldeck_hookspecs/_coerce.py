"""Rich parameter types for tools made from functions: schema and argument coercion by pydantic.

A tool function may declare what FastMCP, Pydantic AI and the Agents SDK's ``function_tool``
accept: pydantic models, dataclasses, TypedDicts, enums, ``datetime`` / ``date`` / ``UUID`` /
``Decimal`` / ``Path``, and constraints such as ``Annotated[int, Field(ge=1, le=10)]``. For such a
function, pydantic builds the JSON Schema the model sees (:func:`rich_parameters`) and, at call
time, turns the JSON arguments into the declared types (:func:`coerce_arguments`): a date string
becomes a ``date``, an object becomes the model or dataclass, a string becomes the enum member.

Functions with plain hints only (``str``, ``int``, lists of them, ``Literal``, ...) never touch
pydantic: their schema is derived by the core's own mapper and their arguments pass as they are,
so the fast path pays one cache look-up. pydantic is imported the first time a rich function is
seen, in the host and in sandbox workers alike (both call through ``call_tool_function``).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import inspect
import ipaddress
import pathlib
import threading
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["RichParameters", "coerce_arguments", "is_rich_annotation", "rich_parameters"]

# Types pydantic converts from their JSON form (strings, numbers) into the declared type.
_CONVERTED: tuple[type, ...] = (
    datetime.datetime,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    decimal.Decimal,
    pathlib.PurePath,
    ipaddress.IPv4Address,
    ipaddress.IPv6Address,
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
    bytes,
)


def _is_pydantic_model(annotation: Any) -> bool:
    # Without importing pydantic: a BaseModel subclass has it in its MRO by module name.
    return inspect.isclass(annotation) and any(
        base.__module__.startswith("pydantic") and base.__name__ == "BaseModel"
        for base in annotation.__mro__
    )


def is_rich_annotation(annotation: Any, _depth: int = 0) -> bool:
    """Whether ``annotation`` needs pydantic for its schema or its coercion."""
    if _depth > 20:
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        # Only text metadata (a description) is handled by the plain mapper.
        if any(not isinstance(extra, str) for extra in args[1:]):
            return True
        return is_rich_annotation(args[0], _depth + 1)
    if origin is typing.Literal:
        return False
    if origin is not None:
        return any(
            is_rich_annotation(arg, _depth + 1) for arg in args if arg is not Ellipsis
        )
    if not inspect.isclass(annotation):
        return False
    if issubclass(annotation, enum.Enum) or issubclass(annotation, _CONVERTED):
        return True
    if _is_pydantic_model(annotation) or dataclasses.is_dataclass(annotation):
        return True
    if _is_typeddict(annotation) or (
        issubclass(annotation, tuple) and hasattr(annotation, "_fields")  # NamedTuple
    ):
        return True
    return False


def _is_typeddict(annotation: type) -> bool:
    # typing_extensions.TypedDict (which pydantic needs before Python 3.12) is not recognised
    # by typing.is_typeddict on 3.11: both are dict subclasses with __total__.
    return typing.is_typeddict(annotation) or (
        issubclass(annotation, dict) and hasattr(annotation, "__total__")
        and hasattr(annotation, "__required_keys__")
    )


@dataclasses.dataclass(frozen=True)
class RichParameters:
    """The pydantic model of a function's parameters, and how to call the function with it."""

    #: JSON Schema of the parameters (``$defs`` inlined where not recursive, titles dropped).
    schema: dict[str, Any]
    #: ``model_validate`` of the parameters model.
    validate: Callable[[Mapping[str, Any]], Any]
    #: The parameter names, in order.
    names: tuple[str, ...]


def _signature_parts(
    function: Callable[..., Any], context_param: str | None
) -> tuple[inspect.Signature, dict[str, Any]] | None:
    try:
        signature = inspect.signature(function)
        hints = typing.get_type_hints(function, include_extras=True)
    except (TypeError, ValueError, NameError, AttributeError):
        return None
    for name, param in signature.parameters.items():
        if name == context_param:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            return None
    return signature, hints


def _context_name(signature: inspect.Signature, hints: Mapping[str, Any]) -> str | None:
    for name in signature.parameters:
        hint = hints.get(name)
        if getattr(hint, "__name__", None) == "ToolContext" and getattr(
            hint, "__module__", ""
        ).startswith("tooldeck_hookspecs"):
            return name
    return None


def rich_parameters(
    function: Callable[..., Any],
    *,
    descriptions: Mapping[str, str] | None = None,
    context_param: str | None = None,
) -> RichParameters | None:
    """The pydantic-made schema and validator of ``function``'s parameters; None when its hints
    are plain (the core's own mapper handles those) or cannot be read.

    :param descriptions: parameter descriptions from the docstring (a ``Field(description=...)``
        in the annotation wins).
    :raises TypeError: when a hint is rich but pydantic cannot handle it, or pydantic is missing.
    """
    parts = _signature_parts(function, context_param)
    if parts is None:
        return None
    signature, hints = parts
    context_param = context_param or _context_name(signature, hints)
    names = [n for n in signature.parameters if n != context_param]
    if not any(is_rich_annotation(hints.get(n, Any)) for n in names):
        return None
    try:
        import pydantic
    except ImportError as exc:  # pragma: no cover - pydantic is a dependency of tooldeck
        raise TypeError(
            "parameters typed with models, dataclasses, TypedDicts, enums, dates or Field(...) "
            "constraints need pydantic (pip install 'pydantic>=2')"
        ) from exc
    fields: dict[str, Any] = {}
    for name in names:
        param = signature.parameters[name]
        annotation = hints.get(name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        description = (descriptions or {}).get(name)
        if description and not _annotated_description(annotation):
            fields[name] = (annotation, pydantic.Field(default, description=description))
        else:  # a Field(description=...) in the annotation wins over the docstring
            fields[name] = (annotation, pydantic.Field(default))
    try:
        model = pydantic.create_model(  # type: ignore[call-overload]
            f"{getattr(function, '__name__', 'tool')}_parameters",
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
        schema = model.model_json_schema()
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TypeError(f"pydantic cannot derive a schema: {first}") from exc
    return RichParameters(schema=_tidy(schema), validate=model.model_validate, names=tuple(names))


def _annotated_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(
        isinstance(extra, str) or getattr(extra, "description", None)
        for extra in typing.get_args(annotation)[1:]
    )


def _tidy(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$defs`` that are not recursive (providers differ in ``$ref`` support) and drop
    pydantic's generated titles (tokens the model does not need)."""
    defs = schema.pop("$defs", {})
    recursive: set[str] = set()

    def resolve(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(item, stack) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/"):]
            if name in stack or name not in defs:
                recursive.add(name)
                return node
            merged = {**resolve(defs[name], (*stack, name)),
                      **{k: resolve(v, stack) for k, v in node.items() if k != "$ref"}}
            return merged
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs", "patternProperties") and isinstance(value, dict):
                out[key] = {k: resolve(v, stack) for k, v in value.items()}
            else:
                out[key] = resolve(value, stack)
        return out

    tidy: dict[str, Any] = resolve(schema, ())
    if recursive:
        tidy["$defs"] = {name: resolve(defs[name], (name,)) for name in defs}
    tidy.setdefault("type", "object")
    tidy.setdefault("properties", {})
    tidy["additionalProperties"] = False
    return tidy


# function -> its RichParameters, or None (plain). A plain dict: the look-up is on every call's
# path (a WeakKeyDictionary costs ~10x more); bounded, emptied when full (functions of dropped
# tools are forgotten then).
_cache: dict[Any, RichParameters | None] = {}
_CACHE_MAX = 10_000
_lock = threading.Lock()
_MISSING = object()


def _rich_for(function: Callable[..., Any], context_param: str | None) -> RichParameters | None:
    try:
        found = _cache.get(function, _MISSING)
    except TypeError:  # unhashable callable: not cached
        found = _MISSING
    if found is not _MISSING:
        return found  # type: ignore[return-value]
    try:
        rich = rich_parameters(function, context_param=context_param)
    except TypeError:
        rich = None  # registration already reported it; at call time pass arguments as is
    with _lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        try:
            _cache[function] = rich
        except TypeError:
            pass
    return rich


def coerce_arguments(
    function: Callable[..., Any], arguments: Mapping[str, Any], context_param: str | None = None
) -> Mapping[str, Any]:
    """``arguments`` converted into ``function``'s declared parameter types (rich functions
    only; plain ones get ``arguments`` back unchanged).

    :raises ToolFailure: ``INVALID_ARGUMENTS`` naming each field pydantic refused.
    """
    rich = _rich_for(function, context_param)
    if rich is None:
        return arguments
    try:
        instance = rich.validate(dict(arguments))
    except Exception as exc:
        from .errors import ErrorCode
        from .exceptions import ToolFailure

        errors = getattr(exc, "errors", None)
        problems: list[str] = []
        if callable(errors):
            for error in errors()[:20]:
                where = ".".join(str(part) for part in error.get("loc", ())) or "$"
                problems.append(f"{where}: {error.get('msg', 'invalid')}")
        message = "; ".join(problems) if problems else str(exc)[:500]
        raise ToolFailure(
            ErrorCode.INVALID_ARGUMENTS,
            f"the arguments do not fit the tool's parameter types: {message[:2000]}",
            suggestion="Fix the arguments named above and call the tool again.",
            details={"problems": problems},
        ) from None
    return {name: getattr(instance, name) for name in rich.names}
