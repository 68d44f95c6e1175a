"""The RE2 -> Python translation of scripts/compile_gitleaks.py, and the shipped rule file."""

from __future__ import annotations

import importlib.util
import json
import re
from importlib import resources
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compile_gitleaks.py"
_spec = importlib.util.spec_from_file_location("compile_gitleaks", SCRIPT)
assert _spec is not None and _spec.loader is not None
compile_gitleaks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compile_gitleaks)


@pytest.mark.parametrize(
    ("re2", "python"),
    [
        (r"\b(p8e-(?i)[a-z0-9]{32})", r"\b(p8e-(?i:[a-z0-9]{32}))"),
        (r"x(?i)ab|cd", r"x(?i:ab)|(?i:cd)"),
        (r"(?:a(?i)b|c)d", r"(?:a(?i:b)|(?i:c))d"),
        (r"sk_[\w]{3}(?:\s|\z)", r"sk_[\w]{3}(?:\s|\Z)"),
        (r"\bpat[[:alnum:]]{14}\b", r"\bpat[a-zA-Z0-9]{14}\b"),
        (r"(?i)plain[a-z]{3}", r"(?i)plain[a-z]{3}"),
        (r"[(?i)]x(?i)y", r"[(?i)]x(?i:y)"),
    ],
)
def test_translate(re2: str, python: str) -> None:
    translated, _notes = compile_gitleaks.translate(re2)
    assert translated == python
    re.compile(translated)


def test_flag_scope_keeps_re2_semantics() -> None:
    translated, _ = compile_gitleaks.translate(r"AB(?i)cd|ef")
    pattern = re.compile(translated)
    assert pattern.fullmatch("ABCD") and pattern.fullmatch("EF") and pattern.fullmatch("ABcd")
    assert not pattern.fullmatch("abcd")


def test_shipped_rule_file() -> None:
    document = json.loads(
        resources.files("tooldeck_policy").joinpath("rules", "gitleaks_rules.json").read_text()
    )
    assert document["source"]["commit"] == "b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b"
    assert document["rule_count"] == len(document["rules"]) == 221
    assert [d["id"] for d in document["dropped"]] == ["pkcs12-file"]
    for rule in document["rules"]:
        re.compile(rule["regex"])
        assert rule["keywords"] == sorted(k.lower() for k in rule["keywords"])
    license_file = resources.files("tooldeck_policy").joinpath("rules", "gitleaks-LICENSE.txt")
    assert "MIT License" in license_file.read_text()


def test_module_patterns_compile_at_first_use_and_match_as_compiled() -> None:
    """The redactor's module-level patterns are compiled lazily (start-up of `tooldeck call`);
    a fresh one is uncompiled, then answers exactly as ``re.compile`` of its source does."""
    from tooldeck_policy import redact

    lazy = redact._lazy_re(r"(?P<key>\w+)=(?P<v>\d+)", re.I)
    assert "compiled" not in vars(lazy)
    text = "a=1, B=22; c=x"
    eager = re.compile(r"(?P<key>\w+)=(?P<v>\d+)", re.I)
    assert [m.groupdict() for m in lazy.finditer(text)] == [
        m.groupdict() for m in eager.finditer(text)
    ]
    assert vars(lazy)["compiled"].pattern == eager.pattern
    assert lazy.sub("-", text) == eager.sub("-", text)
    assert lazy.search("zz=9").group("v") == "9"
    assert lazy.fullmatch("a=1") and not lazy.fullmatch("a=1 ")
    assert lazy.flags == eager.flags and lazy.groupindex == eager.groupindex
    # Every module-level pattern is lazy and compiles to a valid regex.
    patterns = [v for v in vars(redact).values() if isinstance(v, redact._LazyPattern)]
    assert len(patterns) >= 20
    for pattern in patterns:
        assert isinstance(pattern.compiled, re.Pattern)
