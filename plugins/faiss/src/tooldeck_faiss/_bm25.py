"""A small BM25 index over integer slots that supports adding and removing documents."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import numpy as np


class BM25Index:
    """Okapi BM25 over weighted term counts.

    Documents live in integer slots (the same slots as the dense index). Postings are kept per
    term as a dict and converted to numpy arrays lazily, so that adding or removing a tool only
    invalidates the terms it contains instead of rebuilding everything.
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._postings: dict[str, dict[int, float]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._doc_terms: dict[int, Counter[str]] = {}
        self._lengths = np.zeros(0, dtype=np.float32)
        self._total_length = 0.0

    def __len__(self) -> int:
        return len(self._doc_terms)

    def _grow(self, slot: int) -> None:
        if slot >= len(self._lengths):
            size = max(slot + 1, 2 * len(self._lengths), 64)
            grown = np.zeros(size, dtype=np.float32)
            grown[: len(self._lengths)] = self._lengths
            self._lengths = grown

    def add(self, slot: int, terms: Mapping[str, float]) -> None:
        """Index ``terms`` (term -> weighted count) under ``slot``, replacing what was there."""
        if slot in self._doc_terms:
            self.remove(slot)
        counts = Counter({t: float(w) for t, w in terms.items() if w > 0})
        self._grow(slot)
        length = float(sum(counts.values()))
        self._lengths[slot] = length
        self._total_length += length
        self._doc_terms[slot] = counts
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[slot] = tf
            self._arrays.pop(term, None)

    def remove(self, slot: int) -> None:
        """Forget the document in ``slot`` (no-op when empty)."""
        counts = self._doc_terms.pop(slot, None)
        if counts is None:
            return
        self._total_length -= float(self._lengths[slot])
        self._lengths[slot] = 0.0
        for term in counts:
            posting = self._postings.get(term)
            if posting is not None:
                posting.pop(slot, None)
                if not posting:
                    del self._postings[term]
            self._arrays.pop(term, None)

    def document_frequency(self, term: str) -> int:
        """How many documents contain ``term``."""
        posting = self._postings.get(term)
        return len(posting) if posting else 0

    def document(self, slot: int) -> Mapping[str, float]:
        """The weighted term counts indexed under ``slot`` (empty when none)."""
        return self._doc_terms.get(slot, {})

    def _array(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        arrays = self._arrays.get(term)
        if arrays is None:
            posting = self._postings.get(term)
            if not posting:
                return None
            arrays = (
                np.fromiter(posting.keys(), dtype=np.int64, count=len(posting)),
                np.fromiter(posting.values(), dtype=np.float32, count=len(posting)),
            )
            self._arrays[term] = arrays
        return arrays

    def term_scores(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The slots containing ``term`` and the term's BM25 contribution to each."""
        n_docs = len(self._doc_terms)
        arrays = self._array(term) if n_docs else None
        if arrays is None:
            return None
        slots, tf = arrays
        avgdl = max(self._total_length / n_docs, 1e-6)
        df = len(slots)
        idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
        norm = self.k1 * (1.0 - self.b + self.b * self._lengths[slots] / avgdl)
        return slots, (idf * tf * (self.k1 + 1.0) / (tf + norm)).astype(np.float32)

    def scores_many(self, queries: list[list[str]], size: int) -> np.ndarray:
        """BM25 scores of every slot below ``size`` for each query (one row per query).

        Each distinct term is scored once even when several queries (the sentences of one
        task and the task as a whole) share it; repeated terms within a query count once.
        """
        out = np.zeros((len(queries), size), dtype=np.float32)
        cache: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}
        for row, terms in enumerate(queries):
            for term in dict.fromkeys(terms):
                if term not in cache:
                    cache[term] = self.term_scores(term)
                hit = cache[term]
                if hit is not None:
                    out[row, hit[0]] += hit[1]
        return out

    def scores(self, query_terms: list[str], size: int) -> np.ndarray:
        """BM25 score of every slot below ``size`` for one query."""
        row: np.ndarray = self.scores_many([query_terms], size)[0]
        return row
