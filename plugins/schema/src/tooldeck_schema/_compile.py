"""Compiling JSON Schemas with fastjsonschema, safely and once.

fastjsonschema fetches remote ``$ref`` targets with urllib when no handler is registered for
the scheme. A tool's schema must never make the deck reach the network at start-up, so every
scheme gets a handler that refuses, and remote references are reported as problems before
compiling.

fastjsonschema also runs ``pattern`` and ``patternProperties`` with Python's backtracking
``re``: after compiling, every regex of the schema in the generated code's ``REGEX_PATTERNS``
table is swapped for its time-safe :class:`~tooldeck_schema._regex.SafeRegex` (RE2), so a
hostile value cannot stall validation (see :mod:`tooldeck_schema._regex`).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import fastjsonschema

from tooldeck_hookspecs import local_ref_target

from ._metaschema import DRAFT7_METASCHEMA
from ._regex import UnsafePatternError, safe_regex

__all__ = [
    "SchemaCompileError",
    "compile_schema",
    "remote_refs",
    "ref_cycle",
    "plain_json",
    "meta_validate",
]

Validator = Callable[[Any], Any]


class SchemaCompileError(ValueError):
    """fastjsonschema could not turn a schema into a validator.

    ``codegen_limit`` is True when the schema is fine but the Python code fastjsonschema
    generated for it is not: CPython allows 20 nested blocks and 100 indentation levels, and
    every ``anyOf`` / ``oneOf`` / ``not`` level opens a ``try`` block. Such a schema is
    validated by the ``jsonschema`` library instead (see :func:`~tooldeck_schema._dialect.
    fallback_validator`).
    """

    def __init__(self, message: str, *, codegen_limit: bool = False) -> None:
        super().__init__(message)
        self.codegen_limit = codegen_limit


def _refuse_remote(uri: str) -> Any:
    raise ValueError(f"remote $ref {uri!r} is not allowed (schemas must be self-contained)")


_HANDLERS: dict[str, Callable[[str], Any]] = {
    scheme: _refuse_remote for scheme in ("http", "https", "file", "ftp", "data", "urn", "")
}

# Compiled validators keyed by (canonical schema text, fast_fail, detailed). The register stage
# compiles a schema to check it and the argument validator needs the same function: compile once.
# Least recently used first out, at most _CACHE_MAX entries: a long-lived deck that registers
# tools at run time (Deck.add_tools, an MCP server reloaded with changed schemas) compiles new
# schemas for weeks, and each entry holds the schema's text and generated code. A validator
# evicted here stays valid for whoever holds it (the catalog does); only a recompile costs.
_CACHE_MAX = 1024
_cache: OrderedDict[tuple[str, bool, bool], Validator] = OrderedDict()
_lock = threading.Lock()


def plain_json(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``schema`` made of plain dicts and lists; raises TypeError if not JSON
    and ValueError for NaN or an infinity (Python's ``json`` writes them as ``NaN``, which no
    provider's JSON parser reads: one such default in one tool's schema failed every request
    that carried the tool)."""
    return json.loads(  # type: ignore[no-any-return]
        json.dumps(schema, sort_keys=True, allow_nan=False)
    )


def _walk_refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            elif key not in ("enum", "const", "default", "examples"):
                yield from _walk_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk_refs(item)


# fastjsonschema keeps its own format regexes (date, email, ...) in the same table under these
# keys: they are the library's, not the schema's, and stay as they are.
_FORMAT_KEYS = frozenset(
    f"{name}_re_pattern"
    for generator in (
        fastjsonschema.draft04.CodeGeneratorDraft04,
        fastjsonschema.draft06.CodeGeneratorDraft06,
        fastjsonschema.draft07.CodeGeneratorDraft07,
    )
    for name in getattr(generator, "FORMAT_REGEXS", {})
)


