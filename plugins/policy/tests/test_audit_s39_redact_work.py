"""Redaction work an attacker can make expensive, and where it runs (audit s39).

Found by a hostile audit (2-core machine, figures printed by a scratch script, not asserted):

- results were redacted on the event loop up to 64 KiB of text, but a character's cost is not
  fixed: 60 KB of quoted tokens took 190 ms, of ``api_key=`` repeated 100 ms, of
  ``aws_secret=<key>`` findings 130 ms, every session on the loop waiting meanwhile;
- ``result_size`` counted only text: 333,000 empty lists (1 MB of JSON, under the output cap)
  were walked on the event loop (0.56 s), and so was a metadata key of any length;
- the name before a quoted value was searched forward (``name...$``) from each of the 96
  characters before every quoted value (3 s per MB of quoted tokens);
- gitleaks' generic-api-key tried every length of its value at every keyword occurrence
  (150 steps per ``key``/``api``/``token``: 1.7 s per MB of ``api_key=`` repeated).

Nothing here is timed: the tests check where the work runs, that the faster forms find exactly
what the slow ones found, and that pathological inputs complete with the right output.
"""

from __future__ import annotations

import random
import re
import string

import pytest
from tooldeck_policy import redact
from tooldeck_policy.redact import (
    OFFLOAD_CHARS,
    needs_offload,
    redact_text,
    result_size,
)

from tooldeck_hookspecs import ToolResult

_RNG = random.Random(3939)
_ALNUM = string.ascii_letters + string.digits


def _r(n: int) -> str:
    return "".join(_RNG.choice(_ALNUM) for _ in range(n))


# ------------------------------------------------------------------------------ where it runs


