"""Per-query fusion of the lexical and the dense signal, and the merge of a query's segments.

Pure numpy over small candidate matrices (one row per query segment, one column per candidate
tool), so the same code serves the retriever and offline tuning.
"""

from __future__ import annotations

import attrs
import numpy as np

__all__ = [
    "FusionParams",
    "Fused",
    "channel_confidence",
    "fuse",
    "spread_over_intents",
    "spread_scores",
]


@attrs.frozen(kw_only=True)
class FusionParams:
    """How the two signals are mixed.

    ``lexical_weight`` is the prior share of BM25. With ``adaptive`` the share moves per segment
    by ``adapt`` times the difference of the channels' confidences (see
    :func:`channel_confidence`), bounded to ``[min_weight, 1 - min_weight]``: a segment whose
    words pick out one tool lexically leans on BM25, one whose words match many tools equally
    (surface words, another language) leans on the embedding.
    """

    lexical_weight: float = 0.4  # RetrieverSettings' defaults, where they were measured
    adaptive: bool = True
    adapt: float = 1.0
    min_weight: float = 0.1
    full_query_weight: float = 0.35
    top: int = 5


@attrs.frozen
class Fused:
    """The fused ranking: ``total`` per candidate, the segment that carried it, and the
    normalised signals (rows = segments) for explanations."""

    total: np.ndarray
    best_seg: np.ndarray
    seg_score: np.ndarray
    whole: np.ndarray
    lex_n: np.ndarray
    dense_n: np.ndarray
    weights: np.ndarray


def channel_confidence(normalised: np.ndarray, top: int = 5) -> np.ndarray:
    """How clearly each row's best candidate stands out: 1 minus the mean of the next ``top``
    normalised scores (the best is 1). A row of zeros (no lexical match at all) has 0."""
    if normalised.shape[1] <= 1:
        single: np.ndarray = np.where(normalised.max(axis=1) > 0, 1.0, 0.0)
        return single
    k = min(top + 1, normalised.shape[1])
    part = -np.partition(-normalised, k - 1, axis=1)[:, :k]
    part = -np.sort(-part, axis=1)
    conf = part[:, 0] - part[:, 1:].mean(axis=1)
    out: np.ndarray = np.clip(conf, 0.0, 1.0)
    return out


def fuse(lex: np.ndarray, dense: np.ndarray, params: FusionParams) -> Fused:
    """Fuse raw BM25 scores and cosines (both ``segments x candidates``).

    With several rows the last one is the whole query: each tool keeps its best segment's
    relative score (every intent's top tool scores 1.0, so intents interleave in the hand) plus
    ``full_query_weight`` times its whole-query score.
    """
    lex_max = lex.max(axis=1, keepdims=True)
    lex_n = np.divide(lex, lex_max, out=np.zeros_like(lex), where=lex_max > 0)
    # Cosines of unrelated texts are not zero; measuring from the pool's floor makes the
    # dense signal span [0, 1] like the lexical one.
    d_lo = dense.min(axis=1, keepdims=True)
    d_span = dense.max(axis=1, keepdims=True) - d_lo
    dense_n = np.divide(dense - d_lo, d_span, out=np.ones_like(dense), where=d_span > 0)
    w = np.full((lex.shape[0], 1), params.lexical_weight, dtype=np.float32)
    if params.adaptive:
        c_lex = channel_confidence(lex_n, params.top)
        c_dense = channel_confidence(dense_n, params.top)
        shift = params.adapt * (c_lex - c_dense)
        lo = params.min_weight
        w = np.clip(params.lexical_weight + shift, lo, 1.0 - lo)[:, None].astype(np.float32)
        # No lexical match at all: the lexical channel has nothing to say.
        w[lex_max[:, 0] <= 0] = 0.0
    fused = w * lex_n + (1.0 - w) * dense_n
    f_max = fused.max(axis=1, keepdims=True)
    rel = np.divide(fused, f_max, out=np.zeros_like(fused), where=f_max > 0)
    if rel.shape[0] > 1:
        parts = rel[:-1]
        best_seg = parts.argmax(axis=0)
        seg_score = parts[best_seg, np.arange(parts.shape[1])]
        whole = rel[-1]
        total = seg_score + params.full_query_weight * whole
    else:
        best_seg = np.zeros(rel.shape[1], dtype=np.int64)
        seg_score = whole = rel[0]
        total = seg_score
    return Fused(total, best_seg, seg_score, whole, lex_n, dense_n, w[:, 0])


def spread_over_intents(
    total: np.ndarray, best_seg: np.ndarray, k: int, diversity: float
) -> np.ndarray:
    """The order of the ``k`` best candidates when each pick costs its intent ``diversity``.

    A candidate's effective score is its total minus ``diversity`` times the number of tools
    already picked for the same segment (intent), so one intent's near-duplicates do not
    crowd out the next intent's tools. ``diversity`` 0 is the plain order by ``total``.
    """
    k = min(k, total.size)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if diversity <= 0 or best_seg.size == 0 or int(best_seg.max()) == int(best_seg.min()):
        order = np.argpartition(-total, k - 1)[:k]
        out: np.ndarray = order[np.argsort(-total[order], kind="stable")]
        return out
    # Only the best few per segment can be picked: k of them at most.
    pool = np.argsort(-total, kind="stable")[: k * (int(best_seg.max()) + 1)]
    # Vectorised greedy pick over the pool (in float64, as Python floats would compute it):
    # argmax takes the first best in pool order, and a picked candidate drops out as -inf,
    # so ties resolve exactly as a scan of the remaining list would.
    base = total[pool].astype(np.float64)
    segs = best_seg[pool]
    counts = np.zeros(int(best_seg.max()) + 1, dtype=np.int64)
    taken = np.zeros(pool.size, dtype=bool)
    picked = np.empty(min(k, pool.size), dtype=np.int64)
    for step in range(picked.size):
        scores = base - diversity * counts[segs]
        scores[taken] = -np.inf
        best_j = int(np.argmax(scores))
        taken[best_j] = True
        picked[step] = pool[best_j]
        counts[segs[best_j]] += 1
    return picked


def spread_scores(
    total: np.ndarray, best_seg: np.ndarray, order: np.ndarray, diversity: float
) -> np.ndarray:
    """The effective score of each pick of :func:`spread_over_intents`: its total minus
    ``diversity`` times the picks of its intent before it.

    They never rise along ``order`` (each pick was the best effective score left, and the
    others only lose), so a caller that sorts by score keeps the spread order: the core's
    ``select`` does, after its rule filters.
    """
    scores: np.ndarray = np.asarray(total[order], dtype=np.float64)
    # The same cases as spread_over_intents' plain order: no penalty there, none here.
    if diversity <= 0 or order.size == 0 or int(best_seg.max()) == int(best_seg.min()):
        return scores
    segs = best_seg[order]
    counts: dict[int, int] = {}
    for j, seg in enumerate(segs.tolist()):
        scores[j] -= diversity * counts.get(seg, 0)
        counts[seg] = counts.get(seg, 0) + 1
    return scores