def _make_time_safe(validator: Validator, schema: Any = None) -> None:
    """Swap the generated code's ``re`` objects for RE2 ones (see the module docstring).

    Every regex the schema brought (``pattern`` values, ``patternProperties`` keys, wherever
    they sit, including ``$ref`` targets) is in the generated code's ``REGEX_PATTERNS`` table,
    keyed by its source text.
    """
    function = getattr(validator, "func", validator)  # functools.partial when formats are set
    namespace = getattr(function, "__globals__", {})
    table = namespace.get("REGEX_PATTERNS")
    if table is None:
        return  # no regex in this schema
    if not isinstance(table, dict):
        # A fastjsonschema whose generated code we do not know: fail closed, never run `re`.
        raise SchemaCompileError(
            "this fastjsonschema version keeps its regexes where tooldeck cannot make them "
            "time-safe; install fastjsonschema<3"
        )
    # Only the schema's own patterns: the generated code calls ``.search`` on those, while the
    # library's format regexes (date, uuid, ...; not all listed in FORMAT_REGEXS) get ``.match``
    # and stay Python regexes, which are fixed and linear.
    own = schema_patterns(schema) if schema is not None else None
    for key in list(table):
        if (key in own) if own is not None else key not in _FORMAT_KEYS:
            table[key] = safe_regex(key)
        elif key in _FORMAT_MAX_CHARS and not isinstance(table[key], _LengthBounded):
            table[key] = _LengthBounded(table[key], _FORMAT_MAX_CHARS[key])


#: The longest value each of fastjsonschema's format regexes is run on; longer ones are not of
#: the format. Those regexes are Python's ``re``, which holds the GIL while it matches: the
#: ``email`` and ``idn-email`` ones backtrack quadratically (``"a.." * 20_000``: seconds), the
#: others cost up to ~250 ns a character, so a model's megabytes would freeze every session
#: even from a worker thread. The bounds are the formats' own (RFC 5321's 320-character
#: address, RFC 1035's 253-character name, an IP or a timestamp's few dozen characters), or
#: far beyond any real value of it.
_FORMAT_MAX_CHARS = {
    "email_re_pattern": 320,
    "idn-email_re_pattern": 320,
    "hostname_re_pattern": 253,
    "idn-hostname_re_pattern": 253,
    "ipv4_re_pattern": 64,
    "ipv6_re_pattern": 64,
    "date-time_re_pattern": 128,
    "date_re_pattern": 128,
    "time_re_pattern": 128,
    "json-pointer_re_pattern": 65_536,
    "relative-json-pointer_re_pattern": 65_536,
    "uri-template_re_pattern": 65_536,
    "uri-reference_re_pattern": 1_048_576,
    "iri-reference_re_pattern": 1_048_576,
    "uri_re_pattern": 4_194_304,
    "iri_re_pattern": 4_194_304,
}


#: The longest value of ``format: regex`` compiled to check it. fastjsonschema's own check is
#: ``re.compile(value)``, whose pure-Python parser takes ~1.2 s per MB of a model's text; no
#: real pattern is this long.
MAX_REGEX_FORMAT_CHARS = 16_384


def _is_regex(value: str) -> bool:
    """``format: regex``: ``value`` compiles as a Python regular expression, within
    :data:`MAX_REGEX_FORMAT_CHARS` (longer ones are refused unread)."""
    if len(value) > MAX_REGEX_FORMAT_CHARS:
        return False
    try:
        re.compile(value)
    except Exception:  # re.error, and RecursionError / OverflowError on pathological nesting
        return False
    return True


_REGEX_FORMAT = {"regex": _is_regex}


class _LengthBounded:
    """A format regex whose ``match`` refuses values longer than ``limit`` unread."""

    __slots__ = ("limit", "regex")

    def __init__(self, regex: Any, limit: int) -> None:
        self.regex = regex
        self.limit = limit

    def match(self, value: str) -> Any:
        """``regex.match(value)``, or None when ``value`` is longer than the format allows."""
        if len(value) > self.limit:
            return None
        return self.regex.match(value)


