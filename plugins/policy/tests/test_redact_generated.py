"""Fake tokens generated at test time from each shipped gitleaks rule, plus a 1 MB benchmark.

No realistic token is committed: every sample is drawn here, from the rule's own pattern, with a
seeded random generator (so failures reproduce), and never written anywhere.
"""

from __future__ import annotations

import json
import random
import re
import re._constants as sre_c  # the parse tree of Python's own regex engine
import re._parser as sre_parse
import string
import sysconfig
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from tooldeck_policy.redact import find_secrets, redact_text

RULES: list[dict[str, Any]] = json.loads(
    resources.files("tooldeck_policy")
    .joinpath("rules", "gitleaks_rules.json")
    .read_text(encoding="utf-8")
)["rules"]

_ALNUM = string.ascii_letters + string.digits
_CATEGORIES = {
    sre_c.CATEGORY_DIGIT: string.digits,
    sre_c.CATEGORY_WORD: _ALNUM,
    sre_c.CATEGORY_SPACE: " ",
    sre_c.CATEGORY_NOT_DIGIT: "abcdefXYZ",
    sre_c.CATEGORY_NOT_WORD: " ",
    sre_c.CATEGORY_NOT_SPACE: _ALNUM,
}


def _set_chars(items: Any) -> list[str]:
    chars: list[str] = []
    negate = False
    for op, av in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            chars.append(chr(av))
        elif op is sre_c.RANGE:
            chars.extend(chr(c) for c in range(av[0], av[1] + 1))
        elif op is sre_c.CATEGORY:
            chars.extend(_CATEGORIES.get(av, ""))
    if negate:
        excluded = set(chars)
        return [c for c in _ALNUM if c not in excluded] or ["~"]
    return chars or ["a"]


def sample_for(pattern: str, rng: random.Random) -> str:
    """A string that ``pattern`` matches: first alternatives, optional parts left out, random
    alphanumerics wherever a class allows them (so that entropy thresholds are met)."""
    out: list[str] = []

    def walk(parsed: Any) -> None:
        for op, av in parsed:
            if op is sre_c.LITERAL:
                out.append(chr(av))
            elif op is sre_c.NOT_LITERAL:
                out.append(rng.choice([c for c in _ALNUM if c != chr(av)]))
            elif op is sre_c.ANY:
                out.append(rng.choice(_ALNUM))
            elif op is sre_c.IN:
                chars = _set_chars(av)
                out.append(rng.choice([c for c in chars if c.isalnum()] or chars))
            elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT):
                lo, hi, sub = av
                count = 0 if lo == 0 else max(lo, min(hi, 24))
                for _ in range(count):
                    walk(sub)
            elif op is sre_c.SUBPATTERN:
                walk(av[3])
            elif op is sre_c.BRANCH:
                walk(av[1][0])
            elif op is sre_c.AT:
                if av is sre_c.AT_BOUNDARY and out and out[-1].isalnum():
                    out.append(" ")
            elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
                pass
            else:
                raise ValueError(f"cannot sample {op}")

    walk(sre_parse.parse(pattern))
    return "".join(out)


def secret_of(rule: dict[str, Any], m: re.Match[str]) -> str:
    if not m.groups():
        return m.group()
    if rule["secret_group"]:
        return m.group(rule["secret_group"])
    return next(g for g in m.groups() if g)


def generated(rule: dict[str, Any]) -> tuple[str, str] | None:
    """(text, secret) for ``rule``, or None when no valid sample can be drawn."""
    try:
        token = sample_for(rule["regex"], random.Random(rule["id"]))
    except ValueError:
        return None
    m = re.search(rule["regex"], token)
    if m is None:
        return None
    # gitleaks only runs a rule when one of its keywords is in the text: give it a line with one
    # when the token does not carry it (e.g. Airtable tokens, named only by the variable).
    context = (
        "" if any(k in token.lower() for k in rule["keywords"]) else f"# {rule['keywords'][0]}\n"
    )
    return f"{context}value: {token}\n", secret_of(rule, m)


@pytest.mark.parametrize("rule", RULES, ids=[r["id"] for r in RULES])
def test_generated_token_is_redacted(rule: dict[str, Any]) -> None:
    sample = generated(rule)
    if sample is None:
        pytest.skip("no sample can be generated from this pattern")
    text, secret = sample
    redacted = redact_text(text)
    assert secret not in redacted, f"{rule['id']} left its secret in {redacted!r}"


