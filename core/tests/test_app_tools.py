"""App-local tools: ``Deck.load(tools=[fn])`` and ``add_tools([fn])``, no packaging needed."""

from __future__ import annotations

from typing import Literal

import pytest
import trio

from tooldeck import Deck, ErrorCode, RegistrationError, SecurityLevel, ToolDefinition, tool

STAGES = ["schema", "runner"]


def word_count(text: str, unique: bool = False) -> int:
    """Count the words of a text.

    Args:
        text: the text to count.
        unique: count each distinct word once.
    """
    words = text.split()
    return len(set(words) if unique else words)


async def shout(text: str, times: int = 1) -> str:
    """Repeat a text in capitals.

    :param text: what to shout.
    :param times: how many times.
    """
    await trio.sleep(0)
    return " ".join([text.upper()] * times)


@tool(category="app", security={"level": "moderate"})
def set_mode(mode: Literal["fast", "safe"]) -> str:
    """Switch the app's mode."""
    return mode


def _load(**kw: object) -> Deck:
    # config={}: no configuration file or environment variable of the machine applies.
    return Deck.load({}, entry_points=STAGES, **kw)  # type: ignore[arg-type]


async def test_functions_become_tools_with_schema_from_hints_and_docstring():
    deck = _load(tools=[word_count, shout])
    async with deck:
        counted = deck.catalog.get("word_count")
        assert counted is not None and counted.plugin == "app"
        assert counted.description == "Count the words of a text."
        assert counted.parameters["properties"] == {
            "text": {"type": "string", "description": "the text to count."},
            "unique": {
                "type": "boolean",
                "description": "count each distinct word once.",
                "default": False,
            },
        }
        assert counted.parameters["required"] == ["text"]
        assert deck.catalog.get("shout").parameters["required"] == ["text"]  # type: ignore[union-attr]
        session = deck.session()
        result = await session.call("word_count", {"text": "a b a", "unique": True})
        assert result.success and result.data == 2
        result = await session.call("shout", {"text": "hi", "times": 2})
        assert result.success and result.data == "HI HI"
        bad = await session.call("word_count", {"text": 3})
        assert bad.error is not None and bad.error.code is ErrorCode.INVALID_ARGUMENTS


async def test_tool_decorator_options_apply_as_in_a_pack():
    deck = _load(tools=[set_mode])
    async with deck:
        definition = deck.catalog.get("set_mode")
        assert definition is not None
        assert definition.category == "app"
        assert definition.security.level is SecurityLevel.MODERATE
        assert definition.parameters["properties"]["mode"]["enum"] == ["fast", "safe"]


async def test_definitions_are_accepted_too():
    definition = ToolDefinition(
        name="ping",
        description="Answer pong.",
        category="app",
        parameters={"type": "object", "properties": {}},
        execute=lambda: "pong",
        call_style="kwargs",
    )
    deck = _load(tools=[definition])
    async with deck:
        result = await deck.session().call("ping", {})
        assert result.success and result.data == "pong"


def test_a_function_given_as_plugin_is_refused_with_a_pointer_to_tools():
    with pytest.raises(TypeError, match=r"tools=\[word_count\]"):
        _load(plugins=[word_count])


def test_a_function_that_cannot_be_described_fails_loudly_naming_it():
    def spread(*values: int) -> int:
        """Add values."""
        return sum(values)

    with pytest.raises(RegistrationError) as caught:
        _load(tools=[spread])
    assert "spread" in str(caught.value) and "'app'" in str(caught.value)


async def test_add_tools_accepts_functions_at_run_time():
    deck = _load()
    async with deck:
        assert "word_count" not in deck.catalog
        await deck.add_tools([word_count, shout])
        assert deck.catalog.get("word_count").plugin == "runtime"  # type: ignore[union-attr]
        result = await deck.session().call("shout", {"text": "ok"})
        assert result.success and result.data == "OK"
        with pytest.raises(RegistrationError, match="not str"):
            await deck.add_tools(["word_count"])  # type: ignore[list-item]