def schema_patterns(schema: Any) -> set[str]:
    """Every regex a schema brings: ``pattern`` values and ``patternProperties`` keys."""
    found: set[str] = set()
    # (node, is_map): a map is {name: schema} (properties, $defs, ...), whose keys are names
    # even when they spell keywords ("enum", "pattern").
    stack: list[tuple[Any, bool]] = [(schema, False)]
    while stack:
        node, is_map = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in node)
        elif not isinstance(node, Mapping):
            continue
        elif is_map:
            stack.extend((value, False) for value in node.values())
        else:
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    found.add(value)
                elif key == "patternProperties" and isinstance(value, Mapping):
                    found.update(k for k in value if isinstance(k, str))
                    stack.append((value, True))
                elif key in _SCHEMA_MAPS:
                    stack.append((value, True))
                elif key not in ("enum", "const", "default", "examples"):
                    stack.append((value, False))
    return found


_SCHEMA_MAPS = frozenset(
    {"properties", "definitions", "$defs", "dependentSchemas", "dependencies"}
)


def remote_refs(schema: Mapping[str, Any]) -> list[str]:
    """Every ``$ref`` in ``schema`` that does not point inside the schema itself."""
    return [ref for ref in _walk_refs(schema) if not ref.startswith("#")]


#: Keywords whose subschemas apply to the same value as the schema holding them: following only
#: these, a validator never descends into the value, so a cycle among them never ends.
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _in_place(node: Mapping[str, Any], root: Any) -> Iterator[tuple[str, Any]]:
    """``(how, subschema)`` for each subschema that applies to the same value as ``node``."""
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = local_ref_target(root, ref)
        if isinstance(target, Mapping):
            yield ref, target
    for key in _IN_PLACE_LISTS:
        items = node.get(key)
        if isinstance(items, list):
            for index, item in enumerate(items):
                if isinstance(item, Mapping):
                    yield f"{key}[{index}]", item
    for key in _IN_PLACE_ONE:
        item = node.get(key)
        if isinstance(item, Mapping):
            yield key, item
    for key in ("dependencies", "dependentSchemas"):
        table = node.get(key)
        if isinstance(table, Mapping):
            for name, item in table.items():
                if isinstance(item, Mapping):
                    yield f"{key}.{name}", item


def ref_cycle(schema: Any) -> str | None:
    """A ``$ref`` loop of ``schema`` that never descends into the value, as text
    (``#/definitions/a -> #/definitions/b -> #/definitions/a``), or None.

    ``{"definitions": {"a": {"$ref": "#/definitions/a"}}}`` (or a loop through ``allOf``,
    ``anyOf``, ``not``, ...) makes every validation recurse until Python's recursion limit:
    each call would fail with a RecursionError that has nothing to do with the arguments.
    Recursive schemas that descend (``{"properties": {"child": {"$ref": "#"}}}``) are fine.
    Iterative: a schema nested thousands of levels deep cannot exhaust the stack here.
    """
    # Every schema node, map-aware: the keys of "properties" & co. are names, not keywords.
    nodes: list[Mapping[str, Any]] = []
    pointers: dict[int, str] = {}  # where each node is, to name the loop's start
    stack: list[tuple[Any, bool, str]] = [(schema, False, "#")]
    while stack:
        node, is_map, pointer = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False, f"{pointer}/{i}") for i, item in enumerate(node))
        elif not isinstance(node, Mapping):
            continue
        elif is_map:
            stack.extend((value, False, f"{pointer}/{_escape(str(key))}")
                         for key, value in node.items())
        else:
            nodes.append(node)
            pointers.setdefault(id(node), pointer)
            for key, value in node.items():
                where = f"{pointer}/{_escape(str(key))}"
                if key in _SCHEMA_MAPS or key == "patternProperties":
                    stack.append((value, True, where))
                elif key not in ("enum", "const", "default", "examples"):
                    stack.append((value, False, where))
    # Depth-first search for a cycle among the in-place edges (white / grey / black).
    done: set[int] = set()
    for start in nodes:
        if id(start) in done:
            continue
        path: list[tuple[Mapping[str, Any], Iterator[tuple[str, Any]], str]] = [
            (start, _in_place(start, schema), "")
        ]
        on_path = {id(start)}
        while path:
            node, edges, _ = path[-1]
            step = next(edges, None)
            if step is None:
                path.pop()
                on_path.discard(id(node))
                done.add(id(node))
                continue
            how, child = step
            if id(child) in on_path:
                first = next(i for i, entry in enumerate(path) if entry[0] is child)
                hops = [entry[2] for entry in path[first + 1 :]] + [how]
                return " -> ".join([pointers.get(id(child), "#"), *hops])
            if id(child) not in done:
                path.append((child, _in_place(child, schema), how))
                on_path.add(id(child))
    return None


