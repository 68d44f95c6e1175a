"""Redaction work an attacker can make slow without making it quadratic (audit s41).

Found by timing each rule's scan over inputs built from its own pattern (samples, cut samples,
keywords with every separator, mutated) and over the whole redaction of a megabyte of each:

- kubernetes-secret-yaml: ~35-100 s of CPU per MB of ``data:`` / ``key: value`` / ``kind:
  secret`` pieces (Python's engine retried the 100 positions after each ``data:`` and the
  200-character tail from each end of the value). Now an exact hand-written matcher;
- generic-api-key: its allowlist of names was searched over the whole match context when it
  was under 4 kB: ``key = <4 kB value>`` repeated, 37 s per MB. Now only the offsets up to
  the anchor are tried, with an equivalent pattern the engine skips fast;
- cli-credential: the words between a program and its option backtracked at every keyword;
- per-finding overhead (entropy, allowlists, regions read twice) for dense findings.

Nothing here is timed: each test checks that the faster form decides exactly as the former
one did (randomized, on texts built from the patterns' own pieces), and counts the work.
"""

from __future__ import annotations

import json
import math
import random
import re
import string
import sys
from collections import Counter
from collections.abc import Iterator
from importlib import resources
from typing import Any, cast

import pytest
from tooldeck_policy import redact
from tooldeck_policy.redact import redact_text


def _rule(rule_id: str) -> Any:
    return next(r for r in redact._redactor().rules if r.id == rule_id)


def _raw_rule(rule_id: str) -> dict[str, Any]:
    source = resources.files("tooldeck_policy").joinpath("rules", "gitleaks_rules.json")
    document = json.loads(source.read_text(encoding="utf-8"))
    return next(r for r in document["rules"] if r["id"] == rule_id)


# --- kubernetes-secret-yaml: an exact matcher ---------------------------------------------

_K8S = re.compile(redact._KubernetesSecretYaml.SOURCE)
# Letters that IGNORECASE matches to ASCII ones, blanks that are not ASCII.
_ODD = ["\u017f", "\u212a", "\u0130", "\u0131", "\u00a0", "\x1c", "\u2028"]
_K8S_PIECES = [
    "data:", "DATA:", "kind:", "Kind: ", "secret", "SECRET", "kind: secret", "kind: 'secret'",
    'kind: "secret"', "kind:\tSecret", "data:\n", " ", "  ", "\t", "\n", "\n  ", "\r\n", "key:",
    "k.y-z:", ": ", "|", "|-", ">", ">-", "| ", "> \n  ", "=", "==", '"', "'", "aaaaaaaaaa",
    "AbC+/d09xYz", "QUJDREVGR0hJSktMTU5P", "{{", "}}", "{{ .Values.x }}", '""', "''", "/", "+",
    "-", "x", "kinds:", "metadata:", "_data:", "\n---\n", "#", *_ODD,
]  # fmt: skip


def _k8s_value(rng: random.Random) -> str:
    c = rng.random()
    if c < 0.6:
        quote = rng.choice(["", "", '"', "'"])
        value = "".join(rng.choice("abcXYZ09+/\u017f\u212a\u0130\u0131")
                        for _ in range(rng.randrange(5, 20)))
        if rng.random() < 0.3:  # a kind line inside or right after the value
            at = rng.randrange(len(value))
            value = value[:at] + rng.choice(["kind: secret", "/kind: secret", " kind: secret",
                                             "+Kind: 'secret'"]) + value[at:]
        return quote + value + "=" * rng.randrange(0, 5) + rng.choice(["", quote, '"', "'"])
    if c < 0.75:
        return "{{" + rng.choice([" .Values.x ", "x", "", "a}b"]) + rng.choice(["}}", "}", ""])
    return rng.choice(['""', "''", '"', "x", ""])


