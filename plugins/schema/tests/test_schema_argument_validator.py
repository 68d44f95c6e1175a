"""tooldeck_argument_validator: per-field problems with JSON paths and actionable messages."""

from __future__ import annotations

import time
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tooldeck_schema import SchemaArgumentValidator, json_path, plugin

from tooldeck_hookspecs import ArgumentProblem, ToolDefinition

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
        "count": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "size": {"type": "number"}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
        "options": {
            "type": "object",
            "properties": {"deep": {"type": "boolean"},
                           "mode": {"enum": ["fast", "safe"]}},
            "additionalProperties": False,
        },
        "target": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "odd key": {"type": "integer"},
    },
    "required": ["path"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def validate() -> SchemaArgumentValidator:
    tool = ToolDefinition(name="demo", description="d", category="test", parameters=SCHEMA)
    return plugin.tooldeck_argument_validator(tool=tool)


def by_path(problems: list[ArgumentProblem]) -> dict[str, ArgumentProblem]:
    assert len({p.path for p in problems}) == len(problems), problems
    return {p.path: p for p in problems}


def test_valid_arguments_have_no_problems(validate):
    assert validate({"path": "a.txt"}) == []
    assert validate({"path": "a", "encoding": "base64", "count": 3, "tags": ["x"],
                     "items": [{"name": "n", "size": 1.5}], "options": {"deep": True},
                     "target": 4, "odd key": 1}) == []
    assert validate(MappingProxyType({"path": "a"})) == []  # any Mapping, not only dict


def test_validation_never_fills_defaults_into_the_arguments():
    validate = SchemaArgumentValidator({"type": "object",
                                        "properties": {"n": {"type": "integer", "default": 3}}})
    arguments: dict = {}
    assert validate(arguments) == [] and arguments == {}


def test_missing_required_field(validate):
    (problem,) = validate({})
    assert problem.path == "$.path"
    assert problem.message == "missing required field 'path' (expected string)"
    assert problem.expected == "string"


def test_wrong_types_name_the_expected_type(validate):
    problems = by_path(validate({"path": 3, "count": "3", "options": {"deep": "yes"}}))
    assert problems["$.path"].message == "expected string, got integer"
    assert problems["$.count"].message == "expected integer, got string"
    assert problems["$.options.deep"].message == "expected boolean, got string"
    assert problems["$.options.deep"].expected == "boolean"


def test_enum_lists_allowed_values_and_suggests(validate):
    problems = by_path(validate({"path": "a", "encoding": "utf8", "options": {"mode": "quick"}}))
    enc = problems["$.encoding"]
    assert '["utf-8", "base64"]' in enc.message and "did you mean 'utf-8'?" in enc.message
    assert enc.expected == ["utf-8", "base64"]
    assert '["fast", "safe"]' in problems["$.options.mode"].message


def test_unknown_fields_get_the_closest_known_name(validate):
    problems = by_path(validate({"pth": "a.txt", "encodng": "utf-8", "zzz": 1}))
    assert problems["$.path"].message.startswith("missing required field 'path'")
    assert problems["$.pth"].message == "unknown field 'pth'; did you mean 'path'?"
    assert "did you mean 'encoding'?" in problems["$.encodng"].message
    assert problems["$.zzz"].message.startswith("unknown field 'zzz'; known fields:")


def test_nested_objects_and_arrays_report_each_bad_field(validate):
    problems = by_path(validate({
        "path": "a",
        "items": [{"name": "ok"}, {}, {"name": 3}, {"name": "x", "size": "big", "colour": 1}],
        "tags": ["a", 2, "c", "d"],
    }))
    assert problems["$.items[1].name"].message.startswith("missing required field 'name'")
    assert problems["$.items[2].name"].message == "expected string, got integer"
    assert problems["$.items[3].size"].message == "expected number, got string"
    assert problems["$.items[3].colour"].message.startswith("unknown field 'colour'")
    assert problems["$.tags[1]"].message == "expected string, got integer"
    assert "$.tags" in problems  # maxItems
    assert "$.items[0].name" not in problems


def test_any_of_and_constraints(validate):
    problems = by_path(validate({"path": "", "count": -1, "target": [1]}))
    assert problems["$.target"].message == "expected string or integer, got array"
    assert "1" in problems["$.path"].message  # minLength 1
    assert "0" in problems["$.count"].message  # minimum 0


def test_odd_keys_are_quoted_in_paths(validate):
    (problem,) = validate({"path": "a", "odd key": "x"})
    assert problem.path == '$["odd key"]'


def test_non_object_arguments_are_a_problem_at_the_root(validate):
    for bad in ([1, 2], "path=a", 3, None):
        (problem,) = validate(bad)  # type: ignore[arg-type]
        assert problem.path == "$" and "JSON object" in problem.message


def test_non_json_values_do_not_crash(validate):
    problems = validate({"path": object()})
    assert problems and problems[0].path in ("$", "$.path")


def test_json_path_rendering():
    assert json_path([]) == "$"
    assert json_path(["items", 2, "name"]) == "$.items[2].name"
    assert json_path(["a.b", 0]) == '$["a.b"][0]'


def test_keys_with_dots_are_located_in_the_data():
    validate = SchemaArgumentValidator({
        "type": "object",
        "properties": {"a.b": {"type": "object", "properties": {"c": {"type": "integer"}}},
                       "a": {"type": "object"}},
    })
    (problem,) = validate({"a.b": {"c": "x"}})
    assert problem.path == '$["a.b"].c'


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["path", "count", "encoding", "tags", "pth"]),
                       st.one_of(st.integers(), st.text(max_size=5), st.none(),
                                 st.lists(st.integers(), max_size=4))))