# Keywords whose value maps names to subschemas, and keywords whose value is data, not schema.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "definitions", "$defs",
                          "dependencies", "dependentSchemas"})
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})


def _const_as_enum(schema: Any) -> None:
    """Rewrite every ``const: x`` as ``enum: [x]``, in place (the same check).

    fastjsonschema 2.x generates ``const`` checks that name the rule in their message, and
    without detailed exceptions there is no rule to name: compiling any schema with ``const``
    raised ``KeyError: 'definition_rule'``, so every tool with a one-value ``Literal``
    (Pydantic writes ``const``) was refused at registration.
    """
    stack: list[tuple[Any, bool]] = [(schema, False)]
    while stack:
        node, is_map = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in node)
        elif isinstance(node, dict):
            if is_map:
                stack.extend((value, False) for value in node.values())
                continue
            if "const" in node:
                value = node.pop("const")
                if "enum" in node and isinstance(node["enum"], list):
                    # Both must hold: keep the enum's members equal to the constant.
                    # (JSON: 1 and 1.0 are one number, true is not 1.)
                    node["enum"] = [v for v in node["enum"] if v == value and
                                    isinstance(v, bool) == isinstance(value, bool)]
                else:
                    node["enum"] = [value]
            for key, value in node.items():
                if key in _SCHEMA_MAPS:
                    stack.append((value, True))
                elif key not in _DATA_KEYWORDS:
                    stack.append((value, False))


def compile_schema(
    schema: Mapping[str, Any], *, fast_fail: bool = True, detailed: bool = True
) -> Validator:
    """Compile ``schema`` (cached). Defaults are not filled in: validation never mutates input.

    ``detailed=False`` gives exceptions that carry only a message (no ``name``, ``rule``,
    ``value``): the same checks, with generated code several times smaller and faster to
    compile (the Draft 7 metaschema: ~5 ms instead of ~30), for validators whose exception only
    says "invalid" before a detailed validator explains it.

    Raises :class:`SchemaCompileError` with fastjsonschema's reason when the schema is unusable.
    """
    plain = plain_json(schema)
    key = (json.dumps(plain, sort_keys=True, separators=(",", ":")), fast_fail, detailed)
    with _lock:
        validator = _cache.get(key)
        if validator is not None:
            _cache.move_to_end(key)
            return validator
    refs = remote_refs(plain)
    if refs:
        raise SchemaCompileError(f"remote $ref {refs[0]!r} is not allowed (use '#/...' refs)")
    if not detailed:
        _const_as_enum(plain)
    # Only a schema that uses the format pays for the custom-format indirection. The metaschema
    # keeps fastjsonschema's own check: it judges packs' schemas, not a model's arguments, and
    # its shipped copy (_metaschema_code) must give the same messages.
    formats = (
        _REGEX_FORMAT
        if '"format":"regex"' in key[0] and plain != DRAFT7_METASCHEMA
        else {}
    )
    try:
        validator = fastjsonschema.compile(
            plain,
            handlers=_HANDLERS,
            formats=formats,
            use_default=False,
            use_formats=True,
            detailed_exceptions=detailed,
            fast_fail=fast_fail,
        )
    except (SyntaxError, RecursionError, MemoryError) as exc:
        # The schema nests combinators deeper than Python can compile (see SchemaCompileError).
        raise SchemaCompileError(
            f"nested too deeply for the compiled validator ({type(exc).__name__}: {exc})",
            codegen_limit=True,
        ) from exc
    except Exception as exc:  # fastjsonschema raises several kinds on bad input
        raise SchemaCompileError(f"{type(exc).__name__}: {exc}") from exc
    try:
        _make_time_safe(validator, plain)
    except UnsafePatternError as exc:
        raise SchemaCompileError(str(exc)) from exc
    with _lock:
        _cache[key] = validator
        while len(_cache) > _CACHE_MAX:
            _cache.popitem(last=False)
    return validator


