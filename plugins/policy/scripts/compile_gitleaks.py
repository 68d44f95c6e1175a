"""Convert gitleaks' default rule set (Go RE2 syntax) into the rule file tooldeck-policy ships.

Usage::

    python plugins/policy/scripts/compile_gitleaks.py \
        /work/shared/data/security/secrets/gitleaks/gitleaks.toml \
        plugins/policy/src/tooldeck_policy/rules/gitleaks_rules.json

The output keeps, per rule: id, description, regex (translated to Python ``re`` syntax),
keywords (lowercased), entropy, secret_group, path (informational), allowlists; plus the global
allowlist, the source (repository, commit, license) and the rules that were dropped, with why.

Translations from RE2 to Python ``re``:

- a flag group in the middle of a pattern, ``a(?i)bc``, applies in RE2 to the rest of the
  enclosing group; Python only accepts global flags at the very start, so it becomes the scoped
  ``a(?i:bc)`` (one scoped group per alternative when the rest of the group has ``|``);
- ``\\z`` (end of text) becomes ``\\Z``;
- POSIX classes inside brackets (``[[:alnum:]]``) are spelled out (``[a-zA-Z0-9]``).

Every translated pattern is compiled with Python warnings turned into errors (Python warns where
its reading of a character class may differ from RE2's); a rule whose pattern still fails is
dropped and reported.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
import warnings
from pathlib import Path
from typing import Any

SOURCE = {
    "repository": "https://github.com/gitleaks/gitleaks",
    "path": "config/gitleaks.toml",
    "commit": "b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b",
    "license": "MIT (see gitleaks-LICENSE.txt next to this file)",
}

_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "lower": "a-z",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
    "space": r" \t\n\r\f\v",
    "word": r"\w",
    "punct": r"!-/:-@\[-`{-~",
}

_BARE_FLAGS = re.compile(r"\(\?([a-zA-Z]*(?:-[a-zA-Z]+)?)\)")


def _scan(pattern: str) -> list[tuple[int, str]]:
    """Structural tokens of ``pattern`` outside escapes and character classes.

    Returns (index, kind) for kinds ``open`` (``(``), ``close`` (``)``), ``bar`` (``|``).
    """
    tokens: list[tuple[int, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(pattern, i)
            continue
        if c == "(":
            tokens.append((i, "open"))
        elif c == ")":
            tokens.append((i, "close"))
        elif c == "|":
            tokens.append((i, "bar"))
        i += 1
    return tokens


def _class_end(pattern: str, start: int) -> int:
    """Index just past the character class that opens at ``start``."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":  # a leading ] is a literal
        i += 1
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[" and pattern.startswith("[:", i):
            close = pattern.find(":]", i + 2)
            if close != -1:
                i = close + 2
                continue
        if c == "]":
            return i + 1
        i += 1
    raise ValueError(f"unterminated character class at {start} in {pattern!r}")


def _scope_one_flag_group(pattern: str) -> str | None:
    """Rewrite the first mid-pattern bare flag group, or return None when there is none."""
    tokens = _scan(pattern)
    for index, (pos, kind) in enumerate(tokens):
        if kind != "open":
            continue
        m = _BARE_FLAGS.match(pattern, pos)
        if m is None or pos == 0:
            continue
        flags = m.group(1)
        # The rest of the enclosing group: up to its closing paren (or the end of the pattern).
        depth, end, bars = 0, len(pattern), []
        for later_pos, later_kind in tokens[index + 1 :]:
            if later_pos < m.end():
                continue
            if later_kind == "open":
                depth += 1
            elif later_kind == "close":
                if depth == 0:
                    end = later_pos
                    break
                depth -= 1
            elif later_kind == "bar" and depth == 0:
                bars.append(later_pos)
        # RE2 keeps the flag for every later alternative of the group: scope each one.
        pieces, cursor = [], m.end()
        for bar in [*bars, end]:
            segment = pattern[cursor:bar]
            pieces.append(f"(?{flags}:{segment})" if segment else "")
            cursor = bar + 1
        return pattern[:pos] + "|".join(pieces) + pattern[end:]
    return None


def _posix_classes(pattern: str) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in _POSIX_CLASSES:
            raise ValueError(f"unknown POSIX class [:{name}:]")
        return _POSIX_CLASSES[name]

    return re.sub(r"\[:(\w+):\]", repl, pattern)


def translate(pattern: str) -> tuple[str, list[str]]:
    """Translate one RE2 pattern to Python ``re``; returns the pattern and the changes made."""
    notes: list[str] = []
    out = pattern
    if r"\z" in out:
        out = out.replace(r"\z", r"\Z")
        notes.append(r"\z -> \Z")
    if "[:" in out and re.search(r"\[:\w+:\]", out):
        out = _posix_classes(out)
        notes.append("POSIX class spelled out")
    scoped = 0
    while (rewritten := _scope_one_flag_group(out)) is not None:
        out = rewritten
        scoped += 1
    if scoped:
        notes.append(f"{scoped} mid-pattern flag group(s) scoped")
    return out, notes


def _check(pattern: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        re.compile(pattern)


def _allowlist(raw: dict[str, Any], where: str) -> dict[str, Any]:
    regexes = []
    for rx in raw.get("regexes", []):
        translated, _ = translate(rx)
        _check(translated)
        regexes.append(translated)
    paths = []
    for rx in raw.get("paths", []):
        translated, _ = translate(rx)
        _check(translated)
        paths.append(translated)
    return {
        "description": raw.get("description", ""),
        "condition": raw.get("condition", "OR").upper(),
        "regex_target": raw.get("regexTarget", "secret"),
        "regexes": regexes,
        "stopwords": [w.lower() for w in raw.get("stopwords", [])],
        "paths": paths,
    }


def compile_rules(config: dict[str, Any]) -> dict[str, Any]:
    """The shipped rule document for a parsed gitleaks configuration."""
    rules: list[dict[str, Any]] = []
    dropped: list[dict[str, str]] = []
    translated_ids: dict[str, list[str]] = {}
    for raw in config["rules"]:
        rule_id = raw["id"]
        if "regex" not in raw:
            dropped.append(
                {
                    "id": rule_id,
                    "reason": "path-only rule (matches file names); tool output has none",
                }
            )
            continue
        try:
            regex, notes = translate(raw["regex"])
            _check(regex)
            allowlists = [_allowlist(a, rule_id) for a in raw.get("allowlists", [])]
        except (re.error, ValueError, FutureWarning, DeprecationWarning) as exc:
            dropped.append({"id": rule_id, "reason": f"does not translate: {exc}"})
            continue
        if notes:
            translated_ids[rule_id] = notes
        rules.append(
            {
                "id": rule_id,
                "description": raw.get("description", ""),
                "regex": regex,
                "keywords": sorted({k.lower() for k in raw.get("keywords", [])}),
                "entropy": float(raw.get("entropy", 0.0)),
                "secret_group": int(raw.get("secretGroup", 0)),
                "path": raw.get("path"),
                "allowlists": allowlists,
            }
        )
    glob = config.get("allowlist", {})
    global_allowlist = _allowlist(
        {"regexes": glob.get("regexes", []), "stopwords": glob.get("stopwords", [])}, "global"
    )
    return {
        "source": SOURCE,
        "min_version": config.get("minVersion"),
        "rule_count": len(rules),
        "global_allowlist": global_allowlist,
        "rules": rules,
        "translated": translated_ids,
        "dropped": dropped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("toml", type=Path)
    parser.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    config = tomllib.loads(args.toml.read_text(encoding="utf-8"))
    document = compile_rules(config)
    args.output.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", "utf-8")
    print(
        f"{document['rule_count']} rules shipped, {len(document['translated'])} translated, "
        f"{len(document['dropped'])} dropped",
        file=sys.stderr,
    )
    for item in document["dropped"]:
        print(f"  dropped {item['id']}: {item['reason']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
