"""tooldeck's filter stage: hybrid lexical (BM25) and dense (sentence-transformers + FAISS)
tool retrieval, with on-disk embedding cache, run-time add/remove and per-intent fusion."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tooldeck_hookspecs import lazy_exports

from ._text import dense_text, segment_query, split_identifier, tokenize

if TYPE_CHECKING:
    from ._history import (
        HISTORY_STORES_GROUP,
        HistoryRow,
        HistoryStatistics,
        HistoryStore,
        HistoryStoreFactory,
        SelectionHistory,
    )
    from ._retriever import (
        DEFAULT_FIELD_WEIGHTS,
        FaissRetriever,
        RetrieverSettings,
        RetrieverStatistics,
        default_model_path,
    )

# The entry point ``tooldeck_faiss.plugin`` imports this package on every ``tooldeck`` command,
# including ``call``/``tools`` that never select: the retriever and history modules (numpy,
# FAISS, the model) load on first use through PEP 562, not at plugin load.
_LAZY = {
    "HISTORY_STORES_GROUP": "._history",
    "HistoryRow": "._history",
    "HistoryStatistics": "._history",
    "HistoryStore": "._history",
    "HistoryStoreFactory": "._history",
    "SelectionHistory": "._history",
    "DEFAULT_FIELD_WEIGHTS": "._retriever",
    "FaissRetriever": "._retriever",
    "RetrieverSettings": "._retriever",
    "RetrieverStatistics": "._retriever",
    "default_model_path": "._retriever",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "DEFAULT_FIELD_WEIGHTS",
    "FaissRetriever",
    "HISTORY_STORES_GROUP",
    "HistoryRow",
    "HistoryStatistics",
    "HistoryStore",
    "HistoryStoreFactory",
    "SelectionHistory",
    "RetrieverSettings",
    "RetrieverStatistics",
    "default_model_path",
    "dense_text",
    "segment_query",
    "split_identifier",
    "tokenize",
]
