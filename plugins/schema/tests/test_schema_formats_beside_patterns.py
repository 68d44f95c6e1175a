"""A schema with a ``pattern`` and a ``format`` (uuid, date, ...) validates both.

Swapping the schema's patterns for RE2 once swapped fastjsonschema's own format regexes too
(``uuid`` is not in its ``FORMAT_REGEXS``): every such call failed with an AttributeError.
"""

from __future__ import annotations

import pytest
from tooldeck_schema._compile import compile_schema, schema_patterns

SCHEMA = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": r"^\d{5}$"},
        "ref": {"type": "string", "format": "uuid"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "mail": {"type": "string", "format": "email"},
    },
}

GOOD = {"code": "12345", "ref": "6f1c2d1e-0000-4000-8000-000000000001", "day": "2026-12-03",
        "at": "2026-12-03T10:00:00Z", "mail": "a@example.org"}


def test_good_values_pass():
    compile_schema(SCHEMA)(GOOD)


@pytest.mark.parametrize(
    ("field", "value"),
    [("code", "1234"), ("ref", "not-a-uuid"), ("day", "2026-13-01"), ("at", "yesterday"),
     ("mail", "nobody")],
)
def test_each_bad_value_is_refused_by_its_own_rule(field, value):
    import fastjsonschema

    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        compile_schema(SCHEMA)({**GOOD, field: value})


def test_only_the_schemas_own_patterns_are_collected():
    schema = {
        "properties": {
            "enum": {"pattern": "a+"},  # a property named like a keyword
            "x": {"enum": [{"pattern": "not-a-schema"}]},
        },
        "patternProperties": {"^k": {"items": {"pattern": "b"}}},
        "$defs": {"pattern": {"pattern": "c"}},
    }
    assert schema_patterns(schema) == {"a+", "^k", "b", "c"}