def _k8s_text(rng: random.Random) -> str:
    def blank() -> str:
        return rng.choice([" ", "\n", "\n  ", "\t", "\n\n    ", " " * rng.randrange(0, 130), ""])

    def entry() -> str:
        indicator = ""
        if rng.random() < 0.3:
            indicator = rng.choice([" |", " |-", ">", " >+", "|", " |x"]) + rng.choice(
                ["\n  ", " ", "\n\n ", "", "\t\n"])
        return (rng.choice(["key", "k.y-z", "a_b", "x", "", "k k"]) + ":" + indicator
                + rng.choice(["", " ", "  ", "\t"]) + _k8s_value(rng))

    def kind() -> str:
        return (rng.choice(["kind:", "Kind:", "\u212aind:", "k\u0131nd:"])
                + rng.choice(["", " ", "\t "]) + rng.choice(["", '"', "'"])
                + rng.choice(["secret", "Secret", "\u017fecret", "secrets"])
                + rng.choice(["", '"', "'", " "]))

    def data() -> str:
        return rng.choice(["", "", "x", "_", " "]) + rng.choice(["data:", "Data:", "data"])

    def filler() -> str:
        return "".join(rng.choice([blank, entry, lambda: rng.choice(_K8S_PIECES),
                                   lambda: "y" * rng.randrange(1, 120)])()
                       for _ in range(rng.randrange(0, 3)))

    if rng.random() < 0.25:  # pieces in any order
        return "".join(rng.choice(_K8S_PIECES) for _ in range(rng.randrange(1, 60)))
    parts: list[str] = []
    for _ in range(rng.randrange(1, 5)):
        if rng.random() < 0.5:
            parts += [kind(), filler(), data(), blank(), filler(), blank(), entry(), filler()]
        else:
            parts += [data(), blank(), filler(), blank(), entry(), filler(), kind(), filler()]
    return "".join(parts)


def _spans(m: Any) -> tuple[tuple[int, int], ...]:
    return (m.span(), m.span(1), m.span(2))


