"""Validation of the whole configuration against the schemas the core and the plugins contribute.

Each plugin describes the table it reads with the ``tooldeck_config_schema()`` hook (``{table:
JSON Schema}``); the core contributes its own tables (``hand``, ``session``, ``approvals``,
``tools``) and top-level keys (``plugins``, ``disable``, ``protected_paths``,
``required_plugins``). Every problem becomes one :class:`ConfigProblem` line naming the file, the
table and the key, with a "did you mean" for a misspelled key or table, and all of them are
reported together (:class:`ConfigValidationError`), so a user fixes the file in one pass.

The schemas are JSON Schema, checked by a small validator here (the core carries no jsonschema
dependency). It understands the keywords a settings table needs: ``type``, ``enum``, ``minimum``,
``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``minLength``, ``pattern``, ``items``,
``minItems``, ``properties``, ``additionalProperties``, ``required`` and ``anyOf``; other keywords
are ignored (they never reject). Numbers must also be finite: ``nan`` or ``inf`` for a TTL or a
limit is a mistake, never an intent.

Severities: an ``error`` stops the deck from starting; a ``warning`` is logged (and listed by
``tooldeck config check``) but does not, because it cannot weaken anything. Warnings are
plugin names in ``plugins`` / ``disable`` / ``required_plugins`` that name no installed entry
point (they may be packs that are simply not installed on this machine), and a tool override
whose tool does not exist while some plugin is disabled or failed (the tool may be that
plugin's).
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from tooldeck_hookspecs import (
    MAX_RATE_WINDOW_S,
    ConfigError,
    ExecutionConfig,
    RegistrationError,
    SecurityConfig,
    normalise_rules,
)

__all__ = [
    "CORE_SCHEMAS",
    "CORE_TOP_LEVEL",
    "DEFAULT_REQUIRED_PLUGINS",
    "ConfigProblem",
    "ConfigValidationError",
    "ToolOverrideError",
    "check_schema",
    "validate_settings",
]

Severity = Literal["error", "warning"]

_LEVELS = ["safe", "moderate", "dangerous"]
_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}}
_POSITIVE_INT = {"type": "integer", "minimum": 1}
#: Every duration is at most 366 days (MAX_RATE_WINDOW_S): a longer one is no use, and a finite
#: 1e300 s passed, then failed late (Redis refuses a key lifetime past 64-bit milliseconds: an
#: approval's ttl_s made every approval read back as damaged, a rate window every call fail).
_POSITIVE_S = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RATE_WINDOW_S}
_WINDOW_S = _POSITIVE_S


def _fields_of(cls: type, typed: Mapping[str, Any]) -> dict[str, Any]:
    # Key names come from the model so that a field added there is never reported as unknown;
    # only the values worth a friendlier message than the registration error get a schema.
    return {f.name: dict(typed.get(f.name, {})) for f in attrs.fields(cls)}


#: The core's own tables.
CORE_SCHEMAS: dict[str, dict[str, Any]] = {
    "hand": {
        "type": "object",
        "properties": {
            "limit": _POSITIVE_INT,
            "recall": _POSITIVE_INT,
            "fallback_recall": _POSITIVE_INT,
            "sticky_turns": {"type": "integer", "minimum": 0},
            "pinned": _STRINGS,
            # Schema-token budget of a hand (estimated tokens of the dealt tools' schemas).
            "max_tokens": _POSITIVE_INT,
            # Characters of a task that selection reads (its beginning and its end).
            "max_task_chars": {"type": "integer", "minimum": 200},
        },
        "additionalProperties": False,
    },
    "session": {
        "type": "object",
        "properties": {
            "grants": _STRINGS,
            "excluded_categories": _STRINGS,
            "max_level": {"type": "string", "enum": _LEVELS},
            "workdir": {"type": "string", "minLength": 1},
            "attributes": {"type": "object"},
        },
        "additionalProperties": False,
    },
    "approvals": {
        "type": "object",
        "properties": {"ttl_s": _POSITIVE_S, "confirm_timeout_s": _POSITIVE_S},
        "additionalProperties": False,
    },
    "tools": {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": {
                "security": {
                    "type": "object",
                    "properties": _fields_of(
                        SecurityConfig,
                        {
                            "level": {"type": "string", "enum": _LEVELS},
                            "require_confirm": {"type": "boolean"},
                            "sandbox": {"type": "boolean"},
                            "allowed_paths": {"type": "array", "items": {"type": "string"}},
                            "rate_limit": {
                                "type": "object",
                                "properties": {
                                    "max_calls": _POSITIVE_INT,
                                    "window_s": _WINDOW_S,
                                },
                                "required": ["max_calls", "window_s"],
                                "additionalProperties": False,
                            },
                        },
                    ),
                    "additionalProperties": False,
                },
                "execution": {
                    "type": "object",
                    "properties": _fields_of(
                        ExecutionConfig,
                        {
                            "timeout_s": _POSITIVE_S,
                            "retryable": {"type": "boolean"},
                            "max_retries": {"type": "integer", "minimum": 0},
                            "cacheable": {"type": "boolean"},
                            "cache_ttl_s": _POSITIVE_S,
                        },
                    ),
                    "additionalProperties": False,
                },
                "description": {"type": "string", "minLength": 1},
                "category": {"type": "string", "minLength": 1},
            },
            "additionalProperties": False,
        },
    },
}

#: The core's top-level keys that are not tables.
CORE_TOP_LEVEL: dict[str, dict[str, Any]] = {
    "plugins": _STRINGS,
    "disable": _STRINGS,
    "required_plugins": _STRINGS,
    "protected_paths": _STRINGS,
    # Seconds an installed pack's register hook may take before the deck starts without it.
    "register_timeout_s": _POSITIVE_S,
}

#: Entry points whose failure stops the deck even when others are only left out: without the
#: policy plugin calls would go unauthorized, without runner or schema nothing runs or checks.
#: ``required_plugins = [...]`` replaces the list.
DEFAULT_REQUIRED_PLUGINS = ("policy", "runner", "schema")

#: Keys whose items name entry points (unknown names are warnings, see the module docstring).
PLUGIN_NAME_KEYS = ("plugins", "disable", "required_plugins")


@attrs.frozen(kw_only=True)
class ConfigProblem:
    """One problem of a configuration: where (file, table, key), what, and how bad."""

    file: str
    #: Dotted table path (``"hand"``, ``"tools.file_write.security"``); ``""`` for top level.
    table: str
    key: str
    message: str
    severity: Severity = "error"
    #: The top-level key the problem lies under (``"tools"``, ``"hand"``...).
    top: str = ""

    def __str__(self) -> str:
        table = f"[{self.table}]" if self.table else "(top level)"
        prefix = "warning: " if self.severity == "warning" else ""
        key = f" {self.key}" if self.key else ""
        return f"{prefix}{self.file}: {table}{key}: {self.message}"


class ConfigValidationError(ConfigError):
    """The configuration has one or more problems.

    ``problems`` holds one line each (errors first, then warnings), ``details`` the same as
    :class:`ConfigProblem` objects.
    """

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.details = list(problems)
        self.problems = [str(p) for p in self.details]
        errors = [p for p in self.details if p.severity == "error"]
        # Exception's own __init__: a subclass may also be a RegistrationError, whose
        # __init__ takes the problem list.
        Exception.__init__(
            self,
            f"{len(errors)} problem(s) in the configuration:\n"
            + "\n".join(f"  - {p}" for p in self.problems),
        )


class ToolOverrideError(ConfigValidationError, RegistrationError):
    """A ``[tools.NAME]`` override is malformed: a configuration and a registration error.

    Bad overrides were always a :class:`RegistrationError` (naming the tool and the field);
    they stay one, with the configuration's one-line problems.
    """


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a table",
    "null": "nothing",
}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a table"
    return f"a {type(value).__name__}"


def _is(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list | tuple)
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "null":
        return value is None
    return True  # an unknown type name never rejects


def _describe(schema: Mapping[str, Any]) -> str:
    """What a schema wants, in words ("an integer >= 1", "a list of strings")."""
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_describe(s) for s in schema["anyOf"])
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return " or ".join(_describe({**schema, "type": k}) for k in kinds)
    if kinds == "array" and isinstance(schema.get("items"), Mapping):
        inner = schema["items"].get("type")
        if isinstance(inner, str) and inner in _TYPE_NAMES:
            noun = {
                "string": "strings",
                "integer": "integers",
                "number": "numbers",
                "boolean": "booleans",
                "object": "tables",
                "array": "lists",
            }.get(inner)
            if noun:
                return f"a list of {noun}"
    text = _TYPE_NAMES.get(kinds, "a value") if isinstance(kinds, str) else "a value"
    bounds = [
        (">=", schema.get("minimum")),
        (">", schema.get("exclusiveMinimum")),
        ("<=", schema.get("maximum")),
        ("<", schema.get("exclusiveMaximum")),
    ]
    extra = " and ".join(f"{op} {bound}" for op, bound in bounds if bound is not None)
    return f"{text} {extra}" if extra else text


Path = tuple[str | int, ...]


def check_schema(value: Any, schema: Any, path: Path) -> list[tuple[Path, str]]:
    """Problems of ``value`` against ``schema`` as (path, message) pairs; empty when it conforms.

    See the module docstring for the keywords understood; a schema that is not a mapping (or is
    ``{}`` / ``True``) accepts everything.
    """
    out: list[tuple[Path, str]] = []
    if not isinstance(schema, Mapping):
        return out
    kinds = schema.get("type")
    if kinds is not None:
        wanted = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is(value, k) for k in wanted):
            out.append((path, f"must be {_describe(schema)}, not {_kind(value)} ({_show(value)})"))
            return out
    if "anyOf" in schema and isinstance(schema["anyOf"], list):
        if not any(not check_schema(value, sub, path) for sub in schema["anyOf"]):
            out.append((path, f"must be {_describe(schema)}, not {_show(value)}"))
            return out
    if "enum" in schema:
        # `True == 1` in Python: compare types too, so `max_level = 1` is not "safe"-adjacent.
        if not any(type(value) is type(v) and value == v for v in schema["enum"]):
            hint = _suggest(value, map(str, schema["enum"])) if isinstance(value, str) else ""
            out.append((path, f"must be {_describe(schema)}, not {_show(value)}{hint}"))
            return out
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            out.append((path, f"must be {_describe(schema)}, not {value}"))
            return out
        checks = (
            ("minimum", operator.ge),
            ("exclusiveMinimum", operator.gt),
            ("maximum", operator.le),
            ("exclusiveMaximum", operator.lt),
        )
        for keyword, ok in checks:
            bound = schema.get(keyword)
            if isinstance(bound, int | float) and not ok(value, bound):
                out.append((path, f"must be {_describe(schema)}, not {_show(value)}"))
                return out
    if isinstance(value, str):
        if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
            out.append(
                (
                    path,
                    "must not be empty"
                    if schema["minLength"] == 1
                    else f"must be at least {schema['minLength']} characters long",
                )
            )
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, value) is None:
            out.append((path, f"must match {pattern!r}, not {_show(value)}"))
    if isinstance(value, list | tuple):
        if isinstance(schema.get("minItems"), int) and len(value) < schema["minItems"]:
            out.append((path, f"needs at least {schema['minItems']} item(s)"))
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                out.extend(check_schema(item, items, (*path, index)))
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        for key in schema.get("required", ()) or ():
            if key not in value:
                out.append(((*path, str(key)), "is required"))
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            key = str(key)
            if key in properties:
                out.extend(check_schema(item, properties[key], (*path, key)))
            elif extra is False:
                known = ", ".join(sorted(properties)) or "none"
                out.append(
                    ((*path, key), f"unknown key{_suggest(key, properties)} (known: {known})")
                )
            elif isinstance(extra, Mapping):
                out.extend(check_schema(item, extra, (*path, key)))
    return out


def _locate(path: tuple[str | int, ...]) -> tuple[str, str]:
    """Split a value's path into (table, key): ``("session", "grants", 0)`` -> (session,
    grants[0])."""
    last = max((i for i, seg in enumerate(path) if isinstance(seg, str)), default=-1)
    if last < 0:
        return "", "".join(f"[{seg}]" for seg in path)

    def dotted(segments: Sequence[str | int]) -> str:
        text = ""
        for seg in segments:
            text += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if text else str(seg))
        return text

    key = str(path[last]) + "".join(f"[{seg}]" for seg in path[last + 1 :])
    return dotted(path[:last]), key


def validate_settings(
    settings: Mapping[str, Any],
    *,
    file: str,
    schemas: Mapping[str, Sequence[tuple[str, Any]]],
    plugin_tables: Iterable[str] = (),
    installed: Iterable[str] | None = None,
    prefix: str = "",
) -> list[ConfigProblem]:
    """Every problem of one settings table (the ``[tool.tooldeck]`` table or a tooldeck.toml).

    :param file: named in every problem (the file path, or ``"config"`` for a mapping).
    :param schemas: per table, the (plugin, JSON Schema) pairs that describe it; the core's own
        tables are added here, so pass only what plugins contributed.
    :param plugin_tables: further table names that are known without a schema (each loaded
        plugin's entry-point name: its table is only checked for being a table).
    :param installed: installed entry-point names, for the warnings on ``plugins`` / ``disable``
        (None skips those checks).
    :param prefix: printed before table names (``"tool.tooldeck"`` for a pyproject.toml).
    """
    problems: list[ConfigProblem] = []

    def add(path: tuple[str | int, ...], message: str, severity: Severity = "error") -> None:
        table, key = _locate(path)
        table = ".".join(p for p in (prefix, table) if p)
        top = str(path[0]) if path else ""
        problems.append(
            ConfigProblem(
                file=file, table=table, key=key, message=message, severity=severity, top=top
            )
        )

    tables = {k: [("tooldeck", v)] for k, v in CORE_SCHEMAS.items()}
    for table, contributed in schemas.items():
        tables.setdefault(table, []).extend(contributed)
    known_tables = set(tables) | set(plugin_tables)
    known_keys = known_tables | set(CORE_TOP_LEVEL)
    for key, value in settings.items():
        key = str(key)
        if key in CORE_TOP_LEVEL:
            for path, message in check_schema(value, CORE_TOP_LEVEL[key], (key,)):
                add(path, message)
            continue
        if key not in known_tables:
            what = "table" if isinstance(value, Mapping) else "key"
            add((key,), f"unknown {what}{_suggest(key, known_keys)}")
            continue
        if not isinstance(value, Mapping):
            add((key,), f"must be a table, not {_kind(value)} ({_show(value)})")
            continue
        for _plugin, schema in tables.get(key, ()):
            for path, message in check_schema(value, schema, (key,)):
                add(path, message)
    protected = settings.get("protected_paths")
    if isinstance(protected, list):
        for index, rule in enumerate(protected):
            if isinstance(rule, str) and rule.strip("/ "):
                try:
                    normalise_rules([rule])
                except ValueError as exc:
                    add(("protected_paths", index), str(exc))
            elif isinstance(rule, str) and rule:  # "" is the schema's (minLength) to report
                add(("protected_paths", index), "a protected path rule must name a path")
    if installed is not None:
        names = sorted(set(installed))
        for key in PLUGIN_NAME_KEYS:
            value = settings.get(key)
            if not isinstance(value, list):
                continue
            for index, name in enumerate(value):
                if isinstance(name, str) and name not in names:
                    add(
                        (key, index),
                        f"no installed plugin is named {name!r}{_suggest(name, names)} "
                        f"(installed: {', '.join(names) or 'none'})",
                        "warning",
                    )
    return problems


def raise_for_errors(problems: Sequence[ConfigProblem]) -> None:
    """Raise :class:`ConfigValidationError` when any problem is an error (warnings included)."""
    if any(p.severity == "error" for p in problems):
        ordered = sorted(problems, key=lambda p: p.severity != "error")
        if any(p.severity == "error" and p.top == "tools" for p in problems):
            raise ToolOverrideError(ordered)
        raise ConfigValidationError(ordered)


def validate_config(
    config: Any,
    *,
    schemas: Mapping[str, Sequence[tuple[str, Any]]],
    plugin_tables: Iterable[str],
    installed: Iterable[str],
) -> list[ConfigProblem]:
    """Every problem of a loaded :class:`~tooldeck.Config` (what it applies), environment too.

    Plugin names that ``TOOLDECK_PLUGINS`` / ``TOOLDECK_DISABLE_PLUGINS`` add and that no
    installed entry point has are warnings naming the variable.
    """
    installed = set(installed)
    settings = config.settings
    problems = validate_settings(
        settings,
        file=config.source or "config",
        schemas=schemas,
        plugin_tables=plugin_tables,
        installed=installed,
        prefix=config.table_prefix,
    )
    in_file: set[str] = set()
    for key in ("plugins", "disable"):
        value = settings.get(key)
        if isinstance(value, list):
            in_file.update(x for x in value if isinstance(x, str))
    for variable, names in (
        ("TOOLDECK_PLUGINS", config.enabled or ()),
        ("TOOLDECK_DISABLE_PLUGINS", config.disabled),
    ):
        for name in sorted(set(names) - in_file - installed):
            problems.append(
                ConfigProblem(
                    file="environment",
                    table="",
                    key=variable,
                    message=f"no installed plugin is named {name!r}"
                    f"{_suggest(name, installed)} (installed: {', '.join(sorted(installed))})",
                    severity="warning",
                )
            )
    return problems


def unknown_tool_problems(
    config: Any, registered: Iterable[str], *, complete: bool
) -> list[ConfigProblem]:
    """``[tools.NAME]`` overrides whose tool is not registered (checked after registration).

    :param complete: every installed plugin is loaded and registered, so a missing tool is a
        misspelling (an error); otherwise it may belong to a plugin left out (a warning).
    """
    tools = config.settings.get("tools")
    if not isinstance(tools, Mapping):
        return []
    names = set(registered)
    prefix = config.table_prefix
    out = []
    for name in tools:
        if name in names:
            continue
        why = "" if complete else " (it may belong to a plugin that is disabled or failed)"
        out.append(
            ConfigProblem(
                file=config.source or "config",
                table=".".join(p for p in (prefix, "tools") if p),
                key=str(name),
                message=f"override for a tool that does not exist{_suggest(str(name), names)}{why}",
                severity="error" if complete else "warning",
            )
        )
    return out
