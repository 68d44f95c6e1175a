"""Adaptive fusion and intent splitting: pure functions, no model."""

from __future__ import annotations

import numpy as np
import pytest
from tooldeck_faiss._fusion import FusionParams, channel_confidence, fuse
from tooldeck_faiss._text import REQUEST_VERBS, segment_query


def test_confidence_is_high_for_a_clear_winner_and_zero_without_signal():
    clear = np.array([[1.0, 0.1, 0.1, 0.0, 0.0, 0.0]], dtype=np.float32)
    flat = np.array([[1.0, 0.95, 0.97, 0.9, 0.92, 0.96]], dtype=np.float32)
    none = np.zeros((1, 6), dtype=np.float32)
    assert channel_confidence(clear)[0] > 0.8
    assert channel_confidence(flat)[0] < 0.1
    assert channel_confidence(none)[0] == 0.0


def test_adaptive_weight_follows_the_confident_channel():
    # Lexically one tool stands out (column 0); the embedding is undecided. Adaptive fusion
    # leans on BM25 here; with the roles swapped it leans on the embedding.
    lex = np.array([[9.0, 0.5, 0.4, 0.3, 0.2, 0.1]], dtype=np.float32)
    dense = np.array([[0.50, 0.52, 0.51, 0.50, 0.49, 0.40]], dtype=np.float32)
    params = FusionParams(lexical_weight=0.5, adaptive=True, adapt=1.0)
    lexical = fuse(lex, dense, params)
    assert lexical.weights[0] > 0.5
    assert int(np.argmax(lexical.total)) == 0
    swapped = fuse(dense * 10, lex / 10 + 0.3, params)
    assert swapped.weights[0] < 0.5
    fixed = fuse(lex, dense, FusionParams(lexical_weight=0.5, adaptive=False))
    assert fixed.weights[0] == 0.5


def test_no_lexical_match_means_dense_only():
    lex = np.zeros((1, 4), dtype=np.float32)
    dense = np.array([[0.1, 0.9, 0.3, 0.2]], dtype=np.float32)
    fused = fuse(lex, dense, FusionParams())
    assert fused.weights[0] == 0.0
    assert int(np.argmax(fused.total)) == 1


def test_each_segment_brings_its_best_tool():
    # Two intents plus the whole query (last row): each intent's best tool scores 1.0.
    lex = np.array([[5.0, 0.0, 1.0], [0.0, 4.0, 1.0], [3.0, 2.0, 2.0]], dtype=np.float32)
    dense = np.array([[0.9, 0.1, 0.4], [0.1, 0.8, 0.4], [0.6, 0.5, 0.5]], dtype=np.float32)
    fused = fuse(lex, dense, FusionParams())
    top2 = set(np.argsort(-fused.total)[:2].tolist())
    assert top2 == {0, 1}
    assert fused.best_seg[0] == 0 and fused.best_seg[1] == 1


def test_split_on_request_verbs():
    verbs = REQUEST_VERBS
    assert segment_query(
        "read the config file in my project and list the folder", verbs=verbs
    ) == ["read the config file in my project", "list the folder"]
    # "and" between nouns is not a new request
    assert segment_query("find pictures of cats and dogs", verbs=verbs) == [
        "find pictures of cats and dogs"
    ]
    # a comma list of requests
    assert segment_query(
        "get the weather in Oslo, convert 20 euros to dollars and send an email to Bob",
        verbs=verbs,
    ) == ["get the weather in Oslo", "convert 20 euros to dollars", "send an email to Bob"]
    # without verbs, the old behaviour
    assert segment_query("read the config file and list the folder") == [
        "read the config file and list the folder"
    ]


def test_spread_over_intents_interleaves_look_alikes():
    from tooldeck_faiss._fusion import spread_over_intents

    # segment 0 has four look-alikes scoring above segment 1's best
    total = np.array([1.3, 1.29, 1.28, 1.27, 1.2, 1.1], dtype=np.float32)
    best_seg = np.array([0, 0, 0, 0, 1, 1])
    assert spread_over_intents(total, best_seg, 3, 0.0).tolist() == [0, 1, 2]
    assert spread_over_intents(total, best_seg, 3, 0.1).tolist() == [0, 4, 1]
    # one intent only: the plain order
    assert spread_over_intents(total, np.zeros(6, dtype=np.int64), 2, 0.1).tolist() == [0, 1]


@pytest.mark.parametrize("diversity", [0.0, 0.03, 0.3, 5.0])
def test_spread_scores_never_rise_along_the_spread(diversity):
    """Sorting the picks by their effective score gives the spread order back: the core's
    select sorts the retriever's hits by score after its rule filters."""
    from tooldeck_faiss._fusion import spread_over_intents, spread_scores

    rng = np.random.default_rng(5)
    for _ in range(50):
        total = rng.random(40)
        best_seg = rng.integers(0, 4, 40)
        order = spread_over_intents(total, best_seg, 15, diversity)
        scores = spread_scores(total, best_seg, order, diversity)
        assert all(a >= b for a, b in zip(scores, scores[1:], strict=False))
        assert sorted(range(15), key=lambda j: -scores[j]) == list(range(15))
        if diversity == 0:
            assert np.array_equal(scores, total[order])
