"""The rules a tool definition must follow before it enters the catalog.

Each problem is one line naming the tool, the plugin and the field, because a developer reads
them in a start-up error (``RegistrationError``) and must know where to look without a debugger.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from tooldeck_hookspecs import (
    MAX_RATE_WINDOW_S,
    Catalog,
    SecurityLevel,
    SessionInfo,
    ToolDefinition,
)
from tooldeck_hookspecs.model import CONTEXT_EXTRAS

from ._compile import SchemaCompileError, compile_schema, meta_validate, plain_json, ref_cycle
from ._dialect import fallback_validator

__all__ = ["validate_definition", "format_problem", "NAME_RE", "MAX_NAME_LENGTH"]

#: Tool names: snake_case, so that every provider (OpenAI, Anthropic, Gemini, MCP) accepts them.
# \Z, not $: "$" also matches before a final newline ("web_fetch\n" passed).
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*\Z")
MAX_NAME_LENGTH = 64
_SEMVER_RE = re.compile(
    r"^v?\d+\.\d+(\.\d+)?(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?\Z"
)
_ENTRYPOINT_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")
#: The longest ``execution.timeout_s``: the bound the configuration's ``[tools.NAME.execution]
#: timeout_s`` has (366 days). It was one day here: a deployment's 2-day override passed the
#: configuration's check, then the tool (or its whole pack) was left out at registration.
_MAX_TIMEOUT_S = MAX_RATE_WINDOW_S
#: Containers (objects and arrays) a parameter schema may nest. Real schemas nest a few levels;
#: fastjsonschema's generated code cannot compile much past this depth anyway, and the copy,
#: the metaschema check and the compiler all recurse: deeper, they would raise RecursionError.
MAX_SCHEMA_DEPTH = 128
_SESSION_FIELDS = frozenset(f.name for f in attrs.fields(SessionInfo)) | frozenset(CONTEXT_EXTRAS)
#: Where a problem lenient registration repairs is reported: how to opt in.
LENIENT_HINT = " (a catalog not written for tooldeck: register it with lenient=True)"


def format_problem(tool: ToolDefinition, field: str, message: str) -> str:
    """One problem line: ``tool 'x' (plugin 'p'): field: message``."""
    return f"tool {tool.name!r} (plugin {tool.plugin or 'unknown'!r}): {field}: {message}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _valid_version(version: str) -> bool:
    # SemVer first: nearly every tool's version is one, and packaging (PEP 440) then need not be
    # imported at all (it costs a new process several ms). Valid if either accepts it.
    if _SEMVER_RE.match(version):
        return True
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def _resolve_entrypoint(entrypoint: str) -> Any:
    module_name, _, qualname = entrypoint.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _check_identity(tool: ToolDefinition, add: Callable[[str, str], None]) -> None:
    name = tool.name
    if not isinstance(name, str) or not NAME_RE.match(name):
        add("name", f"{name!r} must be snake_case (lowercase letters, digits, '_'; a letter first)"
            + LENIENT_HINT)
    elif len(name) > MAX_NAME_LENGTH:
        add("name", f"is {len(name)} characters long; at most {MAX_NAME_LENGTH} are allowed"
            + LENIENT_HINT)
    if not isinstance(tool.version, str) or not tool.version.strip():
        add("version", "must be a non-empty version string such as '1.0.0'")
    elif not _valid_version(tool.version):
        add("version", f"{tool.version!r} is neither a PEP 440 nor a semantic version")
    if not isinstance(tool.description, str) or not tool.description.strip():
        add("description", "must be a non-empty text telling the model what the tool does"
            + LENIENT_HINT)
    if not isinstance(tool.category, str) or not tool.category.strip():
        add("category", "must be a non-empty category such as 'filesystem'")


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests dicts and lists more than ``limit`` deep (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _check_parameters(tool: ToolDefinition, add: Callable[[str, str], None]) -> set[str] | None:
    """Check the parameter schema; return its property names (None if it is unusable)."""
    schema = tool.parameters
    if not isinstance(schema, Mapping):
        add("parameters", f"must be a JSON Schema object, got {type(schema).__name__}")
        return None
    if _nested_deeper_than(schema, MAX_SCHEMA_DEPTH):
        # Checked before anything that recurses over the schema (a tool pack or an MCP server
        # may send one thousands of levels deep).
        add("parameters", f"is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        return None
    try:
        plain = plain_json(schema)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValueError) and "Out of range float" in str(exc):
            add("parameters", "holds NaN or an infinity, which JSON cannot carry to a provider")
        else:
            add("parameters", f"is not JSON-serializable ({exc})")
        return None
    bad = meta_validate(plain)
    if bad is not None:
        add(*bad)
        return None
    if plain.get("type") != "object":
        add("parameters.type", f"must be 'object' (tool arguments are a JSON object), "
            f"got {plain.get('type')!r}")
    properties = plain.get("properties", {})
    names = set(properties) if isinstance(properties, dict) else set()
    for required in plain.get("required", []):
        if required not in names:
            add("parameters.required", f"{required!r} is not a property")
    loop = ref_cycle(plain)
    if loop is not None:
        add("parameters", f"$ref loop {loop}: the schema refers to itself without descending "
            "into the value, so validating any call would never end")
        return names
    try:
        compile_schema(plain, detailed=False)  # the argument validator's fast half, cached
    except SchemaCompileError as exc:
        if not exc.codegen_limit:
            add("parameters", f"cannot be compiled: {exc}")
        else:  # the argument validator falls back to the interpreted validator: check that one
            try:
                fallback_validator(plain)
            except ValueError as invalid:
                add("parameters", f"cannot be compiled: {invalid}")
    return names


def _check_param_refs(
    field: str, values: Any, names: set[str] | None, add: Callable[[str, str], None]
) -> None:
    for value in values:
        if not isinstance(value, str) or not value:
            add(field, f"{value!r} must be a non-empty parameter name")
        elif names is not None and value not in names:
            add(field, f"{value!r} is not a property of parameters")


def _check_security(
    tool: ToolDefinition, names: set[str] | None, add: Callable[[str, str], None]
) -> None:
    security = tool.security
    if not isinstance(security.level, SecurityLevel):
        add("security.level", f"{security.level!r} must be one of safe, moderate, dangerous")
    for path in security.allowed_paths:
        if not isinstance(path, str) or not path.strip():
            add("security.allowed_paths", f"{path!r} must be a non-empty path or template")
    _check_param_refs("security.path_params", security.path_params, names, add)
    _check_param_refs("security.url_params", security.url_params, names, add)
    _check_param_refs("security.command_params", security.command_params, names, add)
    limit = security.rate_limit
    if limit is not None:
        if not isinstance(limit.max_calls, int) or isinstance(limit.max_calls, bool) or (
            limit.max_calls < 1
        ):
            add("security.rate_limit.max_calls", f"{limit.max_calls!r} must be an integer >= 1")
        if not _is_number(limit.window_s) or not 0 < limit.window_s <= MAX_RATE_WINDOW_S:
            add("security.rate_limit.window_s",
                f"{limit.window_s!r} must be > 0 and <= {MAX_RATE_WINDOW_S:.0f} s (366 days)")


def _check_execution(tool: ToolDefinition, add: Callable[[str, str], None]) -> None:
    ex = tool.execution
    if not _is_number(ex.timeout_s) or not 0 < ex.timeout_s <= _MAX_TIMEOUT_S:
        add("execution.timeout_s",
            f"{ex.timeout_s!r} must be > 0 and <= {_MAX_TIMEOUT_S:.0f} s (366 days)")
    if not isinstance(ex.max_retries, int) or isinstance(ex.max_retries, bool) or not (
        0 <= ex.max_retries <= 10
    ):
        add("execution.max_retries", f"{ex.max_retries!r} must be an integer from 0 to 10")
    if not _is_number(ex.cache_ttl_s) or ex.cache_ttl_s < 0:
        add("execution.cache_ttl_s", f"{ex.cache_ttl_s!r} must be a number >= 0")
    if not isinstance(ex.memory_mb, int) or isinstance(ex.memory_mb, bool) or ex.memory_mb < 16:
        add("execution.memory_mb", f"{ex.memory_mb!r} must be an integer >= 16")
    if (
        not isinstance(ex.max_output_bytes, int)
        or isinstance(ex.max_output_bytes, bool)
        or ex.max_output_bytes < 1024
    ):
        add("execution.max_output_bytes", f"{ex.max_output_bytes!r} must be an integer >= 1024")
    for field in ex.cache_context:
        if field not in _SESSION_FIELDS:
            add("execution.cache_context", f"{field!r} is not a session field "
                f"(one of {', '.join(sorted(_SESSION_FIELDS))})")


def _check_callable(tool: ToolDefinition, add: Callable[[str, str], None]) -> None:
    if tool.call_style not in ("mapping", "kwargs"):
        add("call_style", f"{tool.call_style!r} must be 'mapping' or 'kwargs'")
    if tool.execute is not None and not callable(tool.execute):
        add("execute", f"{tool.execute!r} is not callable")
    entrypoint = tool.entrypoint
    if entrypoint is not None:
        if not isinstance(entrypoint, str) or not _ENTRYPOINT_RE.match(entrypoint):
            add("entrypoint", f"{entrypoint!r} must look like 'package.module:function'")
            entrypoint = None
        elif tool.security.sandbox or tool.execute is None:
            # A sandbox worker imports the tool by this reference: prove now that it can.
            try:
                target = _resolve_entrypoint(entrypoint)
            except Exception as exc:  # any import failure is the developer's
                add("entrypoint", f"{entrypoint!r} cannot be imported: {type(exc).__name__}: "
                    f"{exc}")
                return
            if not callable(target):
                add("entrypoint", f"{entrypoint!r} does not name a callable")
    if tool.execute is None and entrypoint is None:
        # A declaration-only tool (a catalog to select from, tools run by the client): it can be
        # dealt and exported; calling it answers EXECUTION_ERROR from the executor.
        if tool.security.sandbox:
            add("execute", "a sandboxed tool needs an execute callable or an entrypoint")
        return
    if tool.security.sandbox and entrypoint is None:
        func = tool.execute
        module = getattr(func, "__module__", None)
        qualname = getattr(func, "__qualname__", "")
        try:
            ok = bool(module) and "<" not in qualname and (
                _resolve_entrypoint(f"{module}:{qualname}") is func
            )
        except Exception:  # not importable means not sandboxable
            ok = False
        if not ok:
            add("entrypoint", "a sandboxed tool needs an entrypoint ('module:function') or a "
                "module-level execute function a worker process can import")


def validate_definition(tool: ToolDefinition, catalog: Catalog | None = None) -> list[str]:
    """Every problem in ``tool``'s definition, one readable line each (empty when it is fine).

    ``catalog`` holds the tools registered so far: a tool whose name is taken is a problem that
    names both plugins.
    """
    problems: list[str] = []

    def add(field: str, message: str) -> None:
        problems.append(format_problem(tool, field, message))

    _check_identity(tool, add)
    if catalog is not None and isinstance(tool.name, str):
        existing = catalog.get(tool.name)
        if existing is not None and existing is not tool:
            add("name", f"{tool.name!r} is already registered by plugin "
                f"{existing.plugin or 'unknown'!r}; plugin {tool.plugin or 'unknown'!r} cannot "
                "register it again (rename one, or disable one of the plugins)")
    names = _check_parameters(tool, add)
    _check_security(tool, names, add)
    _check_execution(tool, add)
    _check_callable(tool, add)
    return problems
