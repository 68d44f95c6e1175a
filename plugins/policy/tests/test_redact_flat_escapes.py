"""The escape pass keeps no object per escape: the same redaction as the former tuple-based pass.

8 MB of zero-width spaces (or one per line) made millions of span and window tuples; the garbage
collector walked every one on each full pass, holding the GIL (and every other session on the
deck's loop) ~0.15-0.6 s at a time. Spans and windows are now flat lists of integers. The former
pass is kept below, verbatim but for names, and both must find the same secrets in thousands of
random texts, secrets of the shared corpora planted inside escapes among them.
"""

from __future__ import annotations

import bisect
import copy
import gc
import os
import random
import urllib.parse
from pathlib import Path
from typing import Any

import attrs
import pytest
from tooldeck_policy import redact
from tooldeck_policy.redact import Finding

# --- the former pass (tuple per span, tuple per window) ----------------------------------------


def _former_escape_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    n = len(text)
    pos = 0
    while pos < n:
        end = min(n, pos + redact._SLICE_CHARS)
        stop = min(n, end + redact._ESCAPE_MAX_CHARS)
        found = list(map(redact._MATCH_SPAN, redact._ESCAPE_RE.finditer(text, pos, stop)))
        while found and found[-1][0] >= end:
            found.pop()
        spans += found
        pos = max(end, found[-1][1]) if found else end
    return spans


def _former_unescaped_windows(
    text: str,
) -> tuple[list[tuple[int, int]], list[tuple[str, tuple[int, int, int, int]]]]:
    spans = _former_escape_spans(text)
    windows: list[tuple[str, tuple[int, int, int, int]]] = []
    count, gap, context = len(spans), 2 * redact._ESCAPE_CONTEXT, redact._ESCAPE_CONTEXT
    unescape = redact._unescape_cached
    i = 0
    while i < count:
        start, end = spans[i]
        line_end = text.find("\n", end)
        if line_end == -1:
            line_end = len(text)
        j = i + 1
        while j < count:
            s, e = spans[j]
            if s - end > gap or s > line_end:
                break
            end = e
            j += 1
        floor = start - context if start > context else 0
        lo = text.rfind("\n", floor, start) + 1 or floor
        hi = min(line_end, end + context)
        if j - i == 1:
            view = text[lo:start] + unescape(text[start:end]) + text[end:hi]
        else:
            pieces: list[str] = []
            cursor = lo
            for k in range(i, j):
                s, e = spans[k]
                pieces.append(text[cursor:s])
                pieces.append(unescape(text[s:e]))
                cursor = e
            pieces.append(text[cursor:hi])
            view = "".join(pieces)
        windows.append((view, (i, j, lo, hi)))
        i = j
    return spans, windows


class _FormerView:
    def __init__(self, text: str, spans: list[tuple[int, int]],
                 window: tuple[int, int, int, int]) -> None:
        first, last, lo, hi = window
        self.vstarts: list[int] = []
        self.ostarts: list[int] = []
        self.olens: list[int] = []
        cursor, vpos = lo, 0
        for k in range(first, last):
            s, e = spans[k]
            if s > cursor:
                self.vstarts.append(vpos)
                self.ostarts.append(cursor)
                self.olens.append(-1)
                vpos += s - cursor
            decoded = redact._unescape(text[s:e])
            self.vstarts.append(vpos)
            self.ostarts.append(s)
            self.olens.append(e - s if len(decoded) <= 1 else -1)
            vpos += len(decoded)
            cursor = e
        if hi > cursor:
            self.vstarts.append(vpos)
            self.ostarts.append(cursor)
            self.olens.append(-1)

    def _at(self, i: int) -> tuple[int, int]:
        k = bisect.bisect_right(self.vstarts, i) - 1
        return k, self.ostarts[k] + (i - self.vstarts[k] if self.olens[k] < 0 else 0)

    def span(self, start: int, end: int) -> tuple[int, int]:
        _, lo = self._at(start)
        k, hi = self._at(end - 1)
        return lo, hi + (1 if self.olens[k] < 0 else self.olens[k])