_meta_validator: Validator | None = None

#: fastjsonschema's options for the plain metaschema validator (see :func:`meta_validate`).
_META_OPTIONS: dict[str, Any] = {
    "use_default": False, "use_formats": True, "detailed_exceptions": False, "fast_fail": True,
}


def metaschema_key() -> str:
    """What the plain metaschema validator's code depends on: the metaschema, the
    fastjsonschema version and the options (a digest, recorded in the generated module)."""
    import hashlib

    text = json.dumps(
        [plain_json(DRAFT7_METASCHEMA), fastjsonschema.VERSION, _META_OPTIONS],
        sort_keys=True, separators=(",", ":"),
    )
    return hashlib.sha256(text.encode()).hexdigest()


def metaschema_code() -> str:
    """The source of ``_metaschema_code.py``: the plain metaschema validator's generated code
    with its :func:`metaschema_key` (written by ``scripts/generate_metaschema_code.py``)."""
    code = fastjsonschema.compile_to_code(
        plain_json(DRAFT7_METASCHEMA), handlers=_HANDLERS, **_META_OPTIONS
    )
    if "Decimal" in code and "from decimal import Decimal" not in code:
        # fastjsonschema's "format": "regex" replaces its import lines with "import re", so
        # the number checks' Decimal (in compile()'s namespace) is missing from the code.
        code = "from decimal import Decimal\n" + code
    return (
        '"""The Draft 7 metaschema validator, generated by fastjsonschema: do not edit.\n\n'
        "Regenerate with ``python plugins/schema/scripts/generate_metaschema_code.py`` when the "
        "metaschema\nor fastjsonschema changes (a stale copy is not used: see KEY).\n"
        '"""\n# ruff: noqa\n# mypy: ignore-errors\n'
        f"KEY = {metaschema_key()!r}\n{code}"
    )


def _plain_meta_validator() -> Validator:
    # The generated code of the metaschema is ~27 kB: compiling it costs a new process ~10 ms
    # at its first registration. Shipped as a module, it loads from the bytecode cache instead;
    # a copy made from another metaschema or fastjsonschema is ignored and compiled afresh.
    try:
        from . import _metaschema_code as generated
    except ImportError:
        generated = None
    if generated is not None and getattr(generated, "KEY", None) == metaschema_key():
        return generated.validate  # type: ignore[no-any-return]
    return compile_schema(DRAFT7_METASCHEMA, detailed=False)


def meta_validate(schema: Any) -> tuple[str, str] | None:
    """Check ``schema`` against the Draft 7 metaschema: ``(field, message)`` of the first
    problem (field like ``parameters.properties.path.type``), or None when it conforms."""
    global _meta_validator
    # Every tool registered at start-up passes through here: a plain validator checks, and
    # only a schema it refuses pays for the detailed one that names the field and the rule.
    if _meta_validator is None:
        _meta_validator = _plain_meta_validator()
    try:
        _meta_validator(schema)
    except fastjsonschema.JsonSchemaValueException:
        pass
    else:
        return None
    try:
        compile_schema(DRAFT7_METASCHEMA)(schema)
    except fastjsonschema.JsonSchemaValueException as exc:
        name = exc.name or "data"
        message = exc.message[len(name) :].strip() if exc.message.startswith(name) else exc.message
        if exc.rule == "anyOf" and name.endswith(".type"):
            message = (f"{exc.value!r} is not a JSON type (array, boolean, integer, null, number, "
                       "object, string)")
        return "parameters" + name[len("data") :], message
    return None
