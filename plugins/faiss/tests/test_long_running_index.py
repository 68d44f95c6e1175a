"""A retriever whose tools are registered and removed at run time for weeks stays bounded.

``Deck.add_tools`` / ``remove_tools`` (an app's per-user connectors, a reloaded MCP server)
go to :meth:`FaissRetriever.add` and :meth:`~FaissRetriever.remove`. A slot once used was never
reused: the index's name list, vector rows and BM25 lengths grew by one per registration, and
every search scored all the slots ever made.
"""

from __future__ import annotations

import numpy as np
import pytest

from tooldeck_hookspecs import ToolDefinition


def _names(results):
    return [r.name for r in results]


def _connector(n: int) -> ToolDefinition:
    return ToolDefinition(
        name=f"connector_{n % 3}",
        description=f"Look up tickets in tracker number {n % 4}.",
        category="api",
        parameters={"type": "object", "properties": {}},
    )


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
async def test_churn_of_runtime_tools_keeps_slots_bounded(tmp_path, handmade, kind):
    from tooldeck_faiss import FaissRetriever, RetrieverSettings

    approx = {"approx_threshold": 5, "approx_kind": "hnsw"} if kind == "hnsw" else {}
    # The deck's own default encoder (quick to load), not the suite's sentence-transformers.
    retriever = FaissRetriever(RetrieverSettings(cache_dir=str(tmp_path / "cache"), **approx))
    await retriever.index(handmade)
    for n in range(200):
        if n % 2:
            await retriever.remove([f"connector_{n % 3}"])
        await retriever.add([_connector(n)])  # a new definition: its old slot dies
    live = len(handmade) + 3
    assert retriever.statistics().tools == live
    # Dead slots are bounded by the live ones (and a small floor), not by the churn.
    assert len(retriever._names) <= 2 * live + 64 + 1
    assert len(retriever._vectors) == len(retriever._names)
    assert retriever.statistics().tombstones <= 64 + live
    # Searches still find what is live, under the names last registered.
    assert _names(await retriever.search("weather forecast in Lisbon", 3))[0] == "get_weather"
    found = _names(await retriever.search("look up tickets in the tracker", 5))
    assert {"connector_0", "connector_1", "connector_2"} <= set(found)
    await retriever.remove(["get_weather"])
    assert "get_weather" not in _names(await retriever.search("weather forecast in Lisbon", 40))


def test_embedding_store_keeps_the_recent_vectors_only(tmp_path):
    """Every tool text ever embedded was kept, in memory and by each merge of the files."""
    from tooldeck_faiss._store import EmbeddingStore

    store = EmbeddingStore(tmp_path, "m", max_vectors=50)
    store.put_many(["hot"], np.ones((1, 4), dtype=np.float32))
    for n in range(400):  # a description changed at run time, 400 times
        store.put_many([f"text-{n}"], np.full((1, 4), n, dtype=np.float32))
        assert store.get_many(["hot"])  # in use all along: never the one dropped
        assert store.held() <= 50
    fresh = EmbeddingStore(tmp_path, "m", max_vectors=50)
    recent = [f"text-{n}" for n in range(390, 400)]
    assert len(fresh.get_many(["hot", *recent])) == 11
    assert fresh.held() <= 50
    # The files hold at most a merge's worth (the bound) plus the chunks since.
    on_disk = 0
    for chunk in (tmp_path / "m").glob("chunk-*.npz"):
        with np.load(chunk) as data:
            on_disk += len(data["keys"])
    assert on_disk <= 50 + 9
