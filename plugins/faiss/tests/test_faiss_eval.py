"""The retriever inside a real deck, and the retrieval evaluation helpers of the core."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tooldeck.testing")

from tooldeck._eval import eval_retrieval, load_dataset, retrieval_metrics, snake_case
from tooldeck.testing import inline_plugin, make_deck


def test_snake_case_names():
    assert snake_case("analyzeEvidence") == "analyze_evidence"
    assert snake_case("getHTTPStatus") == "get_http_status"
    assert snake_case("Weird-Name 2") == "weird_name_2"
    assert snake_case("3dPrint") == "t_3d_print"


def test_metrics_by_hand():
    hands = [["a", "b", "c"], ["x"] * 14 + ["d"]]
    golds = [["a", "c"], ["d", "e"]]
    m = retrieval_metrics(hands, golds)
    assert m["R@5"] == 50.0  # 1.0 and 0.0
    assert m["R@15"] == 75.0  # 1.0 and 0.5
    assert m["complete@15"] == 50.0
    assert 0 < m["NDCG@10"] < 100


@pytest.fixture
def dataset_file(tmp_path, handmade):
    tools = []
    for t in handmade:
        # camelCase names, as in datasets that were not written for tooldeck
        parts = t.name.split("_")
        name = parts[0] + "".join(p.capitalize() for p in parts[1:])
        tools.append({"name": name, "description": t.description, "category": t.category,
                      "parameters": dict(t.parameters)})
    queries = [
        {"query": "Show me the weather in Oslo.", "relevant": ["getWeather"], "split": "a"},
        {"query": "Read report.txt and translate it into French. Then email it to Bob.",
         "relevant": ["fileRead", "translateText", "sendEmail"], "split": "b"},
        {"query": "Commit my changes to git.", "relevant": ["gitCommit"], "split": "b"},
    ]
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"tools": tools, "queries": queries}))
    return path


def test_load_dataset_maps_names(dataset_file):
    tools, queries = load_dataset(dataset_file)
    assert len(tools) == 20 and all(t.execute is None for t in tools)
    assert "get_weather" in {t.name for t in tools}
    assert queries[1]["relevant"] == ["file_read", "translate_text", "send_email"]
    assert queries[1]["relevant_original"] == ["fileRead", "translateText", "sendEmail"]


async def test_eval_through_a_real_deck(dataset_file, tmp_path):
    tools, queries = load_dataset(dataset_file)

    def tooldeck_register_tools(register):
        for tool in tools:
            register(tool)

    deck = make_deck(
        inline_plugin(tooldeck_register_tools, name="dataset"),
        load_entry_points=["schema", "runner", "faiss"],
        config={"faiss": {"cache_dir": str(tmp_path / "cache")}},
    )
    async with deck:
        figures = await eval_retrieval(deck, queries, limit=5)
        hand = await deck.session().select("what's the forecast for Rome", limit=3)
    assert figures["queries"] == 3 and figures["build_s"] > 0
    assert figures["R@5"] == 100.0 and figures["complete@15"] == 100.0
    assert set(figures["splits"]) == {"a", "b"}
    assert {"R@5", "R@10", "R@15", "NDCG@10", "complete@15", "p50_ms", "p95_ms"} <= set(figures)
    assert "get_weather" in hand.names
