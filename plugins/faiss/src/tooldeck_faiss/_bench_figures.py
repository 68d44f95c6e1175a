"""The faiss plugin's part of ``tooldeck bench`` (hookimpls, re-exported by
:mod:`tooldeck_faiss.plugin`): selection latency on synthetic catalogs of 1k to 100k tools
(random vectors, queries embedded for real), next to one query embedding. numpy, FAISS and the
model load only when ``tooldeck bench`` runs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import trio

from tooldeck_hookspecs import ToolDefinition, hookimpl
from tooldeck_hookspecs.specs.bench import BenchComparison, BenchDescriptions

__all__ = ["bench_selection", "query_embedding_figures"]

_SIZES = ("1k", "10k", "100k")

_WORDS = {
    "query_embedding_ms": "one MiniLM query embedding with the retriever's own encoder (ONNX "
    "Runtime float by default) (ms)",
    "selection": "selection figures",
    **{
        f"select_p50_ms_{size}": f"selection p50, {size} tools (random vectors), query embedded "
        "for real (ms)"
        for size in _SIZES
    },
    **{
        f"index_build_s_{size}": f"building the index of {size} tools from precomputed vectors (s)"
        for size in _SIZES
    },
    **{
        f"select_vs_query_embedding_ratio_{size}": f"selection p50 at {size} tools / one query "
        "embedding by the retriever's own encoder"
        for size in _SIZES
    },
}


@hookimpl
def tooldeck_bench_descriptions() -> BenchDescriptions:
    """The selection figures in words, and the selection lines of the side table."""
    from .bench import DESCRIPTIONS

    return BenchDescriptions(
        figures={**DESCRIPTIONS, **_WORDS},
        comparisons=tuple(
            BenchComparison(
                what=f"selection p50 inside a deck, {size} tools, new queries, vs one MiniLM query "
                "embedding by sentence-transformers (ms)",
                ours=f"select_p50_ms_{size}",
                theirs="st_float_query_embedding_ms",
                ratio=f"select_vs_st_float_query_ratio_{size}",
                goal=goal,
                position=70 + i,
            )
            for i, (size, goal) in enumerate((("1k", "-"), ("10k", "<= 0.5x"), ("100k", "<= 1x")))
        ),
    )


@hookimpl
def tooldeck_bench_figures(quick: bool) -> dict[str, Any]:
    """Selection p50 and index build per catalog size, one query embedding, and their ratio."""
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    figures: dict[str, Any] = {}
    try:
        figures.update(trio.run(bench_selection, sizes))
        embedding = trio.run(query_embedding_figures)
        figures.update(embedding)
        # The reference of the goals: plain MiniLM as users run it (sentence-transformers
        # float, encode([q])), measured in this run; the ratio to the retriever's own encoder
        # stays beside it.
        from .bench import st_float_query_embedding_ms

        reference = st_float_query_embedding_ms()
        figures["st_float_query_embedding_ms"] = round(reference, 2)
        figures["fast_vs_st_float_query_ratio"] = round(
            embedding["query_embedding_ms"] / reference, 3
        )
        for size in sizes:
            label = f"{size // 1000}k"
            select = figures.get(f"select_p50_ms_{label}")
            if isinstance(select, float | int):
                figures[f"select_vs_query_embedding_ratio_{label}"] = (
                    select / embedding["query_embedding_ms"]
                )
                figures[f"select_vs_st_float_query_ratio_{label}"] = round(select / reference, 3)
    except Exception as exc:
        figures["selection"] = f"skipped: {type(exc).__name__}: {exc}"
    return figures


_BENCH_QUERIES = [
    "Read the file notes.txt and count its words.",
    "What's the weather in Paris tomorrow?",
    "Find the latest price of ACME shares. Then email it to my manager. "
    "Also remind me to check again on Friday.",
    "Convert 120 US dollars to euros.",
    "Search the web for trio structured concurrency and summarize the first result.",
    "Resize every picture in the photos folder to 800 pixels wide, then zip the folder.",
    "Create a calendar event for the team meeting on Monday at 10am.",
    "Run the unit tests. If they fail, show me the log. Finally commit the fix to git.",
]


def _synthetic_catalog(size: int, seed: int = 7) -> tuple[list[ToolDefinition], Any]:
    """``size`` tools with plausible names and descriptions, and random unit vectors."""
    import numpy as np

    rng = np.random.default_rng(seed)
    verbs = "get list create update delete search analyze convert send fetch compute check".split()
    # A vocabulary of a few thousand pseudo-words keeps BM25 postings at realistic lengths.
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pe", "da", "zu", "fo"]
    vocab = sorted({"".join(rng.choice(syllables, size=3)) for _ in range(6000)})
    tools = []
    for i in range(size):
        words = rng.choice(vocab, size=8)
        verb = verbs[i % len(verbs)]
        tools.append(
            ToolDefinition(
                name=f"{verb}_{words[0]}_{words[1]}_{i}",
                description=f"{verb.capitalize()} the {' '.join(words[1:6])}.",
                category=f"cat_{i % 50}",
                parameters={
                    "type": "object",
                    "properties": {str(words[6]): {"type": "string", "description": words[7]}},
                },
            )
        )
    return tools, _unit_rows(rng, size, 384)


def _unit_rows(rng: Any, size: int, dim: int) -> Any:
    """``size`` random L2-normalised float32 rows of ``dim`` values drawn from ``rng``."""
    import numpy as np

    vectors = rng.standard_normal((size, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def _second_vectors(size: int, seed: int = 11) -> Any:
    """Random unit rows for the second dense channel (512-d), so that the timed selections
    pay its query cost as a default deck does."""
    import numpy as np

    return _unit_rows(np.random.default_rng(seed), size, 512)


async def bench_selection(
    sizes: Sequence[int] = (1_000, 10_000, 100_000), *, rounds: int = 5
) -> dict[str, float]:
    """Median selection latency (query embedding, both signals, fusion) per catalog size.

    Tool vectors are random and injected through ``FaissRetriever.index_vectors`` so that a
    100k catalog builds in seconds; queries are embedded for real by the same model each time.
    Returns ``select_p50_ms_1k``, ``select_p50_ms_10k``, ``select_p50_ms_100k`` (one key per
    size) and ``index_build_s_<size>``.
    """
    import statistics  # here, not at the plugin's load: fractions and decimal come with it

    import numpy as np

    from ._retriever import FaissRetriever, RetrieverSettings

    figures: dict[str, float] = {}
    model = None
    for size in sizes:
        label = f"{size // 1000}k" if size % 1000 == 0 else str(size)
        tools, vectors = _synthetic_catalog(size)
        # No query cache: every timed search embeds its query for real.
        settings = RetrieverSettings(cache_dir=None, query_cache_size=0)
        retriever = FaissRetriever(settings, model=model)
        await retriever.warm_up()
        model = retriever.model  # load the model once for every size
        started = time.perf_counter()
        second = _second_vectors(size) if settings.second_encoder != "none" else None
        # The default's summary view: a second row per tool in both channels (other seeds).
        views = second_views = None
        if settings.summary_view:
            views = _unit_rows(np.random.default_rng(size + 1), size, vectors.shape[1])
            if second is not None:
                second_views = _second_vectors(size, seed=12)
        await retriever.index_vectors(
            tools, vectors, second_vectors=second, view_vectors=views,
            second_view_vectors=second_views,
        )
        figures[f"index_build_s_{label}"] = round(time.perf_counter() - started, 3)
        for query in _BENCH_QUERIES[:3]:  # warm caches and the model's first-call costs
            await retriever.search(query, 20)
        latencies = []
        for _ in range(rounds):
            for query in _BENCH_QUERIES:
                t0 = time.perf_counter()
                await retriever.search(query, 20)
                latencies.append((time.perf_counter() - t0) * 1000.0)
        figures[f"select_p50_ms_{label}"] = round(statistics.median(latencies), 2)
        # The same selections when the query's vectors come from the retriever's query cache
        # (a repeated or widened query, a task seen before): fusion and search only.
        prepared = []
        for query in _BENCH_QUERIES:
            segments = retriever._query_segments(query)
            prepared.append((segments, retriever._embed_query(segments)))
        cached = []
        for _ in range(rounds):
            for segments, qvecs in prepared:
                t0 = time.perf_counter()
                await trio.to_thread.run_sync(retriever._rank, segments, qvecs, 20)
                cached.append((time.perf_counter() - t0) * 1000.0)
        figures[f"select_cached_p50_ms_{label}"] = round(statistics.median(cached), 2)
    return figures


async def query_embedding_figures(rounds: int = 5) -> dict[str, Any]:
    """Median milliseconds of embedding one query with the retriever's own encoder (float
    MiniLM by ONNX Runtime by default)."""
    import statistics

    from ._retriever import FaissRetriever, RetrieverSettings

    retriever = FaissRetriever(RetrieverSettings(cache_dir=None, query_cache_size=0))
    await retriever.warm_up()  # the process's shared model: loaded once by bench_selection
    model = retriever.model

    from ._encoder import BertOnnxEncoder

    onnx = isinstance(model, BertOnnxEncoder)

    def embed(text: str) -> float:
        context: Any = contextlib.nullcontext()
        if not onnx:  # torch only for its own models
            import torch

            context = torch.inference_mode()
        started = time.perf_counter()
        with context:
            model.encode([text], normalize_embeddings=True, convert_to_numpy=True)
        return (time.perf_counter() - started) * 1000.0

    for query in _BENCH_QUERIES[:3]:
        await trio.to_thread.run_sync(embed, query)
    samples = [
        await trio.to_thread.run_sync(embed, query)
        for _ in range(rounds)
        for query in _BENCH_QUERIES
    ]
    return {"query_embedding_ms": statistics.median(samples)}