def test_kubernetes_matcher_finds_what_re_finds() -> None:
    # (The stop 41 run: 500,000 texts, 65,000 matches, no difference.)
    matcher = redact._KubernetesSecretYaml()
    rng = random.Random(41)
    found = 0
    for _ in range(6000):
        text = _k8s_text(rng)
        lo = rng.randrange(0, max(1, len(text) // 4)) if rng.random() < 0.3 else 0
        hi = max(lo, len(text) - (rng.randrange(0, max(1, len(text) // 4))
                                  if rng.random() < 0.3 else 0))
        want = [_spans(m) for m in _K8S.finditer(text, lo, hi)]
        assert [_spans(m) for m in matcher.finditer(text, lo, hi)] == want, (text, lo, hi)
        found += len(want)
    assert found > 500  # the texts do hold matches


def test_kubernetes_rule_runs_the_matcher_not_the_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    rule = _rule("kubernetes-secret-yaml")
    assert rule._regex == _raw_rule("kubernetes-secret-yaml")["regex"] == _K8S.pattern
    assert getattr(rule.finditer, "__func__", None) is redact._KubernetesSecretYaml.finditer

    class Refused:
        def finditer(self, *args: Any) -> Any:
            raise AssertionError("the backtracking pattern ran")

    monkeypatch.setitem(rule.__dict__, "pattern", Refused())
    text = "apiVersion: v1\nkind: Secret\ndata:\n  password: c3VwZXJzZWNyZXRwYXNzd29yZDEyMw==\n"
    shown = redact_text(text * 3)
    assert "c3VwZXJzZWNy" not in shown and "[REDACTED:kubernetes-secret-yaml]" in shown


class _CountingPattern:
    """A compiled pattern that counts the characters handed to its scans."""

    def __init__(self, rx: re.Pattern[str], counter: list[int]) -> None:
        self.rx, self.counter = rx, counter

    def finditer(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[Any]:
        self.counter[0] += min(endpos, len(text)) - pos
        return self.rx.finditer(text, pos, endpos)


@pytest.mark.parametrize(
    "unit",
    ["data: kind: secret ", "data:\n  k: aaaaaaaaaaaa\nkind: secret\n",
     "data:" + " " * 90 + "k: " + "a" * 400 + " kind: secret\n", "kind: secret data: x: {{ y }} "],
)
def test_kubernetes_work_is_a_few_scans_of_each_region(
    unit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each region is read by three linear scans; the former pattern read ~100 x 200 characters
    # per data: in them (35-100 s per MB).
    counter = [0]
    for name in ("_DATA", "_KIND", "_ENTRY"):
        rx = getattr(redact._KubernetesSecretYaml, name).compiled
        monkeypatch.setattr(redact._KubernetesSecretYaml, name, _CountingPattern(rx, counter))
    rule = _rule("kubernetes-secret-yaml")
    text = (unit * (200_000 // len(unit) + 1))[:200_000]
    positions = [m.start() for m in re.finditer("secret", text.lower())]
    regions = list(redact._windows(positions, len(text)))
    findings = list(rule.scan(text, positions))
    read = sum(min(len(text), redact._extend_to_space(text, hi)) - lo for lo, hi in regions)
    assert counter[0] <= 3 * read and read <= 3 * len(text)
    assert len({(f.start, f.end) for f in findings}) == len(findings)  # each judged once


def test_a_match_found_again_in_the_next_region_is_judged_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rule = _rule("kubernetes-secret-yaml")
    judged: list[tuple[int, int]] = []
    real = type(rule)._finding

    def counting(self: Any, text: str, m: Any, *, widen: bool) -> Any:
        judged.append(m.span())
        return real(self, text, m, widen=widen)

    monkeypatch.setattr(type(rule), "_finding", counting)
    unit = "data:\n  k: aaaaaaaaaaaa\nkind: secret\n"
    text = unit * 3000
    positions = [m.start() for m in re.finditer("secret", text)]
    assert len(list(redact._windows(positions, len(text)))) > 5  # overlapping regions
    list(rule.scan(text, positions))
    assert len(judged) == len(set(judged))  # (before: ~2.2 judgements per match)


# --- _covers: only the offsets up to the anchor, fast patterns -----------------------------


def _covers_by_finditer(rx: re.Pattern[str], where: str, anchor: int) -> bool:
    for hit in rx.finditer(where):
        if hit.start() > anchor:
            return False
        if hit.end() > anchor:
            return True
    return False


_NAMES = [
    "access", "accessibility", "access_id", "random-access", "api", "api.version", "rapid",
    "capital", "foo-api-bar:jar:", ":JAR:", "author", "X-MS-Exchange-Organization-Auth",
    "Authentication-Results", "credentials_id", "withCredentials", "bucket_key", "hot.key",
    "idx-key", "pubkey", "public_key", "schema-key", "turkey", "key_alias", "keypressed",
    "key-vault-id", "keyVaultToStoreSecrets", "keytab-path", "issuerkeyhash", "Monkey", "donkey",
    "MONKEY", "keying", "secret_length", "UserSecretsId", "csrf_token", "io.jsonwebtoken : jjwt",
    "api_endpoint", "token.uri", "public-token", "key_file", "ABC_D=\nEF_G=\n", "ab.c=\nd.e=",
    "=\n", "--mount=type=secret,", "import { a, b } from 'x'", 'LICENSE = "MIT"',
    'LIC_FILES_CHKSUM = "f"', 'SRC="abc123"', "LICENSE", "SRC", "kind:", "data:", "\n---\n",
    "\u017fecret", "\u212aey", "\u0130dx", "\u0131ssuerkeyhash", "KEY", "aPi", " ", "=", ":", "_",
]  # fmt: skip


def _names_text(rng: random.Random) -> str:
    alphabet = string.ascii_letters + string.digits + "_.-=: \n\"'" + "".join(_ODD[:4])
    out = []
    for _ in range(rng.randrange(1, 14)):
        r = rng.random()
        if r < 0.6:
            out.append(rng.choice(_NAMES))
        elif r < 0.85:
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12))))
        else:
            out.append(rng.choice(string.ascii_lowercase + string.digits) * rng.randrange(1, 80))
    return "".join(out)


def _allowlist_regexes() -> list[re.Pattern[str]]:
    return [rx for rule_id in ("generic-api-key", "kubernetes-secret-yaml")
            for a in _rule(rule_id).allowlists if a.target != "secret" for rx in a.regexes]


def test_covers_decides_as_finditer_on_the_allowlists() -> None:
    # (The stop 41 run: 100,000 texts, 7.8 million offsets, no difference.)
    rng = random.Random(4141)
    patterns = _allowlist_regexes()
    covered = 0
    for _ in range(1500):
        where = _names_text(rng)
        if rng.random() < 0.05:
            where += " " * (redact._COVERS_SEARCH_MAX + 10)
        for _ in range(3):
            anchor = rng.randrange(0, min(len(where), 600) + 2)
            for rx in patterns:
                got = redact._covers(rx, where, anchor)
                assert got == _covers_by_finditer(rx, where, anchor), (rx.pattern[:40], where,
                                                                       anchor)
                covered += got
    assert covered > 100


def test_the_fast_alternation_matches_as_the_allowlist_at_every_offset() -> None:
    (names,) = next(a for a in _rule("generic-api-key").allowlists if a.target == "match").regexes
    fast = redact._cover_walk(names).fast
    assert fast is not None
    rng = random.Random(414)
    for _ in range(800):
        where = _names_text(rng)
        walk = fast.walker(where, redact._FAST_SPAN)
        for at in range(len(where)):
            want = names.match(where, at)
            got = walk(where, at)  # the first match in [at, at + 63]
            if got is not None and got.start(1) == at:
                assert want is not None and want.span() == got.span(1), (where, at)
            else:
                assert want is None, (where, at)


def test_ignorecase_forms_of_ascii_letters() -> None:
    cased = [chr(c) for c in range(sys.maxunicode + 1)
             if chr(c).lower() != chr(c) or chr(c).upper() != chr(c)]
    for letter in string.ascii_lowercase:
        rx = re.compile("(?i)" + letter)
        forms = {c for c in cased if rx.match(c)}
        assert forms == set(redact._case_class(letter)[1:-1]), letter


class _Spy:
    """A pattern that records where ``_covers`` asked it to look."""

    def __init__(self, rx: re.Pattern[str], *, named: bool) -> None:
        self.rx = rx
        if named:
            self.pattern, self.flags = rx.pattern, rx.flags
        self.starts: list[int] = []
        self.searched = 0

    def match(self, where: str, pos: int = 0) -> re.Match[str] | None:
        self.starts.append(pos)
        return self.rx.match(where, pos)

    def finditer(self, where: str, pos: int = 0, endpos: int = 0) -> Iterator[re.Match[str]]:
        self.searched += endpos - pos
        return self.rx.finditer(where, pos, endpos)


def test_covers_reads_a_short_context_only_up_to_a_close_anchor() -> None:
    # Under 4 kB the whole context was searched: 37 s per MB of ``key = <4 kB value>``.
    (names,) = next(a for a in _rule("generic-api-key").allowlists if a.target == "match").regexes
    spy = _Spy(names, named=False)
    where = "key = " + "a1b2c3d4" * 490
    assert len(where) <= redact._COVERS_SEARCH_MAX
    assert not redact._covers(cast(re.Pattern[str], spy), where, 3)
    assert spy.searched == 0 and max(spy.starts) <= 3


def test_covers_tries_a_literal_pattern_only_where_its_literal_is() -> None:
    rx = re.compile(r'LICENSE[^=]*=\s*"[^"]+')
    assert redact._literal_prefix(rx.pattern) == "LICENSE"
    spy = _Spy(rx, named=True)
    where = "LICENSE x " * 60 + "key: " + "v" * 300
    anchor = where.index("key:")
    assert not redact._covers(cast(re.Pattern[str], spy), where, anchor)
    assert spy.searched == 0 and spy.starts == [m.start() for m in re.finditer("LICENSE", where)]
    spy = _Spy(rx, named=True)
    assert redact._covers(cast(re.Pattern[str], spy), 'LICENSE = "MIT" key', 2)


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [("LICENSE[^=]*=", "LICENSE"), ("--mount=type=secret,", "--mount=type=secret,"),
     ("import[ \\t]+{", "import"), ("ab*c", "a"), ("ab?", "a"), ("a{2}", ""), ("ab|cd", ""),
     ("(?i)abc", ""), ("(ab)c", ""), ("\\.ab", ""), ("a.b", "a"), ("", "")],
)
def test_literal_prefix(pattern: str, prefix: str) -> None:
    assert redact._literal_prefix(pattern) == prefix


def test_a_long_value_under_the_search_size_is_found_once_per_value() -> None:
    rng = random.Random(3)
    value = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(4000))
    text = f"key = {value} " * 20
    shown = redact_text(text)
    assert value[:40] not in shown and shown.count("[REDACTED:") == 20


# --- cli-credential: the words between a program and its option ---------------------------

_OLD_CLI_WORDS = r"(?:[ \t]+[^\s]{1,256}){0,16}?"


def test_cli_words_are_possessive() -> None:
    assert redact._CLI_WORDS == r"(?:[ \t]++[^\s]{1,256}+){0,16}?"


def test_cli_patterns_match_as_with_backtracking_words() -> None:
    new = [r.pattern for r in redact._own_rules()
           if r.id == "cli-credential" and redact._CLI_WORDS in r.pattern.pattern]
    assert len(new) == 3
    old = [re.compile(p.pattern.replace(redact._CLI_WORDS, _OLD_CLI_WORDS)
                      .replace(r"[\w-]{0,16}+", r"[\w-]{0,16}")) for p in new]
    pieces = ["mysql", "mariadb", "mysqldump", "sshpass", "redis-cli", "docker login", "unzip",
              "7za", "openssl", "curl", " ", "  ", "\t", "\n", "-p", "-pS3cr3t!", "-P", "-a", "-k",
              "-u", "--user", "=", "'", '"', "host", "admin:pw", "x" * 20, "s3cr3t", "\u00a0",
              ";", "a" * 260]
    programs = ["mysql", "mariadb-dump", "sshpass", "redis-cli", "login", "zip", "7z", "openssl",
                "curl"]
    flags = ["-p", "-a", "-P", "-k", "-u", "--user", "-p'", '-p"', "-pX"]
    rng = random.Random(41)
    matched = 0
    for _ in range(1500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30)))
        if rng.random() < 0.6:  # a command line: program, words, option, value
            words = "".join(rng.choice([" ", "  ", "\t"]) + rng.choice(pieces).strip()
                            for _ in range(rng.randrange(0, 20)))
            text = (rng.choice(programs) + words + rng.choice([" ", "\t ", ""])
                    + rng.choice(flags) + rng.choice(["", " ", "="])
                    + rng.choice(["s3cr3t!", "u:pw9", "'q w'", "x", ""]) + text)
        for a, b in zip(old, new, strict=True):
            for at in range(len(text)):
                x, y = a.match(text, at), b.match(text, at)
                assert (x and (x.span(), x.span(1))) == (y and (y.span(), y.span(1))), (text, at)
                matched += x is not None
    assert matched > 100


