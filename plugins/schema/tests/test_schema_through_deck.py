"""The schema plugin wired into the real core: start-up errors and call-time problems."""

from __future__ import annotations

import pytest

from tooldeck_hookspecs import RegistrationError, ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")


def echo(arguments, context):
    """Return the arguments."""
    return dict(arguments)


GOOD = ToolDefinition(
    name="echo_items", description="Echo a list of items.", category="test", execute=echo,
    parameters={"type": "object",
                "properties": {"items": {"type": "array", "items": {
                    "type": "object", "properties": {"name": {"type": "string"}},
                    "required": ["name"]}}},
                "required": ["items"], "additionalProperties": False},
)


def test_bad_definitions_fail_start_up_naming_tool_plugin_field():
    bad = ToolDefinition(name="Echo", description="", category="test", execute=echo,
                         parameters={"type": "object", "required": ["x"]})
    with pytest.raises(RegistrationError) as info:  # raised while the deck loads
        tooldeck_testing.make_deck(tooldeck_testing.tools_plugin([bad], name="pack"),
                                   load_entry_points=["schema", "runner"])
    problems = info.value.problems
    assert any(p.startswith("tool 'Echo' (plugin 'pack'): name:") for p in problems)
    assert any(": description:" in p for p in problems)
    assert "tool 'Echo' (plugin 'pack'): parameters.required: 'x' is not a property" in problems


def test_duplicate_tool_across_plugins_names_both():
    with pytest.raises(RegistrationError) as info:
        tooldeck_testing.make_deck(tooldeck_testing.tools_plugin([GOOD], name="first"),
                                   tooldeck_testing.tools_plugin([GOOD], name="second"),
                                   load_entry_points=["schema", "runner"])
    text = "\n".join(info.value.problems)
    assert "'first'" in text and "'second'" in text


async def test_call_time_problems_have_json_paths(tmp_path):
    deck = tooldeck_testing.make_deck(tools=[GOOD], load_entry_points=["schema", "runner"])
    async with deck:
        session = deck.session(workdir=str(tmp_path))
        ok = await session.call("echo_items", {"items": [{"name": "a"}]})
        assert ok.success, ok.error
        bad = await session.call("echo_items", {"items": [{"name": "a"}, {}, {"name": 1}],
                                                "extra": True})
        assert not bad.success and bad.error.code == "INVALID_ARGUMENTS"
        text = repr(bad.error)
        for path in ("$.items[1].name", "$.items[2].name", "$.extra"):
            assert path in text, text
