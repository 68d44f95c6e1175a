"""Hand budgets in schema tokens: the best tools that fit, the count limit still holds, a tool
bigger than the budget is skipped (never cut), the hand reports its tokens.

Real stages: MiniLM + FAISS retriever over the demo catalog, schema rules, runner.
"""

from __future__ import annotations

import os

import pytest

from tooldeck import ToolDefinition
from tooldeck._catalog import estimate_tokens, schema_tokens
from tooldeck._catalog_data import load_demo_catalog
from tooldeck.testing import make_deck
from tooldeck_hookspecs import ConfigError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TASK = "read the config file in my project, then send the weather forecast by email"


def huge_weather_tool() -> ToolDefinition:
    """A very relevant tool whose schema alone is ~2,000 tokens (a real API's long enum)."""
    return ToolDefinition(
        name="weather_forecast_everywhere",
        description="Get the weather forecast for a city: temperature, rain, wind, by day.",
        category="weather",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "station": {
                    "type": "string",
                    "description": "Weather station identifier",
                    "enum": [f"station-{i:04d}-{'north' if i % 2 else 'south'}"
                             for i in range(400)],
                },
            },
            "required": ["city"],
        },
    )


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    # The demo catalog's vectors, shared by every module of this test process that deals from
    # it (core/tests/test_hand_tokens.py and test_history_selection.py,
    # tests/test_hand_with_real_retriever.py): embedding its ~400 tools takes seconds, and these
    # tests check the hand, not a first embedding (tooldeck-faiss's own tests check that).
    shared = tmp_path_factory.getbasetemp() / "demo-catalog-embeddings"
    shared.mkdir(exist_ok=True)
    return shared


def small_catalog() -> list[ToolDefinition]:
    """A slice of the demo catalog the task touches, and distractors (few tools: fast to embed)."""
    demo = list(load_demo_catalog())
    topical = [t for t in demo if any(w in t.name for w in ("weather", "email", "file", "config"))]
    return [*topical, *[t for t in demo[:40] if t not in topical]]


def new_deck(cache_dir, **hand):
    return make_deck(
        load_entry_points=["schema", "runner", "faiss"],
        tools=[*small_catalog(), huge_weather_tool()],
        config={"faiss": {"cache_dir": str(cache_dir)}, "hand": {"limit": 12, **hand}},
    )


def test_the_estimate_is_deterministic_and_grows_with_the_schema():
    assert estimate_tokens("") == 0
    assert estimate_tokens('{"name":"file_read"}') == estimate_tokens('{"name":"file_read"}')
    small = ToolDefinition(name="ping", description="Ping.", category="net")
    big = huge_weather_tool()
    assert 10 < schema_tokens(small) < 40
    assert schema_tokens(big) > 1500
    # CJK text costs about a token a character, not a token a word.
    assert estimate_tokens("查询指定城市的天气预报") >= 10


async def test_without_a_budget_the_hand_reports_its_tokens(cache_dir):
    async with new_deck(cache_dir) as deck:
        hand = await deck.session().select(TASK)
    assert len(hand.tools) == 12 and hand.max_tokens is None and hand.over_budget == ()
    assert hand.tokens == sum(deck.catalog.schema_tokens(n) for n in hand.names)
    assert "weather_forecast_everywhere" in hand.names


async def test_a_budget_deals_the_best_tools_that_fit_and_skips_a_too_big_one(cache_dir):
    async with new_deck(cache_dir) as deck:
        session = deck.session()
        free = await session.select(TASK)
        budget = 900
        hand = await session.select(TASK, max_tokens=budget)
    assert hand.max_tokens == budget
    assert 0 < hand.tokens <= budget
    assert hand.tokens == sum(deck.catalog.schema_tokens(n) for n in hand.names)
    # Skipped whole, not cut: it is not in the hand, and says why.
    assert "weather_forecast_everywhere" not in hand.names
    assert "weather_forecast_everywhere" in hand.over_budget
    assert deck.catalog.get("weather_forecast_everywhere").parameters["properties"]["station"]
    # Best first: the tools dealt keep the order of the unbudgeted hand, minus what did not fit.
    ranked = [n for n in free.names if n in hand.names]
    assert hand.names[: len(ranked)] == ranked
    assert len(hand.tools) <= 12


async def test_the_count_limit_still_applies_under_a_generous_budget(cache_dir):
    async with new_deck(cache_dir, max_tokens=100_000) as deck:
        session = deck.session()
        hand = await session.select(TASK, limit=5)
        assert len(hand.tools) == 5 and hand.max_tokens == 100_000 and hand.over_budget == ()
        # A budget below every schema deals nothing rather than half a schema.
        empty = await session.select(TASK, max_tokens=5)
    assert empty.tools == () and empty.tokens == 0 and empty.over_budget


async def test_config_budget_applies_and_the_export_holds_what_was_counted(cache_dir):
    async with new_deck(cache_dir, max_tokens=600) as deck:
        session = deck.session(pinned=["drive_share_file"])
        hand = await session.select(TASK)
    assert hand.max_tokens == 600 and hand.tokens <= 600
    assert hand.names[0] == "drive_share_file"  # pinned tools are dealt first and count too
    exported = hand.export("openai")
    assert [e["function"]["name"] for e in exported] == hand.names


@pytest.mark.parametrize("bad", [0, -5, "lots"])
def test_config_refuses_a_budget_that_is_not_a_positive_integer(cache_dir, bad):
    with pytest.raises(ConfigError, match="max_tokens"):
        new_deck(cache_dir, max_tokens=bad)