# --- per-finding work ----------------------------------------------------------------------


def _entropy_by_counter(value: str) -> float:
    if not value:
        return 0.0
    n = len(value)
    if n < len(redact._CLOG):
        return math.log2(n) - sum(map(redact._CLOG.__getitem__, Counter(value).values())) / n
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def test_entropy_is_counted_as_counter_did() -> None:
    rng = random.Random(41)
    alphabets = [string.ascii_letters + string.digits, "ab", "xoxb-0", string.printable,
                 "\u00e9\u4e2d\u0130" + string.ascii_lowercase]
    for _ in range(20_000):
        alphabet = rng.choice(alphabets)
        value = "".join(rng.choice(alphabet) for _ in range(rng.choice([rng.randrange(40),
                                                                         rng.randrange(400)])))
        assert list(redact._counts(value).items()) == list(Counter(value).items())
        assert redact.shannon_entropy(value) == _entropy_by_counter(value)


def _allows_by_list(allowlist: Any, secret: str, entropy: float, context: Any) -> bool:
    """The former ``_Allowlist.allows``: every condition read, then combined."""
    checks: list[bool] = []
    if allowlist.has_paths:
        if allowlist.condition == "AND":
            return False
        checks.append(False)
    if allowlist.regexes:
        if allowlist.target == "secret":
            checks.append(bool(allowlist.combined.fullmatch(secret)))
        else:
            where, anchor = context()
            checks.append(any(redact._covers(rx, where, anchor) for rx in allowlist.regexes))
    if allowlist.stopwords:
        checks.append(allowlist._stopwords_explain(secret, entropy))
    if not checks:
        return False
    return all(checks) if allowlist.condition == "AND" else any(checks)


