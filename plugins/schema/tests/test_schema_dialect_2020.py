"""JSON Schema 2020-12 / 2019-09 is validated by its own dialect (issue 15), patterns time-safe.

Through the real deck: a tool whose parameters use prefixItems + items:false, dependentRequired,
unevaluatedProperties; draft-7 schemas keep fastjsonschema's fast path.
"""

from __future__ import annotations

import time

import pytest
from tooldeck_schema._arguments import SchemaArgumentValidator
from tooldeck_schema._dialect import later_dialect

from tooldeck import ErrorCode, ToolDefinition
from tooldeck.testing import make_deck

SCHEMA = {
    "type": "object",
    "properties": {
        "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}],
                  "items": False},
        "user": {"type": "string"},
        "password": {"type": "string"},
        "when": {"type": "string", "format": "date"},
    },
    "dependentRequired": {"user": ["password"]},
    "unevaluatedProperties": False,
}


def _echo(**arguments):
    return arguments


TOOL = ToolDefinition(name="place", description="Place a point.", category="demo",
                      parameters=SCHEMA, execute=_echo, call_style="kwargs")


@pytest.mark.parametrize(
    ("arguments", "ok", "words"),
    [
        ({"point": [1, 2]}, True, None),
        ({"point": [1, 2, 3]}, False, "at most 2"),
        ({"point": [1, "x"]}, False, "number"),
        ({"user": "ann"}, False, "dependency"),
        ({"user": "ann", "password": "pw"}, True, None),
        ({"extra": 1}, False, "Unevaluated"),
        ({"when": "2026-13-01"}, False, "date"),
    ],
)
async def test_a_2020_schema_is_validated_by_its_dialect_through_the_deck(arguments, ok, words):
    async with make_deck(load_entry_points=["schema", "runner"], tools=[TOOL]) as deck:
        result = await deck.session().call("place", arguments)
    if ok:
        assert result.success, result.error
    else:
        assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGUMENTS
        assert words in result.error.message


def test_the_dialect_is_the_declared_one_or_the_keywords():
    assert later_dialect(SCHEMA) == "2020-12"
    assert later_dialect({"$schema": "https://json-schema.org/draft/2019-09/schema"}) == "2019-09"
    assert later_dialect({"$schema": "http://json-schema.org/draft-07/schema#",
                          "prefixItems": []}) is None  # declared draft 7 wins
    assert later_dialect({"type": "object", "properties": {"prefixItems": {"type": "string"}}}) \
        is None  # a property named like a keyword is no keyword


def test_patterns_stay_time_safe_in_the_dialect_path():
    validator = SchemaArgumentValidator({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}},
        "patternProperties": {"^x_(a+)+$": {"type": "integer"}},
        "additionalProperties": False,
    })
    started = time.perf_counter()
    problems = validator({"s": "a" * 50_000 + "!", "x_" + "a" * 50_000 + "!": "no"})
    elapsed = time.perf_counter() - started
    paths = {p.path for p in problems}
    assert "$.s" in paths  # the pattern was checked (and failed), by RE2
    assert any("unknown field" in p.message for p in problems)  # the key matched no pattern
    assert all(len(p.message) < 1000 for p in problems)  # the model's long value is not echoed
    print(f"\n2020-12 path, ReDoS-shaped pattern on 50k chars: {elapsed * 1000:.1f} ms")


def test_an_invalid_2020_schema_is_refused_at_registration():
    from tooldeck_schema._compile import SchemaCompileError

    with pytest.raises(SchemaCompileError, match="2020-12"):
        SchemaArgumentValidator({"type": "object", "prefixItems": "not a list"})
