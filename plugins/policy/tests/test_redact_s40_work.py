"""Redaction work an attacker can make quadratic (audit s40).

Found by timing every rule's adversarial inputs (its keyword, then a long run of what its value
accepts, on one line) through ``redact_text``: gitleaks' generic rule takes a value of any
length (``[a-z0-9+/]{11,}``), and its allowlist of names was searched over the whole match,
from every offset, by ``[a-z0-9-]*?api[a-z0-9-]*?:jar:``: ``age-secret-key-1 = `` then 16 kB
of key characters took 2 s, 32 kB 8 s (quadratic; 1 MB would take hours). The allowlist is
now tried only at the offsets that can cover the rule's name (0.1 s per MB). Nothing here is
timed: the tests check that the faster form decides exactly as ``finditer`` did, and that the
pathological inputs complete with the right output.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Iterator
from typing import cast

import pytest
from tooldeck_policy import redact
from tooldeck_policy.redact import redact_text


def _covers_by_finditer(rx: re.Pattern[str], where: str, anchor: int) -> bool:
    """The former ``_covers``: every hit of ``finditer``, in order."""
    for hit in rx.finditer(where, 0, len(where)):
        if hit.start() > anchor:
            return False
        if hit.end() > anchor:
            return True
    return False


def _allowlist_patterns() -> list[re.Pattern[str]]:
    patterns = []
    for rule in redact._redactor().rules:
        if isinstance(rule, redact._GitleaksRule):
            for allowlist in rule.allowlists:
                if allowlist.target != "secret":
                    patterns.extend(allowlist.regexes)
    # and patterns that match the empty string, whose hits finditer spaces out its own way
    patterns += [re.compile(p) for p in (r"a*", r"(?:ab)*", r"x?", r"\b", r"a|", r"(?=b)",
                                         r"b*a?", r"api[a-z]*", "")]
    return patterns


def test_covers_decides_as_finditer_did() -> None:
    rng = random.Random(4040)
    patterns = _allowlist_patterns()
    words = ["api", "key", "access", "rapid", ":jar:", "author", "public_key", "keyid", "a",
             "--mount=type=secret,", 'LICENSE="x"', "import { a } from 'b'", "\n", " ", "-"]
    letters = "aabkeyapi:jr-_=.\n KEY"
    for _ in range(3000):
        if rng.random() < 0.5:
            where = "".join(rng.choice(letters) for _ in range(rng.randint(0, 60)))
        else:
            where = "".join(rng.choice(words) for _ in range(rng.randint(0, 20)))
        if rng.random() < 0.1:
            where += " " * redact._COVERS_SEARCH_MAX  # the long form of the walk
        anchor = rng.randint(0, len(where) + 1)
        for rx in patterns:
            assert redact._covers(rx, where, anchor) == _covers_by_finditer(rx, where, anchor), (
                rx.pattern[:60], where[:80], anchor)


class _Spy:
    """A pattern that records where ``_covers`` asked it to look."""

    def __init__(self, rx: re.Pattern[str]) -> None:
        self.rx = rx
        self.starts: list[int] = []
        self.searched = 0  # characters handed to finditer

    def match(self, where: str, pos: int = 0) -> re.Match[str] | None:
        self.starts.append(pos)
        return self.rx.match(where, pos)

    def finditer(self, where: str, pos: int = 0, endpos: int = 0) -> Iterator[re.Match[str]]:
        self.searched += endpos - pos
        return self.rx.finditer(where, pos, endpos)


def test_covers_tries_a_long_match_only_where_the_name_can_be_covered() -> None:
    (generic,) = [r for r in redact._redactor().rules if r.id == "generic-api-key"]
    names = next(a for a in generic.allowlists if a.target == "match").regexes[0]
    spy = _Spy(names)
    where = "key = " + "a1b2c3d4" * 20_000
    assert not redact._covers(cast(re.Pattern[str], spy), where, 3)
    assert max(spy.starts) <= 3 and spy.searched == 0


_KEY_CHARS = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


@pytest.mark.parametrize(
    "head, run",
    [
        ("age-secret-key-1 = ", _KEY_CHARS.upper()),
        ("dapi = ", "abcdef0123456789"),
        ("xkeysib- = ", "abcdef0123456789"),
        ("token: ", "".join(random.Random(5).choices(string.ascii_lowercase + string.digits,
                                                      k=997))),
    ],
)
def test_a_keyword_then_a_long_value_on_one_line(head: str, run: str) -> None:
    # 64 kB on one line: ~30 s before (quadratic), a few ms now.
    text = head + run * (64_000 // len(run))
    redacted = redact_text(text)
    assert redacted.startswith(head) and redacted.endswith("]")
    assert run[:40] not in redacted  # the whole value is one finding


def test_covers_still_excuses_a_long_match_by_its_name() -> None:
    # The allowlist's names (``public_key``) still excuse a value, however long it is.
    value = "".join(random.Random(7).choice(string.ascii_lowercase + string.digits)
                    for _ in range(8000))
    text = f"public_key = {value}"
    findings = redact.find_secrets(text)
    assert not any(f.rule_id == "generic-api-key" for f in findings)


# --- Keyword regions are cut at _WINDOW_MAX: one finditer call must not hold the GIL for
# seconds. Over "data: kind: secret " repeated, kubernetes-secret-yaml's pattern costs ~3 µs per
# character, and 1 MB of it was one region: every other thread (the event loop too) waited
# 3.2 s. Cut at 8 kB, the longest wait measured 0.03 s (figures in the stop 40 note).


def test_every_keyword_region_lies_whole_inside_a_bounded_window() -> None:
    rng = random.Random(40)
    for _ in range(300):
        n = rng.randrange(1, 300_000)
        dense = rng.random() < 0.5
        count = rng.randrange(1, 3_000)
        gap = 20 if dense else 3_000
        positions, p = [], rng.randrange(0, 600)
        for _ in range(count):
            if p >= n:
                break
            positions.append(p)
            p += rng.randrange(1, gap)
        windows = list(redact._windows(positions, n))
        for lo, hi in windows:
            assert 0 <= lo < hi <= n
            # A window grows only while it is under the cap; the last keyword adds one region.
            assert hi - lo < redact._WINDOW_MAX + redact._WINDOW_BEFORE + redact._WINDOW_AFTER
        for q in positions:
            start, end = max(0, q - redact._WINDOW_BEFORE), min(n, q + redact._WINDOW_AFTER)
            assert any(lo <= start and end <= hi for lo, hi in windows), q


def _kubernetes_secret(value: str) -> str:
    return f"apiVersion: v1\nkind: Secret\ndata:\n  password: {value}\n"


def test_dense_keywords_find_what_one_region_found(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    filler = ["data: kind: secret ", "kind: secret\n", "secret=", "token: x ", "password ",
              "api_key ", " data:\n  ", "lorem ipsum "]
    texts = []
    for _ in range(40):
        parts = []
        for _ in range(rng.randrange(200, 1_500)):
            parts.append(rng.choice(filler))
            if rng.random() < 0.01:
                token = "".join(rng.choice(string.ascii_letters + string.digits)
                                for _ in range(rng.randrange(16, 48)))
                parts.append(rng.choice([_kubernetes_secret(token), f"api_key={token}\n",
                                         f"ghp_{token[:36].ljust(36, 'x')} "]))
        texts.append("".join(parts))
    cut = [redact_text(t) for t in texts]
    monkeypatch.setattr(redact, "_WINDOW_MAX", 1 << 40)  # the former merging: one region
    whole = [redact_text(t) for t in texts]
    assert cut == whole


def test_a_secret_amid_a_megabyte_of_kubernetes_keywords_is_redacted() -> None:
    value = "c3VwZXJzZWNyZXRwYXNzd29yZDEyMw=="
    filler = "data: kind: secret " * 27_000  # ~0.5 MB: each region is scanned, bounded
    text = filler + _kubernetes_secret(value) + filler
    shown = redact_text(text)
    assert value not in shown and "[REDACTED" in shown