def test_generated_tokens_are_attributed_to_their_rule() -> None:
    generated_count, attributed, missed = 0, 0, []
    for rule in RULES:
        sample = generated(rule)
        if sample is None:
            continue
        generated_count += 1
        if any(f.rule_id == rule["id"] for f in find_secrets(sample[0])):
            attributed += 1
        else:
            missed.append(rule["id"])
    print(
        f"\ngenerated {generated_count}/{len(RULES)}, attributed {attributed}, other rule: {missed}"
    )
    # Overlapping rules (aws-access-token vs our aws-access-key-id, bittrex key/secret) may take
    # the credit; the token is redacted either way (previous test).
    assert generated_count >= len(RULES) - 5
    assert attributed >= generated_count - 5


def _fake(alphabet: str, n: int, rng: random.Random) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def handmade_tokens(rng: random.Random) -> Iterator[tuple[str, str]]:
    """(rule id expected, token) built from each provider's documented prefix and alphabet."""
    b32 = string.ascii_uppercase + "234567"
    yield "github-pat", "ghp_" + _fake(_ALNUM, 36, rng)
    yield "github-oauth", "gho_" + _fake(_ALNUM, 36, rng)
    yield "github-fine-grained-pat", "github_pat_" + _fake(_ALNUM + "_", 82, rng)
    yield "aws-access-key-id", "AKIA" + _fake(b32, 16, rng)
    yield "gitlab-pat", "glpat-" + _fake(_ALNUM, 20, rng)
    yield (
        "slack-bot-token",
        "xoxb-"
        + _fake(string.digits, 12, rng)
        + "-"
        + _fake(string.digits, 12, rng)
        + "-"
        + _fake(_ALNUM, 24, rng),
    )
    yield "stripe-access-token", "sk_live_" + _fake(_ALNUM, 32, rng)
    yield "npm-access-token", "npm_" + _fake(string.ascii_lowercase + string.digits, 36, rng)
    yield "gcp-api-key", "AIza" + _fake(_ALNUM + "_-", 35, rng)
    yield "anthropic-api-key", "sk-ant-api03-" + _fake(_ALNUM + "_-", 93, rng) + "AA"
    yield (
        "openai-api-key",
        "sk-proj-" + _fake(_ALNUM, 74, rng) + "T3BlbkFJ" + _fake(_ALNUM, 74, rng),
    )
    yield (
        "jwt",
        "eyJ"
        + _fake(_ALNUM, 30, rng)
        + ".eyJ"
        + _fake(_ALNUM, 40, rng)
        + "."
        + _fake(_ALNUM + "_-", 43, rng),
    )


def test_handmade_tokens_in_prose_json_and_env() -> None:
    rng = random.Random(7)
    for rule_id, token in handmade_tokens(rng):
        for text in (
            f"Deploy finished; used {token} for auth.",
            json.dumps({"result": {"headers": {"x-token": token}}}),
            f"SOME_VAR={token}\n",
        ):
            redacted = redact_text(text)
            assert token not in redacted, (rule_id, text)
        ids = {f.rule_id for f in find_secrets(f"token {token} end")}
        assert ids == {rule_id}


def _mixed_megabyte(with_secrets: bool) -> tuple[str, list[str]]:
    """About 1 MB of Python source, logs and JSON; with a generated secret every ~2 KB."""
    rng = random.Random(1)
    parts: list[str] = []
    size = 0
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = sorted(stdlib.glob("*.py"))
    samples = [s for s in (generated(r) for r in RULES) if s is not None]
    secrets: list[str] = []
    i = 0
    while size < 1_000_000:
        chunk = sources[i % len(sources)].read_text(encoding="utf-8", errors="replace")[:1500]
        log = (
            f"2026-12-02T14:{i % 60:02d}:00Z INFO request_id={rng.getrandbits(64):x} "
            f"sha={rng.getrandbits(160):040x} user=bob path=/api/v1/items status=200\n"
        )
        blob = json.dumps({"id": i, "name": f"item {i}", "tags": ["a", "b"], "ok": True}) + "\n"
        parts.extend((chunk, log, blob))
        size += len(chunk) + len(log) + len(blob)
        if with_secrets:
            text, secret = samples[i % len(samples)]
            parts.append(text)
            secrets.append(secret)
            size += len(text)
        i += 1
    return "".join(parts), secrets


def test_benchmark_redact_one_megabyte() -> None:
    """Reports timings (printed, never asserted) and checks every planted secret went away."""
    figures = {}
    for label, with_secrets in (("plain", False), ("with secrets", True)):
        text, secrets = _mixed_megabyte(with_secrets)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            redacted = redact_text(text)
            best = min(best, time.perf_counter() - start)
        figures[label] = (len(text), len(secrets), best)
        for secret in secrets:
            assert secret not in redacted
    for label, (size, count, seconds) in figures.items():
        print(
            f"\nredact_text {label}: {size / 1e6:.2f} MB, {count} secrets, {seconds * 1000:.1f} ms"
        )
