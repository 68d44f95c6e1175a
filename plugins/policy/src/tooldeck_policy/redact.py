"""Secret redaction for tool results: gitleaks' rules plus a few detectors of our own.

Every secret found is replaced by ``[REDACTED:<rule-id>]``. The detectors:

- the gitleaks default rule set (``rules/gitleaks_rules.json``, built by
  ``scripts/compile_gitleaks.py``), run the way gitleaks runs it: a rule is tried only when one of
  its keywords occurs in the lowercased text; the secret is the rule's ``secretGroup`` (or the first
  non-empty group); it must be more random than the rule's ``entropy`` (Shannon, bits per
  character); the rule's and the global allowlists (regexes on the secret, the match or the line,
  stopwords) let placeholders through;
- ``private-key``: whole ``-----BEGIN ... PRIVATE KEY-----`` blocks through their END line
  (through the last key line when the END line was cut off); markers alone, as in code that
  looks for keys, are left;
- ``url-credentials``: the password of ``scheme://user:password@host``;
- ``authorization-header``: the credential of ``Authorization: Bearer|Basic|Token ...``;
- ``aws-access-key-id`` / ``aws-secret-access-key``: AWS keys regardless of entropy (gitleaks
  skips low-entropy ones);
- ``keyword-assignment``: ``password = ...``, ``secret: ...``, ``api_key=...``, ``token: ...`` in
  code, env, ini, yaml and JSON, like detect-secrets' keyword detector, minus placeholders, code
  references and type annotations;
- ``high-entropy-assignment``: a random-looking base64-alphabet value assigned to any name
  (detect-secrets' 4.5 bits per character), except names that say it is an id or a hash.

Lines carrying ``pragma: allowlist secret`` (detect-secrets) or ``gitleaks:allow`` are left alone:
both tools use them to mark fixtures that are known not to be live secrets. UUIDs and bare hex
strings (git SHAs, digests) are never redacted on their own.

Speed: one Aho-Corasick pass (``pyahocorasick`` when installed, ``str.find`` otherwise) finds every
keyword occurrence; rules then run only around those occurrences, anchored at them when the rule's
pattern starts with its keyword. 1 MB of mixed text takes about 40 ms without secrets and
50-80 ms with ~600 of them (2-core machine); the rules compile once, on first use (~0.15 s).

A string value under a credential-like key of a mapping (``{"password": ...}``, HTTP header
dicts with ``Authorization`` or ``Cookie``) is replaced whole by :func:`redact_value`, whatever it
looks like.
"""

from __future__ import annotations

import functools
import json
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import resources
from typing import Any

import attrs

from tooldeck_hookspecs import ToolResult

try:  # An optional accelerator: one C pass for all keywords instead of one scan per keyword.
    import ahocorasick as _ahocorasick  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - exercised only where pyahocorasick is missing
    _ahocorasick = None

__all__ = [
    "Finding",
    "REDACTION_FORMAT",
    "find_secrets",
    "redact_result",
    "redact_text",
    "redact_value",
    "rule_ids",
    "secret_name",
    "shannon_entropy",
]

#: How a secret is replaced; ``{rule}`` is the id of the rule that found it.
REDACTION_FORMAT = "[REDACTED:{rule}]"

# Regions searched around a keyword occurrence, for rules that are not anchored at it. Wide enough
# for gitleaks' longest contexts (Kubernetes secrets: 300 characters before the keyword; private
# keys and long tokens after it).
_WINDOW_BEFORE = 512
_WINDOW_AFTER = 4096
_WINDOW_SLACK = 1024

_PRAGMAS = ("pragma: allowlist secret", "gitleaks:allow")
_REDACTED_RE = re.compile(r"\[REDACTED:[\w.-]+\]")

# gitleaks' generic rule template starts with an identifier, then one of the rule's names. The
# identifier part only widens the match to the left (the secret is a later group); in Python's
# backtracking engine it costs 50 steps per position, so it is stripped and given back only where
# an allowlist looks at the whole match.
_IDENT_PREFIX = "[\\w.-]{0,50}?"
_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@attrs.frozen(kw_only=True)
class Finding:
    """A secret in a text: the rule that found it and the span ``text[start:end]`` it covers."""

    rule_id: str
    start: int
    end: int


