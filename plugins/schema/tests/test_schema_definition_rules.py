"""tooldeck_validate_tool: every rule with a failing and a passing case."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from tooldeck_schema import plugin, validate_definition

from tooldeck_hookspecs import (
    ExecutionConfig,
    RateLimit,
    SecurityConfig,
    ToolDefinition,
)

PARAMS = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "url": {"type": "string"},
                   "cmd": {"type": "string"}},
    "required": ["path"],
}


def module_level_tool(arguments: dict[str, Any], context: Any) -> str:
    """A tool a sandbox worker could import."""
    return "ok"


class FakeCatalog:
    """The smallest Catalog: the tools registered so far."""

    def __init__(self, *tools: ToolDefinition) -> None:
        self._tools = {t.name: t for t in tools}

    def get(self, name: str) -> ToolDefinition | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolDefinition]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def by_category(self, category: str) -> list[ToolDefinition]:
        return [t for t in self._tools.values() if t.category == category]

    def categories(self) -> list[str]:
        return sorted({t.category for t in self._tools.values()})


def good(**changes: Any) -> ToolDefinition:
    base = ToolDefinition(
        name="file_read", description="Read a file.", category="filesystem", version="1.2.0",
        parameters=PARAMS, execute=module_level_tool, plugin="fs",
        security=SecurityConfig(path_params=("path",), url_params=("url",),
                                command_params=("cmd",), rate_limit=RateLimit(max_calls=5)),
    )
    if "parameters" in changes and "security" not in changes:
        changes["security"] = SecurityConfig()  # the security params name PARAMS' properties
    return attrs.evolve(base, **changes)


def sec(**changes: Any) -> SecurityConfig:
    return attrs.evolve(good().security, **changes)


def ex(**changes: Any) -> ExecutionConfig:
    return ExecutionConfig(**changes)


def check(tool: ToolDefinition, catalog: FakeCatalog | None = None) -> list[str]:
    return plugin.tooldeck_validate_tool(tool=tool, catalog=catalog or FakeCatalog())


def test_a_good_definition_has_no_problems():
    assert check(good()) == []


# (changes that break one rule, field named in the problem, changes that respect it)
CASES: list[tuple[dict[str, Any], str, dict[str, Any]]] = [
    ({"name": "FileRead"}, "name", {"name": "file_read2"}),
    ({"name": "2read"}, "name", {"name": "read_2"}),
    ({"name": "file-read"}, "name", {"name": "file_read"}),
    ({"name": "a" * 65}, "name", {"name": "a" * 64}),
    ({"version": ""}, "version", {"version": "0.1"}),
    ({"version": "one"}, "version", {"version": "2.0.0-beta.1+build.5"}),
    ({"version": "1.0.0.0.x"}, "version", {"version": "1.0.0rc1"}),
    ({"description": "  "}, "description", {"description": "Reads."}),
    ({"category": ""}, "category", {"category": "my_pack"}),
    ({"parameters": {"type": "array"}}, "parameters.type", {"parameters": {"type": "object"}}),
    ({"parameters": {"type": "object", "properties": {"a": {"type": "strin"}}}},
     "parameters.properties.a.type",
     {"parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}),
    ({"parameters": {"type": "object", "properties": {"a": {"minLength": -1}}}},
     "parameters.properties.a.minLength",
     {"parameters": {"type": "object", "properties": {"a": {"minLength": 0}}}}),
    ({"parameters": {"type": "object", "required": "path"}}, "parameters.required",
     {"parameters": {"type": "object", "required": []}}),
    ({"parameters": {"type": "object", "properties": {"a": {"pattern": "(unclosed"}}}},
     "parameters.properties.a.pattern",
     {"parameters": {"type": "object", "properties": {"a": {"pattern": "^[a-z]+$"}}}}),
    ({"parameters": {"type": "object", "properties": {"a": {"$ref": "#/definitions/nope"}}}},
     "parameters",
     {"parameters": {"type": "object", "properties": {"a": {"$ref": "#/definitions/s"}},
                     "definitions": {"s": {"type": "string"}}}}),
    ({"parameters": {"type": "object",
                     "properties": {"a": {"$ref": "https://example.invalid/s.json"}}}},
     "parameters",
     {"parameters": {"type": "object", "properties": {"a": {"$ref": "#/$defs/s"}},
                     "$defs": {"s": {"type": "string"}}}}),
    ({"parameters": {"type": "object", "properties": {"x": {}}, "required": ["pth"]}},
     "parameters.required",
     {"parameters": {"type": "object", "properties": {"pth": {}}, "required": ["pth"]}}),
    ({"parameters": {"type": "object", "properties": {"d": {"default": {1, 2}}}}},
     "parameters",
     {"parameters": {"type": "object", "properties": {"d": {"default": [1, 2]}}}}),
    ({"security": sec(allowed_paths=("",))}, "security.allowed_paths",
     {"security": sec(allowed_paths=("{workdir}", "/srv/data"))}),
    ({"security": sec(path_params=("pth",))}, "security.path_params",
     {"security": sec(path_params=("path",))}),
    ({"security": sec(url_params=("link",))}, "security.url_params",
     {"security": sec(url_params=("url",))}),
    ({"security": sec(command_params=("command",))}, "security.command_params",
     {"security": sec(command_params=("cmd",))}),
    ({"security": sec(rate_limit=RateLimit(max_calls=0))}, "security.rate_limit.max_calls",
     {"security": sec(rate_limit=RateLimit(max_calls=1))}),
    ({"security": sec(rate_limit=RateLimit(max_calls=3, window_s=0))},
     "security.rate_limit.window_s",
     {"security": sec(rate_limit=RateLimit(max_calls=3, window_s=0.5))}),
    # Accepted, then every call of the tool failed under Redis (PEXPIRE out of range).
    ({"security": sec(rate_limit=RateLimit(max_calls=3, window_s=1e300))},
     "security.rate_limit.window_s",
     {"security": sec(rate_limit=RateLimit(max_calls=3, window_s=366 * 86400))}),
    ({"execution": ex(timeout_s=0)}, "execution.timeout_s", {"execution": ex(timeout_s=0.1)}),
    # The configuration's bound ([tools.NAME.execution] timeout_s): 366 days, not one day.
    ({"execution": ex(timeout_s=366 * 86400 + 1)}, "execution.timeout_s",
     {"execution": ex(timeout_s=366 * 86400)}),
    ({"execution": ex(max_retries=11)}, "execution.max_retries",
     {"execution": ex(max_retries=10)}),
    ({"execution": ex(max_retries=-1)}, "execution.max_retries",
     {"execution": ex(max_retries=0)}),
    ({"execution": ex(cache_ttl_s=-1)}, "execution.cache_ttl_s",
     {"execution": ex(cache_ttl_s=0)}),
    ({"execution": ex(memory_mb=15)}, "execution.memory_mb", {"execution": ex(memory_mb=16)}),
    ({"execution": ex(max_output_bytes=1023)}, "execution.max_output_bytes",
     {"execution": ex(max_output_bytes=1024)}),
    ({"execution": ex(cache_context=("cwd",))}, "execution.cache_context",
     {"execution": ex(cache_context=("workdir",))}),
    # A declaration-only tool (no execute, no entrypoint) is fine unless it is sandboxed.
    ({"execute": None, "security": sec(sandbox=True)}, "execute",
     {"execute": None, "security": sec(sandbox=True),
      "entrypoint": f"{__name__}:module_level_tool"}),
    ({"entrypoint": "not a reference"}, "entrypoint",
     {"entrypoint": "tooldeck_schema.plugin:tooldeck_validate_tool"}),
    ({"security": sec(sandbox=True), "entrypoint": "tooldeck_schema.nope:run"}, "entrypoint",
     {"security": sec(sandbox=True),
      "entrypoint": "tooldeck_schema.plugin:tooldeck_validate_tool"}),
    ({"security": sec(sandbox=True), "entrypoint": "tooldeck_schema:NAME_RE"}, "entrypoint",
     {"security": sec(sandbox=True), "entrypoint": "tooldeck_schema:validate_definition"}),
    ({"security": sec(sandbox=True), "execute": lambda a, c: a}, "entrypoint",
     {"security": sec(sandbox=True), "execute": module_level_tool}),
    ({"call_style": "positional"}, "call_style", {"call_style": "kwargs"}),
]


@pytest.mark.parametrize(("bad", "field", "fixed"), CASES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_rule_fails_then_passes(bad, field, fixed):
    problems = check(good(**bad))
    assert problems, f"no problem found for {bad}"
    assert any(f": {field}:" in p for p in problems), problems
    assert check(good(**fixed)) == []


def test_security_level_must_be_a_security_level():
    security = SecurityConfig()
    object.__setattr__(security, "level", "reckless")  # bypass the converter, as a bug would
    problems = check(good(security=security))
    assert any(": security.level:" in p for p in problems)


def test_duplicate_names_name_both_plugins():
    first = good(plugin="fs")
    problems = check(good(plugin="other_fs"), FakeCatalog(first))
    (problem,) = problems
    assert "'fs'" in problem and "'other_fs'" in problem and ": name:" in problem
    assert check(good(plugin="other_fs", name="file_read_v2"), FakeCatalog(first)) == []


def test_several_problems_are_all_reported():
    tool = good(name="Bad-Name", version="", description="",
                execution=ex(timeout_s=-1, max_retries=99))
    fields = {p.split(": ")[1] for p in check(tool)}
    assert {"name", "version", "description", "execution.timeout_s",
            "execution.max_retries"} <= fields


_LINE = re.compile(r"^tool '(?P<tool>[^']*)' \(plugin '(?P<plugin>[^']*)'\): "
                   r"(?P<field>[\w.$\[\]]+): \S.*$")


def test_every_problem_names_tool_plugin_and_field():
    for bad, _field, _fixed in CASES:
        tool = good(**bad)
        for problem in check(tool):
            match = _LINE.match(problem)
            assert match, problem
            assert match["tool"] == tool.name and match["plugin"] == "fs"
            assert "\n" not in problem
            assert match["field"].split(".")[0] in {
                "name", "version", "description", "category", "parameters", "security",
                "execution", "execute", "entrypoint", "call_style"}


def test_example_message_from_the_brief():
    tool = good(parameters={"type": "object", "properties": {"path": {"type": "string"}},
                            "required": ["pth"]}, security=sec(path_params=("path",),
                                                               url_params=(), command_params=()))
    assert check(tool) == [
        "tool 'file_read' (plugin 'fs'): parameters.required: 'pth' is not a property"
    ]


def test_2020_12_schemas_are_accepted():
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}]},
                       "item": {"$ref": "#/$defs/item"}},
        "$defs": {"item": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    }
    assert validate_definition(good(parameters=schema, security=SecurityConfig())) == []


def test_validation_without_catalog_and_unknown_plugin():
    problems = validate_definition(good(plugin=None, name="X"))
    assert problems and problems[0].startswith("tool 'X' (plugin 'unknown'): name:")
