"""``pattern`` and ``patternProperties`` run on RE2 wherever they sit in a schema."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
from tooldeck_schema import SchemaArgumentValidator, SchemaCompileError, compile_schema
from tooldeck_schema._regex import FALLBACK_MAX_LENGTH, SafeRegex, backtracking_hazard, safe_regex

EVIL = "a" * 30 + "!"
NESTED = r"^(a+)+$"


def _regexes(validator: Any) -> dict[str, Any]:
    function = getattr(validator, "func", validator)
    return dict(function.__globals__.get("REGEX_PATTERNS", {}))


async def test_every_regex_of_a_schema_is_swapped_for_re2() -> None:
    schema = {
        "type": "object",
        "definitions": {"word": {"type": "string", "pattern": r"^(\w+\s?)*$"}},
        "properties": {
            "ref": {"$ref": "#/definitions/word"},
            # Properties whose *names* are keywords: their schemas are schemas all the same.
            "enum": {"type": "string", "pattern": "(a|aa)+$"},
            "pattern": {"type": "string", "pattern": NESTED},
            "deep": {"type": "array", "items": {"type": "string", "pattern": "(.*a){20}"}},
            "keys": {"type": "object", "propertyNames": {"pattern": "^([a-z]+)*$"}},
            "when": {"type": "string", "format": "date"},
        },
        "patternProperties": {"^x_(a+)+$": {"type": "integer"}},
    }
    validator = compile_schema(schema)
    table = _regexes(validator)
    schema_keys = {r"^(\w+\s?)*$", "(a|aa)+$", NESTED, "(.*a){20}", "^([a-z]+)*$",
                   "^x_(a+)+$"}
    assert schema_keys <= set(table)
    for key in schema_keys:
        assert isinstance(table[key], SafeRegex) and table[key].engine == "re2", key
    # fastjsonschema's own format regexes stay its own (behind a length bound, see _compile).
    assert all(
        isinstance(getattr(v, "regex", v), re.Pattern)
        for k, v in table.items()
        if k not in schema_keys
    )
    full = SchemaArgumentValidator(schema)
    with trio.fail_after(30):  # hang guard: these would backtrack for minutes in `re`
        bad = {"ref": EVIL, "enum": EVIL, "pattern": EVIL, "deep": ["a" * 19 + "x" * 30],
               "keys": {"ab1" * 10 + "!": 1}, "x_" + EVIL: 1}
        paths = {p.path for p in full(bad)}
    assert {"$.ref", "$.enum", "$.pattern", "$.deep[0]"} <= paths
    assert full({"ref": "two words", "enum": "aaa", "pattern": "aaaa", "x_aaa": 3}) == []


def test_json_schema_dollar_is_the_end_of_the_string() -> None:
    validate = SchemaArgumentValidator(
        {"type": "object", "properties": {"v": {"type": "string", "pattern": "^a+$"}}}
    )
    assert validate({"v": "aaa"}) == []
    assert validate({"v": "aaa\n"})  # Python's `$` would accept the final newline


def test_patterns_re2_cannot_run() -> None:
    # Benign backreference / lookaround: Python's engine, still enforced.
    backref = safe_regex(r"^(a)\1$")
    assert backref.engine == "re" and backref.search("aa") and not backref.search("ab")
    look = safe_regex(r"^(?=.*\d)\w+$")
    assert look.engine == "re" and look.search("abc1") and not look.search("abc")
    # Long values are not fed to the backtracking engine at all.
    assert not look.search("1" * (FALLBACK_MAX_LENGTH + 1))
    # Backtracking hazards with features RE2 lacks are refused with the reason.
    for pattern in (r"^((a+)+)\1$", r"(?=x)(a|aa)+$", r"^(\w+\s?)*(?<=z)$", r"(?!b)(.*a){3}"):
        assert backtracking_hazard(pattern), pattern
        with pytest.raises(SchemaCompileError, match="nested quantifiers"):
            compile_schema({"type": "string", "pattern": pattern})
    for pattern in (r"^(a)\1$", r"^(?=.*\d)[a-z0-9]{1,8}$", r"(ab)+\1"):
        assert backtracking_hazard(pattern) is None, pattern


def test_unicode_and_odd_strings() -> None:
    word = safe_regex(r"^\p{L}+$")
    assert word.engine == "re2" and word.search("Grüße") and not word.search("a1")
    assert not safe_regex("^a$").search("\ud800")  # a lone surrogate does not crash
