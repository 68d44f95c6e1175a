"""Redaction's passes over a whole text let go of the GIL between slices (audit s42).

Redaction runs in a worker thread, but a thread keeps the event loop (every other session) only
if it releases the GIL, and one C call never does. Three passes read the whole text in one call:
the keyword automaton (~37 ms per MB with no keyword), the search for base64/hex runs (~90-200 ms
per MB of text with no run: its look-behind defeats the engine's skipping) and the escapes
(8 million zero-width spaces: 8 million matches in one ``list(map(...))``, 8.6 s). Measured with
a thread that wakes every millisecond: an 8 MB output of ``"`` held the GIL 1.6 s in one search,
one of zero-width spaces 8.6 s.

Nothing here is timed: each pass must give exactly what the whole-text call gave (randomized,
with slices of many sizes), and no call into the engine may read more than a slice (recorded
through proxies of the compiled patterns and the automaton).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from tooldeck_policy import redact
from tooldeck_policy._urls import MAX_URL_CHARS, check_url

_PIECES = [
    "%41", "%4", "%", "\\u0041", "\\u00", "\\x41", "\\/", "&#65;", "&#1234567;", "&#x41;",
    "&#x10ffff;", "&#", "\u200b", "\u00ad", "a", "AAAA", "Zm9vYmFy", "QUJD" * 10, "\n", "\r\n",
    " ", "=", "==", "-", "_", "+", "/", "token", "password", "api_key", "secret", "ghp_",
    "AKIA", "x" * 50, "A" * 41 + "\n", "A" * 64 + "\n", "0123456789abcdef" * 3, '"', "\u0130",
]  # fmt: skip


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_PIECES) for _ in range(rng.randrange(1, 300)))


def _whole_occurrences(lowered: str) -> dict[int, list[int]]:
    """The former one-call form of ``_Redactor._occurrences``."""
    found: dict[int, list[int]] = {}
    for end, (i, length) in redact._redactor().automaton.iter(lowered):
        found.setdefault(i, []).append(end - length + 1)
    return found


def test_sliced_passes_find_what_the_whole_text_calls_found(monkeypatch):
    rng = random.Random(42)
    redactor = redact._redactor()
    assert redactor.automaton is not None  # pyahocorasick is a dependency
    for _ in range(2000):
        # Slices from just over a run's minimum to wider than the text.
        monkeypatch.setattr(redact, "_SLICE_CHARS", rng.choice([21, 22, 25, 33, 64, 200, 5000]))
        text = _text(rng)
        assert [m.span() for m in redact._encoded_run_matches(text)] == [
            m.span() for m in redact._ENCODED_RUN_RE.finditer(text)
        ], text
        assert list(redact._escape_spans(text)) == [
            offset for m in redact._ESCAPE_RE.finditer(text) for offset in m.span()
        ]
        lowered = text.replace("\u0130", "i").lower()
        assert redactor._occurrences(lowered) == _whole_occurrences(lowered)


def test_known_secrets_are_found_across_slices(monkeypatch):
    monkeypatch.setattr(redact, "_SLICE_CHARS", 64)
    secret = "Zq8#known-secret-value-that-is-long-" + "k" * 100  # longer than a slice
    redact.add_known_secrets(secret)
    try:
        for offset in (0, 1, 30, 63, 64, 65, 127, 500):
            text = "." * offset + secret + " tail"
            assert redact.redact_text(text) == (
                "." * offset + redact.REDACTION_FORMAT.format(rule=redact.KNOWN_SECRET_RULE)
                + " tail"
            )
    finally:
        redact.configure({})


class _Recording:
    """A compiled pattern or an automaton that records how much of the text each call reads."""

    def __init__(self, inner: Any, reads: list[tuple[str, int]]) -> None:
        self._inner = inner
        self._reads = reads

    def _record(self, name: str, text: str, pos: int = 0, endpos: int | None = None) -> None:
        end = len(text) if endpos is None else min(endpos, len(text))
        self._reads.append((name, end - pos))

    def finditer(self, text: str, pos: int = 0, endpos: int | None = None) -> Any:
        self._record("finditer", text, pos, endpos)
        return self._inner.finditer(text, pos, len(text) if endpos is None else endpos)

    def search(self, text: str, pos: int = 0, endpos: int | None = None) -> Any:
        self._record("search", text, pos, endpos)
        return self._inner.search(text, pos, len(text) if endpos is None else endpos)

    def iter(self, text: str, *args: Any) -> Any:
        self._record("iter", text, *args)
        return self._inner.iter(text, *args)

    def __getattr__(self, name: str) -> Any:  # match() reads one run: the run is the work
        return getattr(self._inner, name)


@pytest.mark.parametrize("kind", ["\u200b", '"', "%41", "x", "a\n"])
def test_no_pass_reads_more_than_a_slice_in_one_call(monkeypatch, kind):
    reads: list[tuple[str, int]] = []
    redactor = redact._redactor()
    monkeypatch.setattr(redact, "_ESCAPE_RE", _Recording(redact._ESCAPE_RE, reads))
    monkeypatch.setattr(redact, "_ENCODED_RUN_RE", _Recording(redact._ENCODED_RUN_RE, reads))
    monkeypatch.setattr(redactor, "automaton", _Recording(redactor.automaton, reads))
    text = kind * (300_000 // len(kind))
    assert redact.redact_text(text) == text  # nothing secret in it
    names = {name for name, _ in reads}
    assert {"finditer", "search", "iter"} <= names
    bound = redact._SLICE_CHARS + redactor.longest_keyword + redact._ESCAPE_MAX_CHARS
    assert max(size for _, size in reads) <= bound


def test_a_url_longer_than_any_client_sends_is_refused_unread():
    long_url = "http://example.com/" + "a" * MAX_URL_CHARS
    reason = check_url(long_url, resolve=False)
    assert reason is not None and "characters long" in reason
    assert f"{len(long_url):,}" in reason and len(reason) < 600  # quoted shortened
    # At the limit, the URL is judged on what it says, as before.
    assert check_url("http://example.com/" + "a" * (MAX_URL_CHARS - 19), resolve=False) is None
    assert "backslash" in (check_url("http://x/" + "\\" * 100, resolve=False) or "")
