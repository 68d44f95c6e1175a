"""Secret redaction for tool results and tooldeck's logs.

Every secret found is replaced by ``[REDACTED:<rule-id>]``. The detectors:

- ``known-secret``: values the deck knows, matched exactly wherever they appear and in their
  encodings (JSON-escaped, percent-encoded, hex, base64 in both alphabets with or without
  padding and at the three byte alignments inside a longer blob): the host environment's
  secret-looking variables (``*TOKEN*``, ``*SECRET*``, ``*_KEY``, ``*PASSWORD*``, ``*_PAT``,
  ``AWS_*``, any URL with a password, ...; values under 8 characters or that are paths are
  skipped) and the configured ``[policy] secrets`` / ``secret_env``. One Aho-Corasick automaton
  holds every form of every value, so the scan costs the same for 1 or 1000 secrets;
- the gitleaks default rule set (``rules/gitleaks_rules.json``, built by
  ``scripts/compile_gitleaks.py``), run the way gitleaks runs it: a rule is tried only when one of
  its keywords occurs in the lowercased text; the secret is the rule's ``secretGroup`` (or the first
  non-empty group); it must be more random than the rule's ``entropy`` (Shannon, bits per
  character); the rule's and the global allowlists let placeholders through;
- ``private-key``: whole ``-----BEGIN ... PRIVATE KEY-----`` blocks through their END line
  (through the last key line when the END line was cut off, from the first key line before the
  END line when the BEGIN line was); markers alone, as in code that looks for keys, are left; a
  base64 or hex run with neither line is taken when its bytes show a private key's structure
  (consecutive big DER INTEGERs or OpenSSH mpints, OpenSSH/EC/PKCS#8 key fields: see
  ``_KEY_SIGNATURES``), so certificates, public keys and images stay;
- ``url-credentials``: the password of ``scheme://user:password@host``;
- ``authorization-header``: the credential of ``Authorization: Bearer|Basic|Token ...``;
- ``aws-access-key-id`` / ``aws-secret-access-key``: AWS keys regardless of entropy (gitleaks
  skips low-entropy ones);
- ``cookie``: the values of ``Cookie:`` / ``Set-Cookie:`` headers and ``curl --cookie`` (every
  pair, to the header's end);
- ``netrc-password``: ``machine HOST login USER password SECRET`` (``~/.netrc``);
- ``pgpass-password``: the password of ``host:port:database:user:password`` (``~/.pgpass``);
- ``password-hash``: crypt(3), htpasswd, LDAP, Django and PHC password hashes (``$apr1$...``,
  ``$2y$...``, ``{SHA}...``, ``$6$...``, ``$argon2id$...``), whole;
- ``cli-credential``: credentials on a command line (``--password X``, ``--token X``,
  ``mysql -pX``, ``sshpass -p X``, ``redis-cli -a X``, ``docker login -p X``, ``curl -u user:X``);
- ``keyword-assignment``: ``password = ...``, ``secret: ...``, ``api_key=...``, ``token: ...`` in
  code, env, ini, yaml and JSON, like detect-secrets' keyword detector, minus placeholders, code
  references and type annotations; YAML values below their name (``password: |``);
  ``<password>...</password>``; and a value named by a sibling field in text
  (``{"name": "DB_PASSWORD", "value": ...}``, YAML's ``- name:`` / ``value:``);
- ``high-entropy-assignment``: a random-looking base64-alphabet value assigned to any name
  (detect-secrets' 4.5 bits per character), except names that say it is an id or a hash;
- ``cut-token``: the word just before a ``…[+N chars]`` cut marker (half a token is no longer
  recognized, and the cut can be shifted).

Encoded text is decoded and scanned again (two levels deep): a base64 run (either alphabet,
lines wrapped at 40+ joined) or hex run that decodes to text holding a secret is replaced whole by
``[REDACTED:base64:<rule>]`` / ``[REDACTED:hex:<rule>]``; percent-encoding, ``\\uXXXX``,
``\\xXX``, ``\\/``, HTML character references and invisible characters (zero-width, soft hyphen,
bidi, variation selectors) are decoded in a view of their line and a secret found there is
replaced exactly. Bytes in base64 (content blocks' ``data`` / ``blob``, ``{"$bytes_base64": ...}``,
a field beside ``"encoding": "base64"`` or ``"<field>_encoding": "base64"``) are decoded and
scanned whether or not they are text, and withheld whole, with a note, when they hold a secret.

The output cannot opt out. Tool output is data the model may have shaped (a command can append
anything to every line), so no inline marker is honoured (``gitleaks:allow``, ``pragma:
allowlist secret``, ``nosec``, ...), and every allowlist only excuses what it explains itself: a
regex on the secret must match all of it; a regex on the match or the line must cover the start
of the rule's match (the name it fired on), not text added around it; a stopword excuses a
secret only when what is left once the stopwords are cut out is not random; an entropy threshold
is met by the whole secret or by any 16/32/64-character window of it (padding a key with
``aaaa...`` does not hide it); placeholders (``${VAR}``, ``<password>``, ``hf_...``, ``%s``) must
be the whole value; gitleaks' right-hand token boundaries are optional after a provider token
(``ghp_...example``) and accept punctuation that no token contains after a generic value
(``password=...#gitleaks:allow``). UUIDs and bare hex strings (git SHAs, digests) are never
redacted on their own.

Speed: linear in the input. One Aho-Corasick pass (``pyahocorasick`` when installed, ``str.find``
otherwise) finds every keyword occurrence; rules then run only around those occurrences, anchored
at them when the rule's pattern starts with its keyword; every look around a finding is bounded
(512 characters for a line-level allowlist, 96 for a name), so a finding costs the same on a 1 MB
line as on a short one. gitleaks' curl rules, written for RE2's linear engine as
``\bcurl\b(?:.*|...)`` before the option they want, search that option part and look back for
``curl`` instead (Python's engine read to the end of the line from every ``curl``: 18 s for 80 kB
of them); long scans check the call's deadline, so an abandoned redaction thread stops.
gitleaks' kubernetes-secret-yaml pattern backtracks for ~100 s per MB of ``data:`` / entry /
``kind: secret`` pieces under Python's engine: an exact linear matcher finds its matches instead
(:class:`_KubernetesSecretYaml`); match and line allowlists are tried only at the offsets up to
the rule's match, the generic names one through an equivalent pattern the engine skips fast
(:class:`_FastAlternation`). 1 MB of mixed text takes about 50 ms with ~600 secrets (decoding
adds a pass per level over the runs and escaped lines, no more than the text: 1.1-1.9x on the
benchmarks, 1 and 10 MB alike); the worst inputs found per rule (its keywords packed, its
pattern's samples cut and glued, mutated) cost up to ~0.7 s per MB for one rule, and a 1 MB
line holding 19,000 ``aws_secret=...`` findings ~1.4 s for the whole redaction (2 s before the
audit of stop 41, 46 s before issue 13; 2-core machine). The rules compile once, on first use
(~0.15 s). :func:`redact_result` is thread-safe and accepts a
deadline; :func:`needs_offload` tells the core when a result is big enough to redact in a
worker thread.

A string value under a credential-like key of a mapping (``{"password": ...}``, HTTP header
dicts with ``Authorization`` or ``Cookie``) is replaced whole by :func:`redact_value`, whatever it
looks like. :func:`install_log_redaction` (run when the plugin loads) redacts every record of the
``tooldeck*`` loggers; :class:`RedactingFilter` does the same for any handler.
"""

from __future__ import annotations

import array
import base64
import binascii
import bisect
import contextvars
import functools
import itertools
import json
import logging
import math
import os
import re
import string
import threading
import time
import urllib.parse
from collections import Counter

try:  # the C loop behind Counter; a dict filled by it keeps Counter's order
    from collections import _count_elements  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a Python without the C helper

    def _count_elements(mapping: dict[str, int], iterable: Iterable[str]) -> None:
        for element in iterable:
            mapping[element] = mapping.get(element, 0) + 1
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import resources
from typing import Any

import attrs

from tooldeck_hookspecs import CALL_DEADLINE, ToolResult

try:  # An optional accelerator: one C pass for all keywords instead of one scan per keyword.
    import ahocorasick as _ahocorasick  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - exercised only where pyahocorasick is missing
    _ahocorasick = None

__all__ = [
    "KNOWN_SECRET_RULE",
    "OFFLOAD_CHARS",
    "REDACTION_FORMAT",
    "Finding",
    "RedactingFilter",
    "RedactionTimeout",
    "add_known_secrets",
    "configure",
    "encoded_forms",
    "find_secrets",
    "install_log_redaction",
    "needs_offload",
    "redact_record",
    "redact_result",
    "redact_text",
    "redact_value",
    "refresh_known_secrets",
    "result_size",
    "rule_ids",
    "secret_env_name",
    "secret_name",
    "settings_secrets",
    "shannon_entropy",
]