def test_inline_redaction_is_bounded_like_the_cores_own() -> None:
    # The core and the MCP server redact their own texts inline up to 16 KiB.
    assert OFFLOAD_CHARS <= 16 * 1024
    dense = ('"' + _r(30) + '" ') * (20_000 // 33)  # ~20 KB of quoted tokens
    assert needs_offload(ToolResult.ok(dense))


@pytest.mark.parametrize(
    "data",
    [
        [[] for _ in range(5000)],
        [0] * 5000,
        [{} for _ in range(3000)],
        {f"k{i}": i for i in range(5000)},
        [[[0] * 10] for _ in range(500)],
    ],
    ids=["empty lists", "zeros", "empty dicts", "int values", "nested"],
)
def test_many_items_without_text_are_redacted_off_the_loop(data: object) -> None:
    assert needs_offload(ToolResult.ok(data))


def test_deciding_stops_early_on_a_huge_container() -> None:
    # One container of a million items decides at once, without pushing them all.
    assert result_size(ToolResult.ok([[]] * 1_000_000), OFFLOAD_CHARS) > OFFLOAD_CHARS


def test_metadata_keys_and_entries_count() -> None:
    assert needs_offload(ToolResult.ok(1).with_metadata(**{"k" * 20_000: 1}))
    assert needs_offload(ToolResult.ok("x").with_metadata(**{f"m{i}": "" for i in range(600)}))
    assert not needs_offload(ToolResult.ok("x").with_metadata(elapsed=1, status="ok"))
    assert not needs_offload(ToolResult.ok([1, 2, 3]))


# ------------------------------------------------------------------ the name before a value

_OLD_KEY_BEFORE = re.compile(
    r"""([A-Za-z_$][\w.$-]{0,63})(?:\\?["'])?\]?[ \t]*(?::=|=>|=|:)[ \t]*$"""
)


def test_the_name_read_backwards_is_the_name_the_forward_search_found() -> None:
    alphabet = "ab_1$.-=:>] \t\"'\\xZ"
    for _ in range(20_000):
        text = "".join(_RNG.choice(alphabet) for _ in range(_RNG.randint(0, 24)))
        old = _OLD_KEY_BEFORE.search(text, 0, len(text))
        assert redact._key_before(text, 0, len(text)) == (old.group(1) if old else None), text
    long_name = "a" * 100 + " = "
    assert redact._key_before(long_name, 0, len(long_name)) == "a" * 64


def test_many_quoted_tokens_are_each_judged_by_their_name() -> None:
    tokens = [_r(30) for _ in range(3000)]
    text = "\n".join(f'client_credential = "{t}"  other_id = "{t}"' for t in tokens)
    redacted = redact_text(text)
    assert redacted.count("client_credential = \"[REDACTED:") == len(tokens)
    assert redacted.count("other_id = \"[REDACTED:") == 0  # an id's value is left


# ------------------------------------------------------------------------------ possessive tails


def _generic_rule() -> redact._GitleaksRule:
    rules = [r for r in redact._redactor().rules if r.id == "generic-api-key"]
    assert len(rules) == 1 and isinstance(rules[0], redact._GitleaksRule)
    return rules[0]


def test_generic_api_key_does_not_retry_every_length_of_its_value() -> None:
    pattern = _generic_rule().pattern.pattern
    assert r"[\w.=-]{10,150}+" in pattern and r"[a-z0-9+/]{11,}+" in pattern


def test_possessive_tails_match_exactly_what_the_patterns_matched() -> None:
    pieces = ["api_key", "token", "=", ": ", "a", "Z", "9", "-", ".", "+", "/", "_", " ", "'",
              '"', ";", "\\n", ",", "t1.", "\n", "~", "#", "==", _r(12), _r(40), "x" * 30]
    changed = 0
    for rule in redact._redactor().rules:
        if not isinstance(rule, redact._GitleaksRule):
            continue
        before = redact._quote_bounded_dots(rule._regex)
        after = redact._possessive_tail(before)
        if after == before:
            continue
        changed += 1
        slow, fast = re.compile(before), re.compile(after)
        for _ in range(400):
            text = "".join(_RNG.choice(pieces) for _ in range(_RNG.randint(1, 40)))
            for p in range(0, len(text), 2):
                a, b = slow.match(text, p), fast.match(text, p)
                assert (a is None) == (b is None), (rule.id, text[p:])
                if a is not None and b is not None:
                    assert a.span() == b.span() and a.groups() == b.groups(), (rule.id, text)
    assert changed >= 1


@pytest.mark.parametrize(
    "regex",
    [
        # a class with a blank: the boundary accepts one, so a shorter run can match
        r"(?i)key[ \t]*=([\w .]{10,150})(?:[\x60'\"\s;]|\\[nr]|$|(?=[^\w.~+/=-]))",
        # a boundary that is not the loosened one (\B accepts a word character)
        r"(?i)key=([\w]{10,150})(?:\B|\s|\Z)",
        # a negated class
        r"(?i)key=([^\s]{10,150})(?:[\x60'\"\s;]|\\[nr]|$|(?=[^\w.~+/=-]))",
    ],
)
def test_tails_that_could_give_back_characters_are_left(regex: str) -> None:
    assert redact._possessive_tail(regex) == regex


def test_a_line_of_keywords_completes_with_the_right_output() -> None:
    secret = _r(24)
    text = "api_key=" * 20_000 + f" api_key={secret}\n"
    redacted = redact_text(text)
    assert secret not in redacted
    assert redacted.endswith("api_key=[REDACTED:generic-api-key]\n") or (
        "[REDACTED:" in redacted[-64:]
    )


# ------------------------------------------------------------------------------ the new readers


def test_many_cookie_headers_with_odd_pairs_complete_with_every_session_redacted() -> None:
    sessions = [_r(24) for _ in range(2000)]
    text = "\n".join(f'Cookie: theme="dark"; flag; sid={s}' for s in sessions)
    redacted = redact_text(text)
    assert redacted.count("[REDACTED:cookie]") == len(sessions)
    assert not any(s in redacted for s in sessions[::97])


def test_nested_yaml_blocks_are_walked_once() -> None:
    secret = _r(20)
    text = "password: |\n" + "".join(f"{' ' * (i % 40 + 2)}password: |\n" for i in range(20_000))
    text += f"  {secret}\n"
    redacted = redact_text(text)
    assert secret not in redacted
    assert redacted == "password: |\n  [REDACTED:keyword-assignment]\n"


def test_names_with_no_value_cost_one_bounded_look_each() -> None:
    text = '{"name": "password", ' * 20_000
    assert redact_text(text) == text
    xml = "<password" * 20_000 + ">x</password>"
    assert redact_text(xml) == xml
