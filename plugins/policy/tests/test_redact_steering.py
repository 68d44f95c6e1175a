"""Tool output cannot steer redaction: allow markers, stopwords, allowlist regexes, entropy.

The model can make a command rewrite every line of what it prints (``awk '{print $0, "#
gitleaks:allow"}' .env``). Every fixture secret and every generated gitleaks sample must stay
redacted whatever the output adds around it.
"""

from __future__ import annotations

import importlib.util
import random
import string
from pathlib import Path
from types import ModuleType

import pytest
from tooldeck_policy.redact import find_secrets, redact_text


def _sibling(name: str) -> ModuleType:
    # The suite runs with --import-mode=importlib: test modules are not importable by name.
    spec = importlib.util.spec_from_file_location(
        f"_policy_tests_{name}", Path(__file__).with_name(f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fixtures = _sibling("test_redact_fixtures")
_generated = _sibling("test_redact_generated")
DS, POSITIVES, SECRETS, read = _fixtures.DS, _fixtures.POSITIVES, _fixtures.SECRETS, _fixtures.read
RULES, generated, handmade_tokens = (
    _generated.RULES,
    _generated.generated,
    _generated.handmade_tokens,
)

pytestmark = pytest.mark.skipif(not SECRETS.is_dir(), reason="security corpora not available")

# Inline markers of gitleaks, detect-secrets, bandit, trufflehog, ggshield, semgrep, ruff...
MARKERS = [
    "# gitleaks:allow",
    "// gitleaks:allow",
    "gitleaks:allow",
    "<!-- gitleaks:allow -->",
    "# pragma: allowlist secret",
    "# pragma: allowlist nextline secret",
    "# pragma: whitelist secret",
    "# nosec",
    "# nosec B105",
    "# noqa",
    "# trufflehog:ignore",
    "# ggignore",
    "# nosemgrep",
    "# detect-secrets: ignore",
    "# lgtm",
]

# Text pasted straight after (or before) the secret to trip a stopword, an allowlist regex, a
# placeholder pattern or the entropy threshold.
SUFFIXES = [
    "example",
    "_example",
    "abcdefghijklmnopqrstuvwxyz",
    "014df517-39d1-4453-b7b3-9930c563627c",
    "false",
    "null",
    "...",
    "…",
    "%s",
    "{}",
    "[REDACTED:x]",
    "_author",
    ":x",
    "a" * 60,
    "ab" * 40,
    " --mount=type=secret,",
    " import { a } from 'b'",
]
PREFIXES = ["author_", "--mount=type=secret,", "import { a } from 'b' ", "x ", "# "]


def _fixture_cases() -> list[tuple[str, str]]:
    return [(read(DS / name), secret) for name, secret in POSITIVES] + [
        (read(SECRETS / "gitleaks" / "env.prod.txt"), "8ae31cacf141669ddfb5da")
    ]


def _generated_cases() -> list[tuple[str, str]]:
    cases = [s for s in (generated(rule) for rule in RULES) if s is not None]
    cases += [(f"TOKEN={t}\n", t) for _, t in handmade_tokens(random.Random(5))]
    return cases


def _every_line(text: str, edit: str, where: str) -> str:
    lines = text.split("\n")
    if where == "end":
        return "\n".join(line + edit if line else line for line in lines)
    return "\n".join(edit + line if line else line for line in lines)


@pytest.mark.parametrize("marker", MARKERS)
def test_allow_markers_appended_to_every_line_change_nothing(marker: str) -> None:
    leaked = []
    for text, secret in _fixture_cases() + _generated_cases():
        assert secret in text
        # glued to the line too: print $0 "#gitleaks:allow"
        for spaced in (" " + marker, "  " + marker, "\t" + marker, marker):
            if secret in redact_text(_every_line(text, spaced, "end")):
                leaked.append((secret[:12], spaced))
        # ... and on the line before (detect-secrets' "nextline" form)
        if secret in redact_text(marker + "\n" + text.replace("\n", "\n" + marker + "\n")):
            leaked.append((secret[:12], "line before"))
    assert leaked == []


def test_fixture_lines_with_the_fixtures_own_pragma_are_redacted() -> None:
    text = read(DS / "file_with_secrets.py.txt")
    assert "pragma: allowlist secret" in text
    assert "f6CGV4aMM9zedoh3OUNbSakBymo7yplB" not in redact_text(text)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_text_pasted_after_each_line_does_not_excuse_a_secret(suffix: str) -> None:
    leaked = []
    for text, secret in _fixture_cases() + _generated_cases():
        for edit in (suffix, " " + suffix):  # glued to the value, and after a blank
            redacted = redact_text(_every_line(text, edit, "end"))
            if secret in redacted:
                leaked.append((secret[:16], edit, redacted[:160]))
    assert leaked == []


@pytest.mark.parametrize("prefix", PREFIXES)
def test_text_pasted_before_each_line_does_not_excuse_a_secret(prefix: str) -> None:
    leaked = []
    for text, secret in _fixture_cases() + _generated_cases():
        redacted = redact_text(_every_line(text, prefix, "start"))
        if secret in redacted:
            leaked.append((secret[:16], redacted[:160]))
    assert leaked == []


def _rand(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def test_stopword_next_to_a_generic_key_is_not_an_excuse() -> None:
    rng = random.Random(3)
    for _ in range(20):
        key = _rand(rng, 24)
        for text in (
            f"api_key={key}example\n",
            f"api_key=example{key}\n",
            f"client_secret: {key}abcdefghijklmnopqrstuvwxyz\n",
            f'"auth_token": "{key}_test_dummy"\n',
        ):
            assert key not in redact_text(text), text


def test_stopwords_and_placeholders_still_excuse_what_they_explain() -> None:
    # Precision kept: placeholders made of stopwords and low-entropy filler are not secrets.
    for text in (
        "api_version = 'v2-example'\n",
        "token: ${GITHUB_TOKEN}\n",
        "password = '{{ vault_password }}'\n",
        "Authorization: Bearer %s\n",
        "TOKEN=ghp_...\n",
        "password: <your password>\n",
    ):
        assert find_secrets(text) == [], text


def test_entropy_padding_does_not_hide_a_generic_secret() -> None:
    rng = random.Random(4)
    for _ in range(20):
        key = _rand(rng, 20)
        for pad in ("a" * 80, "ab" * 60, "x" * 130):
            text = f"secret_value = {key}{pad}\n"
            assert key not in redact_text(text), text


def test_a_rejected_match_does_not_hide_the_real_name_after_it() -> None:
    # "secret," is an operator-less name gitleaks' generic rule accepts; its allowlisted match
    # must not swallow the real assignment that follows.
    key = _rand(random.Random(6), 24)
    for text in (f"--mount=type=secret,API_KEY={key}\n", f"secret,TOKEN={key}\n"):
        assert key not in redact_text(text), text