def shannon_entropy(value: str) -> float:
    """Bits of Shannon entropy per character of ``value`` (0 for the empty string)."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _line_of(text: str, start: int, end: int) -> str:
    lo = text.rfind("\n", 0, start) + 1
    hi = text.find("\n", end)
    return text[lo : len(text) if hi == -1 else hi]


# ---------------------------------------------------------------------------------------------
# Allowlists
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class _Allowlist:
    condition: str
    target: str
    regexes: tuple[re.Pattern[str], ...]
    stopwords: tuple[str, ...]
    has_paths: bool

    @classmethod
    def load(cls, raw: Mapping[str, Any]) -> _Allowlist:
        return cls(
            condition=str(raw.get("condition", "OR")).upper(),
            target=str(raw.get("regex_target", "secret")),
            regexes=tuple(re.compile(rx) for rx in raw.get("regexes", ())),
            stopwords=tuple(raw.get("stopwords", ())),
            has_paths=bool(raw.get("paths")),
        )

    def allows(self, secret: str, match: Callable[[], str], line: Callable[[], str]) -> bool:
        checks: list[bool] = []
        if self.has_paths:
            checks.append(False)  # tool output has no file path to match
        if self.regexes:
            target = (
                secret if self.target == "secret" else match() if self.target == "match" else line()
            )
            checks.append(any(rx.search(target) for rx in self.regexes))
        if self.stopwords:
            lowered = secret.lower()
            checks.append(any(word in lowered for word in self.stopwords))
        if not checks:
            return False
        return all(checks) if self.condition == "AND" else any(checks)


# Placeholders that no detector of ours reports: template variables, masks, type names, literals.
_PLACEHOLDER_RE = re.compile(
    r"""^(?:
        \$\{?[\w.:-]*\}?                  # $VAR, ${VAR}, ${VAR:-x}
      | \$\(.*\)                          # $(command)
      | \{\{.*\}\}                        # {{ template }}
      | <[^<>]*>                          # <password>
      | %[\w()]*%?[sd]?                   # %s, %(name)s, %VAR%
      | [*xX.•#_-]+                       # ****, xxxx, ...
      | @\w+@                             # @VAR@
      | .*(?:\.\.\.|…).*                  # hf_..., sk-…
      | .*(?:%[sdr]|%\(\w+\)[sdr]|\{\w*\}).*  # a format string: "Bearer %s", "token {}"
      | [A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+     # the name of an environment variable
      | (?i:none|null|nil|true|false|undefined|empty|required|optional|str|string|bytes|int|bool
          |secret|password|passwd|pass|pwd|token|changeme|redacted|hidden|masked|example|dummy
          |test|(?:your|my|the)[_\s-][\w\s-]*)
    )$""",
    re.VERBOSE,
)
_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
_HEX_RE = re.compile(r"^[0-9a-fA-F]+$")


def _is_placeholder(value: str) -> bool:
    return bool(_PLACEHOLDER_RE.match(value) or _REDACTED_RE.search(value))


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


def _windows(positions: list[int], n: int) -> Iterator[tuple[int, int]]:
    """Merged search regions around keyword occurrences (sorted positions)."""
    lo = hi = -1
    for p in positions:
        start, end = max(0, p - _WINDOW_BEFORE), min(n, p + _WINDOW_AFTER)
        if start <= hi:
            hi = max(hi, end)
            continue
        if hi >= 0:
            yield lo, hi
        lo, hi = start, end
    if hi >= 0:
        yield lo, hi


_SPACE_RE = re.compile(r"\s")


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
        self.allowlists = tuple(_Allowlist.load(a) for a in raw.get("allowlists", ()))
        self.global_allowlist = global_allowlist
        self.priority = priority
        regex, self.widen = _strip_identifier_prefix(str(raw["regex"]))
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
        self.pattern = re.compile(regex)

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        if self.anchored:
            last_end = -1
            for p in positions:
                if p < last_end:
                    continue
                m = self.pattern.match(text, p)
                if m is None:
                    continue
                last_end = m.end()
                finding = self._finding(text, m, widen=self.widen)
                if finding is not None:
                    yield finding
            return
        if not positions:
            return
        for lo, hi in _windows(positions, len(text)):
            for m in self.pattern.finditer(text, lo, _extend_to_space(text, hi)):
                finding = self._finding(text, m, widen=self.widen)
                if finding is not None:
                    yield finding

    def _finding(self, text: str, m: re.Match[str], *, widen: bool) -> Finding | None:
        groups = m.groups()
        if groups:
            if self.secret_group:
                if self.secret_group > len(groups):
                    return None
                index = self.secret_group
            else:
                index = next((i for i, g in enumerate(groups, 1) if g), 0)
            start, end = m.span(index)
        else:
            start, end = m.span()
        if start < 0 or start == end:
            return None
        secret = text[start:end]
        if self.entropy and shannon_entropy(secret) <= self.entropy:
            return None

        def whole_match() -> str:
            lo = m.start()
            if widen:  # give back the identifier the anchored pattern left out (up to 50 chars)
                floor = max(0, lo - 50)
                while lo > floor and text[lo - 1] in _IDENT_CHARS:
                    lo -= 1
            return text[lo : m.end()]

        def line() -> str:
            return _line_of(text, m.start(), m.end())

        if self.global_allowlist.allows(secret, whole_match, line):
            return None
        if any(a.allows(secret, whole_match, line) for a in self.allowlists):
            return None
        return Finding(rule_id=self.id, start=start, end=end)


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
        for p in self._starts(text, positions):
            if p < last_end:
                continue
            m = self.pattern.match(text, p)
            if m is None:
                continue
            last_end = m.end()
            start, end = m.span(self.group)
            if start < 0 or start == end or _is_placeholder(text[start:end]):
                continue
            if self.check is not None and not self.check(text, m):
                continue
            yield Finding(rule_id=self.id, start=start, end=end)


class _PrivateKeyRule(_Rule):
    """Whole PEM/OpenSSH private key blocks, BEGIN line through END line."""

    _BEGIN = re.compile(r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----", re.I)
    _END = re.compile(r"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----", re.I)
    # What a key block holds: base64 lines, "Proc-Type: ..." headers, and, inside JSON strings,
    # escaped newlines. Anything else between BEGIN and END means the markers are just text.
    _BODY = re.compile(r"[\sA-Za-z0-9+/=:,.\\-]*")
    _BODY_LINE = re.compile(r"(?:\\[rn]|\r?\n)[ \t]*(?:[A-Za-z0-9+/=]{8,}|[A-Za-z-]+:[^\n]*)")
    _MAX_BLOCK = 65536

    def __init__(self, priority: int) -> None:
        self.id = "private-key"
        self.keywords = ("-----begin",)
        self.priority = priority

    def scan(self, text: str, positions: list[int]) -> Iterator[Finding]:
        last_end = 0
        for p in positions:
            if p < last_end:
                continue
            begin = self._BEGIN.match(text, p)
            if begin is None:
                continue
            stop = begin.end()
            end = self._END.search(text, stop, min(len(text), stop + self._MAX_BLOCK))
            if end is not None and self._BODY.fullmatch(text, stop, end.start()):
                stop = end.end()
            else:
                # No END line (the output was cut off): take the key lines that follow.
                while (line := self._BODY_LINE.match(text, stop)) is not None:
                    stop = line.end()
                if stop == begin.end():
                    continue  # a bare marker, e.g. in code that looks for keys
            last_end = stop
            yield Finding(rule_id=self.id, start=begin.start(), end=stop)


# Names that hold credentials. Strong words count anywhere in the name; weak ones only at its end
# (``max_tokens`` and ``token_count`` are not credentials, ``auth_token`` is).
_STRONG_NAME_RE = re.compile(r"passw(?:or)?d|secret|credential|contrase(?:ñ|n)a", re.I)
_WEAK_NAME_RE = re.compile(
    r"""(?:^|[\W_])(?:pwd|pass|passphrase|token|auth|authorization|cookie|
        (?:api|auth|service|account|db|database|priv|private|client|access|secret|signing
          |encryption|master|session|app|consumer|license)[_.-]?key
        |apikey)$""",
    re.I | re.VERBOSE,
)
# Names that say the value is something else: an id, a length, a location, a pagination cursor...
_NOT_SECRET_NAME_RE = re.compile(
    r"""(?:[\W_](?:id|ids|name|names|type|length|len|size|count|file|path|dir|url|uri|endpoint
        |header|env|var|field|policy|required|enabled|expiry|expires|ttl|timeout|version|prompt
        |label|hint|key_id|format|regex|pattern|placeholder|source|provider|helper|process|method
        |scope|scopes|mode|kind|class|store|manager|backend|strategy)
      |(?:page|next|continuation|csrf|xsrf|cursor|sync|refresh_url|max|num|min)[_.-]?tokens?
      |tokens?[_.-]?(?:type|count|limit|usage|url|uri|endpoint)|keyword|bypass|compass
      |^(?:max|num|total|input|output|prompt|completion)[_.-]?tokens?)$""",
    re.I | re.VERBOSE,
)
_ASSIGNMENT_RE = re.compile(
    r"""(?P<key>[A-Za-z_$@][\w.$@-]{0,79})
        (?:\\?["'])?\]?[ \t]*(?P<sep>:=|=>|\?=|=(?![=>~])|:(?!:))[ \t]*
        (?:!!?[\w/:.-]+[ \t]+)?  # a YAML tag: !!binary, !secret
        (?:\\"(?P<eq>[^"\\\n]{1,512})\\"
          |"(?P<dq>[^"\n]{1,512})"
          |'(?P<sq>[^'\n]{1,512})'
          |`(?P<bq>[^`\n]{1,512})`
          |(?P<bare>[^\s"'`,;]{1,512}))""",
    re.VERBOSE,
)
_CODE_CHARS = frozenset("()[]{}")
_DOTTED_NAME_RE = re.compile(r"^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+$")
_TYPE_NAME_RE = re.compile(r"^[A-Z][A-Za-z]*$")
_SNAKE_NAME_RE = re.compile(r"^[a-z]+(?:_[a-z]+)+$")
_PATH_RE = re.compile(r"^(?:~?/|\./|\.\./)[\w./~+-]*$")


@functools.lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    """True when a variable or field called ``name`` holds a credential (by its name)."""
    if _NOT_SECRET_NAME_RE.search(name):
        return False
    return bool(_STRONG_NAME_RE.search(name) or _WEAK_NAME_RE.search(name))


def _credential_value(value: str, key: str, *, quoted: bool, type_hint: bool) -> bool:
    """True when ``value``, assigned to the credential name ``key``, looks like a real secret."""
    if _is_placeholder(value) or value.lower() == key.lower():
        return False
    if quoted:
        return len(value) >= 4 and not value.isspace()
    if len(value) < 6 or _CODE_CHARS.intersection(value) or _PATH_RE.match(value):
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
        for p in positions:
            start = p
            floor = max(0, p - 64)
            while start > floor and (text[start - 1].isalnum() or text[start - 1] in "_.$@-"):
                start -= 1
            if start in seen_keys or start < last_end:
                continue
            seen_keys.add(start)
            m = _ASSIGNMENT_RE.match(text, start)
            if m is None or not secret_name(m.group("key")):
                continue
            for group in ("eq", "dq", "sq", "bq", "bare"):
                if m.group(group) is not None:
                    break
            value = m.group(group).strip()
            if not _credential_value(
                value, m.group("key"), quoted=group != "bare", type_hint=m.group("sep") == ":"
            ):
                continue
            vstart, vend = m.span(group)
            last_end = vend
            yield Finding(rule_id=self.id, start=vstart, end=vend)


_QUOTED_B64_RE = re.compile(r"""["'](?P<v>[A-Za-z0-9+/_=-]{20,256})\\?["']""")
_ENV_B64_RE = re.compile(r"""=(?P<v>[A-Za-z0-9+/_-]{20,256}={0,2})(?=[ \t]*(?:\r?\n|$|\#))""")
_KEY_BEFORE_RE = re.compile(
    r"""([A-Za-z_$][\w.$-]{0,63})(?:\\?["'])?\]?[ \t]*(?::=|=>|=|:)[ \t]*$"""
)
_ENV_LINE_RE = re.compile(r"""^[ \t]*(?:export[ \t]+)?([A-Za-z_][\w.-]{0,63})$""")
_ID_NAME_RE = re.compile(
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
    return shannon_entropy(value) > HIGH_ENTROPY_LIMIT


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
            line_start = text.rfind("\n", 0, m.start()) + 1
            key = _KEY_BEFORE_RE.search(text, max(line_start, m.start() - 96), m.start())
            if key is None or _ID_NAME_RE.search(key.group(1)):
                continue
            yield Finding(rule_id=self.id, start=m.start("v"), end=m.end("v"))
        for m in _ENV_B64_RE.finditer(text):
            value = m.group("v")
            if not _random_looking(value.rstrip("=")):
                continue
            line_start = text.rfind("\n", 0, m.start()) + 1
            key = _ENV_LINE_RE.match(text[line_start : m.start()])
            if key is None or _ID_NAME_RE.search(key.group(1)):
                continue
            yield Finding(rule_id=self.id, start=m.start("v"), end=m.end("v"))


def _aws_secret_check(text: str, m: re.Match[str]) -> bool:
    return shannon_entropy(m.group(1)) > 3.0


def _own_rules() -> list[_Rule]:
    # Priorities: lower wins on overlap. gitleaks' specific rules sit at 10, its generic one at 50.
    return [
        _PrivateKeyRule(priority=0),
        _RegexRule(
            "aws-access-key-id",
            r"\b((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})\b",
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
            r"""\b[A-Za-z][A-Za-z0-9+.-]{1,30}://[^\s:/?#@'"<>]{1,256}:([^\s/?#@'"<>]{1,256})@""",
            ("://",),
            group=1,
            priority=20,
            back_over=string.ascii_letters + string.digits + "+.-",
        ),
        _KeywordAssignmentRule(priority=30),
        _HighEntropyAssignmentRule(priority=60),
    ]


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
        self.automaton: Any = None
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
            for end, (i, length) in self.automaton.iter(lowered):
                found.setdefault(i, []).append(end - length + 1)
            return found
        for i, keyword in enumerate(self.keywords):
            p = lowered.find(keyword)
            while p != -1:
                found.setdefault(i, []).append(p)
                p = lowered.find(keyword, p + 1)
        return found

    def find(self, text: str) -> list[Finding]:
        if not text:
            return []
        # str.lower keeps lengths except for U+0130, which becomes two code points.
        lowered = text.replace("\u0130", "i").lower()
        occurrences = self._occurrences(lowered)
        findings: list[tuple[int, Finding]] = []
        # gitleaks' prefilter: a rule runs only when one of its keywords is in the text.
        candidates = {r for i in occurrences for r in self.keyword_rules[i]}
        for r in sorted(candidates) + self.always:
            rule = self.rules[r]
            lists = [occurrences[i] for i in self.rule_keywords[r] if i in occurrences]
            if not lists:
                positions: list[int] = []
            elif len(lists) == 1:
                positions = lists[0]
            else:
                positions = sorted(set().union(*lists))
            findings.extend((rule.priority, f) for f in rule.scan(text, positions))
        if not findings:
            return []
        return self._merge(text, findings)

    @staticmethod
    def _merge(text: str, findings: list[tuple[int, Finding]]) -> list[Finding]:
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
        for start, end, _priority, rule_id in merged:
            line = _line_of(text, start, end)
            if any(pragma in line for pragma in _PRAGMAS):
                continue
            if _REDACTED_RE.fullmatch(text[start:end]):
                continue
            result.append(Finding(rule_id=rule_id, start=start, end=end))
        return result


@functools.cache
def _redactor() -> _Redactor:
    source = resources.files("tooldeck_policy").joinpath("rules", "gitleaks_rules.json")
    return _Redactor(json.loads(source.read_text(encoding="utf-8")))


def rule_ids() -> list[str]:
    """Ids of every rule that can appear in a redaction marker."""
    return [rule.id for rule in _redactor().rules]


def find_secrets(text: str) -> list[Finding]:
    """The secrets in ``text``, in order, overlapping findings merged (what gets redacted)."""
    return _redactor().find(text)


# Short strings found clean, remembered: results repeat the same short values (a status, a
# file name, a mode) call after call, and a set lookup is ~100x cheaper than the rule scan.
# Only clean strings are kept, so no secret lingers here; the set is emptied when full.
_CLEAN_MAX_LENGTH = 256
_CLEAN_MAX_ENTRIES = 8192
_clean: set[str] = set()


def redact_text(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<rule-id>]``."""
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
        parts.append(text[cursor : f.start])
        parts.append(REDACTION_FORMAT.format(rule=f.rule_id))
        cursor = f.end
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
        except ValueError:
            pass
        else:
            redacted = redact_value(parsed)
            if redacted is not parsed:
                return json.dumps(redacted, ensure_ascii=False)
    return redact_text(value)


def _redact_mapping(value: Mapping[Any, Any]) -> Any:
    out: dict[Any, Any] | None = None  # a copy, made at the first change only
    for key, item in value.items():
        kind = type(item)
        if kind in _PLAIN:
            continue  # numbers, flags and None: nothing to redact, and no call to find that out
        if kind is str and len(item) <= _CLEAN_MAX_LENGTH and item in _clean:
            new = item  # redact_value's first test, without the call
        else:
            new = redact_value(item)
        # {"password": "hunter2"}: the name is in the key, out of the text rules' sight.
        if (
            isinstance(key, str)
            and isinstance(new, str)
            and new is item
            and secret_name(key)
            and _credential_value(new.strip(), key, quoted=True, type_hint=False)
        ):
            new = _KEYWORD_MARKER
        if new is not item:
            if out is None:
                out = dict(value)
            out[key] = new
    return value if out is None else out


# Types with no text inside: returned as they are without a look (most tool output is these).
_PLAIN = frozenset({int, float, bool, type(None)})


def redact_value(value: Any) -> Any:
    """``value`` with secrets redacted in every string, recursively.

    Walks dicts (and other mappings), lists and tuples; a string that is a JSON document is
    parsed, redacted and serialized again. A string value under a credential-like key
    (``"password"``, ``"api_key"``, ...) is replaced whole. Returns ``value`` itself (the same
    object) when nothing changed, so callers can test for changes with ``is``.
    """
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
        items = [redact_value(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return type(value)(items) if isinstance(value, tuple) else items
    return value


def redact_result(result: ToolResult) -> ToolResult | None:
    """``result`` with secrets redacted in its data, error and metadata; None when it has none.

    Meant for ``tooldeck_process_result``: returning None keeps the hook chain cheap.
    """
    changes: dict[str, Any] = {}
    data = redact_value(result.data)
    if data is not result.data:
        changes["data"] = data
    metadata = redact_value(result.metadata)
    if metadata is not result.metadata:
        changes["metadata"] = metadata
    error = result.error
    if error is not None:
        error_changes: dict[str, Any] = {}
        message = redact_text(error.message)
        if message != error.message:
            error_changes["message"] = message
        if error.suggestion:
            suggestion = redact_text(error.suggestion)
            if suggestion != error.suggestion:
                error_changes["suggestion"] = suggestion
        details = redact_value(error.details)
        if details is not error.details:
            error_changes["details"] = details
        if error_changes:
            changes["error"] = attrs.evolve(error, **error_changes)
    if not changes:
        return None
    return attrs.evolve(result, **changes)
