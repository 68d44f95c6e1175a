"""tooldeck's filter stage: hybrid lexical (BM25) and dense (sentence-transformers + FAISS)
tool retrieval, with on-disk embedding cache, run-time add/remove and per-intent fusion."""

from __future__ import annotations

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
from ._text import dense_text, segment_query, split_identifier, tokenize

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
