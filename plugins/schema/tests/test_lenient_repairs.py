"""What lenient registration repairs passes this plugin's strict rules, and nothing else moves.

The core repairs definitions before the register stage sees them (it never imports a plugin),
so these tests hold the two together: every repaired definition is valid here.
"""

from __future__ import annotations

import pytest
from tooldeck_schema import MAX_NAME_LENGTH, NAME_RE, validate_definition
from tooldeck_schema._rules import LENIENT_HINT

from tooldeck import ToolDefinition
from tooldeck._catalog import (
    PROVIDER_NAME_LIMIT,
    ToolCatalog,
    normalise_name,
    provider_safe_name,
    repair_definition,
)

NASTY_NAMES = [
    "getWeather",
    "requests.get",
    "website_configuration_api.WebsiteConfigurationApi.get_all_website_configurations_by_id",
    "x" * 200,
    "3dPrint",
    "Café-Crème",
    "查询天气",
    "weather/forecast v2",
    "__private__",
    "",
]

NASTY_PARAMETERS = [
    None,
    {},
    {"properties": {"a": {"type": "str"}}},
    {"type": "dict", "properties": {"a": {"type": "tuple", "items": {"type": "float"}}}},
    {"type": "object", "properties": {"a": {"type": ["str", "null"]}}, "required": ["a", "b"]},
    {"type": "object", "properties": {}, "required": "a"},
    {"type": "object", "properties": {"a": {"anyOf": [{"type": "int"}, {"type": "bool"}]}}},
    # Nested `required` without `properties` is valid and kept.
    {"type": "object", "properties": {"a": {"type": "object", "required": ["x"]}}},
]


def test_the_core_and_the_plugin_agree_on_the_provider_limit():
    assert PROVIDER_NAME_LIMIT == MAX_NAME_LENGTH == 64


@pytest.mark.parametrize("name", NASTY_NAMES)
@pytest.mark.parametrize("parameters", NASTY_PARAMETERS)
def test_every_repaired_definition_passes_the_strict_rules(name, parameters):
    raw = ToolDefinition(
        name=name, description="", category="", parameters=parameters, plugin="catalog"
    )
    repaired, warnings = repair_definition(raw, lambda n: False)
    assert validate_definition(repaired) == []
    assert NAME_RE.match(repaired.name) and len(repaired.name) <= MAX_NAME_LENGTH
    assert repaired.description.strip() and repaired.category == "general"
    kinds = {w.kind for w in warnings}
    assert {"description_derived", "category_defaulted"} <= kinds
    assert len(kinds) == len(warnings)  # one warning per change
    assert all(w.tool == repaired.name and w.original == name for w in warnings)


def test_a_valid_definition_comes_back_unchanged_and_unreported():
    good = ToolDefinition(
        name="file_read",
        description="Read a file.",
        category="filesystem",
        parameters={"type": "object", "properties": {"path": {"type": "string"}},
                    "required": ["path"]},
    )
    repaired, warnings = repair_definition(good, lambda n: False)
    assert repaired is good and warnings == []


def test_nested_required_keys_without_properties_are_kept():
    from tooldeck._catalog import repair_parameters

    nested = {"type": "object", "properties": {"a": {"type": "object", "required": ["x"]}},
              "required": ["a", "b"]}
    fixed, changes = repair_parameters(nested)
    assert fixed["properties"]["a"]["required"] == ["x"] and fixed["required"] == ["a"]
    assert changes == ["parameters.required entries that are not properties dropped: ['b']"]


def test_taken_names_get_the_next_free_suffix_within_the_limit():
    catalog = ToolCatalog()
    long = "a" * 70
    names = []
    for _ in range(3):
        tool, _warnings = repair_definition(
            ToolDefinition(name=long, description="d", category="c"),
            lambda n: catalog.get(n) is not None,
        )
        catalog.add(tool, None)
        names.append(tool.name)
    assert len(set(names)) == 3
    assert all(len(n) <= MAX_NAME_LENGTH and NAME_RE.match(n) for n in names)
    assert names[0] == provider_safe_name(long)


def test_names_are_converted_the_way_the_eval_always_did():
    assert normalise_name("analyzeEvidence") == "analyze_evidence"
    assert normalise_name("getHTTPStatus") == "get_http_status"
    assert normalise_name("3dPrint") == "t_3d_print"
    assert normalise_name("Café-Crème") == "cafe_creme"
    assert normalise_name("查询天气") == normalise_name("查询天气")  # stable across runs


def test_strict_problems_that_lenient_registration_repairs_say_how_to_opt_in():
    bad = ToolDefinition(name="getWeather", description="", category="api")
    problems = validate_definition(bad)
    assert len(problems) == 2 and all(p.endswith(LENIENT_HINT) for p in problems)