def test_allowlists_decide_as_when_every_condition_was_read() -> None:
    rng = random.Random(41)
    secrets = ["true", "aaaa", "${X}", "abcdefghijklmnopqrstuvwxyz", "s3cr3tK3yZ9q", "example",
               "x" * 30, "EXAMPLEKEY0123456789", "changeme-abc"]
    contexts = [("--mount=type=secret, key = x", 0), ("key = x", 0), ("publickey = x", 3)]
    for _ in range(3000):
        raw = {"condition": rng.choice(["OR", "AND"]),
               "regex_target": rng.choice(["secret", "match", "line"]),
               "regexes": rng.sample(["^s3", "x+", "(?i)example", "--mount=type=secret,",
                                      "public"], rng.randrange(0, 3)),
               "stopwords": rng.sample(["example", "abc", "changeme"], rng.randrange(0, 3)),
               "paths": ["p"] if rng.random() < 0.3 else []}
        allowlist = redact._Allowlist.load(raw)
        secret, context = rng.choice(secrets), rng.choice(contexts)
        entropy = rng.choice([0.0, 3.0, 3.5])
        assert allowlist.allows(secret, entropy, lambda c=context: c) == _allows_by_list(
            allowlist, secret, entropy, lambda c=context: c), (raw, secret, context)


