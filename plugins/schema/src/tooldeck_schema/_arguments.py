"""Call-time argument validation: one compiled check on the hot path, a full report on failure."""

from __future__ import annotations

import difflib
import itertools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import fastjsonschema

from tooldeck_hookspecs import ArgumentProblem, shorten

from ._compile import SchemaCompileError, compile_schema, plain_json
from ._dialect import dialect_validator, fallback_validator, later_dialect
from ._regex import safe_regex

__all__ = ["SchemaArgumentValidator", "json_path", "json_type"]

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")

#: Problems explained per call; the rest are counted (a model sending 100k unknown keys got a
#: 10 MB answer after seconds of the event loop).
MAX_PROBLEMS = 50


def json_type(value: Any) -> str:
    """The JSON type name of a Python value, as a model would say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def json_path(segments: Sequence[str | int]) -> str:
    """Render ``["items", 2, "name"]`` as ``$.items[2].name`` (odd keys as ``$["a b"]``)."""
    out = ["$"]
    for seg in segments:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
            continue
        seg = shorten(seg, 100)  # a key the model made up may be megabytes long
        if _IDENT_RE.match(seg):
            out.append(f".{seg}")
        else:
            out.append(f"[{json.dumps(seg, ensure_ascii=False)}]")
    return "".join(out)


def _segments(name: str, instance: Any) -> list[str | int]:
    """Split fastjsonschema's ``data.items[2].name`` into keys, guided by the real data.

    The name alone is ambiguous for keys containing '.' or '[': matching against the keys the
    arguments really have picks the right split.
    """
    rest = name[4:] if name.startswith("data") else name
    node = instance
    segments: list[str | int] = []
    while rest:
        if rest.startswith("[") and "]" in rest:
            inner, rest = rest[1 : rest.index("]")], rest[rest.index("]") + 1 :]
            index: str | int = int(inner) if inner.lstrip("-").isdigit() else inner
            segments.append(index)
            try:
                node = node[index]
            except (KeyError, IndexError, TypeError):
                node = None
            continue
        if rest.startswith("."):
            rest = rest[1:]
        key = None
        if isinstance(node, Mapping):
            candidates = [
                k for k in node
                if isinstance(k, str) and rest.startswith(k)
                and (len(rest) == len(k) or rest[len(k)] in ".[")
            ]
            if candidates:
                key = max(candidates, key=len)
        if key is None:
            match = re.match(r"[^.\[]*", rest)
            key = match.group(0) if match else rest
        segments.append(key)
        rest = rest[len(key) :]
        node = node.get(key) if isinstance(node, Mapping) else None
    return segments


def _strip_name(message: str, name: str) -> str:
    return message[len(name) :].strip() if message.startswith(name) else message


def _type_text(schema: Any) -> str | None:
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(map(str, kind))
    if isinstance(kind, str):
        return kind
    if "enum" in schema:
        return "one of " + json.dumps(schema["enum"], ensure_ascii=False)
    return None


def _closest(word: str, options: Sequence[str]) -> str | None:
    if len(word) > 128:  # difflib is quadratic; no real field name is this long
        return None
    matches = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _explain_one(
    error: fastjsonschema.JsonSchemaValueException, arguments: Any
) -> list[ArgumentProblem]:
    name = error.name or "data"
    segments = _segments(name, arguments)
    path = json_path(segments)
    rule = error.rule
    definition = error.definition if isinstance(error.definition, Mapping) else {}
    value = error.value
    if rule == "type":
        expected = definition.get("type")
        text = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return [ArgumentProblem(path=path, message=f"expected {text}, got {json_type(value)}",
                                expected=expected)]
    if rule == "enum":
        allowed = definition.get("enum", [])
        message = (f"must be one of {shorten(json.dumps(allowed, ensure_ascii=False), 500)}, got "
                   f"{shorten(json.dumps(value, ensure_ascii=False, default=str))}")
        if isinstance(value, str):
            guess = _closest(value, [a for a in allowed if isinstance(a, str)])
            if guess is not None:
                message += f"; did you mean {guess!r}?"
        return [ArgumentProblem(path=path, message=message, expected=allowed)]
    if rule == "const":
        const = definition.get("const")
        return [ArgumentProblem(path=path, expected=const,
                                message=f"must be {json.dumps(const, ensure_ascii=False)}")]
    if rule == "required" and isinstance(value, Mapping):
        properties = definition.get("properties", {})
        return [
            ArgumentProblem(
                path=json_path([*segments, field]),
                message=f"missing required field {field!r}"
                + (f" (expected {kind})" if (kind := _type_text(properties.get(field))) else ""),
                expected=_type_text(properties.get(field)),
            )
            for field in definition.get("required", [])
            if field not in value
        ]
    if rule == "additionalProperties" and isinstance(value, Mapping):
        properties = list(definition.get("properties", {}))
        # The model chose these keys: match them time-safely, as the validator itself did.
        patterns = [safe_regex(p) for p in definition.get("patternProperties", {})]
        problems = []
        unknown = 0
        for field in value:
            if field in properties or any(p.search(str(field)) for p in patterns):
                continue
            unknown += 1
            if unknown > MAX_PROBLEMS:
                continue  # counted, not explained: 100k unknown keys cost seconds of hints
            guess = _closest(str(field), properties)
            hint = f"; did you mean {guess!r}?" if guess else (
                f"; known fields: {', '.join(properties)}" if properties else ""
            )
            # The model chose the name: echo a bounded piece of it, never all of it.
            shown = shorten(str(field), 100)
            problems.append(ArgumentProblem(path=json_path([*segments, shown]),
                                            message=f"unknown field {shown!r}{hint}",
                                            expected=properties))
        if unknown > MAX_PROBLEMS:
            problems.append(ArgumentProblem(
                path=json_path(segments),
                message=f"and {unknown - MAX_PROBLEMS} more unknown fields",
                expected=properties,
            ))
        if problems:
            return problems
    if rule in ("anyOf", "oneOf") and isinstance(error.rule_definition, list):
        forms = [t for t in map(_type_text, error.rule_definition) if t]
        if forms and rule == "anyOf":
            return [ArgumentProblem(path=path, expected=forms,
                                    message=f"expected {' or '.join(forms)}, got "
                                    f"{json_type(value)}")]
    return [ArgumentProblem(path=path, message=_strip_name(error.message, name),
                            expected=error.rule_definition)]


_FLAT = frozenset({str, int, bool, type(None)})


def non_finite_numbers(arguments: Any) -> list[ArgumentProblem]:
    """A problem for each NaN or infinite float in ``arguments`` (at most :data:`MAX_PROBLEMS`).

    JSON has no NaN and no Infinity, but Python's ``json.loads`` (how a model's arguments are
    usually parsed) reads ``NaN``, ``Infinity`` and ``-Infinity``. JSON Schema bounds cannot
    stop them: NaN compares false to everything, so ``minimum`` / ``maximum`` pass it, and
    Infinity passes a lone ``minimum``. They are refused here, for every schema. The walk is
    iterative (arguments are bounded in depth by the core, but this must never recurse).
    """
    problems: list[ArgumentProblem] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(arguments, ())]
    while stack:
        node, where = stack.pop()
        if isinstance(node, Mapping):
            items: Any = node.items()
        elif isinstance(node, list | tuple):
            items = enumerate(node)
        else:
            continue
        for key, value in items:
            kind = type(value)
            if kind in _FLAT:
                continue
            if kind is float or isinstance(value, float):
                if not math.isfinite(value):
                    text = "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
                    problems.append(ArgumentProblem(
                        path=json_path([*where, key if isinstance(key, int) else str(key)]),
                        message=f"{text} is not a JSON number (JSON numbers are finite)",
                        expected="a finite number",
                    ))
                    if len(problems) >= MAX_PROBLEMS:
                        return problems
            elif isinstance(value, Mapping | list | tuple):
                stack.append((value, (*where, key if isinstance(key, int) else str(key))))
    return problems


class SchemaArgumentValidator:
    """Validates a tool's arguments against its ``parameters`` JSON Schema.

    Two validators: a fast one, compiled when the tool is registered, that stops at the first
    error with a bare message (the hot path, a few microseconds for a valid call), and one that
    collects every error with its details, compiled at the first invalid call (most tools of a
    short-lived process never see one), whose errors are rewritten into messages a model can act
    on: the expected type, the allowed values, the missing field, the closest known name.
    """

    __slots__ = ("_fast", "_all", "_dialect", "schema")

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        self.schema = plain_json(parameters)
        # A 2019-09 / 2020-12 schema is validated by its own dialect (see _dialect).
        dialect = later_dialect(self.schema)
        self._dialect: Any = None
        if dialect is not None:
            try:
                self._dialect = dialect_validator(self.schema, dialect)
            except ValueError as exc:
                raise SchemaCompileError(str(exc)) from None
            return
        try:
            self._fast = compile_schema(self.schema, detailed=False)
        except SchemaCompileError as exc:
            if not exc.codegen_limit:
                raise
            try:  # too deep for generated code: the interpreted validator takes it
                self._dialect = fallback_validator(self.schema)
            except ValueError as invalid:
                raise SchemaCompileError(str(invalid)) from None
            return
        self._all: Any = None

    def __call__(self, arguments: Mapping[str, Any], /) -> list[ArgumentProblem]:
        """The problems in ``arguments`` (empty list when they are valid)."""
        if type(arguments) is not dict:  # the usual case skips the ABC checks
            if not isinstance(arguments, Mapping):
                return [ArgumentProblem(
                    path="$", expected="object",
                    message=f"arguments must be a JSON object, got {json_type(arguments)}",
                )]
            arguments = dict(arguments)
        if self._dialect is not None:
            return self._dialect_problems(arguments) or non_finite_numbers(arguments)
        try:
            self._fast(arguments)
        except fastjsonschema.JsonSchemaException:
            return self.explain(arguments)
        except Exception as exc:  # odd (non-JSON) values must not crash a call
            return [ArgumentProblem(path="$", message=f"arguments are not valid JSON values "
                                    f"({type(exc).__name__}: {exc})")]
        # Valid for the schema; NaN and Infinity slip through any schema (see the function).
        return non_finite_numbers(arguments)

    def _dialect_problems(self, arguments: Mapping[str, Any]) -> list[ArgumentProblem]:
        try:
            errors = sorted(itertools.islice(self._dialect.iter_errors(arguments),
                                             MAX_PROBLEMS * 20),
                            key=lambda e: list(map(str, e.absolute_path)))
        except Exception as exc:  # odd (non-JSON) values must not crash a call
            return [ArgumentProblem(path="$", message=f"arguments are not valid JSON values "
                                    f"({type(exc).__name__}: {exc})")]
        problems = []
        for error in errors[:MAX_PROBLEMS]:
            validator = error.validator
            expected = error.validator_value if validator in ("type", "enum", "const") else None
            problems.append(ArgumentProblem(
                path=json_path(list(error.absolute_path)),
                message=shorten(str(error.message), 500),
                expected=expected,
            ))
        return problems

    def explain(self, arguments: Mapping[str, Any]) -> list[ArgumentProblem]:
        """Every problem in ``arguments`` (the slow path, after the fast check failed)."""
        if self._dialect is not None:
            return self._dialect_problems(arguments)
        if self._all is None:
            # The same schema compiled when the tool was registered: this cannot be refused.
            self._all = compile_schema(self.schema, fast_fail=False)
        try:
            self._all(arguments)
        except fastjsonschema.JsonSchemaValuesException as exc:
            errors = list(exc.errors)
        except fastjsonschema.JsonSchemaValueException as exc:
            errors = [exc]
        except Exception as exc:
            return [ArgumentProblem(path="$", message=f"arguments are not valid JSON values "
                                    f"({type(exc).__name__}: {exc})")]
        else:
            return []
        problems: list[ArgumentProblem] = []
        seen: set[tuple[str, str]] = set()
        for error in errors:
            for problem in _explain_one(error, arguments):
                if (problem.path, problem.message) not in seen:
                    seen.add((problem.path, problem.message))
                    problems.append(problem)
            if len(problems) > MAX_PROBLEMS:
                break  # a model's answer needs the first few, not a 10 MB list
        return problems
