"""Misspelt request words, corrected to the catalog's own words.

Real requests are typed in a hurry ("seacrh apple", "weather in India using searcvh web tool",
"LIST C DRIIVE"). A misspelt word matches no BM25 term, and MiniLM's word pieces carry little of
its meaning, so the one word that names the tool is lost on both channels. This module maps such
a word to the catalog word it most likely meant, before either channel reads the request.

Conservative on purpose, since a wrong correction costs more than a missed one:

- only lower-case or all-capital ASCII words of 5 letters or more are looked at: not proper
  nouns written in Title case inside a sentence, not camelCase or identifiers with digits or
  ``_``, not the letters after a literal ``\n``; four-letter words have too many neighbours
  ("chai" is one letter from "chat");
- a word that is known is never changed: an English word (pyspellchecker's English frequency
  list, 128k words, and the embedding model's ``vocab.txt``), with plain endings taken off,
  or a word the catalog uses;
- a candidate is a catalog word that starts with the same letter and is one edit away (an
  insertion, a deletion, a substitution or two letters swapped), two for words of 8 letters
  or more; below 8 letters it must be an English word too (so "openai" stays, rather than
  becoming the catalog's "openapi"), and a last letter is only dropped when it repeats the
  one before ("searchh", not "warna" -> "warn"). The candidate used by the most tools wins; a
  tie corrects nothing.

Measured on both open sets (see the plugin's README): the corrections BFCL live's requests get
are real typos ("seacrh", "searcvh", "informaton", "califronia", "tomorro") but for a few
foreign words; Seal-Tools gets two, both harmless.

Without a vocabulary of known words nothing is corrected: the catalog alone cannot tell a real
word it lacks ("kites") from a misspelling of one it has ("kits").
"""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from collections.abc import Iterable

__all__ = ["Speller", "load_known_words"]

_ASCII_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
#: What may touch a word that is looked at: a letter, digit, ``_`` or ``\`` (a literal "\n"
#: before it, as in "...\nThe") makes it part of something else.
_JOINED = frozenset("_\\")
_TOKEN = re.compile(r"[^\W_]+")  # the words a tool text is made of, in any script
_SENTENCE_START = re.compile(r"(?:^|[.!?;:]\s+|\n)\s*$")
#: Endings taken off before a word is looked up as known ("kites" -> "kite", "parsed" -> "parse").
_ENDINGS = ("ing", "ed", "es", "s", "er", "ers", "ly", "est")
_MIN_LENGTH = 5
_MIN_TARGET = 4
_LONG = 8

_ENGLISH: frozenset[str] | None = None
_ENGLISH_LOCK = threading.Lock()


def _english_words() -> frozenset[str]:
    """pyspellchecker's English word list (loaded once per process: 0.5 s, about 10 MB)."""
    global _ENGLISH
    with _ENGLISH_LOCK:
        if _ENGLISH is None:
            try:
                from spellchecker import SpellChecker
            except ImportError:  # an optional part: without it the model's vocabulary only
                _ENGLISH = frozenset()
            else:
                words = SpellChecker(language="en", distance=1).word_frequency.dictionary
                _ENGLISH = frozenset(w for w in words if w.isascii() and w.isalpha())
        return _ENGLISH


def load_known_words(model_path: str | None) -> frozenset[str]:
    """English words: pyspellchecker's list and the whole words of a BERT ``vocab.txt`` in
    ``model_path``. Empty when neither is there (the speller then corrects nothing)."""
    vocabulary: frozenset[str] = frozenset()
    if model_path:
        try:
            with open(os.path.join(model_path, "vocab.txt"), encoding="utf-8") as handle:
                vocabulary = frozenset(
                    word
                    for line in handle
                    if (word := line.strip()).isascii() and word.isalpha() and word.islower()
                )
        except OSError:
            pass
    return vocabulary | _english_words()