def test_a_short_value_is_refused_before_the_placeholder_pattern(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ``pwd: pwd: ...``: every name's value is the next name, refused for its length (the
    # placeholder pattern ran first, at every one: 0.9 s per MB).
    calls = [0]
    real = redact._is_placeholder

    def counting(value: str) -> bool:
        calls[0] += 1
        return real(value)

    monkeypatch.setattr(redact, "_is_placeholder", counting)
    redact._clean.clear()
    text = "pwd: " * 2000
    assert redact_text(text) == text
    assert calls[0] < 100


def test_credential_values_decide_as_before() -> None:
    def former(value: str, key: str, *, quoted: bool, type_hint: bool) -> bool:
        """``_credential_value`` before its test of the length came first."""
        if redact._is_placeholder(value) or value.lower() == key.lower():
            return False
        if quoted:
            return len(value) >= 4 and not value.isspace()
        if redact._CODE_CHARS.intersection(value):
            head = value[: min(value.find(c) for c in redact._CODE_CHARS if c in value)]
            if not head or (redact._CODE_HEAD_RE.match(head) and not redact._random_token(head)):
                return False
            value = head
        if len(value) < 6 or redact._PATH_RE.match(value):
            return False
        if redact._DOTTED_NAME_RE.match(value) or value.startswith(("self.", "this.", "$")):
            return False
        if redact._SNAKE_NAME_RE.match(value):
            return False
        if type_hint and redact._TYPE_NAME_RE.match(value):
            return False
        return not (value.isalpha() and value.islower() and not redact._STRONG_NAME_RE.search(key))

    rng = random.Random(41)
    pieces = ["a", "B", "1", "$", "{", "}", "(", ")", ".", "_", "/", "~", "-", "self.",
              "x" * 8, "Secret", "str", "${A}", "<p>", "***", "...", " "]
    for _ in range(50_000):
        value = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 6)))
        key = rng.choice(["password", "token", "api_key", "pwd"])
        quoted, hint = rng.random() < 0.5, rng.random() < 0.5
        assert redact._credential_value(value, key, quoted=quoted, type_hint=hint) == former(
            value, key, quoted=quoted, type_hint=hint), (value, key, quoted, hint)


def test_the_assignment_value_group_is_the_last_one_closed() -> None:
    rng = random.Random(41)
    pieces = ["password", ": ", "=", '"', '\\"', "'", "`", "abc", "x y", "\n", " ", ":=", "=>",
              "?=", "!!binary ", "$x", "@a", "-", ".", "token", "::", "==", ",", ";", "a" * 600]
    seen = 0
    for _ in range(30_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 8)))
        m = redact._ASSIGNMENT_RE.match(text)
        if m is not None:
            seen += 1
            first = next(g for g in redact._VALUE_GROUPS if m.group(g) is not None)
            assert m.lastgroup == first, text
    assert seen > 500