class _FormerRedactor(redact._Redactor):
    """The redactor with the former escape pass (``find`` recurses into this one too)."""

    def _decoded_findings(self, text: str, depth: int) -> list[tuple[float, Finding]]:
        parts: list[str] = []
        offsets: list[int] = []
        sources: list[Any] = []
        found: list[tuple[float, Finding]] = []
        at = 0
        for start, end, kind, data in redact._encoded_runs(text):
            decoded = redact._text_like(data)
            if decoded is None:
                if redact._key_body_run(text, start, end, kind, data):
                    found.append((self.priority("private-key"),
                                  Finding(rule_id="private-key", start=start, end=end)))
                continue
            parts.append(decoded)
            offsets.append(at)
            sources.append((start, end, kind))
            at += len(decoded) + len(redact._PART_SEPARATOR)
        spans, windows = _former_unescaped_windows(text)
        separator = len(redact._PART_SEPARATOR)
        for view, window in windows:
            parts.append(view)
            offsets.append(at)
            sources.append(window)
            at += len(view) + separator
        if not parts:
            return found
        joined = redact._PART_SEPARATOR.join(parts)
        inner: dict[int, list[Finding]] = {}
        views: dict[int, _FormerView] = {}
        for f in self.find(joined, depth + 1):
            first = bisect.bisect_right(offsets, f.start) - 1
            last = bisect.bisect_right(offsets, f.end - 1) - 1
            for k in range(first, last + 1):
                source = sources[k]
                if len(source) == 4:
                    size = len(parts[k])
                    lo = max(0, f.start - offsets[k])
                    hi = min(size, f.end - offsets[k])
                    if lo >= hi:
                        continue
                    view = views.get(k)
                    if view is None:
                        view = views[k] = _FormerView(text, spans, source)
                    start, end = view.span(lo, hi)
                    found.append(
                        (self.priority(f.rule_id), attrs.evolve(f, start=start, end=end))
                    )
                else:
                    inner.setdefault(k, []).append(f)
        for k, findings in inner.items():
            start, end, kind = sources[k]
            found.append(self._whole(start, end, kind, findings))
        return found


def _former() -> redact._Redactor:
    former = copy.copy(redact._redactor())  # the same compiled rules
    former.__class__ = _FormerRedactor
    return former


# --- random texts -------------------------------------------------------------------------------


def _security_data() -> Path:
    candidates = [
        os.environ.get("TOOLDECK_SECURITY_DATA", ""),
        "/work/shared/data/security",
        str(Path(__file__).resolve().parents[4] / "shared" / "data" / "security"),
    ]
    return next((Path(c) for c in candidates if c and Path(c).is_dir()), Path(candidates[1]))


_SECRETS_DIR = _security_data() / "secrets"

# Secrets of the detect-secrets and gitleaks fixtures (test_redact_fixtures.py), and the lines
# they stand on, which carry the names the rules look for.
_PLANTED = [
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "gX69YO4CvBsVjzAwYxdGyDd30t5+9ez31gKATtj4",
    "ToCynx5Se4e2PtoZxEhW7lUJcOX15c54",
    "8b1118b376c313ed420e5133ba91307817ed52c2",
    "ghp_" + "A1b2C3d4E5" * 3 + "xyzabc",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
]


def _corpus_lines() -> list[str]:
    lines: list[str] = []
    if _SECRETS_DIR.is_dir():
        for path in sorted(_SECRETS_DIR.rglob("*")):
            if path.is_file() and path.suffix in {".txt", ".env", ".ini", ".yaml", ".md", ".diff"}:
                text = path.read_text(encoding="utf-8", errors="replace")
                lines += [line for line in text.splitlines() if 8 <= len(line) <= 300]
    return lines


def _escaped(rng: random.Random, secret: str) -> str:
    """``secret`` with escapes planted inside: invisible characters between its characters,
    some characters percent-, \\u-, \\x- or HTML-encoded."""
    out = []
    for ch in secret:
        roll = rng.random()
        if roll < 0.15:
            out.append(rng.choice(["\u200b", "\u00ad", "\ufeff", "\u2060", "\u200d"]) + ch)
        elif roll < 0.25 and ord(ch) < 256:
            code = ord(ch)
            out.append(rng.choice([
                urllib.parse.quote(ch, safe="") if ch.isalnum() else f"%{code:02X}",
                f"\\u{code:04x}", f"\\x{code:02x}", f"&#{code};", f"&#x{code:X};",
            ]))
        else:
            out.append(ch)
    return "".join(out)


