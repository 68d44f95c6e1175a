"""Turn a decorated or plain function into a ToolDefinition: parameters from hints and docstring."""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs

from tooldeck_hookspecs import (
    TOOL_OPTIONS_ATTR,
    ExecutionConfig,
    RegistrationError,
    SecurityConfig,
    ToolContext,
    ToolDefinition,
)
from tooldeck_hookspecs._coerce import rich_parameters

__all__ = ["definition_from_function", "apply_override", "structure_config"]

_converter = cattrs.Converter(forbid_extra_keys=True)

_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    dict: {"type": "object"},
    list: {"type": "array"},
    tuple: {"type": "array"},
    Any: {},
}

_OPTION_KEYS = {
    "name",
    "description",
    "category",
    "version",
    "parameters",
    "security",
    "execution",
    "tags",
    "entrypoint",
}


def structure_config(value: Any, cls: type[Any], where: str) -> Any:
    """A SecurityConfig / ExecutionConfig from a dict (or the object itself), with a clear error."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    try:
        return _converter.structure(dict(value), cls)
    except Exception as exc:
        messages = (
            cattrs.transform_error(exc)
            if isinstance(exc, cattrs.BaseValidationError)
            else [str(exc)]
        )
        raise RegistrationError([f"{where}: {m}" for m in messages]) from exc


def _schema_for(annotation: Any) -> dict[str, Any]:
    if annotation in _SIMPLE:
        return dict(_SIMPLE[annotation])
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        schema = _schema_for(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
        return schema
    if origin is typing.Literal:
        values = list(args)
        schema = {"enum": values}
        kinds = {type(v) for v in values}
        if len(kinds) == 1 and next(iter(kinds)) in _SIMPLE:
            schema = {**_SIMPLE[next(iter(kinds))], "enum": values}
        return schema
    if origin in (types.UnionType, typing.Union):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            return _schema_for(non_null[0])
        return {"anyOf": [_schema_for(a) for a in non_null]}
    if origin in (list, tuple, set, frozenset, typing.Sequence, getattr(typing, "List", None)):
        item = args[0] if args else Any
        schema = {"type": "array"}
        if item is not Ellipsis and item is not Any:
            schema["items"] = _schema_for(item)
        return schema
    if origin in (dict, Mapping) or origin is getattr(typing, "Dict", None):
        return {"type": "object"}
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    if inspect.isclass(annotation) and attrs.has(annotation):
        props = {f.name: _schema_for(f.type) for f in attrs.fields(annotation)}
        required = [f.name for f in attrs.fields(annotation) if f.default is attrs.NOTHING]
        return {"type": "object", "properties": props, "required": required}
    raise TypeError(f"no JSON Schema mapping for type {annotation!r}")


_PARAM_PATTERNS = (
    # reST / Sphinx: ":param name: text"
    re.compile(r"^\s*:param\s+(?:[\w\[\], .|]+\s+)?(\w+)\s*:\s*(.*)$"),
    # Google style inside an Args: section: "name (type): text" or "name: text"
    re.compile(r"^\s{2,}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$"),
    # NumPy-ish / simple "name -- text"
    re.compile(r"^\s*(\w+)\s+--\s+(.*)$"),
)


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {param: description}) from a Google, reST or simple docstring."""
    if not doc:
        return "", {}
    text = inspect.cleandoc(doc)
    lines = text.splitlines()
    description_lines: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.lower() in {"args:", "arguments:", "parameters:", "params:"}:
            in_args = True
            current = None
            continue
        if stripped.lower() in {"returns:", "raises:", "yields:", "examples:", "example:"}:
            in_args = False
            current = None
            continue
        matched = False
        for index, pattern in enumerate(_PARAM_PATTERNS):
            if index == 1 and not in_args:
                continue
            match = pattern.match(line)
            if match:
                current = match.group(1)
                params[current] = match.group(2).strip()
                matched = True
                break
        if matched:
            continue
        if current and stripped and (in_args or line.startswith(" ")):
            params[current] += " " + stripped
            continue
        if stripped.startswith(":"):  # other reST fields (:returns:, :raises:)
            current = None
            continue
        if not params and not in_args:
            description_lines.append(line)
    description = "\n".join(description_lines).strip()
    # The first paragraph is the description a model reads; the rest is for humans.
    description = description.split("\n\n")[0].replace("\n", " ").strip()
    return description, params