def test_one_call_for_the_identifier_and_its_operator() -> None:
    rng = random.Random(41)
    pieces = ["password", ": ", "=", '"', '\\"', "\\", "'", "`", "abc", "]", " ", "\t", ":=",
              "=>", "?=", "=~", "==", "::", "$x", "@a", "-", ".", "key", ",", ";", "\n"]
    for _ in range(30_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 8)))
        at = rng.randrange(len(text))
        end = redact._IDENT_RUN_RE.match(text, at).end()
        assigned = redact._OPERATOR_AFTER_RE.match(text, end) is not None
        run = redact._IDENT_RUN_ASSIGNED_RE.match(text, at)
        assert (run.end(), run.group(1) is not None) == (end, assigned), (text, at)


# --- escapes: windows as tuples, views made for findings only ------------------------------


def _former_views(text: str) -> list[tuple[str, list[int], list[int], list[int]]]:
    """The former ``_unescaped_windows`` and ``_view``: every window's text and segments."""
    out = []
    matches = list(redact._ESCAPE_RE.finditer(text))
    groups: list[list[re.Match[str]]] = []
    for m in matches:
        if groups and not (m.start() - groups[-1][-1].end() > 2 * redact._ESCAPE_CONTEXT
                           or m.start() > redact._line_end(text, groups[-1][0].end())):
            groups[-1].append(m)
        else:
            groups.append([m])
    for escapes in groups:
        start, end = escapes[0].start(), escapes[-1].end()
        lo = text.rfind("\n", max(0, start - redact._ESCAPE_CONTEXT), start) + 1 or max(
            0, start - redact._ESCAPE_CONTEXT)
        hi = min(redact._line_end(text, end), end + redact._ESCAPE_CONTEXT)
        pieces, vstarts, ostarts, olens = [], [], [], []
        cursor, vpos = lo, 0
        for m in escapes:
            if m.start() > cursor:
                vstarts.append(vpos)
                ostarts.append(cursor)
                olens.append(-1)
                pieces.append(text[cursor:m.start()])
                vpos += m.start() - cursor
            decoded = redact._unescape(m.group())
            vstarts.append(vpos)
            ostarts.append(m.start())
            olens.append(m.end() - m.start() if len(decoded) == 1 or not decoded else -1)
            pieces.append(decoded)
            vpos += len(decoded)
            cursor = m.end()
        if hi > cursor:
            vstarts.append(vpos)
            ostarts.append(cursor)
            olens.append(-1)
            pieces.append(text[cursor:hi])
        out.append(("".join(pieces), vstarts, ostarts, olens))
    return out


def test_escape_windows_are_the_former_views() -> None:
    rng = random.Random(41)
    pieces = ["%41", "%2f", "%zz", "\\u0067", "\\x41", "\\/", "&#65;", "&#x41;", "&#x110000;",
              "\u200b", "\u00ad", "\ufe0f", "\n", " ", "ghp_", "abc", "x" * 700, "%", "\\", "&"]
    for _ in range(1500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40)))
        spans, views, bounds = redact._unescaped_windows(text)
        former = _former_views(text)
        assert views == [f[0] for f in former]
        windows = [tuple(bounds[w:w + 4]) for w in range(0, len(bounds), 4)]
        for window, (_, vstarts, ostarts, olens) in zip(windows, former, strict=True):
            made = redact._View(text, spans, window)  # type: ignore[arg-type]
            assert (made.vstarts, made.ostarts, made.olens) == (vstarts, ostarts, olens)


def test_a_line_per_escape_makes_no_view_object(monkeypatch: pytest.MonkeyPatch) -> None:
    made = [0]
    real = redact._View.__init__

    def counting(self: Any, *args: Any) -> None:
        made[0] += 1
        real(self, *args)

    monkeypatch.setattr(redact._View, "__init__", counting)
    redact._clean.clear()
    text = "\u200b\n" * 5000 + "gh\u200bp_" + "A1b2C3d4E5" * 3 + "xyzabc\n"
    shown = redact_text(text)
    assert "[REDACTED:" in shown and made[0] == 1  # (before: one per line, 5,001)
