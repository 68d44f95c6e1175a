"""Misspelt request words, corrected to the catalog's own words.

Real requests are typed in a hurry ("seacrh apple", "weather in India using searcvh web tool",
"LIST C DRIIVE"). A misspelt word matches no BM25 term, and MiniLM's word pieces carry little of
its meaning, so the one word that names the tool is lost on both channels. This module maps such
a word to the catalog word it most likely meant, before either channel reads the request.

Conservative on purpose, since a wrong correction costs more than a missed one:

- only lower-case or all-capital ASCII words of 5 letters or more are looked at: not proper
  nouns written in Title case inside a sentence, not camelCase or identifiers with digits or
  ``_``, not the letters after a literal ``\\n``; four-letter words have too many neighbours
  ("chai" is one letter from "chat");
- a word that is known is never changed: an English word (pyspellchecker's English frequency
  list, 128k words, and the embedding model's ``vocab.txt``), with plain endings taken off,
  or a word the catalog uses;
- a candidate is a catalog word that starts with the same letter and is one edit away (an
  insertion, a deletion, a substitution or two letters swapped); below 8 letters it must be
  an English word too (so "openai" stays, rather than becoming the catalog's "openapi"), and
  a last letter is only dropped when it repeats the
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
from collections.abc import Callable

from ._text import _WORD, stem

__all__ = ["Speller", "load_known_words"]

_ASCII_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
#: What may touch a word that is looked at: a letter, digit, ``_`` or ``\`` (a literal "\n"
#: before it, as in "...\nThe") makes it part of something else.
_JOINED = frozenset("_\\")
#: Endings taken off before a word is looked up as known ("kites" -> "kite", "parsed" -> "parse").
_ENDINGS = ("ing", "ed", "es", "s", "er", "ers", "ly", "est")
_MIN_LENGTH = 5
_MIN_TARGET = 4
#: From this length a candidate need not be an English word ("kubernets" -> "kubernetes").
_LONG = 8
#: Unknown words looked up per request, at most: each costs about 54 x its length lookups
#: (0.1 ms), and a request of nothing but made-up words must not hold selection (a megabyte
#: of them took 11 s). Real requests have a handful.
MAX_LOOKUPS = 256

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


def _opens_sentence(text: str, start: int) -> bool:
    """Whether the word at ``start`` opens the text, a line or a sentence."""
    i = start - 1
    while i >= 0 and text[i].isspace():
        if text[i] == "\n":
            return True
        i -= 1
    return i < 0 or (text[i] in ".!?;:" and i < start - 1)


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


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _one_edit(word: str) -> set[str]:
    """Every string one edit from ``word``: a letter deleted, inserted or replaced, or two
    neighbours swapped (about 54 x its length; generated per unknown word, so the speller keeps
    no index of its own)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    deletes = [a + b[1:] for a, b in splits if b]
    swaps = [a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1]
    replaces = [a + c + b[1:] for a, b in splits if b for c in _LETTERS]
    inserts = [a + c + b for a, b in splits for c in _LETTERS]
    return set(deletes + swaps + replaces + inserts)


class Speller:
    """Corrects misspelt request words to words of the catalog (see the module's docstring).

    ``known`` are words that are never corrected (English). ``uses`` gives, for a lower-case
    word, how many of the catalog's tools use it (0 for none): the retriever answers from its
    BM25 index, so the speller follows tools registered and removed at run time without a
    copy of its own. Thread-safe as long as ``uses`` is.
    """

    def __init__(self, known: frozenset[str], uses: Callable[[str], int]) -> None:
        self._known = known
        self._uses = uses
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
            w for raw in _WORD.findall(text)  # words of any script; ASCII kept below
            if len(w := raw.lower()) >= _MIN_TARGET and w.isascii() and w.isalpha()
        }

    def _is_known(self, word: str) -> bool:
        if word in self._known or self._uses(word):
            return True
        for ending in _ENDINGS:
            if word.endswith(ending) and len(word) - len(ending) >= 3:
                base = word[: -len(ending)]
                if base in self._known or base + "e" in self._known or self._uses(base):
                    return True
                # "running" -> "runn" -> "run"
                if len(base) > 3 and base[-1] == base[-2] and base[:-1] in self._known:
                    return True
        return False

    def _candidate(self, word: str) -> str | None:
        long_word = len(word) >= _LONG
        scored = [
            (uses, w) for w in _one_edit(word)
            if len(w) >= _MIN_TARGET and w[0] == word[0]
            and (long_word or w in self._known)
            and (uses := self._uses(w))
        ]
        # A trailing letter more is a typo when it repeats the one before ("searchh"); else
        # it is more often another word or language ("warna" is not "warn").
        if not long_word and word[-1] != word[-2]:
            scored = [(n, w) for n, w in scored if w != word[:-1]]
        if not scored:
            return None
        # Spellings of one catalog word ("university", "universitys") are one reading: its
        # English spelling, else the shortest, stands for it.
        readings: dict[str, tuple[int, str]] = {}
        for uses, w in sorted(scored, key=lambda c: (c[1] not in self._known, len(c[1]), c[1])):
            readings.setdefault(stem(w), (uses, w))
        ranked = sorted(readings.values(), reverse=True)
        if len(ranked) > 1 and ranked[0][0] == ranked[1][0]:
            return None  # two equally likely readings: leave the word as it was typed
        return ranked[0][1]

    def correct(self, text: str) -> tuple[str, dict[str, str]]:
        """``text`` with its misspelt words replaced, and what was replaced by what."""
        if not self.enabled:
            return text, {}
        changes: dict[str, str] = {}
        pieces: list[str] = []
        last = 0
        seen: dict[str, str | None] = {}  # a long request repeats its words
        looked_up = 0
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
                if not _opens_sentence(text, start):
                    continue  # a name inside a sentence ("Shishir", "Petaluma")
            if word not in seen:
                if self._is_known(word):
                    seen[word] = None
                elif looked_up < MAX_LOOKUPS:
                    looked_up += 1
                    seen[word] = self._candidate(word)
                else:
                    continue
            fixed = seen[word]
            if fixed is None:
                continue
            changes[raw] = fixed
            pieces.append(text[last:start])
            pieces.append(fixed)
            last = end
        if not changes:
            return text, {}
        with self._lock:
            self.corrections += 1
        pieces.append(text[last:])
        return "".join(pieces), changes