_PIECES = ["%41", "%2f", "%zz", "\\u0067", "\\x41", "\\/", "&#65;", "&#x41;", "&#x110000;",
           "\u200b", "\u00ad", "\ufe0f", "\n", "\n\n", " ", "password=", "token: ", "api_key = ",
           "ghp_", "AKIA", "abc", "x" * 700, "%", "\\", "&", '"', "=", "-----BEGIN"]


def _text(rng: random.Random, lines: list[str]) -> str:
    parts = []
    for _ in range(rng.randrange(1, 30)):
        roll = rng.random()
        if roll < 0.15:
            parts.append(_escaped(rng, rng.choice(_PLANTED)))
        elif roll < 0.25 and lines:
            parts.append(_escaped(rng, rng.choice(lines)))
        elif roll < 0.3 and lines:
            parts.append(rng.choice(lines))
        elif roll < 0.35:
            unit = rng.choice(["\u200b", "\u200b\n", "%20", "a\u200b"])
            parts.append(unit * rng.randrange(1, 400))
        else:
            parts.append(rng.choice(_PIECES))
    return "".join(parts)


def test_same_findings_as_the_former_escape_pass() -> None:
    rng = random.Random(43)
    lines = _corpus_lines()
    assert lines, "the security corpora were not found"
    new, former = redact._redactor(), _former()
    found = 0
    for n in range(2500):
        text = _text(rng, lines)
        got = new.find(text)
        assert got == former.find(text), (n, text[:300])
        found += bool(got)
    assert found > 800  # the texts do hold secrets: the comparison is not of empty lists


@pytest.mark.parametrize("secret", _PLANTED)
def test_a_secret_hidden_by_escapes_is_still_redacted(secret: str) -> None:
    rng = random.Random(secret)
    for _ in range(20):
        hidden = _escaped(rng, secret)
        text = "x\u200b\n" * 2000 + f"key = {hidden} \n" + "%20" * 500
        shown = redact.redact_text(text)
        assert hidden not in shown and "[REDACTED:" in shown
        assert [f for f in redact._redactor().find(text)] == _former().find(text)


@pytest.mark.parametrize("unit", ["\u200b", "\u200b\n", "a\u200b", "%20", "&#65;\n"])
def test_the_escape_pass_leaves_no_object_per_escape(unit: str) -> None:
    """What the collector would walk: the pass keeps a handful of objects alive whatever the
    number of escapes (before: a tuple per escape and two per window, 300,000+ here)."""
    text = unit * 100_000
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        spans, views, bounds = redact._unescaped_windows(text)
        after = len(gc.get_objects())
    finally:
        gc.enable()
    assert len(spans) == 200_000
    assert after - before < 100
    # and the windows are those of the former pass
    former_spans, former_windows = _former_unescaped_windows(text)
    assert views == [view for view, _ in former_windows]
    assert list(bounds) == [x for _, window in former_windows for x in window]
    assert list(spans) == [x for span in former_spans for x in span]


def test_long_texts_are_lowered_slice_by_slice_to_the_same_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """str.lower is per character but for a capital sigma (final or not, by what is around
    it): slices give the whole text's lowering whenever it holds none."""
    rng = random.Random(46)
    alphabet = ["a", "B", "\u0130", "\u200b", "\u03a3", "\u03c3", " ", "\n", "\u00c9", "Z"]
    for n in range(600):
        monkeypatch.setattr(redact, "_SLICE_CHARS", rng.choice([3, 7, 64, 16_384]))
        size = rng.choice([0, 10, 100, 1000, 5 * redact._SLICE_CHARS])
        letters = alphabet if n % 2 else [c for c in alphabet if c != "\u03a3"]
        text = "".join(rng.choice(letters) for _ in range(size))
        assert redact._lowered(text) == text.replace("\u0130", "i").lower(), n
