"""A small app-local tool pack and a deck behind a portal, shared by the framework adapter tests.

The deck is real: the schema validator, the runner, the MiniLM + FAISS retriever (embeddings cached
per test session) and the core's confirmation baseline for the dangerous tool.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from tooldeck_faiss import RetrieverSettings

from tooldeck import tool
from tooldeck.portal import DeckPortal, PortalSession
from tooldeck.testing import make_deck

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Where the dangerous tool writes; a test reads it to know whether the tool really ran.
MARKERS: list[str] = []


@tool(category="text", execution={"cacheable": False})
def word_count(text: str) -> int:
    """Count the words in a piece of text.

    Args:
        text: the text whose words are counted
    """
    return len(text.split())


@tool(category="text", execution={"cacheable": False})
def reverse_text(text: str) -> str:
    """Reverse the characters of a piece of text.

    Args:
        text: the text to reverse
    """
    return text[::-1]


@tool(category="weather", execution={"cacheable": False})
def weather_forecast(city: str) -> str:
    """Tell tomorrow's weather forecast for a city: temperature, rain and wind.

    Args:
        city: the city name
    """
    return f"sunny in {city}"


@tool(category="notes", security={"level": "dangerous"}, execution={"cacheable": False})
def delete_notes(folder: str) -> str:
    """Permanently delete every note in a notes folder.

    Args:
        folder: the notes folder to wipe
    """
    MARKERS.append(folder)
    return f"deleted notes in {folder}"


TOOLS = [word_count, reverse_text, weather_forecast, delete_notes]


@pytest.fixture(scope="session")
def embeddings_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("embeddings")


@pytest.fixture(scope="session")
def portal(embeddings_dir: Path) -> Iterator[DeckPortal]:
    # One deck for every adapter test: loading torch and MiniLM is the slow part, and each test
    # opens its own session (its own hand, approvals and grants) on it.
    faiss: dict[str, object] = {"cache_dir": str(embeddings_dir)}
    if "history" in attrs.fields_dict(RetrieverSettings):
        # Selection that learns from use would carry one test's calls into the next test's hand
        # (and write to the user's state folder): these tests pin the hand to the task alone.
        faiss["history"] = False
    deck = make_deck(
        load_entry_points=["schema", "runner", "faiss"],
        tools=TOOLS,
        config={"faiss": faiss, "hand": {"limit": 2}},
    )
    with DeckPortal(deck) as running:
        yield running


@pytest.fixture
def markers() -> list[str]:
    """The folders ``delete_notes`` really wiped during this test."""
    MARKERS.clear()
    return MARKERS


@pytest.fixture
def session(portal: DeckPortal, tmp_path: Path, markers: list[str]) -> PortalSession:
    return portal.session(workdir=tmp_path)