def test_problems_exist_exactly_when_the_arguments_are_invalid(arguments):
    validate = SchemaArgumentValidator(SCHEMA)
    problems = validate(arguments)
    valid = (
        isinstance(arguments.get("path"), str) and arguments["path"] != ""
        and "pth" not in arguments
        and ("count" not in arguments
             or (type(arguments["count"]) is int and arguments["count"] >= 0))
        and arguments.get("encoding", "utf-8") in ("utf-8", "base64")
        and ("tags" not in arguments
             or (isinstance(arguments["tags"], list) and arguments["tags"] == []))
    )
    assert (problems == []) == valid, (arguments, problems)
    for problem in problems:
        assert problem.path.startswith("$") and problem.message


def test_validator_speed_is_reported(validate):
    """A benchmark, not an assertion on time: prints microseconds per valid call."""
    arguments = {"path": "a.txt", "encoding": "utf-8", "count": 3}
    n = 20_000
    start = time.perf_counter()
    for _ in range(n):
        validate(arguments)
    ok_us = (time.perf_counter() - start) / n * 1e6
    bad = {"pth": "a.txt", "count": "x"}
    start = time.perf_counter()
    for _ in range(2000):
        validate(bad)
    bad_us = (time.perf_counter() - start) / 2000 * 1e6
    print(f"\nargument validator: valid call {ok_us:.1f} us, invalid call (full report) "
          f"{bad_us:.1f} us")
    assert validate(arguments) == []


@pytest.mark.parametrize("dialect", [None, "https://json-schema.org/draft/2020-12/schema"])
def test_a_flood_of_bad_fields_is_explained_in_part_and_counted(dialect):
    """100k unknown keys from a model: the answer explains the first problems and counts the
    rest (an audit measured a 10 MB answer after 3.3 s of the event loop)."""
    schema = {"type": "object", "properties": {"value": {"type": "integer"}},
              "additionalProperties": False}
    if dialect:
        schema["$schema"] = dialect
    problems = SchemaArgumentValidator(schema)({f"k{i}": i for i in range(100_000)})
    assert 1 <= len(problems) <= 51
    if not dialect:
        assert problems[-1].message == "and 99950 more unknown fields"
        assert problems[0].message.startswith("unknown field 'k0'")