def _context_param(signature: inspect.Signature, hints: Mapping[str, Any]) -> str | None:
    for name in signature.parameters:
        if hints.get(name) is ToolContext:
            return name
    return None


def definition_from_function(
    func: Callable[..., Any], *, plugin: str | None, options: Mapping[str, Any]
) -> ToolDefinition:
    """Build a ToolDefinition for ``func``; ``options`` override what ``@tool`` attached."""
    merged = {**getattr(func, TOOL_OPTIONS_ATTR, {}), **options}
    unknown = set(merged) - _OPTION_KEYS
    name = str(merged.get("name") or getattr(func, "__name__", ""))
    where = f"tool {name!r} (plugin {plugin!r})"
    if unknown:
        raise RegistrationError([f"{where}: unknown option(s) {sorted(unknown)}"])
    doc_description, doc_params = parse_docstring(func.__doc__)
    signature = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception as exc:
        raise RegistrationError([f"{where}: cannot resolve type hints: {exc}"]) from exc
    context_param = _context_param(signature, hints)
    parameters = merged.get("parameters")
    if parameters is None:
        # Models, dataclasses, TypedDicts, enums, dates, Field(...) constraints: pydantic makes
        # the schema, and call_tool_function coerces the arguments into those types.
        try:
            rich = rich_parameters(func, descriptions=doc_params, context_param=context_param)
        except TypeError as exc:
            raise RegistrationError([f"{where}: parameters: {exc}"]) from exc
        if rich is not None:
            parameters = rich.schema
    if parameters is None:
        properties: dict[str, Any] = {}
        required: list[str] = []
        problems: list[str] = []
        for pname, param in signature.parameters.items():
            if pname == context_param:
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
                problems.append(
                    f"{where}: parameters.{pname}: *args, **kwargs and positional-only "
                    "parameters cannot be derived; pass parameters= as a JSON Schema"
                )
                continue
            annotation = hints.get(pname, Any)
            try:
                schema = _schema_for(annotation)
            except TypeError as exc:
                problems.append(f"{where}: parameters.{pname}: {exc}")
                continue
            if pname in doc_params and "description" not in schema:
                schema["description"] = doc_params[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            elif param.default is not None and isinstance(
                param.default, str | int | float | bool | list | dict
            ):
                schema["default"] = param.default
            properties[pname] = schema
        if problems:
            raise RegistrationError(problems)
        parameters = {"type": "object", "properties": properties, "required": required}
        parameters["additionalProperties"] = False
    qualname = getattr(func, "__qualname__", "")
    entrypoint = merged.get("entrypoint")
    if entrypoint is None and "<locals>" not in qualname and getattr(func, "__module__", None):
        entrypoint = f"{func.__module__}:{qualname}"
    return ToolDefinition(
        name=name,
        description=merged.get("description") or doc_description,
        category=merged.get("category", ""),
        version=str(merged.get("version", "1.0.0")),
        parameters=parameters,
        security=structure_config(merged.get("security"), SecurityConfig, f"{where}: security"),
        execution=structure_config(merged.get("execution"), ExecutionConfig, f"{where}: execution"),
        execute=func,
        entrypoint=entrypoint,
        call_style="kwargs",
        context_param=context_param,
        tags=tuple(merged.get("tags", ())),
        plugin=plugin,
    )


def apply_override(
    tool: ToolDefinition, override: Mapping[str, Any], source: str
) -> ToolDefinition:
    """Apply a ``[tools.NAME]`` table: security/execution fields replaced one by one."""
    if not override:
        return tool
    where = f"{source}: tools.{tool.name}"
    changes: dict[str, Any] = {}
    for key, cls in (("security", SecurityConfig), ("execution", ExecutionConfig)):
        if key in override:
            current = _converter.unstructure(getattr(tool, key))
            changes[key] = structure_config({**current, **override[key]}, cls, f"{where}.{key}")
    for key in ("description", "category"):
        if key in override:
            changes[key] = override[key]
    return attrs.evolve(tool, **changes)