class _LazyPattern:
    """A module-level regex compiled at its first use, not at import: the redactor's ~25
    patterns cost ~7 ms to compile, which every ``tooldeck call`` paid even when a result held
    nothing that reaches most of them. After the first use, the pattern's methods are plain
    instance attributes (no per-call indirection)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._source = (pattern, flags)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not set yet: compile once, then bind what callers use.
        compiled = re.compile(*self.__dict__["_source"])
        for attribute in ("search", "match", "fullmatch", "finditer", "findall", "sub",
                          "subn", "split", "pattern", "flags", "groups", "groupindex"):
            self.__dict__[attribute] = getattr(compiled, attribute)
        self.__dict__["compiled"] = compiled
        return self.__dict__[name] if name in self.__dict__ else getattr(compiled, name)


def _lazy_re(pattern: str, flags: int = 0) -> Any:
    """``re.compile(pattern, flags)``, deferred to the first use (see :class:`_LazyPattern`)."""
    return _LazyPattern(pattern, flags)


# The spans of matches, read by map() at C speed.
_MATCH_SPAN = re.Match.span
_MATCH_START = re.Match.start

#: Characters of a text that one call into C reads in the passes over the whole text (keyword
#: occurrences, encoded runs, escapes). Running in a worker thread keeps redaction off the
#: event loop only if the thread lets go of the GIL: a C call never does, and one pass over an
#: 8 MB output in one call held it, and with it every other session, for up to 8.6 s (zero-width
#: spaces: 8 million escape matches in one ``list(map(...))``). A slice costs ~1-16 ms at most.
_SLICE_CHARS = 16_384


def _lowered(text: str) -> str:
    """``text`` lower-cased for the keyword search, with the length of ``text`` (``str.lower``
    keeps lengths except for U+0130, which becomes two code points: it is written ``i``).

    Slice by slice for long texts (see :data:`_SLICE_CHARS`): one ``lower()`` of 2.7 million
    zero-width spaces held the GIL ~50 ms. The same text: ``str.lower`` maps each character
    on its own but for a capital sigma (``Σ`` becomes ``ς`` at the end of a word, which it
    finds by looking past the slice's edge), so a text holding one is lowered whole."""
    if len(text) <= 4 * _SLICE_CHARS or "\u03a3" in text:
        return text.replace("\u0130", "i").lower()
    return "".join([
        text[at:at + _SLICE_CHARS].replace("\u0130", "i").lower()
        for at in range(0, len(text), _SLICE_CHARS)
    ])


def _automaton_matches(automaton: Any, text: str, reach: int) -> Iterator[tuple[int, Any]]:
    """``automaton.iter(text)`` (pyahocorasick: ``(end index, value)``), slice by slice of
    match ends (see :data:`_SLICE_CHARS`): one ``iter`` reads on in C until its next match.

    Each slice starts the automaton ``reach`` characters early (the longest word's length
    minus one), so that its state at the slice's first end is that of a run over the whole
    text: the same matches, in the same order. The slices are copied: ``iter``'s own start
    and end arguments cost a pass over the whole text each (quadratic)."""
    n = len(text)
    for low in range(0, n, _SLICE_CHARS):
        start = max(0, low - reach)
        shift = low - start
        for end, value in automaton.iter(text[start:low + _SLICE_CHARS]):
            if end >= shift:
                yield start + end, value

#: How a secret is replaced; ``{rule}`` is the id of the rule that found it.
REDACTION_FORMAT = "[REDACTED:{rule}]"

# Regions searched around a keyword occurrence, for rules that are not anchored at it. Wide enough
# for gitleaks' longest contexts (Kubernetes secrets: 300 characters before the keyword; private
# keys and long tokens after it).
_WINDOW_BEFORE = 512
_WINDOW_AFTER = 4096
_WINDOW_SLACK = 1024

# How far around a match a line-level allowlist looks (lines of tool output can be 8 MiB long).
_LINE_CONTEXT = 512
_REDACTED_RE = _lazy_re(r"\[REDACTED:[\w.:-]+\]")
_REDACTED_MAX = 96

# gitleaks' generic rule template starts with an identifier, then one of the rule's names. The
# identifier part only widens the match to the left (the secret is a later group); in Python's
# backtracking engine it costs 50 steps per position, so it is stripped and given back only where
# an allowlist looks at the whole match.
_IDENT_PREFIX = "[\\w.-]{0,50}?"
_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class _Refused:
    """Why a rule's match was not a finding, where the scan needs to know (a sentinel)."""

    __slots__ = ()


#: The match's secret has too little entropy (see :func:`_entropic`).
_LOW_ENTROPY = _Refused()


@attrs.frozen(kw_only=True)
class Finding:
    """A secret in a text: the rule that found it and the span ``text[start:end]`` it covers."""

    rule_id: str
    start: int
    end: int


# c * log2(c), precomputed for :func:`shannon_entropy` and the sliding windows of
# :func:`_entropic`.
_CLOG = [0.0] + [c * math.log2(c) for c in range(1, 257)]


# log2(n), precomputed (the same floats as math.log2).
_LOG2 = [0.0] + [math.log2(n) for n in range(1, len(_CLOG))]


def _counts(value: str) -> dict[str, int]:
    """What ``Counter(value)`` holds (the same order), without Counter's own overhead."""
    counts: dict[str, int] = {}
    _count_elements(counts, value)
    return counts


def shannon_entropy(value: str) -> float:
    """Bits of Shannon entropy per character of ``value`` (0 for the empty string)."""
    if not value:
        return 0.0
    return _entropy_of(_counts(value), len(value))


def _entropy_of(counts: dict[str, int], n: int) -> float:
    if n < len(_CLOG):  # H = log2(n) - sum(c * log2 c) / n, from a table
        return _LOG2[n] - sum(map(_CLOG.__getitem__, counts.values())) / n
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _scoped(regex: str) -> str:
    """``regex`` with a leading global flag group made scoped, so that it can be alternated."""
    m = re.match(r"\(\?([aiLmsux]+)\)", regex)
    return f"(?{m.group(1)}:{regex[m.end() :]})" if m else regex


# ---------------------------------------------------------------------------------------------
# Allowlists
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class _Allowlist:
    """One gitleaks allowlist, applied so that the text being redacted cannot steer it.

    gitleaks reads allowlists as "this finding is a known false positive". In tool output the
    text is the attacker's: a model can have a command append words to every line. So each
    condition only excuses what it explains itself: a regex on the secret must match all of it
    (``(?i)^true|false|null$`` then means what it says, not "contains false"); a regex on the
    match or the line must cover the start of the rule's match, i.e. the name the rule fired on,
    not text added around it; a stopword excuses only when what is left of the secret once every
    stopword is cut out holds nothing random enough for the rule.
    """

    condition: str
    target: str
    regexes: tuple[re.Pattern[str], ...]
    stopwords: tuple[str, ...]
    has_paths: bool
    stopword_automaton: Any = None
    #: The secret-target regexes as one alternation: any of them matching all of the secret.
    combined: re.Pattern[str] | None = None
    #: How :func:`_covers` walks each regex of a match/line allowlist (made once: hashing a
    #: long pattern for a cache look-up cost 2 us per finding).
    walks: tuple[_CoverWalk, ...] = ()
    #: What :meth:`_stopwords_explain` answered, by (secret, entropy): several names before one
    #: ``=`` each start a match with the same secret (emptied when full).
    explained: dict[tuple[str, float], bool] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def load(cls, raw: Mapping[str, Any]) -> _Allowlist:
        stopwords = tuple(raw.get("stopwords", ()))
        automaton: Any = None
        if stopwords and _ahocorasick is not None:
            automaton = _ahocorasick.Automaton()
            for word in stopwords:
                automaton.add_word(word, len(word))
            automaton.make_automaton()
        sources = [str(rx) for rx in raw.get("regexes", ())]
        # One pass instead of one per regex; a leading global flag becomes a scoped group.
        combined = re.compile("|".join(f"(?:{_scoped(rx)})" for rx in sources)) if sources else None
        target = str(raw.get("regex_target", "secret"))
        regexes = tuple(re.compile(rx) for rx in sources)
        return cls(
            condition=str(raw.get("condition", "OR")).upper(),
            target=target,
            regexes=regexes,
            combined=combined,
            walks=() if target == "secret" else tuple(_CoverWalk(rx) for rx in regexes),
            stopwords=stopwords,
            has_paths=bool(raw.get("paths")),
            stopword_automaton=automaton,
        )

    def allows(self, secret: str, entropy: float, context: Callable[[], tuple[str, int]]) -> bool:
        """Whether this allowlist excuses ``secret`` (found by a rule demanding ``entropy``).

        ``context`` gives the text a match/line regex looks at and the offset in it of the start
        of the rule's match (computed only when a regex needs it). The conditions are read in
        order and the reading stops once the outcome is known (each is a pure test).
        """
        every = self.condition == "AND"
        known = False  # whether any condition was read
        if self.has_paths:
            if every:
                return False  # tool output has no file path to match: no need to read more
            known = True  # tool output has no file path to match: False, read on
        if self.regexes:
            if self.target == "secret":
                hit = self.combined is not None and self.combined.fullmatch(secret) is not None
            else:
                hit = False
                for walk in self.walks:
                    if walk.literal and isinstance(context, _Context) and not context.holds(
                        walk.literal
                    ):
                        continue  # no match of it can start at or before the anchor
                    where, anchor = context()
                    if walk.covers(where, anchor):
                        hit = True
                        break
            if hit != every:
                return hit  # OR: one is enough; AND: one failing is enough
            known = True
        if self.stopwords:
            return self._stopwords_explain(secret, entropy)
        return known and every

    def _stopwords_explain(self, secret: str, entropy: float) -> bool:
        if len(secret) > _REMEMBERED_MAX:
            return self._explain(secret, entropy)
        known = self.explained.get((secret, entropy))
        if known is None:
            if len(self.explained) >= 4096:
                self.explained.clear()
            known = self.explained[(secret, entropy)] = self._explain(secret, entropy)
        return known

    def _explain(self, secret: str, entropy: float) -> bool:
        lowered = secret.lower()
        spans: list[tuple[int, int]] = []
        if self.stopword_automaton is not None:
            for end, length in self.stopword_automaton.iter(lowered):
                spans.append((end - length + 1, end + 1))
        else:  # pragma: no cover - exercised only where pyahocorasick is missing
            for word in self.stopwords:
                p = lowered.find(word)
                while p != -1:
                    spans.append((p, p + len(word)))
                    p = lowered.find(word, p + 1)
        if not spans:
            return False
        # What the stopwords do not cover must not look like the secret the rule wants: a
        # stopword pasted next to a real key leaves the key whole in one of these segments.
        spans.sort()
        cursor, threshold = 0, max(entropy, _STOPWORD_REST_ENTROPY)
        for start, end in spans:
            if start > cursor and _segment_is_secret(secret[cursor:start], threshold):
                return False
            cursor = max(cursor, end)
        return not _segment_is_secret(secret[cursor:], threshold)


# Up to this length, _covers searches the whole text (each search is bounded by it).
_COVERS_SEARCH_MAX = 4096


def _covers(rx: re.Pattern[str], where: str, anchor: int) -> bool:
    """Whether a match of ``rx`` in ``where`` (one of ``finditer``'s) spans the offset ``anchor``.

    ``finditer`` is walked by hand, trying ``rx`` only at the offsets up to ``anchor``: a
    search for the next hit tried every offset to the end of ``where``, and the match of
    gitleaks' generic rule can be a whole line (its value ``[a-z0-9+/]{11,}`` has no bound).
    Its allowlist's ``[a-z0-9-]*?api[a-z0-9-]*?:jar:`` then read the rest of that value from
    every offset: 8 s for 32 kB of ``key = aaaa...`` (quadratic). A search is the first offset
    at which ``match`` succeeds, so the hits are the same. How the offsets are tried depends on
    the pattern (see :class:`_CoverWalk`): the search over the whole of a short ``where`` was
    quadratic too (37 s per MB of ``key = <4 kB value>``).
    """
    return _cover_walk(rx).covers(where, anchor)


class _CoverWalk:
    """How :func:`_covers` tries one pattern at the offsets up to the anchor, by what its
    matches start with:

    - a literal (``LICENSE[^=]*=...``, ``--mount=type=secret,``): only the offsets where that
      literal occurs (found by ``str.find``) can start a match;
    - gitleaks' generic allowlist of names (:class:`_FastAlternation`): one call of an
      equivalent pattern whose alternatives the engine skips at C speed, over the next
      :data:`_FAST_SPAN` offsets (a match starting past the anchor ends the walk anyway);
    - anything else: ``finditer`` over a short ``where`` when the anchor is not close to its
      start, else ``match`` at each offset.
    """

    def __init__(self, rx: re.Pattern[str]) -> None:
        self.rx = rx
        source = getattr(rx, "pattern", None)
        flags = getattr(rx, "flags", 0)
        self.literal = (
            _literal_prefix(source)
            if isinstance(source, str) and not flags & (re.IGNORECASE | re.VERBOSE)
            else ""
        )
        self.fast = (
            _FastAlternation.get(source, flags)
            if isinstance(source, str) and not self.literal
            else None
        )

    def covers(self, where: str, anchor: int) -> bool:
        if self.literal:
            return self._covers_at_literals(where, anchor)
        if self.fast is not None:
            return self._covers_fast(where, anchor)
        if len(where) <= _COVERS_SEARCH_MAX and anchor > _COVERS_MATCH_MAX:
            return _covers_from(self.rx, where, anchor, 0)  # short: one C loop is cheaper
        return self._covers_by_match(where, anchor, 0)

    def _covers_by_match(self, where: str, anchor: int, at: int) -> bool:
        rx = self.rx
        while at <= anchor:
            hit = rx.match(where, at)
            if hit is None:
                at += 1
                continue
            if hit.end() == hit.start():
                # finditer's rules after an empty hit (no second empty hit at the same offset)
                # cannot be replayed with match(): read on with finditer itself (none of
                # gitleaks' allowlists matches the empty string).
                return _covers_from(rx, where, anchor, at)
            if hit.end() > anchor:
                return True
            at = hit.end()
        return False

    def _covers_at_literals(self, where: str, anchor: int) -> bool:
        rx, literal = self.rx, self.literal
        last = anchor + len(literal)  # a literal found before this starts at most at anchor
        at = where.find(literal, 0, last)
        while at >= 0:
            hit = rx.match(where, at)
            if hit is None:
                at = where.find(literal, at + 1, last)
                continue
            if hit.end() > anchor:
                return True  # (a match that starts with a literal is not empty)
            at = where.find(literal, hit.end(), last)
        return False

    def _covers_fast(self, where: str, anchor: int) -> bool:
        assert self.fast is not None
        at = 0
        while at <= anchor:
            if anchor - at > _FAST_SPAN:
                return self._covers_by_match(where, anchor, at)
            # the first match starting in [at, at + N], N >= anchor - at
            hit = self.fast.walker(where, anchor - at)(where, at)
            if hit is None:
                return False
            start, end = hit.span(1)
            if start > anchor:
                return False
            if end == start:
                return _covers_from(self.rx, where, anchor, start)
            if end > anchor:
                return True
            at = end
        return False


@functools.lru_cache(maxsize=1024)
def _cover_walk(rx: re.Pattern[str]) -> _CoverWalk:
    return _CoverWalk(rx)


# Up to this anchor, _covers tries the offsets one by one rather than search a short text.
_COVERS_MATCH_MAX = 8


def _literal_prefix(pattern: str) -> str:
    """The literal every match of ``pattern`` (case-sensitive, not verbose) starts with: its
    leading plain characters, none of them made optional or repeated; "" when it has none or
    may start otherwise (a flag group, a top-level ``|``)."""
    if pattern.startswith("(") or len(_split_top(pattern)) != 1:
        return ""
    out = []
    for i, c in enumerate(pattern):
        if not (c.isascii() and (c.isalnum() or c in "_-=,:;/<>!@%&~'\" #")):
            break
        if pattern[i + 1 : i + 2] in ("*", "+", "?", "{"):
            break
        out.append(c)
    return "".join(out)


# The case-insensitive forms of an ASCII letter that differ from its lower and upper case
# (Python's ``re`` with IGNORECASE on str patterns; test_redact_s41_speed.py checks the table
# against every cased character).
_IGNORECASE_EXTRA = {"i": "\u0130\u0131", "k": "\u212a", "s": "\u017f"}
_QUANTIFIERS = ("*", "+", "?", "{")
# Most offsets _covers_fast reads in one call (a match starting later than the anchor ends the
# walk: the anchor of a match allowlist is the length of the name before it, at most 50).
_FAST_SPAN = 63


class _FastAlternation:
    """A case-insensitive alternation of words (gitleaks' generic allowlist of names:
    ``(?i)(?:access(?:ibility|or)|...|rapid|...)``) as an equivalent pattern the engine runs
    fast, and the walk :func:`_covers` makes with it.

    Under IGNORECASE the engine tries each of the ~30 alternatives at each offset (~1 us per
    offset, 10 us for a name of 10 characters). Rewritten, equivalently:

    - each alternative's first letter becomes the class of all its case forms (``[aA]``,
      ``[kK\u212a]``, see :data:`_IGNORECASE_EXTRA`), the rest stays case-insensitive; a group
      of alternatives is spread (``(?:A|B)S`` is ``AS|BS``: tried in the same order);
    - alternatives are gathered by first character: the classes are cut into disjoint sets,
      and each set leads the alternatives that can start with it, in their order. At an
      offset only the set holding its character is entered (one table look-up per set, the
      engine skips a branch whose first class fails), and there the alternatives are tried in
      the order of the source, the others could not match there;
    - alternatives that start with a run (``[a-z0-9-]*?api[a-z0-9-]*?:jar:``,
      ``[A-Z_]+=\n...``) read the run at each offset: they are left out for a text that lacks
      a literal they need (``:jar:``, ``=\n``, see :data:`_NEEDS`), where they cannot match;
      where they are kept, the alternatives stay in one list, in order.

    Equivalence on random texts: test_redact_s41_speed.py.
    """

    def __init__(self, parts: list[tuple[str, str, re.Pattern[str] | None]]) -> None:
        # (first class or "" when the alternative does not start with one, the rest, the
        # literal it needs or None), in order
        self.parts = parts
        self.needs = list(dict.fromkeys(need for _, _, need in parts if need is not None))
        self.walkers: dict[tuple[tuple[bool, ...], int], Callable[..., Any]] = {}

    @classmethod
    def get(cls, source: str, flags: int) -> _FastAlternation | None:
        """The fast form of ``source``, or None when it is not an alternation of words."""
        head = "(?i)(?:"
        if flags & ~(re.IGNORECASE | re.UNICODE) or not source.startswith(head):
            return None
        try:
            body = _group_body(source, len(head))
        except (ValueError, IndexError):
            return None
        if len(head) + len(body) + 1 != len(source):
            return None
        parts: list[tuple[str, str, re.Pattern[str] | None]] = []
        for alternative in _split_top(body):
            spread = _spread_alternative(alternative, "")
            if spread is not None:
                parts.extend((first, rest, None) for first, rest in spread)
            else:
                need = _NEEDS.get(alternative)
                parts.append(("", f"(?i:{alternative})", None if need is None else need.compiled))
        return cls(parts)

    def walker(self, where: str, span: int) -> Callable[..., Any]:
        """``match`` of ``(?s:.){0,N}?(<the alternatives that can match in where>)``, N the
        least of 0, 1, 3, 7, ... 63 that is at least ``span`` (<= _FAST_SPAN)."""
        present = tuple(need.search(where) is not None for need in self.needs)
        reach = (1 << span.bit_length()) - 1
        walk = self.walkers.get((present, reach))
        if walk is None:
            found = {need for need, here in zip(self.needs, present, strict=True) if here}
            kept = [(first, rest) for first, rest, need in self.parts
                    if need is None or need in found]
            pattern = f"(?s:.){{0,{reach}}}?({_alternation(kept)})"
            walk = self.walkers[(present, reach)] = re.compile(pattern).match
        return walk


def _alternation(parts: list[tuple[str, str]]) -> str:
    """``first + rest`` for each part, in order, as one alternation, gathered by first character
    when every part starts with a class (see :class:`_FastAlternation`)."""
    if not parts:
        return "(?!)"
    if not all(first for first, _ in parts):
        return "|".join(first + rest for first, rest in parts)
    sets = [frozenset(first[1:-1]) for first, _ in parts]
    by_member: dict[tuple[int, ...], list[str]] = {}  # the parts a character starts -> them
    for char in sorted(set().union(*sets)):
        by_member.setdefault(tuple(i for i, s in enumerate(sets) if char in s), []).append(char)
    branches = []
    for members, chars in by_member.items():
        rests = [parts[i][1] for i in members]
        branches.append(f"[{''.join(chars)}](?:{'|'.join(rests)})")
    return "|".join(branches)


def _case_class(letter: str) -> str:
    return "[" + letter.lower() + letter.upper() + _IGNORECASE_EXTRA.get(letter.lower(), "") + "]"


_CLASS_HEAD_RE = re.compile(r"\[[A-Za-z]+\](?![*+?{])")


def _spread_alternative(alternative: str, suffix: str) -> list[tuple[str, str]] | None:
    """``alternative`` then ``suffix`` (both read case-insensitively unless scoped
    otherwise) as equivalent ``(first class, rest)`` pairs, tried in this order; None when it
    does not start with a letter, a class of letters or a group of such."""
    first = alternative[:1]
    if first.isascii() and first.isalpha() and alternative[1:2] not in _QUANTIFIERS:
        rest = alternative[1:]
        return [(_case_class(first), (f"(?i:{rest})" if rest else "") + suffix)]
    for opening, flag in (("(?:", "i"), ("(?-i:", "-i")):
        if not alternative.startswith(opening):
            continue
        try:
            body = _group_body(alternative, len(opening))
        except (ValueError, IndexError):
            return None
        rest = alternative[len(opening) + len(body) + 1 :]
        if rest[:1] in _QUANTIFIERS:
            return None  # an optional group: the alternative may start after it
        after = (f"(?i:{rest})" if rest else "") + suffix
        out: list[tuple[str, str]] = []
        for inner in _split_top(body):
            if flag == "i":
                spread = _spread_alternative(inner, after)
            else:  # case-sensitive: a class of letters or a letter starts it as it is
                head = _CLASS_HEAD_RE.match(inner)
                if head is not None:
                    spread = [(head.group(), f"(?-i:{inner[head.end():]})" + after)]
                elif inner[:1].isascii() and inner[:1].isalpha() and inner[1:2] not in _QUANTIFIERS:
                    spread = [(f"[{inner[0]}]", f"(?-i:{inner[1:]})" + after)]
                else:
                    spread = None
            if spread is None:
                return None
            out.extend(spread)
        return out
    return None


#: Literals that alternatives of a :class:`_FastAlternation` starting with a run need.
_NEEDS = {
    "[a-z0-9-]*?api[a-z0-9-]*?:jar:": _lazy_re(r"(?i):jar:"),
    "(?-i:(?:[A-Z_]+=\\n[A-Z_]+=|[a-z_]+=\\n[a-z_]+=)(?:\\n|\\Z))": _lazy_re("=\n"),
    "(?-i:(?:[A-Z.]+=\\n[A-Z.]+=|[a-z.]+=\\n[a-z.]+=)(?:\\n|\\Z))": _lazy_re("=\n"),
}


def _covers_from(rx: re.Pattern[str], where: str, anchor: int, at: int) -> bool:
    """:func:`_covers`, by ``finditer`` from offset ``at`` (where one of its hits starts)."""
    for hit in rx.finditer(where, at, len(where)):
        if hit.start() > anchor:
            return False  # later hits start later still
        if hit.end() > anchor:
            return True
    return False


# A segment left beside a stopword counts as a secret from this many characters and above this
# entropy (or the rule's, when higher): gitleaks' generic rule wants 10+ characters at 3.5 bits.
_STOPWORD_REST_MIN = 8
_STOPWORD_REST_ENTROPY = 3.0


def _segment_is_secret(segment: str, threshold: float) -> bool:
    segment = segment.strip("_.-=/ \t")
    return len(segment) >= _STOPWORD_REST_MIN and _entropic(segment, threshold)


_ENTROPY_WINDOWS = (16, 32, 64)


def _entropic(value: str, threshold: float) -> bool:
    """Whether ``value``, or any 16/32/64-character window of it, has more than ``threshold``.

    Remembered for values up to :data:`_REMEMBERED_MAX` characters: the windows are slid in
    Python (~100 us for a value of 150 characters), and the same value is judged again and
    again when several names precede one ``=`` (each keyword starts a match of gitleaks'
    generic rule, all with that value), or when the pieces a stopword leaves of it recur
    (3.5 s per MB of such lines).
    """
    if len(value) <= _REMEMBERED_MAX:
        return _entropic_remembered(value, threshold)
    return _entropic_of(value, threshold)


# Values remembered by _entropic and _Allowlist._stopwords_explain are at most this long (a
# cache of long secrets would keep megabytes of past tool output alive).
_REMEMBERED_MAX = 256


def _entropic_of(value: str, threshold: float) -> bool:
    """:func:`_entropic`, computed.

    gitleaks measures the entropy of the whole secret. A secret whose pattern allows a longer
    value can be padded by the output itself (``KEY=<real key>aaaaaaaa...``) until the whole
    falls under the threshold; the random part still stands out in a window.
    """
    # No text, nor any window of it, has more entropy than log2 of its count of distinct
    # characters: a long run of a few characters ("xoxb-0000000000-..." repeated, "ABSK/"
    # repeated) is refused at C speed instead of sliding Python windows over it.
    counts = _counts(value)
    distinct, n = len(counts), len(value)
    most = _LOG2[distinct] if distinct < len(_LOG2) else math.log2(distinct)
    if distinct < 2 or most <= threshold:
        return False
    if _entropy_of(counts, n) > threshold:
        return True
    for w in _ENTROPY_WINDOWS:
        if w >= n:
            break
        if math.log2(min(w, distinct)) <= threshold:
            continue  # no window this short can exceed the threshold
        counts: Counter[str] = Counter(value[:w])
        acc = sum(_CLOG[c] for c in counts.values())
        limit = (math.log2(w) - threshold) * w  # H > t  <=>  acc < (log2 w - t) * w
        if acc < limit:
            return True
        for i in range(w, n):
            out, inc = value[i - w], value[i]
            if out == inc:
                continue
            co = counts[out]
            acc += _CLOG[co - 1] - _CLOG[co]
            counts[out] = co - 1
            ci = counts[inc]
            acc += _CLOG[ci + 1] - _CLOG[ci]
            counts[inc] = ci + 1
            if acc < limit - 1e-9:
                return True
    return False


_entropic_remembered = functools.lru_cache(maxsize=4096)(_entropic_of)


# Placeholders that no detector of ours reports: template variables, masks, type names, literals.
_PLACEHOLDER_RE = _lazy_re(
    r"""^(?:
        \$(?:[A-Z_][A-Z0-9_]*|[a-z_][a-z0-9_]*)  # $VAR, $var (not "$ecr3t": mixed case)
      | \$\{[^{}]*\}                      # ${VAR}, ${VAR:-x}
      | \$\([^()]*\)                      # $(command)
      | \{\{[^{}]*\}\}                    # {{ template }}
      | <[^<>]*>                          # <password>
      | %\w+%|%\(\w+\)[sd]|%[sd]          # %VAR%, %(name)s, %s
      | [*xX.•#_-]+                       # ****, xxxx, ...
      | @\w+@                             # @VAR@
      | [\w-]{0,8}(?:\.\.\.|…)[\w-]{0,8}  # hf_..., sk-…, ghp_...abcd: a shortened token
      | (?:[A-Za-z]+[ \t]+)?(?:%[sdr]|%\(\w+\)[sdr]|\{\w*\})  # "Bearer %s", "{}", "%(pw)s"
      | [A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+     # the name of an environment variable
      | (?i:none|null|nil|true|false|undefined|empty|required|optional|str|string|bytes|int|bool
          |secret|password|passwd|pass|pwd|token|changeme|redacted|hidden|masked|example|dummy
          |test|(?:your|my|the)[_\s-][A-Za-z_\s-]*)
    )$""",
    re.VERBOSE,
)
_UUID_RE = _lazy_re(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
_HEX_RE = _lazy_re(r"^[0-9a-fA-F]+$")


def _is_placeholder(value: str) -> bool:
    # Whole-value patterns only: an output that appends "...", "%s" or a marker to a line must
    # not turn the real value before it into a placeholder.
    return bool(_PLACEHOLDER_RE.match(value) or _REDACTED_RE.fullmatch(value))


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------


class _Rule:
    """A detector: keywords for the prefilter and a scan over the keyword occurrences."""

    id: str
    keywords: tuple[str, ...]
    #: Lower wins when two findings overlap (specific detectors before generic ones).
    priority: int

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        raise NotImplementedError


#: A merged region is cut once it is this long (the next keyword starts a new, overlapping one):
#: one ``finditer`` call holds the GIL from start to end, and some gitleaks patterns cost
#: microseconds per character where keywords are dense (kubernetes-secret-yaml over
#: "data: kind: secret " repeated: one region of 1 MB held every other thread, the event loop
#: included, for 3.2 s).
_WINDOW_MAX = 8192


def _windows(positions: list[int], n: int) -> Iterator[tuple[int, int]]:
    """Merged search regions around keyword occurrences (sorted positions).

    Every occurrence's own region (``_WINDOW_BEFORE`` before it, ``_WINDOW_AFTER`` after) lies
    whole inside one of the regions yielded; regions may overlap once a merged one reached
    :data:`_WINDOW_MAX` (a match found twice is merged with itself afterwards)."""
    lo = hi = -1
    for p in positions:
        start, end = max(0, p - _WINDOW_BEFORE), min(n, p + _WINDOW_AFTER)
        if start <= hi and hi - lo < _WINDOW_MAX:
            hi = max(hi, end)
            continue
        if hi >= 0:
            yield lo, hi
        lo, hi = start, end
    if hi >= 0:
        yield lo, hi


_SPACE_RE = _lazy_re(r"\s")


def _extend_to_space(text: str, hi: int) -> int:
    """Move a region's end to the next whitespace so that it does not cut a token in two."""
    if hi >= len(text):
        return len(text)
    m = _SPACE_RE.search(text, hi, min(len(text), hi + _WINDOW_SLACK))
    return m.start() if m else min(len(text), hi + _WINDOW_SLACK)


def _class_end(pattern: str, start: int) -> int:
    """Index just past the character class opening at ``start`` (``[]...]``, escapes)."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "]":
            return i + 1
        i += 1
    raise ValueError("unterminated character class")


def _split_top(pattern: str) -> list[str]:
    """Top-level ``|`` alternatives of a group body (escapes and classes respected)."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            cur.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[":
            j = _class_end(pattern, i)
            cur.append(pattern[i:j])
            i = j
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _group_body(pattern: str, start: int) -> str:
    """The body of the group whose body starts at ``start`` (just after its ``(?:``)."""
    depth, i = 1, start
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(pattern, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return pattern[start:i]
        i += 1
    raise ValueError("unbalanced pattern")


def _strip_identifier_prefix(regex: str) -> tuple[str, bool]:
    """``regex`` without its leading ``[\\w.-]{0,50}?`` parts, and whether any was removed."""
    stripped = False
    if regex.startswith("(?i)" + _IDENT_PREFIX):
        regex, stripped = "(?i)" + regex[4 + len(_IDENT_PREFIX) :], True
    if regex.startswith(_IDENT_PREFIX + "(?i:" + _IDENT_PREFIX):
        regex, stripped = "(?i:" + regex[2 * len(_IDENT_PREFIX) + 4 :], True
    return regex, stripped


def _leading_literals(pattern: str) -> list[str] | None:
    """Lowercased literal starts of every match of ``pattern``, or None when it cannot tell.

    Understands what gitleaks' patterns start with: a global ``(?i)``, ``\\b``, groups of
    alternatives, escaped punctuation and ``[Xx]`` case pairs.
    """
    s = pattern
    if s.startswith("(?i)"):
        s = s[4:]
    if s.startswith("\\b"):
        s = s[2:]
    if s.startswith("("):
        if s.startswith("(?:") or s.startswith("(?i:") or s.startswith("(?-i:"):
            body_start = s.index(":") + 1
        elif s.startswith("(?"):
            return None
        else:
            body_start = 1
        try:
            body = _group_body(s, body_start)
        except (ValueError, IndexError):
            return None
        after = s[body_start + len(body) + 1 : body_start + len(body) + 3]
        if after[:1] in ("?", "*") or after.startswith("{0"):
            return None  # an optional group: the match may start after it
        out: list[str] = []
        for alternative in _split_top(body):
            prefixes = _leading_literals(alternative)
            if prefixes is None:
                return None
            out.extend(prefixes)
        return out
    chars: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and not s[i + 1].isalnum():
            chars.append(s[i + 1])
            i += 2
        elif (
            c == "[" and i + 3 < len(s) and s[i + 3] == "]" and s[i + 1].lower() == s[i + 2].lower()
        ):
            chars.append(s[i + 1].lower())
            i += 4
        elif c.isalnum() or c in "_-~":
            chars.append(c.lower())
            i += 1
        else:
            break
    if chars and i < len(s) and (s[i] in "?*" or s.startswith("{0", i)):
        chars.pop()  # the last literal is optional
    return ["".join(chars)] if chars else None


# Right-hand boundaries of gitleaks' patterns: the token must be followed by a quote, a blank,
# ';' or the end. An output that glues ``#gitleaks:allow`` (or ``,``, ``)``, ``%s``, letters) to
# each line would make every such rule miss.
_TERMINATORS = (
    "(?:[\\x60'\"\\s;]|\\\\[nr]|$)",
    "(?:$|[\\\\'\"\\x60\\s<),])",
    "(?:\\s|\\Z)",
    "(?:\\B|\\s|\\Z)",
)
_TOKEN_END = "(?=[^\\w.~+/=-])"


def _loosen_terminator(regex: str, *, optional: bool) -> str:
    for terminator in _TERMINATORS:
        if regex.endswith(terminator):
            return f"{regex[:-1]}|{'' if optional else _TOKEN_END})"
    return regex


#: A leading program name followed by "anything on this line or the next five" (gitleaks' curl
#: rules); the name is group 1.
_LEAD_ANY_LINES = _lazy_re(
    r"^\\b([a-z]+)\\b\(\?:\.\*\??\|\.\*\??\(\?:\[\\r\\n\]\{1,2\}\.\*\??\)\{1,5\}\)"
)
_LINE_BREAK_RE = _lazy_re(r"\r\n?|\n")


# A run of dots, its quantifier, then (past closing groups) an optional backslash and a quote.
_DOT_RUN = re.compile(r"\.(\*|\+|\{\d+,\d*\})(\?)?(\)*\\?)([\"'])")


def _quote_bounded_dots(regex: str) -> str:
    r"""``regex`` with each run of "any character" that ends at a quote (``.{8,}\"``) made a
    run of anything but that quote (``[^"\n]{8,}\"``).

    Python's engine runs such a run to the end of the line, then backs off to the last quote
    from every place the rule is tried: gitleaks' nuget-config-password rule
    (``value=\"(.{8,})\"\s*/>``) took 63 s per MB of ``<add key="Password" value="``
    repeated. An attribute value ends at its first quote anyway (XML escapes one inside it), and
    the run stops there at once. Only dots outside character classes and escapes are read.
    """
    out: list[str] = []
    i, n, in_class = 0, len(regex), False
    while i < n:
        c = regex[i]
        if c == "\\":
            out.append(regex[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            # A ']' right after '[' or '[^' is a member, not the end.
            j = i + 1 + (regex[i + 1 : i + 2] == "^")
            if regex[j : j + 1] == "]":
                out.append(regex[i : j + 1])
                i = j + 1
                continue
        elif c == ".":
            m = _DOT_RUN.match(regex, i)
            if m is not None:
                quote = m.group(4)
                out.append(f"[^{quote}\\n]{m.group(1)}{m.group(2) or ''}")
                i = m.start(3)
                continue
        out.append(c)
        i += 1
    return "".join(out)


# Characters that no loosened right-hand boundary accepts: ``[\x60'"\s;]``, ``\\[nr]``,
# ``$`` and _TOKEN_END's lookahead all refuse them.
_TOKEN_CLASS_RE = re.compile(
    r"\[(?:\\w|\\[.~+/=_-]|[A-Za-z0-9]-[A-Za-z0-9]|[A-Za-z0-9_.~+/=-])+\]"
)
# A class run at the end of an alternative of the secret group: ``[\w.=-]{10,150}``,
# ``[a-z0-9+/]{11,}`` (optionally then ``={0,3}``).
_TAIL_RUN_RE = re.compile(r"(\[[^\]]+\])(\{\d+,\d*\}|\+|\*)((?:=\{0,\d\})?)$")


def _possessive_tail(regex: str) -> str:
    r"""``regex`` with the class runs that end its secret group made possessive, when the group
    is followed by the loosened boundary (``...|(?=[^\w.~+/=-]))``) and the runs hold only
    characters that boundary refuses.

    Then giving characters back cannot help: a shorter run is followed by one of its own
    characters, which the boundary refuses. Python's engine tried every length anyway at every
    keyword: gitleaks' generic-api-key (``([\w.=-]{10,150}|[a-z0-9][a-z0-9+/]{11,}={0,3})``)
    cost 150 steps per occurrence of ``key``, ``api``, ``token``..., 1.7 s per MB of
    ``api_key=api_key=...`` (held on a thread that shares the interpreter with every session).
    """
    suffix = _TOKEN_END + ")"
    if not regex.endswith(suffix):
        return regex
    start = regex.rfind("(?:", 0, len(regex) - len(suffix))
    if start <= 0 or regex[start - 1] != ")":
        return regex
    close = start - 1
    # The group that closes there: the last '(' whose body ends at ``close``.
    for open_at in range(close - 1, -1, -1):
        if regex[open_at] != "(" or (open_at and regex[open_at - 1] == "\\"):
            continue
        body_start = open_at + 1
        if regex.startswith("?:", body_start):
            body_start += 2
        elif regex.startswith("?", body_start):
            continue
        try:
            body = _group_body(regex, body_start)
        except (ValueError, IndexError):
            return regex
        if body_start + len(body) != close:
            continue
        alternatives = []
        for alternative in _split_top(body):
            m = _TAIL_RUN_RE.search(alternative)
            if m is not None and _TOKEN_CLASS_RE.fullmatch(m.group(1)):
                alternative = (alternative[: m.start()] + m.group(1) + m.group(2) + "+"
                               + m.group(3))
            alternatives.append(alternative)
        return regex[:body_start] + "|".join(alternatives) + regex[close:]
    return regex


def _word_at(text: str, p: int, n: int) -> bool:
    """``text[p:p+n]`` is a whole word (what ``\b...\b`` around it asks)."""
    before = text[p - 1] if p else " "
    after = text[p + n] if p + n < len(text) else " "
    return not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_")


def _check_deadline() -> None:
    """Stop a long scan once the call's deadline has passed: an abandoned redaction thread
    must not go on burning a core."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise RedactionTimeout("redaction ran past the call's deadline")


class _GitleaksRule(_Rule):
    def __init__(
        self,
        raw: Mapping[str, Any],
        global_allowlist: _Allowlist,
        priority: int,
    ) -> None:
        self.id = str(raw["id"])
        self.keywords = tuple(raw.get("keywords", ()))
        self.entropy = float(raw.get("entropy", 0.0))
        self.secret_group = int(raw.get("secret_group", 0))
        self._raw_allowlists = tuple(raw.get("allowlists", ()))
        self.global_allowlist = global_allowlist
        self.priority = priority
        regex, self.widen = _strip_identifier_prefix(str(raw["regex"]))
        # A provider token (no identifier before it) needs no boundary after it at all: letters
        # glued to it by the output still leave the token in front. Generic name=value rules
        # keep a boundary, loosened to any punctuation no token contains.
        regex = _loosen_terminator(regex, optional=not self.widen)
        try:
            starts = _leading_literals(regex)
        except (ValueError, IndexError):
            starts = None  # cannot tell where matches start: search windows instead
        # Every match starts with a keyword: try the pattern only at keyword occurrences. A
        # stripped name group may spell a keyword's start (``passw(?:or)?d``), hence the
        # relaxed test for those.
        self.anchored = (
            bool(self.keywords)
            and bool(starts)
            and all(
                any(
                    p.startswith(k) or (self.widen and len(p) >= 4 and k.startswith(p))
                    for k in self.keywords
                )
                for p in starts or ()
            )
        )
        # gitleaks' curl rules start "\bcurl\b(?:.*|.*(?:[\r\n]{1,2}.*){1,5})" before the option
        # they look for: RE2 runs that in linear time, Python's backtracking engine reads to the
        # end of the line from every "curl" (a line of 10,000 "curl " took 18 s per 80 KB).
        # Such a rule searches its option part instead (linear) and looks back for the
        # program within the same five lines (see _scan_after_lead).
        lead = _LEAD_ANY_LINES.match(regex)
        self.lead: str | None = None
        if lead is not None and self.keywords == (lead.group(1).lower(),):
            self.lead = lead.group(1).lower()
            self.anchored = False
            regex = regex[lead.end():]
        self._regex = regex

    # The pattern and the rule's allowlists compile at the rule's first use: compiling all 221
    # rules costs ~50 ms, which a new process's first call would pay whatever its output, and
    # a rule only runs when one of its keywords occurs in the text.
    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        # Rewritten here, with the compile, not when the rule is made: only the rules whose
        # keywords occur are ever compiled (see _quote_bounded_dots).
        return re.compile(_possessive_tail(_quote_bounded_dots(self._regex)))

    @functools.cached_property
    def finditer(self) -> Callable[[str, int, int], Iterator[Any]]:
        """``pattern.finditer``, or an exact linear matcher that finds the same matches where
        Python's engine backtracks for seconds (see :data:`_EXACT_MATCHERS`)."""
        exact = _EXACT_MATCHERS.get(self._regex)
        return exact().finditer if exact is not None else self.pattern.finditer

    @functools.cached_property
    def allowlists(self) -> tuple[_Allowlist, ...]:
        return tuple(_Allowlist.load(a) for a in self._raw_allowlists)

    @functools.cached_property
    def all_allowlists(self) -> tuple[_Allowlist, ...]:
        """The global allowlist, then the rule's own."""
        return (self.global_allowlist, *self.allowlists)

    @functools.cached_property
    def contextual(self) -> bool:
        """Whether an allowlist reads the match or the line around the secret."""
        return any(a.target != "secret" and a.regexes for a in self.all_allowlists)

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        if self.lead is not None:
            yield from self._scan_after_lead(text, positions)
            return
        if self.anchored:
            last_end = -1
            for k, p in enumerate(positions):
                if p < last_end:
                    continue
                if not k & 1023:
                    _check_deadline()
                m = self.pattern.match(text, p)
                if m is None:
                    continue
                finding = self._finding(text, m, widen=self.widen)
                if isinstance(finding, Finding):
                    last_end = m.end()
                    yield finding
                elif finding is _LOW_ENTROPY:
                    # The keywords inside a secret refused for its entropy are skipped, as
                    # gitleaks' non-overlapping matches skip them: any secret starting there
                    # within it is a piece of it, and none of its windows stood out either.
                    # Matching again from each one read the rest of the text each time: a
                    # 60 KB line of "xoxb-..." took 45 s. A match refused by an allowlist still
                    # hides nothing: it may swallow the name of a real secret that the output
                    # put after it ("secret,API_KEY=...").
                    last_end = self._secret_span(m)[1]
            return
        if not positions:
            return
        # Regions overlap once one is cut (see _windows): a match found again in the next one,
        # with the same spans, is judged the same (a finding only depends on its spans), and
        # the copy would only be merged with itself.
        seen: set[tuple[tuple[int, int], ...]] = set()
        for lo, hi in _windows(positions, len(text)):
            _check_deadline()
            earlier, seen = seen, set()
            for m in self.finditer(text, lo, _extend_to_space(text, hi)):
                spans = m.regs
                seen.add(spans)
                if spans in earlier:
                    continue
                finding = self._finding(text, m, widen=self.widen)
                if isinstance(finding, Finding):
                    yield finding

    def _scan_after_lead(self, text: str, positions: list[int]) -> Iterator[Finding]:
        """The rule's pattern after its leading program name, wherever it matches after an
        occurrence of that name (a word) on the same line or up to five lines before: what
        ``\bcurl\b(?:.*|.*(?:[\r\n]{1,2}.*){1,5})`` allows, in one linear pass."""
        starts = [p for p in positions if _word_at(text, p, len(self.lead or ""))]
        if not starts:
            return
        import bisect

        breaks = [m.start() for m in _LINE_BREAK_RE.finditer(text, starts[0])]
        for m in self.pattern.finditer(text, starts[0]):
            _check_deadline()
            at = bisect.bisect_right(starts, m.start()) - 1
            if at < 0:
                continue
            lead = starts[at] + len(self.lead or "")
            if m.start() < lead:
                continue
            lines = bisect.bisect_left(breaks, m.start()) - bisect.bisect_left(breaks, lead)
            if lines > 5:
                continue
            finding = self._finding(text, m, widen=self.widen)
            if isinstance(finding, Finding):
                yield finding

    def _secret_span(self, m: re.Match[str]) -> tuple[int, int]:
        """Where the secret of match ``m`` lies (its group, else the whole match); (-1, -1)
        when the rule names a group the pattern does not have."""
        groups = m.groups()
        if not groups:
            return m.span()
        if self.secret_group:
            if self.secret_group > len(groups):
                return -1, -1
            return m.span(self.secret_group)
        for i, group in enumerate(groups, 1):
            if group:
                return m.span(i)
        return m.span()

    def _finding(
        self, text: str, m: re.Match[str], *, widen: bool
    ) -> Finding | _Refused | None:
        start, end = self._secret_span(m)
        if start < 0 or start == end:
            return None
        secret = text[start:end]
        if self.entropy and not _entropic(secret, self.entropy):
            return _LOW_ENTROPY

        if not self.contextual:  # no allowlist reads the text around the secret
            for allowlist in self.all_allowlists:
                if allowlist.allows(secret, self.entropy, _no_context):
                    return None
            return Finding(rule_id=self.id, start=start, end=end)
        match_context = line_context = None
        for allowlist in self.all_allowlists:
            if allowlist.target == "line":
                if line_context is None:
                    line_context = _Context(text, m, "line", widen)
                context = line_context
            else:
                if match_context is None:
                    match_context = _Context(text, m, "match", widen)
                context = match_context
            if allowlist.allows(secret, self.entropy, context):
                return None
        return Finding(rule_id=self.id, start=start, end=end)


_IDENT_CHARS_TEXT = "".join(sorted(_IDENT_CHARS))


class _Context:
    """What a match or line allowlist reads around a rule's match: ``context()`` is the text
    and the offset in it of the start of the match. The bounds and the copy are made at the
    first reader that needs them; :meth:`holds` answers without the copy."""

    __slots__ = ("_bounds", "_kind", "_m", "_text", "_where", "_widen")

    def __init__(self, text: str, m: Any, kind: str, widen: bool) -> None:
        self._text, self._m, self._kind, self._widen = text, m, kind, widen
        self._bounds: tuple[int, int] | None = None
        self._where: tuple[str, int] | None = None

    def bounds(self) -> tuple[int, int]:
        if self._bounds is None:
            text, m = self._text, self._m
            start, end = m.start(), m.end()
            if self._kind == "match":
                lo = start
                if self._widen:  # give back the identifier the anchored pattern left out
                    floor = max(0, lo - 50)
                    lo = floor + len(text[floor:lo].rstrip(_IDENT_CHARS_TEXT))
                self._bounds = lo, end
            else:
                # The line, clipped to a bounded window around the match: a 1 MB line must
                # not be copied and searched once per finding.
                lo = text.rfind("\n", max(0, start - _LINE_CONTEXT), start) + 1
                if lo == 0:
                    lo = max(0, start - _LINE_CONTEXT)
                hi = text.find("\n", end, end + _LINE_CONTEXT)
                if hi == -1:
                    hi = min(len(text), end + _LINE_CONTEXT)
                self._bounds = lo, hi
        return self._bounds

    def holds(self, literal: str) -> bool:
        """Whether ``literal`` may start in the context at or before the match (False: it
        does not; a find in the text, no copy)."""
        lo, _ = self.bounds()
        return self._text.find(literal, lo, self._m.start() + len(literal)) >= 0

    def __call__(self) -> tuple[str, int]:
        if self._where is None:
            lo, hi = self.bounds()
            self._where = self._text[lo:hi], self._m.start() - lo
        return self._where


def _no_context() -> tuple[str, int]:  # pragma: no cover - never called (see contextual)
    raise AssertionError("an allowlist of the secret asked for its context")


class _SpanMatch:
    """What a rule's scan reads of a ``re.Match`` (spans and groups), for a match found by one
    of the exact matchers below instead of ``re``."""

    __slots__ = ("_spans", "string")

    def __init__(self, string: str, spans: tuple[tuple[int, int], ...]) -> None:
        self.string = string
        self._spans = spans  # groups 0, 1, ...: (start, end), or (-1, -1) for a group not taken

    def span(self, group: int = 0) -> tuple[int, int]:
        return self._spans[group]

    def start(self, group: int = 0) -> int:
        return self._spans[group][0]

    def end(self, group: int = 0) -> int:
        return self._spans[group][1]

    def group(self, group: int = 0) -> str | None:
        start, end = self._spans[group]
        return None if start < 0 else self.string[start:end]

    def groups(self) -> tuple[str | None, ...]:
        return tuple(None if s < 0 else self.string[s:e] for s, e in self._spans[1:])

    @property
    def regs(self) -> tuple[tuple[int, int], ...]:
        return self._spans


def _space_run_start(text: str, q: int, floor: int) -> int:
    """Start of the run of whitespace that ends at ``q``, not below ``floor`` (``\\s`` is what
    ``str.isspace`` calls whitespace, and ``rstrip`` strips: read back in growing chunks)."""
    step = 64
    while True:
        at = q - step if q - step > floor else floor
        kept = text[at:q].rstrip()
        if kept or at == floor:
            return at + len(kept)
        step *= 4


def _first_in_intervals(
    starts: list[int], lows: list[int], highs: list[int], x: int, limit: int
) -> tuple[int, int]:
    """The first of the sorted positions ``starts`` that is in ``[x, limit]`` and inside one of
    the sorted disjoint intervals ``[lows[j], highs[j]]``, and that ``j``; ``(-1, -1)`` when
    there is none. Each turn of the loop passes an interval or a start."""
    bisect_left = bisect.bisect_left
    j = bisect_left(highs, x)
    while j < len(highs):
        lower = lows[j] if lows[j] > x else x
        if lower > limit:
            break
        i = bisect_left(starts, lower)
        if i == len(starts) or starts[i] > limit:
            break
        if starts[i] <= highs[j]:
            return starts[i], j
        j = bisect_left(highs, starts[i], j + 1)
    return -1, -1


class _Reach:
    """For one alternative of :class:`_KubernetesSecretYaml`: the ``data:`` starts from which
    each entry is the first one reachable, as sorted disjoint intervals ``[lows[j],
    highs[j]]`` (an entry's interval begins after the previous entry's), with what the
    alternative keeps of that entry (``items[j]``)."""

    __slots__ = ("highs", "items", "lows", "_prev", "_skip")

    def __init__(self, skip: int) -> None:
        self.lows: list[int] = []
        self.highs: list[int] = []
        self.items: list[Any] = []
        self._prev = -(1 << 62)
        self._skip = skip  # a data: ends this far before the blank run it reaches

    def add(self, low: int, q: int, item: Any) -> None:
        """The entry at ``q``, reachable from the ``data:`` starts at ``low`` and after."""
        floor = self._prev + 1 - self._skip
        self._prev = q
        if low < floor:
            low = floor
        if low <= q - self._skip:
            self.lows.append(low)
            self.highs.append(q - self._skip)
            self.items.append(item)


class _KubernetesSecretYaml:
    """gitleaks' kubernetes-secret-yaml pattern (:attr:`SOURCE`), matched in linear time with
    exactly ``re``'s matches (spans of the match and both groups).

    The pattern is ``A|B``: ``A`` = a ``kind: secret`` line, within 200 characters a ``data:``,
    within 100 more a blank run, then an entry (``name: value``, the secret group); ``B`` = a
    ``data:``, the entry, then within 200 characters a ``kind: secret`` line. Python's engine
    retried the entry and the 200-character tail from each of the 100 positions after each
    ``data:`` and from each possible end of the entry's value: ~100 s of CPU per MB of
    ``data:``/entry/``kind: secret`` pieces (a window of 8 kB is cut, each one still cost a
    second). What the backtracking comes to:

    - the blank run ``\\s+`` before an entry must reach the entry's first character (the entry
      starts with ``[\\w.-]``), so an entry can only start at the end ``q`` of a blank run,
      and the ``data:`` whose first 100 characters after it touch that run reaches it; the
      entries reachable from one ``data:`` are tried in order;
    - inside the entry every part but the value's run ``[a-z0-9+/]{10,}={0,3}["']?`` has one
      way to match (the possessive :attr:`_ENTRY` reads that way): its ends, in the order the
      engine tries them, are every position from the longest one down to 10 characters into
      the run; in ``A`` the first (longest) is taken;
    - ``B``'s tail needs a ``kind: secret`` line starting within 200 characters of the end: the
      longest end if one starts within 200 of it, else the last one that starts inside the
      value (the end is then that line's start);
    - a ``kind: secret`` line has one way to match, plus its closing quote (greedy, taken).

    So each entry, ``data:`` and kind line is looked at a bounded number of times (bisections
    on sorted lists). ``finditer``'s ``endpos`` ends the text for every look, as it did for
    ``re``. Equivalence with ``re.finditer`` on random texts: test_redact_s41_speed.py.
    """

    SOURCE = (
        "(?i)(?:\\bkind:[ \\t]*[\"']?\\bsecret\\b[\"']?(?s:.){0,200}?\\bdata:(?s:.){0,100}?\\s+"
        "([\\w.-]+:(?:[ \\t]*(?:\\||>[-+]?)\\s+)?[ \\t]*(?:[\"']?[a-z0-9+/]{10,}={0,3}[\"']?"
        "|\\{\\{[ \\t\\w\"|$:=,.-]+}}|\"\"|''))|\\bdata:(?s:.){0,100}?\\s+([\\w.-]+:(?:[ \\t]*"
        "(?:\\||>[-+]?)\\s+)?[ \\t]*(?:[\"']?[a-z0-9+/]{10,}={0,3}[\"']?"
        "|\\{\\{[ \\t\\w\"|$:=,.-]+}}"
        "|\"\"|''))(?s:.){0,200}?\\bkind:[ \\t]*[\"']?\\bsecret\\b[\"']?)"
    )
    _DATA = _lazy_re(r"(?i)\bdata:")
    _KIND = _lazy_re(r"""(?i)\bkind:[ \t]*+["']?+\bsecret\b""")
    # Every entry start (overlapping ones too: a lookahead), its first end (group 1) and its
    # value's run (group 2).
    _ENTRY = _lazy_re(
        r"""(?i)(?<=\s)(?=([\w.-]++:(?:[ \t]*+(?:\||>[-+]?+)\s++)?+[ \t]*+"""
        r"""(?:(["']?+[a-z0-9+/]{10,}+)={0,3}+["']?+|\{\{[ \t\w"|$:=,.-]++}}|""|'')))"""
    )
    _AROUND = 200  # (?s:.){0,200}? between the kind line and the rest
    _GAP = 100  # (?s:.){0,100}? after data:
    _DATA_LEN = len("data:")

    def finditer(self, text: str, lo: int, hi: int) -> Iterator[_SpanMatch]:
        data = list(map(_MATCH_START, self._DATA.finditer(text, lo, hi)))
        if not data:
            return  # both alternatives need a data: and a kind line
        heads = list(map(_MATCH_SPAN, self._KIND.finditer(text, lo, hi)))  # (cannot overlap)
        if not heads:
            return
        kinds = [start for start, _ in heads]
        kind_ends = [end for _, end in heads]
        bisect_left, around, n_kinds = bisect.bisect_left, self._AROUND, len(kinds)
        # The data: starts from which an entry q is the first one reachable (that succeeds):
        # one interval per entry, [lows[j], highs[j]]; for A any entry, for B one whose tail
        # reaches a kind line.
        skip = self._DATA_LEN + 1
        a_reach = _Reach(skip)
        b_reach = _Reach(skip)
        reach = self._GAP + self._DATA_LEN
        for m in self._ENTRY.finditer(text, lo, hi):
            q, e = m.start(), m.end(1)
            # data: at d reaches q when its next 100 characters touch q's blank run
            at = q - 64 if q - 64 > lo else lo
            kept = text[at:q].rstrip()
            low = (at + len(kept) if kept or at == lo else _space_run_start(text, q, lo)) - reach
            a_reach.add(low, q, (q, e))
            k = bisect_left(kinds, e)
            if k < n_kinds and kinds[k] - e <= around:
                end = e
            else:
                value = m.start(2)
                if value < 0:
                    continue  # a single end, and no kind line after it
                shortest = value + (text[value] in "\"'") + 10
                k -= 1
                if k < 0 or kinds[k] < shortest:
                    continue
                end = kinds[k]  # a shorter value, the kind line right after it
            b_reach.add(low, q, ((q, end), k))

        def quoted_end(end: int) -> int:  # the optional closing quote (greedy)
            return end + 1 if end < hi and text[end] in "\"'" else end

        def next_a(pos: int) -> tuple[int, tuple[tuple[int, int], ...]] | None:
            for k in range(bisect_left(kinds, pos), n_kinds):
                head = kind_ends[k]
                for after in (head + 1, head) if quoted_end(head) > head else (head,):
                    d, j = _first_in_intervals(
                        data, a_reach.lows, a_reach.highs, after, after + around
                    )
                    if d >= 0:
                        span = a_reach.items[j]
                        return kinds[k], ((kinds[k], span[1]), span, (-1, -1))
            return None

        def next_b(pos: int) -> tuple[int, tuple[tuple[int, int], ...]] | None:
            d, j = _first_in_intervals(data, b_reach.lows, b_reach.highs, pos, hi)
            if d < 0:
                return None
            span, k = b_reach.items[j]
            return d, ((d, quoted_end(kind_ends[k])), (-1, -1), span)

        a, b = next_a(lo), next_b(lo)
        while a is not None or b is not None:
            first = a if b is None or (a is not None and a[0] < b[0]) else b
            spans = first[1]
            yield _SpanMatch(text, spans)
            pos = spans[0][1]
            if a is not None and a[0] < pos:
                a = next_a(pos)
            if b is not None and b[0] < pos:
                b = next_b(pos)


#: gitleaks patterns (as compiled into the rule file) -> an exact matcher that replaces
#: ``re``'s ``finditer`` for them (same matches, linear time).
_EXACT_MATCHERS: dict[str, Callable[[], Any]] = {
    _KubernetesSecretYaml.SOURCE: _KubernetesSecretYaml,
}


class _RegexRule(_Rule):
    """One of our own detectors: a pattern tried around its keywords, a group as the secret."""

    def __init__(
        self,
        rule_id: str,
        pattern: str,
        keywords: Iterable[str],
        *,
        group: int = 0,
        priority: int,
        check: Callable[[str, re.Match[str]], bool] | None = None,
        back_over: str = "",
    ) -> None:
        self.id = rule_id
        self.pattern = re.compile(pattern)
        self.keywords = tuple(keywords)
        self.group = group
        self.priority = priority
        self.check = check
        # Matches start at a keyword, or this many characters of ``back_over`` before one.
        self.back_over = frozenset(back_over)

    def _starts(self, text: str, positions: list[int]) -> Iterator[int]:
        for p in positions:
            start, floor = p, max(0, p - 32)
            while start > floor and text[start - 1] in self.back_over:
                start -= 1
            yield start

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        last_end = -1
        for k, p in enumerate(self._starts(text, positions)):
            if p < last_end:
                continue
            if not k & 1023:
                _check_deadline()
            m = self.pattern.match(text, p)
            if m is None:
                continue
            start, end = m.span(self.group)
            if start < 0 or start == end or _is_placeholder(text[start:end]):
                continue
            if self.check is not None and not self.check(text, m):
                continue
            last_end = m.end()  # only an accepted finding hides later keyword occurrences
            yield Finding(rule_id=self.id, start=start, end=end)


class _PrivateKeyRule(_Rule):
    """Whole PEM/OpenSSH private key blocks, BEGIN line through END line."""

    _BEGIN = _lazy_re(r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----", re.I)
    _END = _lazy_re(r"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----", re.I)
    # What a key block holds: base64 lines, "Proc-Type: ..." headers, and, inside JSON strings,
    # escaped newlines. Anything else between BEGIN and END means the markers are just text.
    _NOT_BODY = _lazy_re(r"[^\sA-Za-z0-9+/=:,.\\-]")
    _BODY_LINE = _lazy_re(r"(?:\\[rn]|\r?\n)[ \t]*(?:[A-Za-z0-9+/=]{8,}|[A-Za-z-]+:[^\n]*)")
    # The same, for key lines that a command decorated (``cat -n``, ``grep -n``, ``cat -A``,
    # ``| ...``, ``... #``, the whole key joined on one line): from the end of the marker or of
    # the last key material, the next run of 16+ base64 characters, either further on the same
    # line (after a few separator characters) or on the next line (after whatever short suffix
    # ends this line and a short prefix that holds no letters: line numbers, ``N:``, ``|``,
    # ``#``, ``>``, blanks; or a ``file:`` name). Every part is bounded, so a step costs the same
    # whatever the text around it (many BEGIN markers with no END stay linear).
    _NEXT = (
        r"(?:[^A-Za-z0-9+/=\n\\]{0,8}+"  # on the same line: blanks, ';', '|'...
        r"|(?:[^\n\\]|\\(?![rn])){0,64}+(?:\n|\\[rn])"  # or a suffix ('$', '#', '\r'), a break,
        r"(?:[^\s:]{1,100}+:)?"  # then a prefix: a file name, ...
        r"[^A-Za-z0-9+/=\n]{0,16}+(?:[0-9]{1,9}+[^A-Za-z0-9+/=\n]{1,8}+)?)"  # '|', '>', 12:
    )
    _LOOSE_STEP = _lazy_re(_NEXT + r"[A-Za-z0-9+/=]{16,}")
    # A short last key line (the last base64 line of a key may hold a few characters) and the
    # END line, both decorated the same way (tried only when an END follows closely).
    _LOOSE_END = _lazy_re(
        _NEXT + r"(?:[A-Za-z0-9+/=]{1,15}+" + _NEXT + r")?"
        r"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----",
        re.I,
    )
    _MAX_BLOCK = 65536

    def __init__(self, priority: int) -> None:
        self.id = "private-key"
        self.keywords = ("-----begin",)
        self.priority = priority

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        # Every BEGIN looks for the next END and for a non-key character before it. Both
        # searches move forward only and are shared by all BEGINs (an output of many BEGIN
        # lines and no END would otherwise scan 64 KiB per line).
        last_end = 0
        end_match: re.Match[str] | None = None
        end_searched = 0  # no END starts in [.., end_searched) beyond end_match
        bad: int | None = None  # the first non-body character at or after bad_from
        bad_from = -1
        for p in positions:
            if p < last_end:
                continue
            begin = self._BEGIN.match(text, p)
            if begin is None:
                continue
            stop = begin.end()
            limit = min(len(text), stop + self._MAX_BLOCK)
            if end_match is None or end_match.start() < stop:
                end_match = self._END.search(text, max(stop, end_searched), limit)
                end_searched = limit if end_match is None else end_match.start()
            end = end_match if end_match is not None and end_match.start() < limit else None
            if end is not None:
                if bad is None and bad_from >= 0 and bad_from <= stop:
                    pass  # no non-body character from bad_from to the end of the text
                elif bad is None or bad < stop:
                    found = self._NOT_BODY.search(text, stop)
                    bad, bad_from = (found.start() if found else None), stop
            if end is not None and (bad is None or bad >= end.start()):
                stop = end.end()
            else:
                # No END line (the output was cut off, or its lines were decorated): take the
                # key lines that follow.
                stop = self._key_material_end(text, stop, end_match)
                if stop == begin.end():
                    continue  # a bare marker, e.g. in code that looks for keys
            last_end = stop
            yield Finding(rule_id=self.id, start=begin.start(), end=stop)

    def _key_material_end(self, text: str, stop: int, end: re.Match[str] | None) -> int:
        """End of the key lines after a BEGIN marker (ending at ``stop``) with no usable END.

        Plain key lines and ``Proc-Type:`` headers first, then decorated ones (see
        ``_LOOSE_STEP``), until a line holds no base64 run of 16+ characters; a short last line
        and an END line decorated the same way are taken too. ``stop`` itself when nothing
        follows that looks like key material (a bare marker, e.g. in code that looks for keys).
        """
        while True:
            line = self._BODY_LINE.match(text, stop)
            if line is None:
                line = self._LOOSE_STEP.match(text, stop)
            if line is None:
                break
            stop = line.end()
        if end is not None and stop <= end.start() <= stop + 256:
            tail = self._LOOSE_END.match(text, stop)
            if tail is not None:
                stop = tail.end()
        return stop


class _PrivateKeyTailRule(_Rule):
    """The key lines before an ``-----END ... PRIVATE KEY-----`` line whose BEGIN line is not in
    the text: output cut at its start (a progress message keeps the last 500 bytes of a line,
    ``tail``, a shortened error, a key on one JSON line cut in two). :class:`_PrivateKeyRule`
    starts at BEGIN lines, so the rest of such a key, most of it, went out as it was.
    """

    _END = _PrivateKeyRule._END
    # Read backwards from the END line: key lines (base64 runs) and the breaks between them,
    # plain or JSON-escaped (``n\`` reversed). Possessive: each character is read once.
    # (A run stops before an escape's letter: ``\n`` reversed reads ``n\``.)
    _BODY_REVERSED = _lazy_re(
        r"(?:(?:n\\|r\\|[ \t\r\n])*+(?:(?![nr]\\)[A-Za-z0-9+/=])++)*+"
    )
    _MIN_MATERIAL = 16

    def __init__(self, priority: int) -> None:
        self.id = "private-key"
        self.keywords = ("-----end",)
        self.priority = priority

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        floor = 0  # the end of the last END line: a walk back never crosses one (linear)
        for p in positions:
            end = self._END.match(text, p)
            if end is None:
                continue
            lo = max(floor, p - _PrivateKeyRule._MAX_BLOCK)
            floor = end.end()
            body = self._BODY_REVERSED.match(text[lo:p][::-1])
            start = p - (body.end() if body is not None else 0)
            # Blanks and escaped breaks just before the key material are not part of it.
            while start < p and (
                text[start] in " \t\r\n" or text.startswith(("\\n", "\\r"), start)
            ):
                start += 2 if text[start] == "\\" else 1
            material = sum(1 for c in text[start:p] if c.isalnum() or c in "+/=")
            if material < self._MIN_MATERIAL:
                continue  # an END marker alone, as in code that writes keys
            yield Finding(rule_id=self.id, start=start, end=end.end())


# Names that hold credentials. Strong words count anywhere in the name; weak ones only at its end
# (``max_tokens`` and ``token_count`` are not credentials, ``auth_token`` is).
_STRONG_NAME_RE = _lazy_re(r"passw(?:or)?d|secret|credential|contrase(?:ñ|n)a", re.I)
_WEAK_NAME_RE = _lazy_re(
    r"""(?:^|[\W_])(?:pwd|pass|passphrase|token|auth|authorization|cookie|
        (?:api|auth|service|account|db|database|priv|private|client|access|secret|signing
          |encryption|master|session|app|consumer|license)[_.-]?key
        |apikey)$""",
    re.I | re.VERBOSE,
)
# Names that say the value is something else: an id, a length, a location, a pagination cursor...
_NOT_SECRET_NAME_RE = _lazy_re(
    r"""(?:[\W_](?:id|ids|name|names|type|length|len|size|count|file|path|dir|url|uri|endpoint
        |header|env|var|field|policy|required|enabled|expiry|expires|ttl|timeout|version|prompt
        |label|hint|key_id|format|regex|pattern|placeholder|source|provider|helper|process|method
        |scope|scopes|mode|kind|class|store|manager|backend|strategy)
      |(?:page|next|continuation|csrf|xsrf|cursor|sync|refresh_url|max|num|min)[_.-]?tokens?
      |tokens?[_.-]?(?:type|count|limit|usage|url|uri|endpoint)|keyword|bypass|compass
      |^(?:max|num|total|input|output|prompt|completion)[_.-]?tokens?)$""",
    re.I | re.VERBOSE,
)
_ASSIGNMENT_RE = _lazy_re(
    r"""(?P<key>[A-Za-z_$@][\w.$@-]{0,79})
        (?:\\?["'])?\]?[ \t]*(?P<sep>:=|=>|\?=|=(?![=>~])|:(?!:))[ \t]*
        (?:!!?[\w/:.-]+[ \t]+)?  # a YAML tag: !!binary, !secret
        (?:\\"(?P<eq>[^"\\\n]{1,512})\\"
          |"(?P<dq>[^"\n]{1,512})"
          |'(?P<sq>[^'\n]{1,512})'
          |`(?P<bq>[^`\n]{1,512})`
          # a quoted value longer than 512 characters, or whose closing quote was cut off:
          # its first 512 characters (the scan takes the rest up to the closing quote)
          |\\"(?P<eqo>[^"\\\n]{1,512})
          |"(?P<dqo>[^"\n]{1,512})
          |'(?P<sqo>[^'\n]{1,512})
          |`(?P<bqo>[^`\n]{1,512})
          |(?P<bare>[^\s"'`,;]{1,512}))""",
    re.VERBOSE,
)
# The rest of the identifier a keyword occurs in (the characters of _ASSIGNMENT_RE's name) and
# what must follow a name for _ASSIGNMENT_RE to match (a cheap test before the full pattern).
_IDENT_RUN_RE = _lazy_re(r"[\w.$@-]*")
_OPERATOR_AFTER_RE = _lazy_re(r"""(?:\\?["'])?\]?[ \t]*(?::=|=>|\?=|=(?![=>~])|:(?!:))""")
# Both in one call: the run, then (group 1, empty) whether an operator follows it.
_IDENT_RUN_ASSIGNED_RE = _lazy_re(
    r"""[\w.$@-]*+((?=(?:\\?["'])?\]?[ \t]*(?::=|=>|\?=|=(?![=>~])|:(?!:))))?"""
)
_KEY_NAME_MAX = 80
_VALUE_GROUPS = ("eq", "dq", "sq", "bq", "eqo", "dqo", "sqo", "bqo", "bare")
# The rest of a value whose closing quote is not within _ASSIGNMENT_RE's 512 characters.
_OPEN_QUOTE_REST = {
    "eqo": _lazy_re(r'[^"\\\n]*'),
    "dqo": _lazy_re(r'[^"\n]*'),
    "sqo": _lazy_re(r"[^'\n]*"),
    "bqo": _lazy_re(r"[^`\n]*"),
}
_CODE_CHARS = frozenset("()[]{}")
_CODE_HEAD_RE = _lazy_re(r"^[A-Za-z_$@][\w$@]*(?:\.[A-Za-z_$][\w$]*)*\.?$|^[\W_]+$")
_DOTTED_NAME_RE = _lazy_re(r"^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+$")
_TYPE_NAME_RE = _lazy_re(r"^[A-Z][A-Za-z]*$")
_SNAKE_NAME_RE = _lazy_re(r"^[a-z]+(?:_[a-z]+)+$")
_PATH_RE = _lazy_re(r"^(?:~?/|\./|\.\./)[\w./~+-]*$")


@functools.lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    """True when a variable or field called ``name`` holds a credential (by its name)."""
    if _NOT_SECRET_NAME_RE.search(name):
        return False
    return bool(_STRONG_NAME_RE.search(name) or _WEAK_NAME_RE.search(name))


def _credential_value(value: str, key: str, *, quoted: bool, type_hint: bool) -> bool:
    """True when ``value``, assigned to the credential name ``key``, looks like a real secret."""
    if len(value) < (4 if quoted else 6):
        return False  # what every test below ends with for a value this short (and cheap)
    if _is_placeholder(value) or value.lower() == key.lower():
        return False
    if quoted:
        return len(value) >= 4 and not value.isspace()
    if _CODE_CHARS.intersection(value):
        # ``get_password()``, ``cfg[key]``: code. But brackets glued to a value by the output
        # (``pw=s3cr3t{}``) must not make it code: what comes before them decides.
        head = value[: min(value.find(c) for c in _CODE_CHARS if c in value)]
        if not head or (_CODE_HEAD_RE.match(head) and not _random_token(head)):
            return False
        value = head
    if len(value) < 6 or _PATH_RE.match(value):
        return False
    if _DOTTED_NAME_RE.match(value) or value.startswith(("self.", "this.", "$")):
        return False
    if _SNAKE_NAME_RE.match(value):
        return False  # ``get_token = get_custom_token``: a reference to code
    if type_hint and _TYPE_NAME_RE.match(value):
        return False  # ``secret: SecretStr``
    if value.isalpha() and value.islower() and not _STRONG_NAME_RE.search(key):
        return False  # a plain word after ``token:`` is prose ("token: expired")
    return True


def _random_token(value: str) -> bool:
    """Letters and digits mixed at more than 4 bits per character: a token, not a name."""
    return (
        any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and _entropic(value, 4.0)
    )


class _KeywordAssignmentRule(_Rule):
    """``name = value`` where the name says the value is a credential (detect-secrets style)."""

    def __init__(self, priority: int) -> None:
        self.id = "keyword-assignment"
        self.keywords = (
            "passw", "pwd", "pass", "secret", "token", "key", "auth", "credential", "contrase",
        )  # fmt: skip
        self.priority = priority

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        seen_keys: set[int] = set()
        last_end = -1
        # The identifier a keyword occurrence sits in ends at run_end; an assignment needs an
        # operator right after it (_ASSIGNMENT_RE's name cannot stop inside an identifier).
        # Computed once per identifier, not once per occurrence: ``keykeykey...`` (one
        # identifier, a keyword every 3 characters) used to walk back 64 characters and run the
        # assignment pattern at every occurrence (~5 s per MB).
        run_end, run_assigned = -1, False
        for p in positions:
            if p < last_end:
                continue
            if p >= run_end:
                run = _IDENT_RUN_ASSIGNED_RE.match(text, p)
                run_end, run_assigned = run.end(), run.group(1) is not None
            # No operator after the identifier, or the name would be longer than the pattern's
            # 80 characters from any start the walk below can reach: no match.
            if not run_assigned or run_end - p > _KEY_NAME_MAX:
                continue
            start = p
            floor = max(0, p - 64)
            while start > floor and (text[start - 1].isalnum() or text[start - 1] in "_.$@-"):
                start -= 1
            if start in seen_keys or start < last_end:
                continue
            seen_keys.add(start)
            # The name the pattern would capture is text[start:run_end]: when it is not a
            # credential's, skip the pattern (its value part reads up to 512 characters).
            if not secret_name(text[start:run_end]):
                continue
            m = _ASSIGNMENT_RE.match(text, start)
            # The value's group is the last one the match closed (one of _VALUE_GROUPS).
            group = m.lastgroup if m is not None else None
            sep = m.group("sep") if m is not None else None
            if m is None or (sep == ":" and group == "bare"
                             and _YAML_BLOCK_RE.fullmatch(m.group("bare"))):
                # YAML's value on the lines below the name (``password: |``, ``password: >-``,
                # ``password:`` then an indented line): nothing after the colon to judge.
                block = _yaml_block(text, start)
                if block is not None:
                    last_end = block.end
                    yield block
                continue
            key = m.group("key")
            if not secret_name(key):
                continue
            vstart, vend = m.span(group)
            if group in _OPEN_QUOTE_REST:
                # Padding after a secret must not push it past the 512-character cap, nor
                # padding before it (``"xxx...<secret>"``, a placeholder's characters) hide it:
                # the whole value, up to its closing quote or the end of the line, is judged
                # and redacted (values of one quote kind do not overlap: linear).
                vend = _OPEN_QUOTE_REST[group].match(text, vend).end()
            value = text[vstart:vend].strip()
            if not _credential_value(value, key, quoted=group != "bare", type_hint=sep == ":"):
                continue
            last_end = vend
            yield Finding(rule_id=self.id, start=vstart, end=vend)


# What may follow ``name:`` in YAML when the value is on the lines below: a block scalar's
# indicator (``|``, ``>-``, ``|2+``) or nothing, then an optional comment.
_YAML_BLOCK_RE = _lazy_re(r"[|>][+-]?[1-9]?[+-]?")
_YAML_NAME_LINE_RE = _lazy_re(
    r"""(?P<key>[A-Za-z_$@][\w.$@-]{0,79})["']?[ \t]*:[ \t]*(?P<ind>[|>][+-]?[1-9]?[+-]?)?"""
    r"""[ \t]*(?:\#[^\n]*)?(?=\r?\n)"""
)
# A line that opens a nested mapping or list, not a scalar's text.
_YAML_STRUCTURE_RE = _lazy_re(r"""[ \t]*(?:-(?:[ \t]|$)|[^\s:#'"]{1,80}:(?:[ \t]|$))""")


def _yaml_block(text: str, start: int) -> Finding | None:
    """The value of the YAML key at ``start`` when it is written on the lines below it: a
    block scalar (``password: |`` then indented lines) or a plain scalar on the next, more
    indented, line(s). None when the key is not a credential's, when what follows is a nested
    mapping or list, or when the value does not look like a real one.

    Without this, ``password: |`` (Kubernetes manifests, Ansible vars, compose files) hid the
    secret on the next line from every rule: each reads a value on the name's own line.
    """
    head = _YAML_NAME_LINE_RE.match(text, start)
    if head is None or not secret_name(head.group("key")):
        return None
    line_start = text.rfind("\n", 0, start) + 1
    column = start - line_start  # the value's lines are indented more than the name
    at = text.index("\n", head.end()) + 1
    first = last = -1
    while at < len(text):
        nl = text.find("\n", at)
        line_end = len(text) if nl == -1 else nl
        line = text[at:line_end].rstrip("\r")
        content = line.lstrip(" \t")
        if content:
            if len(line) - len(content) <= column:
                break
            if first < 0:
                if head.group("ind") is None and _YAML_STRUCTURE_RE.match(line):
                    return None  # ``credentials:`` over a nested mapping: its own keys
                first = at + len(line) - len(content)
            last = at + len(line)
        if nl == -1:
            break
        at = nl + 1
    if first < 0:
        return None
    value = " ".join(part.strip() for part in text[first:last].splitlines())
    block = head.group("ind") is not None
    if not _credential_value(value, head.group("key"), quoted=block, type_hint=not block):
        return None
    return Finding(rule_id="keyword-assignment", start=first, end=last)


_QUOTED_B64_RE = re.compile(r"""["'](?P<v>[A-Za-z0-9+/_=-]{20,256})\\?["']""")
# The value ends where its alphabet does: requiring an end of line after it let an output that
# appends one character to each line hide every value.
_ENV_B64_RE = re.compile(r"""=(?P<v>[A-Za-z0-9+/_-]{20,256}={0,2})(?![A-Za-z0-9+/_=-])""")
# The name an assigned value is given, read backwards from the value's opening quote: the
# text before it, reversed, must start with the operator and end with the name (its reversed
# form: ``[\w.$-]{0,63}`` then ``[A-Za-z_$]``, as long as possible). Searching forward for a
# name that ends right at the quote (``name...$``) tried the name pattern at each of the 96
# characters before every quoted value: 3 s per MB of quoted tokens, on the event loop.
_KEY_BEFORE_REVERSED_RE = _lazy_re(
    r"""[ \t]*(?:=:|>=|=|:)[ \t]*\]?(?:["']\\?)?([\w.$-]{0,63}[A-Za-z_$])"""
)


def _key_before(text: str, lo: int, end: int) -> str | None:
    """The name assigned the value that starts at ``end`` (``name = "..."``, ``"name": "..."``),
    looked for in ``text[lo:end]``; None when there is none."""
    m = _KEY_BEFORE_REVERSED_RE.match(text[lo:end][::-1])
    return None if m is None else m.group(1)[::-1]
# The name of an env-style assignment: at the start of a line or after a blank or ';' (a prefix
# added to every line must not hide it), ``export`` allowed.
_ENV_LINE_RE = _lazy_re(
    r"""(?:^|(?<=[\s;,]))(?:export[ \t]+)?([A-Za-z_][\w.-]{0,63})\Z""", re.MULTILINE
)
_ID_NAME_RE = _lazy_re(
    r"""(?:^|[\W_])(?:id|ids|uuid|guid|sha\d*|hash|digest|checksum|etag|integrity|commit|rev
        |revision|nonce|data|content|body|image|icon|file|path|url|uri|href|src|name)$
      |(?<=[a-z])(?:Id|ID|Ids|IDs|Hash|Url|Uri)$""",
    re.VERBOSE,
)

#: detect-secrets' default limit for base64 strings, in bits per character.
HIGH_ENTROPY_LIMIT = 4.5


def _random_looking(value: str) -> bool:
    """Mixed letters and digits, not hex, not a UUID, entropy above the limit."""
    if _HEX_RE.match(value) or _UUID_RE.match(value):
        return False
    if not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False
    return _entropic(value, HIGH_ENTROPY_LIMIT)


class _HighEntropyAssignmentRule(_Rule):
    """A random-looking value assigned to a name that does not say "id" or "hash"."""

    def __init__(self, priority: int) -> None:
        self.id = "high-entropy-assignment"
        self.keywords = ()  # runs on every text: its patterns start with a literal quote or '='
        self.priority = priority

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        for m in _QUOTED_B64_RE.finditer(text):
            value = m.group("v")
            if not _random_looking(value):
                continue
            floor = max(0, m.start() - 96)  # bounded: lines of tool output can be 8 MiB long
            line_start = text.rfind("\n", floor, m.start()) + 1
            key = _key_before(text, max(line_start, floor), m.start())
            if key is None or _ID_NAME_RE.search(key):
                continue
            yield Finding(rule_id=self.id, start=m.start("v"), end=m.end("v"))
        for m in _ENV_B64_RE.finditer(text):
            value = m.group("v")
            if not _random_looking(value.rstrip("=")):
                continue
            key = _ENV_LINE_RE.search(text, max(0, m.start() - 96), m.start())
            if key is None or _ID_NAME_RE.search(key.group(1)):
                continue
            yield Finding(rule_id=self.id, start=m.start("v"), end=m.end("v"))


def _aws_secret_check(text: str, m: re.Match[str]) -> bool:
    return shannon_entropy(m.group(1)) > 3.0


# A command-line value: up to 256 characters with no blank or quote (the quote that opened it
# is outside the group). Every part of the patterns below is bounded: tried at each keyword, a
# pattern reads at most one line of 16 words.
_CLI_VALUE = r"""["']?((?![-\s])[^\s'"]{1,256})"""
# Possessive: a word given back in part leaves a non-blank where a blank must follow, so no
# shorter word or run of blanks can match; the engine still tried them all, for each count of
# words, at every keyword (0.6-0.9 s per MB of "mysql " or "7z " repeated).
_CLI_WORDS = r"(?:[ \t]++[^\s]{1,256}+){0,16}?"


class _CookieRule(_Rule):
    """The values of ``Cookie:`` / ``Set-Cookie:`` headers (``curl -v``, HTTP logs, a HAR or a
    JSON header map) and of ``curl --cookie``: a session cookie is a credential, whatever it
    looks like. Set-Cookie's attributes (``Path``, ``Expires``, ...) are left.

    Every ``name=value`` pair of the header's value is read, to its end (the closing quote of a
    quoted value, the end of the line, or the next blank after ``--cookie``): a pair that does
    not parse (a quoted value, a flag with no ``=``, a comma) is skipped, not the end of the
    header, and there is no cap on the count of pairs. Stopping at the first odd pair or after
    64 of them left every later cookie, the session's among them, in the output (a site sets
    dozens of tracking cookies, and ``theme="dark"`` is a valid cookie).
    """

    _HEADER = _lazy_re(
        r"""(?i)(?:set-)?cookie2?(?:\\?["']?[ \t]*:[ \t]*(\\?["']?)|[ \t]*=[ \t]*(["'])|"""
        r"""[ \t]+(["']?)(?=[^\s=;'"]{1,128}=))"""
    )
    # A pair: a name at the start of the value or after a separator or a blank, then its value,
    # bare or in double quotes (RFC 6265's cookie-value).
    _PAIR = _lazy_re(
        r"""(?<![^\s;,:"'])([^\s=;,'"\\]{1,128})=(?:\\?"([^"\\\n]{1,4096})\\?"|([^\s;,'"\\]{1,4096}))"""
    )
    _ATTRIBUTES = frozenset(
        {"path", "domain", "expires", "max-age", "samesite", "priority", "partitioned",
         "version", "comment", "secure", "httponly"}
    )

    def __init__(self, priority: int) -> None:
        self.id = "cookie"
        self.keywords = ("cookie",)
        self.priority = priority

    def _value_end(self, text: str, m: re.Match[str]) -> int:
        """Where the header value that ``m`` opens ends."""
        at = m.end()
        line_end = _line_end(text, at)
        quote = m.group(1) or m.group(2) or m.group(3) or ""
        if quote:
            close = text.find(quote, at, line_end)
            while close > at and len(quote) == 1 and text[close - 1] == "\\":
                close = text.find(quote, close + 1, line_end)  # an escaped quote inside
            return line_end if close == -1 else close
        if m.group(3) is not None:  # ``--cookie sid=...``: one shell word
            blank = _SPACE_RE.search(text, at, line_end)
            return line_end if blank is None else blank.start()
        return line_end

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        last_end = -1
        for p in positions:
            start = p - 4 if p >= 4 and text[p - 4 : p].lower() == "set-" else p
            if start < last_end:
                continue
            m = self._HEADER.match(text, start)
            if m is None:
                continue
            end = self._value_end(text, m)
            # The header's pairs do not overlap the next header's: linear over the text.
            last_end = end
            for pair in self._PAIR.finditer(text, m.end(), end):
                name = pair.group(1)
                group = 2 if pair.group(2) is not None else 3
                value = pair.group(group)
                if (name.lower() in self._ATTRIBUTES or len(value) < 8
                        or _is_placeholder(value)):
                    continue
                yield Finding(rule_id=self.id, start=pair.start(group), end=pair.end(group))


_METAVAR_RE = _lazy_re(r"[A-Z][A-Z0-9_-]*")


def _cli_value_check(text: str, m: re.Match[str]) -> bool:
    """Not what ``--help`` output and prose put after an option: a metavar (``PASSWORD``), a
    type (``string``), a plain lower-case word (``--password is required``)."""
    value = m.group(1)
    if len(value) < 4 or _METAVAR_RE.fullmatch(value):
        return False
    return not (value.isalpha() and value.islower() and len(value) <= 10)


def _cli_rules() -> list[_Rule]:
    """Credentials given on a command line, as ``ps``, shell history, CI logs and scripts show
    them: ``--password X``, ``--token X``, ``mysql -pX``, ``sshpass -p X``, ``redis-cli -a X``,
    ``docker login -p X``, ``zip -P X``, ``curl -u user:X``. (``--password=X`` is also caught by
    the keyword and gitleaks rules; the space-separated form was not.)"""
    return [
        _RegexRule(
            "cli-credential",
            r"--(?:(?:http-|ftp-|proxy-|db-|admin-|root-)?pass(?:word|wd|phrase)?"
            r"|(?:access-|auth-|with-|bearer-|api-|bot-|refresh-|github-|gitlab-)?token"
            r"|api[-_]?key|(?:client-|app-)?secret)(?:[ \t]+|=)" + _CLI_VALUE,
            ("--pass", "--http-pass", "--ftp-pass", "--proxy-pass", "--db-pass", "--admin-pass",
             "--root-pass", "--token", "--access-token", "--auth-token", "--with-token",
             "--bearer-token", "--api-token", "--bot-token", "--refresh-token",
             "--github-token", "--gitlab-token", "--api-key", "--api_key", "--apikey",
             "--secret", "--client-secret", "--app-secret"),
            group=1,
            priority=25,
            check=_cli_value_check,
        ),
        _RegexRule(
            "cli-credential",
            # mysql's -pSECRET (attached: a bare -p prompts) in every client of the family.
            r"(?i:mysql|mariadb)[\w-]{0,16}+" + _CLI_WORDS
            + r"""[ \t]+-p["']?((?!\s)[^\s'"]{1,256})""",
            ("mysql", "mariadb"),
            group=1,
            priority=25,
            check=_cli_value_check,
        ),
        _RegexRule(
            "cli-credential",
            r"(?:sshpass" + _CLI_WORDS + r"[ \t]+-p[ \t]*"
            r"|redis-cli" + _CLI_WORDS + r"[ \t]+-a[ \t]+"
            r"|login" + _CLI_WORDS + r"[ \t]+-p[ \t]+"
            r"|(?:un)?zip" + _CLI_WORDS + r"[ \t]+-P[ \t]+"
            r"|7za?" + _CLI_WORDS + r"[ \t]+-p(?=\S)"
            r"|openssl" + _CLI_WORDS + r"[ \t]+-k[ \t]+)" + _CLI_VALUE,
            ("sshpass", "redis-cli", "login", "zip", "7z", "openssl"),
            group=1,
            priority=25,
            check=_cli_value_check,
        ),
        _RegexRule(
            "cli-credential",
            r"curl" + _CLI_WORDS + r"""[ \t]+(?:-u|--user)(?:[ \t]+|=)?["']?[^\s:'"]{1,128}:"""
            r"""((?!\s)[^\s'"]{1,256})""",
            ("curl",),
            group=1,
            priority=25,
        ),
    ]


class _CutTokenRule(_Rule):
    """The word just before a cut marker (``…[+N chars]``, what ``shorten`` leaves where it cut
    a long text: a progress message, an exception quoted in an error): the word may be the
    first half of a secret, which no rule recognizes once cut, and which a tool that echoes
    input could shift past the cut piece by piece. A cut word is withheld whole, whatever it
    looks like (the text around the cut was going to be lost anyway)."""

    _MARKER = _lazy_re(r"…\[\+\d{1,20} chars\]")
    _WORD_ENDS = frozenset(string.whitespace + "\"'`<>()[]{},;")
    _MIN_WORD = 6
    _MAX_WORD = 512

    def __init__(self, priority: int) -> None:
        self.id = "cut-token"
        self.keywords = ("…[+",)
        self.priority = priority

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        for p in positions:
            if self._MARKER.match(text, p) is None:
                continue
            start, floor = p, max(0, p - self._MAX_WORD)
            while start > floor and text[start - 1] not in self._WORD_ENDS:
                start -= 1
            if p - start >= self._MIN_WORD:
                yield Finding(rule_id=self.id, start=start, end=p)


class _NamedValueRule(_Rule):
    """A value whose credential name is in a sibling field, in text: ``{"name": "DB_PASSWORD",
    "value": "..."}`` (``kubectl get -o json``, HAR headers, ``aws ssm get-parameters``,
    CloudFormation's ``ParameterKey``/``ParameterValue``) and YAML's ``- name: API_TOKEN`` /
    ``value: ...``. :func:`redact_value` knows these pairs as structures; printed as text, the
    name sits in another field than the value, out of every other rule's sight."""

    _HEAD = _lazy_re(
        r"""(?i:name|key|parameterkey|parametername|header|variable)\\?["']?[ \t]*[:=][ \t]*"""
        r"""\\?["']?(?P<name>[\w./:@-]{1,128})"""
    )
    # The value's field, in the same object: within 256 characters, no brace or bracket between
    # (the leading class lets the engine skip to a candidate at C speed).
    _VALUE_KEY = _lazy_re(
        r"""(?=[\\"'vVpPsS])(?<![\w-])\\?["']?(?i:value|parametervalue|val|secret)\\?["']?"""
        r"""[ \t]*[:=][ \t]*"""
    )
    _VALUE = _lazy_re(
        r"""\\?"(?P<dq>[^"\\\n]{1,4096})\\?"|'(?P<sq>[^'\n]{1,4096})'"""
        r"""|(?P<bare>[^\s,}\]"'][^\n,}\]]{0,4095})"""
    )
    _GAP_STOP = _lazy_re(r"[{}\[\]]|\n[ \t]*-[ \t]")
    _GAP = 256
    _VALUE_KEY_MAX = 32

    def __init__(self, priority: int) -> None:
        self.id = "keyword-assignment"
        self.keywords = ("name", "key", "header", "variable", "parameter")
        self.priority = priority

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        last_end = -1
        # What earlier looks learnt, so that names close together (``name: password`` repeated)
        # do not read the same characters again: the next end of an item, and where no value
        # field starts (a field is short: a look resumes a little before where one stopped).
        item_end, item_clear = -1, -1
        no_value_until = -1
        for k, p in enumerate(positions):
            if p < last_end or (p and (text[p - 1].isalnum() or text[p - 1] == "_")):
                continue
            if not k & 1023:
                _check_deadline()
            head = self._HEAD.match(text, p)
            if head is None or not secret_name(head.group("name")):
                continue
            # The value's field is looked for up to the end of this object or list item (or
            # 256 characters): each look is bounded, whatever follows.
            at = head.end()
            stop = min(len(text), at + self._GAP)
            if item_end < at:
                found = self._GAP_STOP.search(text, max(at, item_clear), stop)
                item_end = found.start() if found is not None else -1
                item_clear = stop if found is None else found.start()
            if at <= item_end < stop:
                stop = item_end
            key = self._VALUE_KEY.search(text, max(at, no_value_until), stop)
            if key is None:
                no_value_until = max(no_value_until, stop - self._VALUE_KEY_MAX)
            value = None if key is None else self._VALUE.match(text, key.end())
            if value is None:
                continue
            group = next(g for g in ("dq", "sq", "bare") if value.group(g) is not None)
            vstart, vend = value.span(group)
            while vend > vstart and text[vend - 1] in " \t\r":
                vend -= 1
            if not _credential_value(
                text[vstart:vend], head.group("name"), quoted=group != "bare", type_hint=False
            ):
                continue
            last_end = vend
            yield Finding(rule_id=self.id, start=vstart, end=vend)


class _XmlElementRule(_Rule):
    """``<password>...</password>`` (Maven's settings.xml, Tomcat, .NET and Spring configs,
    SOAP): an element named like a credential. The keyword and assignment rules read
    ``name=value`` and ``name: value``, not an element's text."""

    _ELEMENT = _lazy_re(
        r"""<(?P<tag>[\w:.-]{1,80})(?:[ \t][^<>\n]{0,256})?>(?P<v>[^<>\n]{1,4096})</(?P=tag)>"""
    )
    _TAG_RUN = _lazy_re(r"[\w:.-]*")

    def __init__(self, priority: int) -> None:
        self.id = "keyword-assignment"
        self.keywords = ("passw", "pwd", "pass", "secret", "token", "key", "auth", "credential")
        self.priority = priority

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        last_end = tried = -1
        for k, p in enumerate(positions):
            if p < last_end:
                continue
            if not k & 1023:
                _check_deadline()
            # The '<' that opens the tag the keyword is in, found at C speed; each '<' is
            # tried once, however many keywords its name holds (``<keykeykey...``).
            lt = text.rfind("<", max(0, p - 80), p)
            if lt < 0 or lt == tried or self._TAG_RUN.match(text, lt + 1).end() < p:
                continue
            tried = lt
            m = self._ELEMENT.match(text, lt)
            if m is None or not secret_name(m.group("tag").rpartition(":")[2]):
                continue
            value = m.group("v").strip()
            if not _credential_value(value, m.group("tag"), quoted=False, type_hint=False):
                continue
            last_end = m.end()
            yield Finding(rule_id=self.id, start=m.start("v"), end=m.end("v"))


# A field of a ~/.pgpass line: any character but a blank, ':', a quote or '\', or an escaped one
# (``\:``, ``\\``). JSON's escaped breaks (``\n``) end a field: a file printed in a JSON string is
# one line of text with its lines joined by them.
_PGPASS_FIELD = r"""(?:[^\s:\\"'`]|\\[^\snrt])"""


def _mixed_token(value: str) -> bool:
    """Letters and digits mixed, 8+ characters, over 3 bits per character: a generated
    password, not a number, a name or a path."""
    return (
        len(value) >= 8
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and shannon_entropy(value) > 3.0
    )


class _PgpassRule(_Rule):
    """The password of a PostgreSQL password file line, ``host:port:database:user:password``
    (``cat ~/.pgpass``; grep's ``file:`` and ``file:N:`` in front are read too).

    There is no keyword: the shape is the signal. The line must start a line or follow a blank
    or a quote, its port must be a number or ``*`` and the password runs to the first unescaped
    colon or blank (libpq ignores what follows a colon), so ``/etc/passwd`` (``root:x:0:0:...``,
    no port in second place), ``host:port`` pairs and URLs are left; so is a password that reads
    as a word (``_cli_value_check``), which also spares ``grep -n`` output of log lines
    (``app.log:3:ERROR:db:connection``). A password with blanks is cut at its first blank (the
    rest of it stays: such passwords are rare in pgpass files, colon-separated log lines with
    prose after them are not).
    """

    # Where to look: lines holding ``:PORT:``; each line is read once whatever its count.
    _PORT = _lazy_re(r":(?:\*|[0-9]{1,5}):")
    _LINE = _lazy_re(
        r"(?m)(?:^|(?<=[\s\"'`>|])|(?<=\\[nrt]))"  # a line's start, after a blank or a quote
        r"(?:[^\s:\"'`]{0,256}pgpass(?::[0-9]{1,9})?:)?"  # grep's file name and line number
        # host: a name, an address (``\:`` in IPv6), ``*``, or a socket directory's path
        r"""(?:\*|(?:[\w.%\[\]-]|\\[^\snrt]){1,253}+|/[^\s:\\"'`]{0,255}+)"""
        r":(?:\*|[0-9]{1,5})"  # port
        r":" + _PGPASS_FIELD + r"{1,256}+"  # database
        r":" + _PGPASS_FIELD + r"{1,256}+"  # user
        # the password: a quote inside it is its own, one before a ',', '}' or a blank closes
        # the JSON string it was printed in
        r""":((?:[^\s:\\"'`]|\\[^\snrt]|["'`](?=[^\s:,;}\]\\"'`])){1,1024}+)"""
    )

    def __init__(self, priority: int) -> None:
        self.id = "pgpass-password"
        self.keywords = ()  # runs on every text: _PORT finds the candidate lines at C speed
        self.priority = priority

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        line_end = -1
        for anchor in self._PORT.finditer(text):
            at = anchor.start()
            if at < line_end:
                continue  # this line was read whole already
            _check_deadline()
            line_start = text.rfind("\n", 0, at) + 1
            line_end = _line_end(text, at)
            for m in self._LINE.finditer(text, line_start, line_end):
                start, end = m.span(1)
                if _is_placeholder(m.group(1)) or not _cli_value_check(text, m):
                    continue
                if end < line_end and text[end] == ":" and not _mixed_token(m.group(1)):
                    # A sixth field: a pgpass line has five (libpq would ignore the rest, and
                    # only a random value glued to one is still taken), /etc/shadow, /etc/group
                    # and $PATH seen through ``grep -Hn`` have more (``:20228:0:99999:7:::``).
                    continue
                yield Finding(rule_id=self.id, start=start, end=end)


# crypt(3)'s alphabet, and base64's (LDAP and Django hashes).
_C64 = "[./0-9A-Za-z]"
_B64 = "[A-Za-z0-9+/]"

#: Password hashes: htpasswd (``user:$apr1$...``, ``user:{SHA}...``, ``user:$2y$...``),
#: /etc/shadow, LDAP's userPassword, Django, PHP (phpass), passlib. A hash is credential
#: material (it is cracked offline, and some protocols accept it as it is), so the whole of it
#: goes. Every alternative has the exact shape of its scheme (lengths, alphabet), so prose
#: about the schemes and shell's ``$1$2`` are left; its keyword starts the match. (The 13
#: characters of a DES crypt hash and htpasswd's plain-text passwords have no shape to tell
#: them from a word.)
_PASSWORD_HASH = (
    r"(?:\$(?:1|apr1|md5)\$" + _C64 + r"{1,8}\$" + _C64 + r"{22}"  # MD5-crypt, Apache
    r"|\$2[abxy]?\$[0-9]{2}\$" + _C64 + r"{53}"  # bcrypt
    r"|\$[56]\$(?:rounds=[0-9]{1,9}\$)?[^$\s:]{1,16}\$" + _C64 + r"{43}(?:" + _C64
    + r"{43})?"  # SHA-256/512-crypt
    r"|\$(?:y|gy|7)\$" + _C64 + r"{1,128}\$(?:" + _C64 + r"{1,128}\$)?" + _C64
    + r"{43}"  # yescrypt, gost-yescrypt, scrypt
    r"|\$argon2(?:id|i|d)\$(?:v=[0-9]{1,4}\$)?m=[0-9]{1,10},t=[0-9]{1,10},p=[0-9]{1,4}"
    r"\$[A-Za-z0-9+/.-]{8,128}\$[A-Za-z0-9+/.-]{16,512}"  # Argon2 (PHC string)
    r"|\$(?:pbkdf2(?:-sha(?:1|256|512))?|scrypt)\$[\w=,]{1,64}\$[A-Za-z0-9+/.=-]{4,128}"
    r"\$[A-Za-z0-9+/.=-]{16,512}"  # passlib's PBKDF2 and scrypt
    r"|\$[PH]\$" + _C64 + r"{31}"  # phpass (WordPress, phpBB)
    r"|pbkdf2_sha(?:1|256)\$[0-9]{1,10}\$[^$\s]{1,128}\$" + _B64 + r"{20,}+={0,2}"  # Django
    r"|scrypt\$[0-9]{1,10}\$[^$\s]{1,128}\$[0-9]{1,3}\$[0-9]{1,3}\$" + _B64
    + r"{20,}+={0,2}"  # Django's scrypt
    r"|(?:sha1|md5)\$[^$\s]{1,128}\$(?:[0-9a-f]{40}|[0-9a-f]{32})(?![0-9a-f])"  # old Django
    r"|\{(?i:s?sha(?:256|384|512)?|s?md5|pbkdf2[\w-]{0,16}|argon2|bcrypt|crypt)\}"
    r"[A-Za-z0-9+/=.$,-]{12,1024}+)"  # LDAP's userPassword, htpasswd's {SHA}
)


def _own_rules() -> list[_Rule]:
    # Priorities: lower wins on overlap. gitleaks' specific rules sit at 10, its generic one at 50.
    return [
        _PrivateKeyRule(priority=0),
        _PrivateKeyTailRule(priority=0),
        _RegexRule(
            "aws-access-key-id",
            # No \b after the key: text glued to it ("AKIA...example") must not hide it.
            r"(?<![A-Z0-9])((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})",
            ("a3t", "akia", "asia", "abia", "acca"),
            group=1,
            priority=5,
        ),
        _RegexRule(
            "aws-secret-access-key",
            r"""(?i)aws[\w.-]{0,20}?(?:secret|private)[\w.-]{0,20}?["']?\s*(?:=|:|=>)\s*["']?"""
            r"""([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])""",
            ("aws",),
            group=1,
            priority=5,
            check=_aws_secret_check,
        ),
        _RegexRule(
            "authorization-header",
            r"""(?i)(?:proxy-)?authorization\\?["']?[ \t]*[:=][ \t]*\\?["']?"""
            r"""(?:Bearer|Basic|Token|Digest|Negotiate|Bot|Splunk|SSWS|JWT)[ \t]+"""
            r"""([A-Za-z0-9._~+/=:-]{8,})""",
            ("authorization",),
            group=1,
            priority=8,
            back_over=string.ascii_letters + "-",
        ),
        _RegexRule(
            "url-credentials",
            # Not \b: a scheme glued to an identifier ("fetch_http://u:p@h", a made-up tool
            # name) has no word boundary, and still carries the password.
            r"""(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{1,30}://"""
            r"""[^\s:/?#@'"<>]{1,256}:([^\s/?#@'"<>]{1,256})@""",
            ("://",),
            group=1,
            priority=20,
            back_over=string.ascii_letters + string.digits + "+.-",
        ),
        _CookieRule(priority=22),
        *_cli_rules(),
        _KeywordAssignmentRule(priority=30),
        _NamedValueRule(priority=30),
        _XmlElementRule(priority=30),
        _RegexRule(
            "netrc-password",
            # ~/.netrc and _netrc (curl, git, ftp, Heroku): ``machine HOST login USER password
            # SECRET``, on one line or one token pair per line.
            r"(?:machine[ \t]+[^\s]{1,256}|default)"
            r"(?:\s+(?:login|account|port|protocol)[ \t]+[^\s]{1,256}){0,4}"
            r"\s+password[ \t]+([^\s]{1,256})",
            ("machine", "default"),
            group=1,
            priority=25,
            check=_cli_value_check,
        ),
        _PgpassRule(priority=25),
        _RegexRule(
            "password-hash",
            _PASSWORD_HASH,
            ("$1$", "$apr1$", "$md5$", "$2$", "$2a$", "$2b$", "$2x$", "$2y$", "$5$", "$6$",
             "$y$", "$gy$", "$7$", "$argon2", "$pbkdf2", "$scrypt$", "$p$", "$h$",
             "pbkdf2_sha", "scrypt$", "sha1$", "md5$", "{sha", "{ssha", "{md5}", "{smd5}",
             "{pbkdf2", "{argon2}", "{bcrypt}", "{crypt}"),
            priority=5,
        ),
        _HighEntropyAssignmentRule(priority=60),
        _CutTokenRule(priority=70),
    ]


# ---------------------------------------------------------------------------------------------
# Known secrets: values the deck holds (its environment, its configuration), in their encodings
# ---------------------------------------------------------------------------------------------

#: Rule id of a known secret (an environment or configured value) in a redaction marker.
KNOWN_SECRET_RULE = "known-secret"
#: Environment values shorter than this are not registered (they would redact everything).
MIN_ENV_SECRET_LENGTH = 8
#: Configured values shorter than this are refused (named explicitly, so a lower floor).
MIN_CONFIGURED_SECRET_LENGTH = 4

# Names of environment variables that hold credentials (upper-cased before the test): strong words
# anywhere (``CLIENTSECRET``), short ones only as a whole segment (``NPM_AUTH``, not ``AUTHOR``).
_SECRET_ENV_NAME_RE = _lazy_re(
    r"""SECRET|PASSW(?:OR)?D|TOKEN(?!IZ)|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|SIGNING_?KEY
      |CREDENTIAL|PASSPHRASE|WEBHOOK|CONNECTION_?STRING
      |(?:^|_)(?:KEY|KEYS|PAT|PASS|PWD|DSN|SALT|PEPPER|COOKIE|AUTH)$
      |(?:^|_)(?:KEY|PAT|PASS|PWD|COOKIE)_
      |^AWS_""",
    re.VERBOSE,
)
# ... unless the name says the value is a setting about the secret, not the secret (a webhook's
# URL is the secret itself).
_NOT_SECRET_ENV_NAME_RE = _lazy_re(
    r"""^(?:PWD|OLDPWD)$
      |(?<!WEBHOOK)_(?:FILE|PATH|DIR|HOME|ROOT|REGION|PROFILE|OUTPUT|ENDPOINT|HOST|PORT|URL|URI
      |URL_TEMPLATE|ID|TYPE|MODE|LENGTH|SIZE|COUNT|TTL|TIMEOUT|EXPIRY|ENABLED|DISABLED|VERSION
      |NAME|FORMAT|ALGORITHM|HEADER|BUNDLE|DOMAIN|PROVIDER|EMAIL|USER|USERNAME|SOCK|SOCKET
      |METHOD|SCOPES?|AUDIENCE|ISSUER|LOCATION|STORE|BACKEND)$""",
    re.VERBOSE,
)
_URL_PASSWORD_RE = _lazy_re(r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*:([^\s/?#@]+)@")


def secret_env_name(name: str) -> bool:
    """True when the environment variable ``name`` holds a credential (by its name)."""
    upper = name.upper()
    return bool(_SECRET_ENV_NAME_RE.search(upper)) and not _NOT_SECRET_ENV_NAME_RE.search(upper)


def _trivial(value: str, minimum: int) -> bool:
    stripped = value.strip()
    if len(stripped) < minimum or len(set(stripped)) < 3:
        return True
    # A path names where a secret is (KEY_FILE=/run/secrets/key); it is not the secret.
    return stripped.startswith(("/", "./", "~/")) and not any(c.isspace() for c in stripped)


def _env_secrets(environ: Mapping[str, str], extra_names: Iterable[str]) -> dict[str, str]:
    """Secret values of ``environ`` -> the name they came from."""
    extra = set(extra_names)
    found: dict[str, str] = {}
    for name, value in environ.items():
        if not value:
            continue
        url_password = _URL_PASSWORD_RE.match(value)
        if url_password is not None:
            # A URL with credentials is secret whatever its variable is called (DATABASE_URL,
            # REDIS_URL...): the whole URL and its password, as written and decoded.
            found.setdefault(value, name)
            for password in {url_password.group(1), urllib.parse.unquote(url_password.group(1))}:
                if not _trivial(password, MIN_CONFIGURED_SECRET_LENGTH):
                    found.setdefault(password, name)
            continue
        if (name in extra or secret_env_name(name)) and not _trivial(value, MIN_ENV_SECRET_LENGTH):
            found.setdefault(value, name)
    return found


def _b64_forms(data: bytes) -> set[str]:
    """The base64 text of ``data`` alone and as it shows inside any longer base64 blob.

    Inside a blob, ``data`` starts 0, 1 or 2 bytes into a 3-byte group; for each alignment only
    the characters that depend on ``data`` alone are kept (the first 0/2/3 and the last partial
    character depend on the neighbours). Standard and URL-safe alphabets, with and without
    padding.
    """
    forms: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(data).decode("ascii")
        forms.add(whole)
        forms.add(whole.rstrip("="))
        for align, skip in ((0, 0), (1, 2), (2, 3)):
            encoded = encode(b"\0" * align + data).decode("ascii")
            bits = 8 * (align + len(data))
            inner = encoded[skip : bits // 6]
            if len(inner) >= 6:
                forms.add(inner)
    return forms


def _percent_lower(encoded: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), encoded)


def encoded_forms(value: str) -> set[str]:
    """``value`` and the encodings it is redacted in: JSON-escaped, percent-encoded, hex, base64.

    Percent-encoding: ``quote`` with and without ``/`` kept, ``quote_plus``, every byte
    encoded; upper- and lowercase hex digits each. Hex: lower and upper. Base64: see
    :func:`_b64_forms`.
    """
    data = value.encode("utf-8", "surrogatepass")
    forms = {value}
    for ascii_only in (True, False):
        escaped = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        forms.add(escaped)
        forms.add(escaped.replace("/", "\\/"))
    percent = {
        urllib.parse.quote(data, safe=""),
        urllib.parse.quote(data, safe="/"),
        urllib.parse.quote_plus(data, safe=""),
        "".join(f"%{b:02X}" for b in data),
    }
    forms.update(percent)
    forms.update(_percent_lower(p) for p in percent)
    forms.add(data.hex())
    forms.add(data.hex().upper())
    forms.update(_b64_forms(data))
    return {f for f in forms if f}


class _KnownSecrets:
    """Exact values to redact wherever they appear, in all their :func:`encoded_forms`.

    One Aho-Corasick automaton over every form of every value: the cost of a scan does not grow
    with the number of secrets. The environment is watched: a variable added or removed is
    seen by the next call, a changed value by the next string that is scanned (strings
    remembered as clean are forgotten whenever the set of secrets changes).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.configured: dict[str, str] = {}  # value -> where it came from
        self.extra_env_names: set[str] = set()
        self.env: dict[str, str] = {}
        self.env_seen: dict[Any, Any] | None = None  # the raw environment last looked at
        self.env_len = -1
        self.automaton: Any = None
        self.pattern: re.Pattern[str] | None = None  # when pyahocorasick is missing
        self.count = 0
        self.longest = 0  # the longest form's length (never less than the automaton's)

    def _rebuild(self) -> None:
        values = {**self.env, **self.configured}
        forms: set[str] = set()
        for value in values:
            forms.update(encoded_forms(value))
        self.count = len(values)
        self.automaton = self.pattern = None
        if forms and _ahocorasick is not None:
            automaton = _ahocorasick.Automaton()
            for form in forms:
                automaton.add_word(form, len(form))
            automaton.make_automaton()
            # Raised before the automaton is swapped in (and never lowered while one is in
            # use): a find() that reads the new automaton never reads a shorter reach.
            self.longest = max(self.longest, max(map(len, forms)))
            self.automaton = automaton
        elif forms:  # pragma: no cover - exercised only where pyahocorasick is missing
            ordered = sorted(forms, key=len, reverse=True)  # longest first: the whole form wins
            self.pattern = re.compile("|".join(re.escape(f) for f in ordered))
        # Strings remembered as clean may hold a value that is secret now.
        _clean.clear()

    def quick_check(self) -> None:
        """Notice a variable added or removed (one length test: this runs on every call)."""
        if len(_ENV_DATA) != self.env_len:
            self.refresh_env()

    def refresh_env(self, *, force: bool = False) -> None:
        """Read the environment's secrets again if it changed at all since the last look."""
        if not force and _ENV_DATA == self.env_seen:
            return  # one C-level dict comparison (~0.4 us for 40 variables)
        with self.lock:
            env = _env_secrets(os.environ, self.extra_env_names)
            self.env_seen = dict(_ENV_DATA)
            self.env_len = len(self.env_seen)
            if env != self.env:
                self.env = env
                self._rebuild()

    def configure(self, values: Iterable[str], env_names: Iterable[str]) -> None:
        with self.lock:
            for value in values:
                self.configured.setdefault(value, "config")
            self.extra_env_names.update(env_names)
        self.refresh_env(force=True)
        with self.lock:
            self._rebuild()

    def find(self, text: str) -> list[tuple[int, Finding]]:
        self.refresh_env()
        automaton, pattern = self.automaton, self.pattern
        if automaton is not None:
            # Read after the automaton: _rebuild raises it first, so it covers every form.
            reach = max(0, self.longest - 1)
            spans = [(end - length + 1, end + 1)
                     for end, length in _automaton_matches(automaton, text, reach)]
        elif pattern is not None:  # pragma: no cover - exercised only without pyahocorasick
            spans = [m.span() for m in pattern.finditer(text)]
        else:
            return []
        return [
            (KNOWN_PRIORITY, Finding(rule_id=KNOWN_SECRET_RULE, start=s, end=e)) for s, e in spans
        ]


# The mapping behind os.environ (CPython keeps it in ``_data``): its length and equality are
# C-level, so watching the environment costs ~30 ns per call and ~0.4 us per scanned string.
_ENV_DATA: Mapping[Any, Any] = getattr(os.environ, "_data", os.environ)
# Known secrets win the name of a merged span: they are certain, not guessed.
KNOWN_PRIORITY = -1
_known = _KnownSecrets()


def configure(settings: Mapping[str, Any]) -> None:
    """Register the secrets of the policy's configuration table (``[policy]``).

    ``secrets``: literal values to redact (at least 4 characters each); ``secret_env``: names of
    environment variables whose values are secrets whatever they are called. Both add to what
    is registered (several decks in one process redact the union). Raises ``ValueError`` for a
    malformed table.
    """
    values = settings.get("secrets", [])
    names = settings.get("secret_env", [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError("policy.secrets must be a list of strings")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("policy.secret_env must be a list of environment variable names")
    short = [v for v in values if len(v.strip()) < MIN_CONFIGURED_SECRET_LENGTH]
    if short:
        raise ValueError(
            f"policy.secrets: {len(short)} value(s) shorter than "
            f"{MIN_CONFIGURED_SECRET_LENGTH} characters would redact ordinary text"
        )
    _known.configure(values, names)


def settings_secrets(settings: Mapping[str, Any]) -> list[str]:
    """The credentials written in tooldeck's settings, outside the ``[policy]`` table.

    Other plugins' tables hold credentials too: an MCP server's ``env`` or ``headers``
    (``GITHUB_TOKEN``, ``Authorization = "Bearer ..."``), a search API's ``api_key``, a Redis or
    database URL with a password. A plugin or a tool that quotes them (a failed connection's
    message, a child process printing its environment) must not hand them out, whatever they
    look like. Taken: a string under a credential-like key (by :func:`secret_name`, or
    :func:`secret_env_name` for an upper-case key), and the password of any URL, with the same
    floor as the environment's values; placeholders (``${TOKEN}``, ``<token>``), paths and names
    of things (``snake_case``, dotted) are not secrets. The walk is bounded (depth and items):
    settings are small.
    """
    found: list[str] = []
    budget = [_SETTINGS_WALK_ITEMS]

    def take(key: str, value: str) -> None:
        url_password = _URL_PASSWORD_RE.match(value)
        if url_password is not None:
            for password in {url_password.group(1), urllib.parse.unquote(url_password.group(1))}:
                if not _trivial(password, MIN_CONFIGURED_SECRET_LENGTH):
                    found.append(password)
            return
        named = secret_name(key) or (key.isupper() and secret_env_name(key))
        stripped = value.strip()
        if not named or _trivial(stripped, MIN_ENV_SECRET_LENGTH) or not _credential_value(
            stripped, key, quoted=False, type_hint=False
        ):  # a mode (``auth = "oauth2_client"``), a reference or a placeholder is no secret
            return
        found.append(stripped)
        scheme, _, credential = stripped.partition(" ")
        if credential and scheme.isalpha() and not _trivial(credential, MIN_ENV_SECRET_LENGTH):
            found.append(credential.strip())  # "Bearer <token>": the token alone too

    def walk(key: str, value: Any, depth: int) -> None:
        budget[0] -= 1
        if budget[0] < 0 or depth > _SETTINGS_WALK_DEPTH:
            return
        if isinstance(value, str):
            take(key, value)
        elif isinstance(value, Mapping):
            for name, item in value.items():
                walk(str(name), item, depth + 1)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(key, item, depth + 1)  # a list of keys is named by its key

    for name, table in settings.items():
        if name != "policy":  # [policy] secrets are registered by configure(); secret_env
            walk(str(name), table, 0)  # lists variable names, which are not secrets
    return found


# Settings are a few tables: a walk stops at these bounds rather than trust their shape.
_SETTINGS_WALK_DEPTH = 16
_SETTINGS_WALK_ITEMS = 100_000


def add_known_secrets(*values: str) -> None:
    """Redact these exact values (and their encodings) from now on, process-wide."""
    configure({"secrets": list(values)})


def refresh_known_secrets() -> int:
    """Read the environment's secrets again now; returns how many values are known."""
    _known.refresh_env(force=True)
    return _known.count


# ---------------------------------------------------------------------------------------------
# Encoded text: base64 and hex runs, escapes, invisible characters
# ---------------------------------------------------------------------------------------------

# A secret in tool output need not be written plainly: ``base64 .env``, ``xxd -p``, a JSON
# encoder's ``\u0067``, a URL's ``%67``, a zero-width space inside a token. Such text is decoded
# and scanned again, down to this many levels (base64 of a percent-encoded line is two).
_DECODE_DEPTH = 2

# A base64 (either alphabet) or hex run: one line of 20+ characters, or lines of 40+ wrapped by
# ``base64`` (76), ``openssl`` (64), ``xxd -p`` (60) and a last, shorter line. Possessive: each
# part is read once, so the search is linear whatever the text.
_ENCODED_RUN_RE = _lazy_re(
    r"(?<![A-Za-z0-9+/_-])"  # at a run's start only: inside a word the search moves on at once
    r"(?:(?:[A-Za-z0-9+/_-]{40,}+\r?\n)++[A-Za-z0-9+/_-]*+={0,2}+|[A-Za-z0-9+/_-]{20,}+={0,2}+)"
)
_URLSAFE_TO_STANDARD = str.maketrans("-_", "+/")
_LINE_BREAKS = str.maketrans("", "", "\r\n")
# Decoded bytes shorter than this hold no secret worth a rule (and short runs are words).
_MIN_DECODED = 12
_CONTROL_RE = _lazy_re(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]")


def _decode_run(run: str) -> tuple[str, bytes] | None:
    """``("hex" | "base64", bytes)`` of one encoded run, or None when it decodes to nothing."""
    if _HEX_RE.match(run) and not len(run) & 1:
        return "hex", bytes.fromhex(run)
    run = run.rstrip("=")
    if len(run) % 4 == 1:
        run = run[:-1]  # a character too many for base64: a glued letter, not data
    try:
        data = binascii.a2b_base64(
            run.translate(_URLSAFE_TO_STANDARD) + "=" * (-len(run) % 4)
        )
    except binascii.Error:
        return None
    return "base64", data


#: Run characters a match of _ENCODED_RUN_RE needs after its start whatever its branch: the
#: 20 of a one-line run (a wrapped run's first line has 40, so its first 20 match that too).
_RUN_MIN = 20


def _encoded_run_matches(text: str) -> Iterator[re.Match[str]]:
    """``_ENCODED_RUN_RE.finditer(text)``, with the search for each run's start done slice
    by slice (:data:`_SLICE_CHARS`): a search that finds nothing read the whole text in one C
    call (~90 ms per MB, the look-behind defeats the engine's skipping).

    The same matches: a run starting at least :data:`_RUN_MIN` characters before a slice's
    end matches there whether or not the text goes on (the look-behind reads before the
    slice), so the first start found in that part of a slice is the first start in the whole
    text; the run is then matched on the whole text from that start."""
    rx = _ENCODED_RUN_RE
    n = len(text)
    pos = 0
    while pos < n:
        end = min(n, pos + _SLICE_CHARS)
        found = rx.search(text, pos, end)
        if found is not None and (end == n or found.start() <= end - _RUN_MIN):
            m = found if end == n else rx.match(text, found.start())
            if m is None:  # pragma: no cover - a start found in a slice matches in the text
                pos = found.start() + 1
                continue
            yield m
            pos = m.end()
        else:
            pos = end - _RUN_MIN + 1 if end < n else n


def _encoded_runs(text: str) -> Iterator[tuple[int, int, str, bytes]]:
    """``(start, end, kind, bytes)`` for each base64 or hex run of ``text`` (wrapped lines
    joined), decoded. Linear: every character is in at most one run."""
    for k, m in enumerate(_encoded_run_matches(text)):
        if not k & 255:
            _check_deadline()
        start, end = m.span()
        run = m.group()
        if "\n" not in run:
            decoded = _decode_run(run)
            if decoded is not None and len(decoded[1]) >= _MIN_DECODED:
                yield start, end, decoded[0], decoded[1]
            continue
        # Lines of one wrap width and one shorter last line are a blob; a line of another
        # width starts the next one. A blob whose first line was cut (``tail -c``, a
        # shortened message) is two: that line, then the whole lines after it, which start
        # where the encoder's lines did (64 and 76 are multiples of 4: still aligned). Only the
        # first blob used to be decoded, and the rest of the run, most of it, was never read.
        lines = run.split("\n")
        i, at = 0, start
        while i < len(lines):
            width = len(lines[i].rstrip("\r"))
            kept = i + 1
            while kept < len(lines) and len(lines[kept].rstrip("\r")) == width:
                kept += 1
            if kept < len(lines) and 0 < len(lines[kept].rstrip("\r")) < width:
                kept += 1
            block = "\n".join(lines[i:kept])
            joined = block.translate(_LINE_BREAKS)
            if len(joined) >= 20:
                decoded = _decode_run(joined)
                if decoded is not None and len(decoded[1]) >= _MIN_DECODED:
                    yield at, at + len(block), decoded[0], decoded[1]
            at += len(block) + 1
            i = kept


# Private key material in bytes with no PEM markers around it: what the base64 of a key body
# decodes to when the BEGIN and END lines were both cut off (``sed -n 5,20p id_rsa``, a middle
# part of a long message), or a DER/OpenSSH key file read as bytes. Random-looking base64 is not
# enough (a certificate is public, an image or a compressed file is as random), so the bytes
# must show a private key's structure:
# - DER INTEGERs one right after the other: two of 128+ bytes, or three of 64+ bytes: the
#   private numbers of an RSA key (d, p, q, dp, dq, qinv) or a DSA key (g, y). A certificate,
#   a CSR or a public key holds one big number (the modulus, then the short exponent), a
#   signature two of 32-66 bytes;
# - three of OpenSSH's mpints (a 4-byte length, then the number) of one length in a row (iqmp,
#   p, q: big-endian lengths are common in binary files, equal ones in a row are not);
# - OpenSSH's ``openssh-key-v1`` magic (the format holds private keys only), an Ed25519 or
#   ECDSA key's private half in it (the public key, then the length of the private one: in a
#   public key blob nothing follows the public key), an ECPrivateKey's scalar followed by its
#   [0] curve or [1] public key (a public key has neither tag), and a PKCS#8 X25519 / Ed25519
#   / X448 / Ed448 key (its OCTET STRING in an OCTET STRING).
# Each number must be positive, minimally encoded and random in its first 64 bytes: zeros,
# padding or a repeated pattern (images, sparse files) are not a key's numbers. In random bytes
# a false match is about 1 in 10^10 positions. Not recognized, for want of any structure:
# encrypted keys (their body is ciphertext), a PKCS#8 DSA key (its one secret number is short),
# and fewer lines than the numbers need (about 4 lines of 64 characters).
_DER_KEY_INT = _lazy_re(rb"\x02(?:[\x40-\x7f]|\x81[\x80-\xff]|\x82[\x01-\x3f][\x00-\xff])", re.S)
_SSH_KEY_MPINT = _lazy_re(rb"\x00\x00(?:\x00[\x40-\xff]|[\x01-\x07][\x00-\xff])", re.S)
_KEY_SIGNATURES = _lazy_re(
    rb"openssh-key-v1\x00\x00\x00\x00[\x04-\x20][a-z]"  # the magic, then a cipher's name
    rb"|ssh-ed25519\x00\x00\x00\x20.{32}\x00\x00\x00\x40"
    rb"|ecdsa-sha2-nistp(?:256|384|521)\x00\x00\x00\x08nistp(?:256|384|521)"
    rb"\x00\x00\x00(?:\x41\x04.{64}|\x61\x04.{96}|\x85\x04.{132})\x00\x00\x00[\x20-\x42]"
    rb"|\x04(?:\x20.{32}|\x30.{48}|\x42.{66})"
    rb"(?:\xa0[\x05-\x0c]\x06[\x03-\x0a]|\xa1[\x20-\x90]\x03[\x20-\x90]\x00\x04)"
    rb"|\x06\x03\x2b\x65[\x6e-\x71]\x04[\x22-\x3a]\x04[\x20-\x38]",
    re.S,
)
_KEY_NUMBER_MIN = 64


def _key_number(data: bytes, at: int, ssh: bool) -> tuple[int, int] | None:
    """``(content start, content end)`` of a positive key number of 64+ bytes (DER INTEGER, or
    SSH mpint when ``ssh``) whose header is at ``at``; None when there is none there. The end
    may lie past the data (a number cut off)."""
    if ssh:
        if at + 4 > len(data):
            return None
        length, head = int.from_bytes(data[at : at + 4], "big"), 4
        if not _KEY_NUMBER_MIN <= length < 2048:
            return None
    else:
        if at + 2 > len(data) or data[at] != 2:
            return None
        length, head = data[at + 1], 2
        if length == 0x81 and at + 3 <= len(data):
            length, head = data[at + 2], 3
        elif length == 0x82 and at + 4 <= len(data):
            length, head = int.from_bytes(data[at + 2 : at + 4], "big"), 4
        if length < _KEY_NUMBER_MIN or length >= 0x80 and head == 2:
            return None
        if (head == 3 and length < 0x80) or (head == 4 and length < 0x100):
            return None  # DER's lengths are minimal
    first = data[at + head : at + head + 64]
    if len(first) < 32 or first[0] >= 0x80 or (first[0] == 0 and first[1] < 0x80):
        return None  # not a positive, minimally encoded number (or too little of it is here)
    if len(set(first)) * 4 < len(first) * 3:
        # Not random: zeros, padding, a repeated pattern, machine code (64 random bytes hold
        # ~57 distinct values, x86 code ~30-45).
        return None
    return at + head, at + head + length


def _private_key_bytes(data: bytes) -> bool:
    """Whether ``data`` holds private key material (see ``_KEY_SIGNATURES`` above)."""
    if _KEY_SIGNATURES.search(data) is not None:
        return True
    for pattern, ssh in ((_DER_KEY_INT, False), (_SSH_KEY_MPINT, True)):
        for m in pattern.finditer(data):
            first = _key_number(data, m.start(), ssh)
            if first is None or first[1] >= len(data):
                continue
            second = _key_number(data, first[1], ssh)
            if second is None:
                continue
            sizes = first[1] - first[0], second[1] - second[0]
            if not ssh and min(sizes) >= 128:
                return True
            third = _key_number(data, second[1], ssh) if second[1] < len(data) else None
            if third is None:
                continue
            if not ssh:
                return True  # three DER numbers of 64+ bytes (RSA-1024: d, p, q...)
            # OpenSSH: iqmp, p and q, as long as one another (or d, twice as long, then iqmp
            # and p). Big-endian lengths in [64, 2048) are common in binary files (an ELF, a
            # PNG): two in a row are not rare enough.
            d, half, last = sizes[0], sizes[1], third[1] - third[0]
            if abs(half - last) <= 1 and (abs(d - half) <= 1 or abs(d - 2 * half) <= 2):
                return True
    return False


# Decoded bytes shorter than this hold no private key (a PKCS#8 Ed25519 key is 48 bytes).
_MIN_KEY_BYTES = 40


def _key_body_run(text: str, start: int, end: int, kind: str, data: bytes) -> bool:
    """Whether the encoded run ``text[start:end]`` (decoded: ``data``) is private key material.

    A run of lines whose width is not a multiple of 4 (OpenSSH's 70) is also read from its 2nd,
    3rd and 4th character: a body whose first lines were cut may start mid-group. (Lines of 64
    or 76 characters start on a group, and so does a one-line run: no second reading.)
    """
    if len(data) < _MIN_KEY_BYTES:
        return False
    if _private_key_bytes(data):
        return True
    if kind != "base64":
        return False
    block = text[start:end]
    first_break = block.find("\n")
    if first_break < 0 or not len(block[:first_break].rstrip("\r")) % 4:
        return False
    run = block.translate(_LINE_BREAKS)
    for skip in (1, 2, 3):
        shifted = _decode_run(run[skip:])
        if shifted is not None and _private_key_bytes(shifted[1]):
            return True
    return False


def _text_like(data: bytes) -> str | None:
    """``data`` as text when it reads as text (UTF-8, nearly no control characters), else None.

    Random tokens, digests and images decode to bytes that are not UTF-8 or full of control
    characters; the text of a ``.env`` file or a JSON document is neither.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        if text.count("\ufffd") * 20 > len(text):
            return None
    bad = 0
    for _ in _CONTROL_RE.finditer(text):
        bad += 1
        if bad * 20 > len(text):
            return None
    return text


# Escapes and invisible characters that a text shows in place of (or inside) a secret's own
# characters: percent-encoding, JSON/JavaScript/Python ``\uXXXX`` and ``\xXX``, an escaped
# slash, HTML character references, and format characters (zero-width spaces and joiners,
# soft hyphens, bidi controls, variation selectors) that render as nothing.
_INVISIBLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0"
)
_ESCAPE_RE = _lazy_re(
    # The leading class lets the engine skip ahead to a candidate (2.5x faster on plain text).
    "(?=[%\\\\&" + _INVISIBLE + "])"
    r"(?:%[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4}|\\x[0-9A-Fa-f]{2}|\\/"
    r"|&\#[0-9]{1,7};|&\#[xX][0-9A-Fa-f]{1,6};"
    "|[" + _INVISIBLE + "])"
)
# Text kept around escapes when a window is decoded: a rule needs the name before a secret
# (gitleaks looks up to 512 characters back) and the secret itself.
_ESCAPE_CONTEXT = 1024
# Between decoded texts scanned in one pass: no rule's match runs across a blank line but a
# private key's, and a finding across two texts counts in both.
_PART_SEPARATOR = "\n\n"


def _unescape(token: str) -> str:
    if token[0] == "%":
        return chr(int(token[1:], 16))
    if token[0] == "\\":
        return "/" if token[1] == "/" else chr(int(token[2:], 16))
    if token[0] == "&":
        code = int(token[3:-1], 16) if token[2] in "xX" else int(token[2:-1])
        return chr(code) if code <= 0x10FFFF else token
    return ""  # an invisible character


class _View:
    """A window of a text with its escapes decoded, and the way back to the text's offsets.

    Segment ``i`` starts at ``vstarts[i]`` in the view and ``ostarts[i]`` in the text; it is
    literal text (``olens[i] == -1``) or one escape of ``olens[i]`` characters (one character
    of the view, or none for an invisible character). Made only for a window that a finding
    falls in (see :func:`_unescaped_windows`).
    """

    __slots__ = ("olens", "ostarts", "vstarts")

    def __init__(self, text: str, spans: array.array[int], window: tuple[int, int, int, int]
                 ) -> None:
        # the escapes first..last-1 (spans[2 * k], spans[2 * k + 1]), in text[lo:hi]
        first, last, lo, hi = window
        self.vstarts: list[int] = []
        self.ostarts: list[int] = []
        self.olens: list[int] = []
        vstarts, ostarts, olens = self.vstarts, self.ostarts, self.olens
        cursor, vpos = lo, 0
        for k in range(2 * first, 2 * last, 2):
            s, e = spans[k], spans[k + 1]
            if s > cursor:
                vstarts.append(vpos)
                ostarts.append(cursor)
                olens.append(-1)
                vpos += s - cursor
            decoded = _unescape(text[s:e])
            vstarts.append(vpos)
            ostarts.append(s)
            # an out-of-range reference is kept as it is: literal text
            olens.append(e - s if len(decoded) <= 1 else -1)
            vpos += len(decoded)
            cursor = e
        if hi > cursor:
            vstarts.append(vpos)
            ostarts.append(cursor)
            olens.append(-1)

    def _at(self, i: int) -> tuple[int, int]:
        k = bisect.bisect_right(self.vstarts, i) - 1
        return k, self.ostarts[k] + (i - self.vstarts[k] if self.olens[k] < 0 else 0)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The span of the text that the view's ``[start, end)`` was decoded from."""
        _, lo = self._at(start)
        k, hi = self._at(end - 1)
        return lo, hi + (1 if self.olens[k] < 0 else self.olens[k])


#: The longest match of _ESCAPE_RE (``&#1234567;``, ``&#x10ffff;``), with room to spare.
_ESCAPE_MAX_CHARS = 16

_FLATTEN = itertools.chain.from_iterable
#: Offsets of flat spans (two per escape) whose pieces one join in a window puts together.
_JOIN_ESCAPES = 8192


def _escape_spans(text: str) -> array.array[int]:
    """The spans of ``_ESCAPE_RE.finditer(text)`` as one flat array of offsets (``start0, end0,
    start1, end1, ...``), read slice by slice (see :data:`_SLICE_CHARS`): 8 million zero-width
    spaces were 8 million matches in one C call.

    Flat machine integers, not a tuple per escape: a tuple is a container the garbage collector
    tracks, and with 8 million of them alive each of its full passes walked them all, holding
    the GIL (and every other session) ~0.15-0.6 s a pass; and a list of millions of int objects
    is freed in one C call too (~100 ms for a 5 MB output), an array in one ``free``.

    The same spans: each slice is searched up to :data:`_ESCAPE_MAX_CHARS` past its end, so a
    match that starts in it is whole, and the next slice starts where the whole text's search
    would go on (the slice's end, or the end of a match that crosses it)."""
    spans = array.array("q")
    n = len(text)
    pos = 0
    # A quarter of a slice: a slice of nothing but zero-width spaces is a match per character,
    # and each costs ~1-3 us in the one C call that collects them.
    step = max(1, _SLICE_CHARS // 4)
    while pos < n:
        end = min(n, pos + step)
        stop = min(n, end + _ESCAPE_MAX_CHARS)
        # Each span's tuple dies at once (freed, never collected): only the offsets stay.
        found = array.array("q", _FLATTEN(map(_MATCH_SPAN, _ESCAPE_RE.finditer(text, pos, stop))))
        while found and found[-2] >= end:
            del found[-2:]  # starts in the next slice: found again there
        spans += found
        pos = max(end, found[-1]) if found else end
    return spans


def _unescaped_windows(text: str) -> tuple[array.array[int], list[str], array.array[int]]:
    """The escapes of ``text`` (flat spans, see :func:`_escape_spans`) and the windows around
    them: each window's decoded text (``views``) and, four offsets a window in the flat
    ``bounds``, ``first, last, lo, hi``: the escapes ``first`` to ``last - 1`` in
    ``text[lo:hi]`` (a :class:`_View` maps the decoded text back).

    One pass of the escape pattern; every character is in at most one window, so the windows
    together are no longer than the text. An escape joins the window of the one before it when
    it is on the same line (as the window's first escape) and at most ``2 * _ESCAPE_CONTEXT``
    characters after it. A window is the lines its escapes are on, at most ``_ESCAPE_CONTEXT``
    characters on either side: escapes hold no line break, so what they hide is on their line
    (and the plain scan saw the rest). No object per window but its text: a line per escape
    (``\u200b\n`` repeated) makes 500,000 windows per MB, and an object with lists per window
    cost 3-5 us each, tuples ~1 us each and ~0.5 s of GIL per full pass of the garbage
    collector over them (see :func:`_escape_spans`).
    """
    spans = _escape_spans(text)
    views: list[str] = []
    bounds = array.array("q")
    count, gap, context = len(spans), 2 * _ESCAPE_CONTEXT, _ESCAPE_CONTEXT
    unescape = _unescape_cached
    find, rfind = text.find, text.rfind
    size = len(text)
    add_view, add_bounds = views.append, bounds.extend
    i = 0  # offset of a span's start in the flat list (two per escape)
    while i < count:
        if not i & 2047:
            _check_deadline()
        start = spans[i]
        end = spans[i + 1]
        line_end = find("\n", end)
        if line_end == -1:
            line_end = size
        j = i + 2
        while j < count:
            s = spans[j]
            if s - end > gap or s > line_end:
                break
            end = spans[j + 1]
            j += 2
        floor = start - context if start > context else 0
        lo = rfind("\n", floor, start) + 1 or floor
        hi = end + context
        if hi > line_end:
            hi = line_end
        if j - i == 2:
            add_view(text[lo:start] + unescape(text[start:end]) + text[end:hi])
        else:
            # Joined a few thousand pieces at a time: one join of a line of 8 million escapes
            # was one C call holding the GIL ~60 ms.
            chunks: list[str] = []
            cursor = lo
            for at in range(i, j, _JOIN_ESCAPES):
                pieces: list[str] = []
                add = pieces.append
                for k in range(at, min(j, at + _JOIN_ESCAPES), 2):
                    s = spans[k]
                    e = spans[k + 1]
                    add(text[cursor:s])
                    add(unescape(text[s:e]))
                    cursor = e
                chunks.append("".join(pieces))
            chunks.append(text[cursor:hi])
            add_view(chunks[0] + chunks[1] if len(chunks) == 2 else "".join(chunks))
        add_bounds((i >> 1, j >> 1, lo, hi))
        i = j
    return spans, views, bounds


def _release(items: list[Any]) -> None:
    """Empty ``items`` a slice at a time: a list of a million texts (a window per line) freed
    when it goes out of scope is one C call of ~40 ms that never lets go of the GIL."""
    while items:
        del items[-_RELEASE_ITEMS:]


_RELEASE_ITEMS = 65_536

_UNESCAPED: dict[str, str] = {}


def _unescape_cached(token: str) -> str:
    """:func:`_unescape`, remembered (texts repeat a few escapes: ``%20``, ``\u200b``)."""
    decoded = _UNESCAPED.get(token)
    if decoded is None:
        if len(_UNESCAPED) >= 4096:
            _UNESCAPED.clear()
        decoded = _UNESCAPED[token] = _unescape(token)
    return decoded


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end == -1 else end


# ---------------------------------------------------------------------------------------------
# The redactor
# ---------------------------------------------------------------------------------------------


class _Redactor:
    def __init__(self, document: Mapping[str, Any]) -> None:
        global_allowlist = _Allowlist.load(document.get("global_allowlist", {}))
        self.rules: list[_Rule] = [
            _GitleaksRule(raw, global_allowlist, 50 if raw["id"].startswith("generic") else 10)
            for raw in document["rules"]
        ]
        self.rules.extend(_own_rules())
        self.keywords = sorted({k for rule in self.rules for k in rule.keywords})
        index = {k: i for i, k in enumerate(self.keywords)}
        self.rule_keywords = [[index[k] for k in rule.keywords] for rule in self.rules]
        # keyword -> rules that list it, so that a text only pays for the rules it can trigger
        self.keyword_rules: list[list[int]] = [[] for _ in self.keywords]
        for r, kw_ids in enumerate(self.rule_keywords):
            for i in kw_ids:
                self.keyword_rules[i].append(r)
        self.always = [r for r, kw_ids in enumerate(self.rule_keywords) if not kw_ids]
        self.priorities: dict[str, float] = {KNOWN_SECRET_RULE: KNOWN_PRIORITY}
        for rule in self.rules:
            self.priorities[rule.id] = min(rule.priority, self.priorities.get(rule.id, 100))
        self.automaton: Any = None
        self.longest_keyword = max(map(len, self.keywords), default=1)
        if _ahocorasick is not None:
            automaton = _ahocorasick.Automaton()
            for i, keyword in enumerate(self.keywords):
                automaton.add_word(keyword, (i, len(keyword)))
            automaton.make_automaton()
            self.automaton = automaton

    def _occurrences(self, lowered: str) -> dict[int, list[int]]:
        """Keyword index -> start positions of its occurrences in ``lowered``."""
        found: dict[int, list[int]] = {}
        if self.automaton is not None:
            matches = _automaton_matches(self.automaton, lowered, self.longest_keyword - 1)
            for end, (i, length) in matches:
                found.setdefault(i, []).append(end - length + 1)
            return found
        for i, keyword in enumerate(self.keywords):
            p = lowered.find(keyword)
            while p != -1:
                found.setdefault(i, []).append(p)
                p = lowered.find(keyword, p + 1)
        return found

    def find(self, text: str, depth: int = 0) -> list[Finding]:
        if not text:
            return []
        lowered = _lowered(text)
        occurrences = self._occurrences(lowered)
        findings: list[tuple[float, Finding]] = []
        # gitleaks' prefilter: a rule runs only when one of its keywords is in the text.
        candidates = {r for i in occurrences for r in self.keyword_rules[i]}
        for r in sorted(candidates) + self.always:
            _check_deadline()
            rule = self.rules[r]
            lists = [occurrences[i] for i in self.rule_keywords[r] if i in occurrences]
            if not lists:
                positions: list[int] = []
            elif len(lists) == 1:
                positions = lists[0]
            else:
                positions = sorted(set().union(*lists))
            findings.extend((rule.priority, f) for f in rule.scan(text, positions))
        findings.extend(_known.find(text))
        if depth < _DECODE_DEPTH:
            findings.extend(self._decoded_findings(text, depth))
        if not findings:
            return []
        return self._merge(text, findings)

    def _decoded_findings(self, text: str, depth: int) -> list[tuple[float, Finding]]:
        """Secrets that only show once part of ``text`` is decoded, as spans of ``text``.

        A base64 or hex run that decodes to text holding a secret is replaced whole (a blob
        cannot be edited in part), named ``base64:<rule>`` / ``hex:<rule>``; a secret written
        with escapes or split by invisible characters is replaced exactly, under its rule's
        name. The decoded texts are scanned together, in one pass of the rules joined by blank
        lines (one call per text cost ~50 us each: 4,000 base64 lines in a megabyte), and
        decoded again themselves down to ``_DECODE_DEPTH``.
        """
        parts: list[str] = []
        offsets = array.array("q")
        # The encoded runs' (start, end, kind), parts[:len(runs)]; the escapes' windows follow.
        runs: list[tuple[int, int, str]] = []
        found: list[tuple[float, Finding]] = []
        at = 0
        separator = len(_PART_SEPARATOR)
        for start, end, kind, data in _encoded_runs(text):
            decoded = _text_like(data)
            if decoded is None:
                # Binary (an image, a random token): no text rule reads it. A private key's
                # body, its BEGIN and END lines both cut off, is recognized by its structure.
                if _key_body_run(text, start, end, kind, data):
                    found.append((self.priority("private-key"),
                                  Finding(rule_id="private-key", start=start, end=end)))
                continue
            parts.append(decoded)
            offsets.append(at)
            runs.append((start, end, kind))
            at += len(decoded) + separator
        spans, windows, bounds = _unescaped_windows(text)
        first_window = len(parts)
        add_offset = offsets.append
        for window_text in windows:
            add_offset(at)
            at += len(window_text) + separator
        parts += windows
        if not parts:
            return found
        joined = _PART_SEPARATOR.join(parts)
        inner: dict[int, list[Finding]] = {}
        views: dict[int, _View] = {}
        for f in self.find(joined, depth + 1):
            first = bisect.bisect_right(offsets, f.start) - 1
            last = bisect.bisect_right(offsets, f.end - 1) - 1
            for k in range(first, last + 1):  # (a finding across parts counts in each)
                if k >= first_window:  # an escapes' window
                    size = len(parts[k])
                    lo = max(0, f.start - offsets[k])
                    hi = min(size, f.end - offsets[k])
                    if lo >= hi:
                        continue
                    view = views.get(k)
                    if view is None:
                        w = 4 * (k - first_window)
                        window = (bounds[w], bounds[w + 1], bounds[w + 2], bounds[w + 3])
                        view = views[k] = _View(text, spans, window)
                    start, end = view.span(lo, hi)
                    found.append(
                        (self.priority(f.rule_id), attrs.evolve(f, start=start, end=end))
                    )
                else:
                    inner.setdefault(k, []).append(f)
        for k, findings in inner.items():
            start, end, kind = runs[k]
            found.append(self._whole(start, end, kind, findings))
        _release(parts)
        _release(windows)
        return found

    def _whole(
        self, start: int, end: int, kind: str, inner: list[Finding]
    ) -> tuple[float, Finding]:
        """One finding over a whole encoded run, named after the most specific inner rule.

        Half a step behind that rule: a known secret's own encoded form found in the same
        run keeps its plain name (``known-secret``)."""
        rule = self.most_specific(inner)
        return self.priority(rule) + 0.5, Finding(rule_id=f"{kind}:{rule}", start=start, end=end)

    def most_specific(self, findings: list[Finding]) -> str:
        """The rule id of the most specific of ``findings``, without a decoding prefix (base64
        inside base64 is still base64)."""
        best = min(findings, key=lambda f: self.priority(f.rule_id))
        return best.rule_id.split(":", 1)[-1]

    def priority(self, rule_id: str) -> float:
        """The merge priority of a rule id (lower wins); decoded ids rank after their rule."""
        if rule_id in self.priorities:
            return self.priorities[rule_id]
        _, _, inner = rule_id.partition(":")
        return self.priorities.get(inner, 100) + 0.5

    @staticmethod
    def _merge(text: str, findings: list[tuple[float, Finding]]) -> list[Finding]:
        # Overlapping findings become one span, named after the most specific rule among them.
        findings.sort(key=lambda pf: (pf[1].start, -pf[1].end))
        merged: list[list[Any]] = []  # [start, end, priority, rule_id]
        for priority, f in findings:
            if merged and f.start < merged[-1][1]:
                last = merged[-1]
                last[1] = max(last[1], f.end)
                if priority < last[2]:
                    last[2], last[3] = priority, f.rule_id
                continue
            merged.append([f.start, f.end, priority, f.rule_id])
        result = []
        # No inline marker (``gitleaks:allow``, ``pragma: allowlist secret``, ``nosec``...) is
        # honoured: in source files they are the author's word, in tool output they are the
        # data's, and a command can append them to every line.
        for start, end, _priority, rule_id in merged:
            if end - start <= _REDACTED_MAX and _REDACTED_RE.fullmatch(text, start, end):
                continue
            result.append(Finding(rule_id=rule_id, start=start, end=end))
        return result


@functools.cache
def _redactor() -> _Redactor:
    source = resources.files("tooldeck_policy").joinpath("rules", "gitleaks_rules.json")
    return _Redactor(json.loads(source.read_text(encoding="utf-8")))


def rule_ids() -> list[str]:
    """Ids of every rule that can appear in a redaction marker."""
    return [*(rule.id for rule in _redactor().rules), KNOWN_SECRET_RULE]


def find_secrets(text: str) -> list[Finding]:
    """The secrets in ``text``, in order, overlapping findings merged (what gets redacted)."""
    _known.quick_check()
    return _redactor().find(text)


# Short strings found clean, remembered: results repeat the same short values (a status, a
# file name, a mode) call after call, and a set lookup is ~100x cheaper than the rule scan.
# Only clean strings are kept, so no secret lingers here; the set is emptied when full.
_CLEAN_MAX_LENGTH = 256
_CLEAN_MAX_ENTRIES = 8192
_clean: set[str] = set()


def redact_text(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<rule-id>]``.

    Raises TypeError for anything but a string (use :func:`redact_value` for bytes and
    structures).
    """
    if not isinstance(text, str):
        raise TypeError(f"redact_text() takes a string, not {type(text).__name__}; "
                        "use redact_value() for bytes and structures")
    _known.quick_check()
    return _redact_text(text)


def _redact_text(text: str) -> str:
    short = len(text) <= _CLEAN_MAX_LENGTH
    if short and text in _clean:
        return text
    findings = _redactor().find(text)
    if not findings:
        if short:
            if len(_clean) >= _CLEAN_MAX_ENTRIES:
                _clean.clear()
            _clean.add(text)
        return text
    parts, cursor = [], 0
    for f in findings:
        start, end = f.start, f.end
        if end - start > 2 and text[start] in "\"'" and text[end - 1] == text[start]:
            # A rule whose secret takes its quotes along (hashicorp-tf-password's
            # '"[^"]*"'): the quotes stay, so redacted JSON or code still parses.
            start, end = start + 1, end - 1
        parts.append(text[cursor:start])
        parts.append(REDACTION_FORMAT.format(rule=f.rule_id))
        cursor = end
    parts.append(text[cursor:])
    return "".join(parts)


_KEYWORD_MARKER = REDACTION_FORMAT.format(rule="keyword-assignment")


def _redact_string(value: str) -> str:
    stripped = value.strip()
    if len(stripped) >= 2 and stripped[0] in "{[" and stripped[-1] in "}]" and '\\"' in stripped:
        # JSON nested in a JSON string: its escaped quotes hide the structure from the text
        # rules, so redact it as a structure and serialize it again (only when something
        # changed). Plain JSON text is left to the text rules, which read `"key": "value"`.
        try:
            parsed = json.loads(stripped)
            redacted = _redact_value(parsed)
            if redacted is not parsed:
                return json.dumps(redacted, ensure_ascii=False)
        except ValueError:
            pass
        except RecursionError:
            # Nested deeper than the stack allows ("[" * 500 in a 1 KB output): the text
            # rules read it as they read any other text, rather than the result being lost.
            pass
    return _redact_text(value)


# Where a structured result carries bytes as base64 (tooldeck_hookspecs.content blocks, and
# the deck's JSON form of a bytes value): content kind (or None) -> the field.
_BLOB_FIELDS = {"image": "data", "audio": "data", "resource": "blob"}
_BYTES_KEY = "$bytes_base64"


def _blob_secret(blob: str) -> str | None:
    """The rule that finds a secret in the bytes of base64 ``blob`` (any bytes: text or not),
    or None. The blob is decoded whole, at any size: its work is linear."""
    decoded = _decode_run(blob.translate(_LINE_BREAKS).strip())
    if decoded is None:
        return None
    redactor = _redactor()
    text = _text_like(decoded[1])
    if text is None and _private_key_bytes(decoded[1]):
        return "base64:private-key"  # a DER or OpenSSH key file's bytes
    if text is None:
        # Bytes that are not text (an image, a database page): scanned one character per byte
        # for plain-text secrets, not decoded further (a byte 0xAD would read as a soft hyphen).
        findings = redactor.find(decoded[1].decode("latin-1"), _DECODE_DEPTH)
    else:
        findings = redactor.find(text, 1)
    return f"base64:{redactor.most_specific(findings)}" if findings else None


# String fields that an ``"encoding": "base64"`` beside them declares to be bytes.
_DECLARED_BLOB_KEYS = frozenset({"content", "data", "blob", "body", "text", "output"})


def _blob_note(rule: str, what: str) -> str:
    return (f"{REDACTION_FORMAT.format(rule=rule)} (base64 {what} content withheld: "
            "its bytes hold a secret)")


def _withheld_blob(value: Mapping[Any, Any], rule: str) -> Any:
    """What replaces a content block or bytes value whose bytes hold a secret: the bytes
    cannot be edited in part, so the whole blob goes, and the marker says why."""
    kind = value.get("$content")
    note = _blob_note(rule, f"{kind} ({value.get('mimeType')})" if kind else "bytes")
    if kind == "resource" and isinstance(value.get("uri"), str):
        # Still a resource block (a client expects one), now with the note as its text.
        return {"$content": "resource", "uri": _redact_text(value["uri"]),
                "mimeType": "text/plain", "text": note}
    return note


#: A mapping with more fields than this is a record, not a name/value pair.
_PAIR_MAX_FIELDS = 6
#: Fields that name a setting, and fields that hold its value, in name/value pairs.
_PAIR_NAME_FIELDS = frozenset({"name", "key", "parameterkey", "header", "variable", "field",
                               "label", "id"})
_PAIR_VALUE_FIELDS = frozenset({"value", "parametervalue", "val", "secret"})


def _named_pair(mapping: Mapping[Any, Any]) -> tuple[str, Any] | None:
    """(the credential name, the value's field) when ``mapping`` is a name/value pair whose
    name is a credential's; None otherwise."""
    name: str | None = None
    field: Any = None
    for key, item in mapping.items():
        if type(key) is not str:
            continue
        low = key.lower()
        if low in _PAIR_NAME_FIELDS and isinstance(item, str):
            name = item
        elif low in _PAIR_VALUE_FIELDS:
            field = key
    if name is None or field is None or not secret_name(name):
        return None
    return name, field


def _under_credential_name(item: Any, name: str) -> Any:
    """What a value named ``name`` (a credential's name) becomes: ``item`` itself when it does
    not look like a real value. A list of values, bytes and a ``{"value": ...}`` wrapper are
    read too: only a string directly under the name was."""
    if isinstance(item, str):
        if _credential_value(item.strip(), name, quoted=True, type_hint=False):
            return _KEYWORD_MARKER
        return item
    if isinstance(item, bytes | bytearray):
        text = bytes(item).decode("utf-8", "replace")
        if _credential_value(text.strip(), name, quoted=True, type_hint=False):
            return type(item)(_KEYWORD_MARKER.encode())
        return item
    if isinstance(item, list | tuple):
        items = [_under_credential_name(x, name) for x in item]
        if all(new is old for new, old in zip(items, item, strict=True)):
            return item
        return items if isinstance(item, list) else tuple(items)
    if isinstance(item, Mapping) and len(item) <= _PAIR_MAX_FIELDS:
        changed = {k: _under_credential_name(v, name) for k, v in item.items()
                   if type(k) is str and k.lower() in _PAIR_VALUE_FIELDS}
        changed = {k: v for k, v in changed.items() if v is not item[k]}
        return {**item, **changed} if changed else item
    return item


def _redact_mapping(value: Mapping[Any, Any]) -> Any:
    field: str | None = None
    if "$content" in value:
        field = _BLOB_FIELDS.get(str(value["$content"]))
    elif _BYTES_KEY in value and len(value) == 1:
        field = _BYTES_KEY
    if field is not None and isinstance(value.get(field), str):
        # Base64 bytes (an image, a clip, a resource's blob, a bytes value): text rules on the
        # base64 would only corrupt it and see nothing. Its bytes are decoded and scanned; the
        # other fields are checked as text.
        blob = value[field]
        rule = _blob_secret(blob)
        if rule is not None:
            return _withheld_blob(value, rule)
        rest = _redact_mapping({k: v for k, v in value.items() if k != field})
        return value if all(rest.get(k) is v for k, v in value.items() if k != field) \
            else {**rest, field: blob}
    out: dict[Any, Any] | None = None  # a copy, made at the first change only
    for key, item in value.items():
        kind = type(item)
        if kind in _PLAIN:
            continue  # numbers, flags and None: nothing to redact, and no call to find that out
        if kind is str and len(item) >= _MIN_DECODED and type(key) is str and (
            value.get(f"{key}_encoding") == "base64"
            or (key in _DECLARED_BLOB_KEYS and value.get("encoding") == "base64")
        ):
            # Bytes a tool declares base64 ({"content": ..., "encoding": "base64"} from
            # file_read, {"stdout": ..., "stdout_encoding": "base64"} from shell_exec): scanned
            # as bytes, text or not, and withheld whole; the encoding then says so.
            rule = _blob_secret(item)
            if rule is None:
                continue
            if out is None:
                out = dict(value)
            out[key] = _blob_note(rule, "bytes")
            sibling = f"{key}_encoding" if f"{key}_encoding" in value else "encoding"
            out[sibling] = "redacted"
            continue
        if kind is str and len(item) <= _CLEAN_MAX_LENGTH and item in _clean:
            new = item  # redact_value's first test, without the call
        else:
            new = _redact_value(item)
        # {"password": "hunter2"}: the name is in the key, out of the text rules' sight.
        if new is item and isinstance(key, str) and secret_name(key):
            new = _under_credential_name(item, key)
        if new is not item:
            if out is None:
                out = dict(value)
            out[key] = new
    # {"name": "DB_PASSWORD", "value": "..."}: the name is in a sibling field (Kubernetes env,
    # HAR headers, CloudFormation parameters, {"key": "api_key", "value": ...}).
    if len(value) <= _PAIR_MAX_FIELDS:
        named = _named_pair(value)
        if named is not None:
            name, field = named
            item = (out if out is not None else value)[field]
            if item is value[field]:
                new = _under_credential_name(item, name)
                if new is not item:
                    if out is None:
                        out = dict(value)
                    out[field] = new
    # Keys are text too ({token: "ok"} from a tool that maps values to names).
    current = out if out is not None else value
    renamed: dict[Any, Any] = {}
    for key in current:
        if type(key) is str and not (len(key) <= _CLEAN_MAX_LENGTH and key in _clean):
            new_key = _redact_text(key)
            if new_key != key:
                renamed[key] = new_key
    if renamed:
        rebuilt: dict[Any, Any] = {}
        for key, item in current.items():
            new_key = renamed.get(key, key)
            while new_key in rebuilt:  # two secrets redacted to one marker stay two entries
                new_key += "'"
            rebuilt[new_key] = item
        return rebuilt
    return value if out is None else out


# Types with no text inside: returned as they are without a look (most tool output is these).
_PLAIN = frozenset({int, float, bool, type(None)})


def redact_value(value: Any) -> Any:
    """``value`` with secrets redacted in every string, recursively.

    Walks dicts (and other mappings; keys too), lists, tuples and sets; bytes are redacted as
    UTF-8 text; a string that is a JSON document is parsed, redacted and serialized again. A
    string value under a credential-like key (``"password"``, ``"api_key"``, ...) is replaced
    whole. Returns ``value`` itself (the same
    object) when nothing changed, so callers can test for changes with ``is``.
    """
    _known.quick_check()
    return _redact_value(value)


def _redact_value(value: Any) -> Any:
    if type(value) in _PLAIN:
        return value
    if isinstance(value, str):
        if len(value) <= _CLEAN_MAX_LENGTH and value in _clean:
            return value
        redacted = _redact_string(value)
        return value if redacted == value else redacted
    if type(value) is dict or isinstance(value, Mapping):  # the exact type first: no ABC check
        return _redact_mapping(value)
    if isinstance(value, list | tuple):
        if (
            len(value) == 2
            and type(value[0]) is str
            and type(value[1]) is str
            and len(value[0]) <= 64
            and not value[0].islower()
            and secret_name(value[0])
            and not secret_name(value[1])
        ):
            # ("Authorization", "Bearer ..."), ("DB_PASSWORD", ...): a header list's or an
            # environment's pair, the name beside the value. Written like a header or a
            # variable only: ["password", "username"] is a list of two field names.
            second = _under_credential_name(_redact_value(value[1]), value[0])
            if second is value[1]:
                return value
            return [value[0], second] if isinstance(value, list) else (value[0], second)
        items = [_redact_value(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        if isinstance(value, tuple):
            # a named tuple is rebuilt from its fields, a plain one from the sequence; a
            # subclass whose constructor takes other arguments becomes a plain tuple
            try:
                return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
            except Exception:
                return tuple(items)
        return items
    if isinstance(value, set | frozenset):
        members = [(_redact_value(item), item) for item in value]
        if all(new is old for new, old in members):
            return value
        return type(value)(new for new, _ in members)
    if isinstance(value, bytes | bytearray):
        # Raw output (a subprocess's stdout): redacted as text, kept as bytes.
        text = bytes(value).decode("utf-8", "surrogateescape")
        redacted = _redact_string(text)
        if redacted == text:
            return value
        return type(value)(redacted.encode("utf-8", "surrogateescape"))
    return value


class RedactionTimeout(TimeoutError):
    """Redaction of a result ran past the deadline given to :func:`redact_result`."""


# The deadline (time.monotonic) of the redaction running in this thread/context, if any.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "tooldeck_policy_redact_deadline", default=None
)

#: Results holding more text than this (characters) are worth redacting off the event loop.
#: The cost of a character is not fixed: text dense in keywords and near-matches (``api_key=``
#: repeated, quoted tokens, ``aws_secret=...`` findings) costs 1-3 s per MB, so 64 KiB inline
#: held the event loop, and every session on it, for 100-200 ms per call. 16 KiB bounds that
#: to a few tens of ms (the core and the MCP server redact their own texts inline up to the
#: same size).
OFFLOAD_CHARS = 16 * 1024
# ... or more strings than this (each costs a scan: up to ~40 us for a short one dense in
# keywords) ...
_OFFLOAD_STRINGS = 512
# ... or more items of containers than this: a result of 333,000 empty lists (1 MB of JSON,
# under the output cap) holds no text at all, and its walk took 0.5 s on the event loop.
_OFFLOAD_ITEMS = 4096


def result_size(result: ToolResult, limit: int | None = None) -> int:
    """Characters of text in ``result`` (data, metadata, error), counting stops past ``limit``.

    A cheap estimate of redaction work: a walk over the containers, no scan of the text.
    """
    total = 0
    strings = 0
    items = 0
    stack: list[Any] = [result.data, result.metadata]
    if result.error is not None:
        stack.extend((result.error.message, result.error.suggestion, result.error.details))
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in _PLAIN:
            continue
        if isinstance(item, str):
            total += len(item)
            strings += 1
            if strings > _OFFLOAD_STRINGS:
                total += OFFLOAD_CHARS + 1  # many small strings cost like one big one
                strings = 0
        elif isinstance(item, Mapping | list | tuple | set | frozenset):
            # Many items cost like much text, strings or not (numbers, empty containers): each
            # is a step of the walk. Counted before the items are pushed, so that deciding
            # costs little whatever the container's size.
            items += len(item) + 1
            if items > _OFFLOAD_ITEMS:
                total += OFFLOAD_CHARS + 1
                items = 0
            if limit is not None and total > limit:
                return total
            if isinstance(item, Mapping):
                stack.extend(item.values())
                stack.extend(k for k in item if isinstance(k, str))
            else:
                stack.extend(item)
        elif isinstance(item, bytes | bytearray):
            total += len(item)
        if limit is not None and total > limit:
            return total
    return total


def needs_offload(result: ToolResult) -> bool:
    """Whether redacting ``result`` is long enough to run in a worker thread.

    The policy's ``tooldeck_process_result`` carries this predicate as its ``tooldeck_offload``
    attribute, so that the core can call the hook through ``trio.to_thread.run_sync`` for big
    results and inline for the rest.
    """
    data = result.data
    if result.error is None and (type(data) in _PLAIN or (
        type(data) is str and len(data) <= _SMALL_DATA_CHARS
    )):
        # The common small result: a scalar or a short text with a little metadata. Only the
        # metadata's strings could add up, and they are few: count them without the full walk.
        metadata = result.metadata
        if not metadata:
            return type(data) is str and len(data) > OFFLOAD_CHARS
        small = 0
        # Keys are redacted too (a 1 MB key was not counted), and many entries cost like
        # many strings whatever their size.
        for key, value in metadata.items() if len(metadata) <= _OFFLOAD_STRINGS else ():
            kind = type(value)
            if type(key) is str:
                small += len(key)
            if kind is str:
                small += len(value)
            elif kind not in _PLAIN:
                break
        else:
            if len(metadata) > _OFFLOAD_STRINGS:
                return True
            return len(data) + small > OFFLOAD_CHARS if type(data) is str else (
                small > OFFLOAD_CHARS
            )
    return result_size(result, OFFLOAD_CHARS) > OFFLOAD_CHARS


# A result whose data is a text up to this size skips result_size's walk (see needs_offload).
_SMALL_DATA_CHARS = OFFLOAD_CHARS // 2


def redact_result(result: ToolResult, *, deadline: float | None = None) -> ToolResult | None:
    """``result`` with secrets redacted in its data, error and metadata; None when it has none.

    Meant for ``tooldeck_process_result``: returning None keeps the hook chain cheap. Linear in
    the size of the result; safe to call from a worker thread. ``deadline`` is a
    ``time.monotonic()`` instant (default: the contract's ``call_deadline()``, which the core
    sets for offloaded redaction): past it, :class:`RedactionTimeout` is raised (checked between
    rules and strings) and nothing is returned, so an unredacted result never escapes.
    """
    _known.quick_check()
    if result.error is None and type(result.data) in _PLAIN:
        # The common small result (a number, a flag, None) with metadata of numbers and
        # already-seen clean words: nothing to redact, decided without the walk's calls.
        for key, value in result.metadata.items():
            kind = type(value)
            if kind in _PLAIN and type(key) is str and (
                len(key) <= _CLEAN_MAX_LENGTH and key in _clean
            ):
                continue  # a key is text too: {"ghp_...": 1} went out as it was
            if (kind is not str or len(value) > _CLEAN_MAX_LENGTH or value not in _clean
                    or type(key) is not str or secret_name(key)):  # (lru-cached: no frame)
                break
        else:
            return None
    if deadline is None:
        # The core sets the call's deadline when it redacts a big result in a worker thread:
        # once the core stopped waiting, further work would only burn a core.
        deadline = CALL_DEADLINE.get()  # call_deadline(), without the call (hot path)
    if deadline is None:
        return _redact_result(result)
    token = _DEADLINE.set(deadline)
    try:
        return _redact_result(result)
    finally:
        _DEADLINE.reset(token)


def _redact_field(value: Any) -> Any:
    """A message-like field: ``value`` itself when nothing changed."""
    if isinstance(value, str):
        redacted = _redact_text(value)
        return value if redacted == value else redacted
    if isinstance(value, BaseException):
        value = str(value)
        return _redact_text(value)
    return _redact_value(value)


def _redact_result(result: ToolResult) -> ToolResult | None:
    changes: dict[str, Any] = {}
    data = _redact_value(result.data)
    if data is not result.data:
        changes["data"] = data
    metadata = _redact_value(result.metadata)
    if metadata is not result.metadata:
        changes["metadata"] = metadata
    error = result.error
    if error is not None:
        error_changes: dict[str, Any] = {}
        # A tool's own ToolError may carry anything as its message: text is redacted as
        # text, anything else as a value (bytes, an exception's args are not text).
        message = _redact_field(error.message)
        if message is not error.message:
            error_changes["message"] = message
        if error.suggestion:
            suggestion = _redact_field(error.suggestion)
            if suggestion is not error.suggestion:
                error_changes["suggestion"] = suggestion
        details = _redact_value(error.details)
        if details is not error.details:
            error_changes["details"] = details
        if error_changes:
            changes["error"] = attrs.evolve(error, **error_changes)
    if not changes:
        return None
    return attrs.evolve(result, **changes)


# ---------------------------------------------------------------------------------------------
# Logs
# ---------------------------------------------------------------------------------------------

#: Loggers whose records are redacted by :func:`install_log_redaction` (name prefix).
LOGGER_PREFIX = "tooldeck"


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """Redact one log record in place: its message, its traceback and its stack; returns it.

    A message, traceback or stack longer than :data:`LOG_TEXT_CAP` is cut to it first (the text
    says how much was cut), so that a record costs bounded time whatever it holds.

    The message is formatted (``getMessage``) once; when it holds no secret the record keeps its
    ``msg`` and ``args`` so that handlers still see the lazy form. When it does, ``msg`` becomes
    the redacted text and ``args`` empty. A traceback is rendered with the standard formatter
    and redacted into ``exc_text``; when it held a secret, ``exc_info`` is dropped too, so that
    no other formatter renders the raw exception again.

    Attributes added with ``extra=`` (structured handlers, such as JSON logs, write them out as
    they are) are redacted too: text and containers of it, each bounded like the message.
    """
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: logging reports it at emit time, as usual
        message = None
    if message is not None:
        redacted = _redact_log_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        traceback_text = _TRACEBACK_FORMATTER.formatException(record.exc_info)
        redacted = _redact_log_text(traceback_text)
        record.exc_text = redacted
        if redacted != traceback_text:
            record.exc_info = None
    elif record.exc_text:
        record.exc_text = _redact_log_text(record.exc_text)
    if record.stack_info:
        record.stack_info = _redact_log_text(record.stack_info)
    _redact_extras(record)
    return record


def _redact_extras(record: logging.LogRecord) -> None:
    """Redact, in place, the attributes ``extra=`` added to ``record``."""
    extras = record.__dict__.keys() - _RECORD_ATTRIBUTES
    for name in extras:
        value = record.__dict__[name]
        redacted = _redact_log_extra(value)
        if redacted is not value:
            record.__dict__[name] = redacted


# What every LogRecord has (and what formatters add); anything else came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message", "asctime", "taskName",
}


def _redact_log_extra(value: Any) -> Any:
    """One ``extra=`` attribute of a log record, redacted; ``value`` itself when clean.

    Text is cut like a message (:func:`_redact_log_text`); a container holding more text than
    :data:`LOG_TEXT_CAP` (the record is redacted in the caller's thread, often the event loop)
    becomes its ``repr``, cut and redacted, instead of being walked whole. Other objects are
    left: what a handler makes of them is its own.
    """
    if type(value) in _PLAIN:
        return value
    if isinstance(value, str):
        redacted = _redact_log_text(value)
        return value if redacted == value else redacted
    if not isinstance(value, Mapping | list | tuple | set | frozenset | bytes | bytearray):
        return value
    _known.quick_check()
    if _text_size(value, LOG_TEXT_CAP) > LOG_TEXT_CAP:
        return _redact_log_text(repr(value))
    return _redact_value(value)


def _text_size(value: Any, limit: int) -> int:
    """Characters of text in ``value``'s containers (an iterative walk; stops past ``limit``)."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str | bytes | bytearray):
            total += len(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
            stack.extend(item.keys())
        elif isinstance(item, list | tuple | set | frozenset):
            total += 1  # an empty container costs a step too
            stack.extend(item)
    return total


#: A log record's message, traceback or stack longer than this (characters) is cut to it before
#: redaction: records are redacted synchronously, in the caller's thread (often the event loop).
LOG_TEXT_CAP = 64 * 1024
# Text past the cap that is scanned too, so that a secret running across the cut is seen whole.
_LOG_LOOKAHEAD = 4096


def _redact_log_text(text: str) -> str:
    """``text`` redacted, cut to :data:`LOG_TEXT_CAP` characters first when longer.

    The rules run on the kept part and a little beyond it (``_LOG_LOOKAHEAD``): a secret that
    starts before the cut is found whole and replaced whole, so no part of it is kept.
    """
    if len(text) <= LOG_TEXT_CAP:
        return redact_text(text)
    _known.quick_check()
    window = text[: LOG_TEXT_CAP + _LOG_LOOKAHEAD]
    parts, cursor = [], 0
    for finding in _redactor().find(window):
        if finding.start >= LOG_TEXT_CAP:
            break
        parts.append(window[cursor : finding.start])
        parts.append(REDACTION_FORMAT.format(rule=finding.rule_id))
        cursor = finding.end
    kept = max(cursor, LOG_TEXT_CAP)
    parts.append(window[cursor:kept])
    parts.append(f"... [truncated {len(text) - kept} chars before redaction]")
    return "".join(parts)


_TRACEBACK_FORMATTER = logging.Formatter()


class RedactingFilter(logging.Filter):
    """A filter that redacts every record it sees (never drops one).

    Attach it to a handler to redact what that handler writes from any logger
    (``handler.addFilter(RedactingFilter())``). tooldeck's own loggers need nothing: see
    :func:`install_log_redaction`.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always True."""
        redact_record(record)
        return True


class _ExtrasFilter(logging.Filter):
    """Redacts the ``extra=`` attributes of the records of the logger it is on (never drops
    one); see :func:`install_log_redaction`."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            _redact_extras(record)
        except Exception:  # never let redaction break the caller's logging call
            for name in record.__dict__.keys() - _RECORD_ATTRIBUTES:
                record.__dict__[name] = "[withheld: redaction failed]"
        return True


_EXTRAS_FILTER = _ExtrasFilter()
_installed_factory: Callable[..., logging.LogRecord] | None = None
_install_lock = threading.Lock()


def install_log_redaction() -> None:
    """Redact every record of the ``tooldeck*`` loggers, whatever handler writes it.

    A filter on the ``tooldeck`` logger would not do: logging consults a logger's filters only
    for records logged on that very logger, not for those of its children that propagate to its
    handlers. So the record factory is wrapped instead (once; the previous factory is kept and
    called): a record of a ``tooldeck*`` logger is redacted when it is made, which happens only
    after the level check, so disabled levels cost nothing. Idempotent.

    ``extra=`` attributes are set on a record only after the factory made it, so the factory
    also gives the logger the record came from a filter that redacts them (a logger's own
    filters do run for its own records, and the first one runs after this very record is made).
    """
    global _installed_factory
    with _install_lock:
        current = logging.getLogRecordFactory()
        if _installed_factory is not None and current is _installed_factory:
            return
        previous = current

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            name = record.name
            # Not a str for logging.makeLogRecord(), which names the record after the factory.
            if isinstance(name, str) and name.startswith(LOGGER_PREFIX):
                try:
                    redact_record(record)
                except Exception:  # never let redaction break the caller's logging call
                    record.msg, record.args = "[log record withheld: redaction failed]", ()
                    record.exc_info = record.exc_text = record.stack_info = None
                logger = logging.Logger.manager.loggerDict.get(name)
                if isinstance(logger, logging.Logger) and _EXTRAS_FILTER not in logger.filters:
                    logger.addFilter(_EXTRAS_FILTER)
            return record

        logging.setLogRecordFactory(factory)
        _installed_factory = factory