def _deletes(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


def _edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment distance (adjacent swaps count one), ``limit + 1`` past it."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        if min(current) > limit:
            return limit + 1
        previous2, previous = previous, current
    return previous[-1]


class Speller:
    """Corrects misspelt request words to words of the catalog (see the module's docstring).

    ``known`` are words that are never corrected (the embedding model's vocabulary). Catalog
    words are counted per tool through :meth:`add` and :meth:`remove`, so the speller follows
    tools registered and removed at run time. Thread-safe.
    """

    def __init__(self, known: frozenset[str]) -> None:
        self._known = known
        self._count: Counter[str] = Counter()
        # A word with one letter deleted -> the catalog words it comes from (symmetric-delete
        # lookup: a query word's own deletes meet these for every word one or two edits away).
        self._by_delete: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.corrections = 0

    @property
    def known(self) -> frozenset[str]:
        """The words never corrected."""
        return self._known

    @property
    def enabled(self) -> bool:
        """Whether words can be corrected at all (a vocabulary of known words was found)."""
        return bool(self._known)

    @staticmethod
    def words(text: str) -> set[str]:
        """The distinct lower-case ASCII words of a tool text that can be correction targets."""
        return {
            w for raw in _TOKEN.findall(text)
            if len(w := raw.lower()) >= _MIN_TARGET and w.isascii() and w.isalpha()
        }

    def add(self, words: Iterable[str]) -> None:
        """Count one tool's words (as :meth:`words` gives them)."""
        if not self.enabled:
            return
        with self._lock:
            for word in words:
                self._count[word] += 1
                if self._count[word] == 1:
                    for variant in _deletes(word) | {word}:
                        self._by_delete.setdefault(variant, set()).add(word)

    def remove(self, words: Iterable[str]) -> None:
        """Forget one removed tool's words."""
        if not self.enabled:
            return
        with self._lock:
            for word in words:
                left = self._count[word] - 1
                if left > 0:
                    self._count[word] = left
                    continue
                self._count.pop(word, None)
                for variant in _deletes(word) | {word}:
                    owners = self._by_delete.get(variant)
                    if owners is not None:
                        owners.discard(word)
                        if not owners:
                            del self._by_delete[variant]

    def _is_known(self, word: str) -> bool:
        if word in self._known or word in self._count:
            return True
        for ending in _ENDINGS:
            if word.endswith(ending) and len(word) - len(ending) >= 3:
                base = word[: -len(ending)]
                if base in self._known or base + "e" in self._known or base in self._count:
                    return True
                # "running" -> "runn" -> "run"
                if len(base) > 3 and base[-1] == base[-2] and base[:-1] in self._known:
                    return True
        return False

    def _candidate(self, word: str) -> str | None:
        limit = 2 if len(word) >= _LONG else 1
        near: set[str] = set()
        for variant in _deletes(word) | {word}:
            near |= self._by_delete.get(variant, set())
        scored = [
            (self._count[w], w) for w in near
            if w[0] == word[0]
            and (limit > 1 or w in self._known)
            and _edit_distance(word, w, limit) <= limit
        ]
        # A trailing letter more is a typo when it repeats the one before ("searchh"); else
        # it is more often another word or language ("warna" is not "warn").
        if limit == 1 and word[-1] != word[-2]:
            scored = [(n, w) for n, w in scored if w != word[:-1]]
        if not scored:
            return None
        scored.sort(reverse=True)
        if len(scored) > 1 and scored[0][0] == scored[1][0]:
            return None  # two equally likely readings: leave the word as it was typed
        return scored[0][1]

    def correct(self, text: str) -> tuple[str, dict[str, str]]:
        """``text`` with its misspelt words replaced, and what was replaced by what."""
        if not self.enabled or not self._count:
            return text, {}
        changes: dict[str, str] = {}
        pieces: list[str] = []
        last = 0
        with self._lock:
            for match in _ASCII_WORD.finditer(text):
                raw = match.group()
                word = raw.lower()
                if len(word) < _MIN_LENGTH or "'" in word:
                    continue
                # Touching a digit, "_" or a non-ASCII letter: an identifier or foreign word.
                start, end = match.span()
                before = text[start - 1] if start else " "
                after = text[end] if end < len(text) else " "
                if before.isalnum() or before in _JOINED or after.isalnum() or after in _JOINED:
                    continue
                if not (raw.islower() or raw.isupper()):
                    if raw[1:] != raw[1:].lower():
                        continue  # camelCase: an identifier ("pointA", "eStatements")
                    if not _SENTENCE_START.search(text[:start]):
                        continue  # a name inside a sentence ("Shishir", "Petaluma")
                if self._is_known(word):
                    continue
                fixed = self._candidate(word)
                if fixed is None:
                    continue
                changes[raw] = fixed
                pieces.append(text[last:start])
                pieces.append(fixed)
                last = end
            if changes:
                self.corrections += 1
        if not changes:
            return text, {}
        pieces.append(text[last:])
        return "".join(pieces), changes
