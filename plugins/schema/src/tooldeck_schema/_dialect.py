"""JSON Schema 2019-09 / 2020-12: validated by their own dialect, with time-safe patterns.

fastjsonschema implements drafts 4, 6 and 7. A schema of a later dialect (declared with
``$schema``, or using keywords only those dialects have: ``prefixItems``, ``dependentRequired``,
``dependentSchemas``, ``unevaluatedProperties``, ``unevaluatedItems``, ``$defs`` with
``$dynamicRef``, ``minContains`` / ``maxContains``) would be mis-validated by it: ``prefixItems``
plus ``items: false`` rejects valid input (draft 7 reads ``items: false`` as "no items at all"),
``dependentRequired`` and ``unevaluatedProperties`` are not enforced. Such schemas are validated
by the ``jsonschema`` library's validator for their dialect instead (the fast path stays
fastjsonschema for everything else), with ``pattern`` and ``patternProperties`` run through the
same RE2-backed :func:`~tooldeck_schema._regex.safe_regex` as the fast path, never Python's
backtracking ``re``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ._regex import safe_regex

__all__ = ["LATER_KEYWORDS", "dialect_validator", "fallback_validator", "later_dialect"]

#: Keywords that exist only from draft 2019-09 on.
LATER_KEYWORDS = frozenset({
    "prefixItems", "dependentRequired", "dependentSchemas", "unevaluatedProperties",
    "unevaluatedItems", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
    "minContains", "maxContains",
})
_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_VALUES = frozenset({"enum", "const", "default", "examples"})


def later_dialect(schema: Any) -> str | None:
    """``"2020-12"`` or ``"2019-09"`` when ``schema`` needs a later dialect than draft 7, else
    None (the declared ``$schema`` wins; without one, a later-only keyword means 2020-12)."""
    if not isinstance(schema, Mapping):
        return None
    declared = schema.get("$schema")
    if isinstance(declared, str):
        if "2020-12" in declared:
            return "2020-12"
        if "2019-09" in declared:
            return "2019-09"
        return None  # an earlier draft, declared: fastjsonschema's
    return "2020-12" if _uses_later_keywords(schema) else None


def _uses_later_keywords(schema: Any) -> bool:
    stack: list[tuple[Any, bool]] = [(schema, False)]
    while stack:
        node, is_map = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in node)
        elif isinstance(node, Mapping):
            if is_map:
                stack.extend((value, False) for value in node.values())
                continue
            for key, value in node.items():
                if key in LATER_KEYWORDS:
                    return True
                if key in _MAPS:
                    stack.append((value, True))
                elif key not in _VALUES:
                    stack.append((value, False))
    return False


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

    if validator.is_type(instance, "string") and not safe_regex(pattern).search(instance):
        shown = instance if len(instance) <= 100 else instance[:100] + "..."
        yield ValidationError(f"{shown!r} does not match {pattern[:200]!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = safe_regex(pattern)
        for key, value in instance.items():
            if compiled.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

    if not validator.is_type(instance, "object"):
        return
    known = set(schema.get("properties", {}))
    patterns = [safe_regex(p) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in known and not any(p.search(k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        names = ", ".join(repr(e)[:100] for e in extras[:10])
        yield ValidationError(f"unknown field(s) {names}")


def dialect_validator(schema: Mapping[str, Any], dialect: str) -> Any:
    """A ``jsonschema`` validator of ``dialect`` for ``schema``, with time-safe patterns and
    format checks.

    :raises ValueError: the schema is not valid in its dialect.
    """
    import jsonschema  # type: ignore[import-untyped]
    from jsonschema import validators  # type: ignore[import-untyped]

    base = {
        "2020-12": jsonschema.Draft202012Validator,
        "2019-09": jsonschema.Draft201909Validator,
        "draft-07": jsonschema.Draft7Validator,
        "draft-06": jsonschema.Draft6Validator,
        "draft-04": jsonschema.Draft4Validator,
    }[dialect]
    try:
        base.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema {dialect}: {exc.message}") from None
    safe = validators.extend(base, {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    })
    return safe(schema, format_checker=base.FORMAT_CHECKER)


def fallback_validator(schema: Mapping[str, Any]) -> Any:
    """A ``jsonschema`` validator for a draft 4-7 schema fastjsonschema cannot compile.

    fastjsonschema turns a schema into Python source, and CPython refuses source with more than
    20 nested blocks: about 19 levels of ``anyOf`` / ``oneOf`` / ``not``, which real generated
    catalogs (union types of union types) do reach. The interpreted validator has no such limit;
    it is slower, so only those schemas use it. Draft 7 unless ``$schema`` names draft 4 or 6.

    :raises ValueError: the schema is not valid in its dialect.
    """
    declared = schema.get("$schema")
    dialect = "draft-07"
    if isinstance(declared, str):
        for name in ("draft-04", "draft-06"):
            if name in declared:
                dialect = name
    return dialect_validator(schema, dialect)
