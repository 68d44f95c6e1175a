"""Selection learns from use through the core's call path, and compound tasks get every intent.

Real stages: MiniLM + FAISS retriever over the demo catalog and the fs pack, schema rules, runner.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from tooldeck import ToolDefinition
from tooldeck._catalog_data import load_demo_catalog
from tooldeck.testing import make_deck, tools_plugin

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("tooldeck_faiss")
pytest.importorskip("tooldeck_tools_fs")


def tally(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


TALLY = ToolDefinition(
    name="tally_words",
    description="Count the words of a text.",
    category="code",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text"}},
        "required": ["text"],
    },
    execute=tally,
    call_style="kwargs",
)


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    """One embedding cache for the test process: the demo catalog is embedded once."""
    # The demo catalog's vectors, shared by every module of this test process that deals from
    # it (core/tests/test_hand_tokens.py and test_history_selection.py,
    # tests/test_hand_with_real_retriever.py): embedding its ~400 tools takes seconds, and these
    # tests check the hand, not a first embedding (tooldeck-faiss's own tests check that).
    shared = tmp_path_factory.getbasetemp() / "demo-catalog-embeddings"
    shared.mkdir(exist_ok=True)
    return shared


def _deck(tmp_path, vectors, *tools: ToolDefinition):
    return make_deck(
        tools_plugin([*load_demo_catalog(), *tools], name="catalog"),
        load_entry_points=["schema", "runner", "faiss", "fs"],
        config={
            "faiss": {
                "cache_dir": str(vectors),
                "history_file": str(tmp_path / "state" / "history.json"),
            }
        },
    )


async def test_a_call_of_a_dealt_tool_is_recorded_against_the_hand_task(tmp_path, vectors):
    task = "how many words are in this paragraph of my essay?"
    async with _deck(tmp_path, vectors, TALLY) as deck:
        session = deck.session(workdir=tmp_path)
        hand = await session.select(task, limit=15)
        assert "tally_words" in hand.names
        result = await session.call("tally_words", {"text": "one two three"})
        assert result.success and result.data == 3
        rows = deck.retriever.history.as_rows()
        assert rows == [{"query": task, "tool": "tally_words", "count": 1}]
        # a second call in the same turn is the same use, not a stronger signal
        await session.call("tally_words", {"text": "again"})
        assert deck.retriever.history.as_rows()[0]["count"] == 1
    path = tmp_path / "state" / "history.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert json.loads(path.read_text())["records"][0]["tool"] == "tally_words"


async def test_compound_demo_task_deals_every_intent_high(tmp_path, vectors):
    async with _deck(tmp_path, vectors, TALLY) as deck:
        hand = await deck.session(workdir=tmp_path).select(
            "read the config file in my project and list the folder", limit=12
        )
    assert {"file_read", "list_dir"} <= set(hand.names[:4]), hand.names


async def test_eval_with_history_replays_a_fraction_and_scores_the_rest(tmp_path, vectors):
    from tooldeck._eval import eval_with_history

    queries = [
        {"query": f"please crunch these numbers for me, batch {i}", "relevant": ["tally_words"],
         "split": "s"}
        for i in range(6)
    ]
    async with _deck(tmp_path, vectors, TALLY) as deck:
        figures = await eval_with_history(deck, queries, 0.5, limit=5)
    assert figures["history"]["replayed_queries"] == 3 and figures["history"]["recorded"] == 3
    assert figures["queries"] == 3 and figures["without_history"]["queries"] == 3
    assert figures["R@5"] >= figures["without_history"]["R@5"]
    assert figures["R@5"] == 100.0
