"""Descriptions of the selection figures that ``tooldeck bench`` reports for this plugin, and
the figures that put selection next to one sentence-transformers float query embedding.

The selection latencies come from ``tooldeck_faiss._bench_figures.bench_selection``
(synthetic catalogs of 1k, 10k and 100k tools with random vectors, queries embedded for real
by the retriever's default encoder). :func:`new_query_selection_figures` adds the reference
the issue-16 goals are stated against: ``SentenceTransformer.encode([query])`` with the float
all-MiniLM-L6-v2, measured in the same run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

__all__ = [
    "DESCRIPTIONS",
    "fast_query_embedding_ms",
    "new_query_selection_figures",
    "st_float_query_embedding_ms",
]

_SIZES = ("1k", "10k", "100k")

DESCRIPTIONS: dict[str, str] = {
    **{
        f"select_cached_p50_ms_{size}": (
            f"selection p50, {size} tools, query vectors from the query cache: "
            "BM25 + FAISS + fusion only (ms)"
        )
        for size in _SIZES
    },
    "st_float_query_embedding_ms": "one query embedded by sentence-transformers float "
    "all-MiniLM-L6-v2, encode([q]) (ms)",
    "fast_query_embedding_ms": "one query embedded by the retriever's default encoder "
    "(ONNX Runtime float MiniLM) (ms)",
    "fast_vs_st_float_query_ratio": "one query embedding: default encoder / "
    "sentence-transformers float",
    **{
        f"select_vs_st_float_query_ratio_{size}": f"selection p50 for a new query at {size} "
        "tools / one sentence-transformers float query embedding (goal: <= 0.5 at 10k, <= 1 "
        "at 100k)"
        for size in _SIZES
    },
}


def _median_ms(embed: Any, queries: Sequence[str], rounds: int) -> float:
    for query in queries[:3]:  # first-call costs (allocations, lazy init) are not counted
        embed(query)
    samples = []
    for _ in range(rounds):
        for query in queries:
            started = time.perf_counter()
            embed(query)
            samples.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(samples)


def st_float_query_embedding_ms(rounds: int = 5) -> float:
    """Median ms of ``SentenceTransformer(all-MiniLM-L6-v2).encode([q])``, float, on CPU, for
    the bench queries: the reference of the selection goals (loads torch: bench only)."""
    import torch

    from ._bench_figures import _BENCH_QUERIES
    from ._retriever import _shared_model, default_model_path

    # The process's float model, loaded quietly (no "Loading weights" bar in the bench).
    model = _shared_model(default_model_path(), quantize=False)

    def embed(text: str) -> None:
        with torch.inference_mode():
            model.encode([text], normalize_embeddings=True, convert_to_numpy=True)

    return _median_ms(embed, _BENCH_QUERIES, rounds)


def fast_query_embedding_ms(rounds: int = 5) -> float:
    """Median ms of one query embedding by the retriever's default encoder (same queries)."""
    from ._bench_figures import _BENCH_QUERIES
    from ._encoder import shared_encoder
    from ._retriever import default_model_path

    encoder = shared_encoder(default_model_path())
    return _median_ms(encoder.encode, _BENCH_QUERIES, rounds)


def new_query_selection_figures(
    sizes: Sequence[int] = (1_000, 10_000, 100_000), *, rounds: int = 5
) -> dict[str, Any]:
    """Selection p50 for new (uncached) queries per catalog size, and its ratio to one
    sentence-transformers float query embedding measured in the same run.

    Returns ``select_p50_ms_<size>`` and ``select_cached_p50_ms_<size>`` (from
    ``bench_selection``), ``st_float_query_embedding_ms``, ``fast_query_embedding_ms``,
    ``fast_vs_st_float_query_ratio`` and ``select_vs_st_float_query_ratio_<size>``.
    """
    import trio

    from ._bench_figures import bench_selection

    figures: dict[str, Any] = dict(trio.run(bench_selection, sizes))
    fast = fast_query_embedding_ms(rounds)
    reference = st_float_query_embedding_ms(rounds)
    figures["fast_query_embedding_ms"] = round(fast, 2)
    figures["st_float_query_embedding_ms"] = round(reference, 2)
    figures["fast_vs_st_float_query_ratio"] = round(fast / reference, 3)
    for size in sizes:
        label = f"{size // 1000}k" if size % 1000 == 0 else str(size)
        select = figures.get(f"select_p50_ms_{label}")
        if isinstance(select, float | int):
            figures[f"select_vs_st_float_query_ratio_{label}"] = round(select / reference, 3)
    return figures
