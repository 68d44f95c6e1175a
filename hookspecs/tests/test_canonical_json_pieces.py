"""Canonical JSON of what orjson refuses is written piece by piece: the same bytes, keys, hashes.

16 MB of lone surrogates went through one ``json.dumps(..., ensure_ascii=True)`` C call of
~0.3-0.7 s, holding the GIL (and the deck's loop, with every other session) even in a worker
thread. Big values are now written in pieces that let go of it between them; cache keys and
approval hashes of existing entries must not change, so every value of a corpus is written
both ways and compared byte for byte (or exception for exception).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from typing import Any

import pytest

from tooldeck_hookspecs import (
    ExecutionConfig,
    SessionInfo,
    ToolDefinition,
    cache_key,
    canonical_json,
    canonical_json_bytes,
    canonical_json_sha256,
    model,
)


def _former_bytes(value: Any) -> bytes:
    """The former ``canonical_json_bytes`` (one ``json.dumps`` call for what orjson refuses)."""
    import orjson

    def ascii_json(v: Any) -> bytes:
        return json.dumps(
            v, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str
        ).encode("ascii")

    try:
        out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
                           default=str)
    except (orjson.JSONEncodeError, TypeError):
        out = None
    if out is not None and (b"null" not in out or not model._has_non_finite(value)):
        return out
    try:
        return ascii_json(value)
    except ValueError:
        value = model._printable_ints(value)
    except TypeError:
        value = model._text_keys(value)
    try:
        return ascii_json(value)
    except (TypeError, ValueError):
        return ascii_json(model._text_keys(model._printable_ints(value)))


class _Text(str):
    pass


class _Number(int):
    pass


class _Ratio(float):
    pass


class _Listy(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:  # what json.dumps reads of a subclass
        return iter(["overridden"])


class _Dicty(dict):  # type: ignore[type-arg]
    pass


class _Shown:
    def __str__(self) -> str:
        return "shown \ud800 \u00e9"


_ODD_STRINGS = ["\ud800", "\udfff", "\ud83d\ude00", "\U0001f600", "\x00", "\x1f", "\"\\/",
                "\u2028", "\u00e9", "\u200b", "plain", "", "\ud800\udc00", "\ufffe"]


def _string(rng: random.Random) -> str:
    n = rng.choice([0, 1, 3, 20, 100, 16_383, 16_384, 16_385, 40_000])
    alphabet = rng.choice([_ODD_STRINGS, ["a", "b"], _ODD_STRINGS + ["x"] * 10])
    out = "".join(rng.choice(alphabet) for _ in range(min(n, 200)))
    return (out * (n // max(1, len(out)) + 1))[:n] if out else out


def _scalar(rng: random.Random) -> Any:
    return rng.choice([
        lambda: _string(rng), lambda: rng.randrange(-10**30, 10**30), lambda: 10**5000,
        lambda: -(10**5000), lambda: rng.random(), lambda: math.nan, lambda: math.inf,
        lambda: -math.inf, lambda: -0.0, lambda: 1e300, lambda: True, lambda: False,
        lambda: None, lambda: _Text("sub\ud800"), lambda: _Number(7), lambda: _Ratio(0.5),
        lambda: b"bytes", lambda: {1, 2}, lambda: _Shown(), lambda: 2**64,
    ])()


def _key(rng: random.Random) -> Any:
    return rng.choice([
        lambda: _string(rng)[:50], lambda: rng.randrange(-5, 5), lambda: rng.random(),
        lambda: True, lambda: None, lambda: math.nan, lambda: 10**5000, lambda: (1, 2),
        lambda: "k" + str(rng.randrange(100)),
    ])()


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 4 or roll < 0.4:
        return _scalar(rng)
    if roll < 0.6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(0, 6))]
    if roll < 0.65:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randrange(0, 4)))
    if roll < 0.68:
        return _Listy([_value(rng, depth + 1) for _ in range(2)])
    pairs = {}
    keys = [_key(rng) for _ in range(rng.randrange(0, 6))]
    if rng.random() < 0.7:  # mostly sortable: text keys only
        keys = [k for k in keys if isinstance(k, str)] or ["only"]
    for key in keys:
        pairs[key] = _value(rng, depth + 1)
    return _Dicty(pairs) if rng.random() < 0.05 else pairs


def _shown(value: Any) -> str:
    try:
        return repr(value)[:300]
    except ValueError:
        return "<a value holding an integer too long to print>"


def _outcome(function: Any, value: Any) -> Any:
    try:
        return function(value)
    except Exception as exc:
        return type(exc)


@pytest.fixture
def pieces_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every value written piece by piece, whatever its size."""
    monkeypatch.setattr(model, "_ONE_CALL_CHARS", -1)
    monkeypatch.setattr(model, "_ONE_CALL_ITEMS", -1)


def test_pieces_write_what_json_dumps_writes(pieces_always: None) -> None:
    rng = random.Random(44)
    pieced = 0
    for n in range(3000):
        value = _value(rng)
        former = _outcome(model._dumps_ascii, value)
        if isinstance(former, str):
            former = former.encode("ascii")
        got = _outcome(lambda v: b"".join(model._ascii_json(v)), value)
        assert got == former, (n, _shown(value))
        pieced += isinstance(got, bytes)
    assert pieced > 2000


def test_keys_and_hashes_are_the_former_ones(pieces_always: None) -> None:
    rng = random.Random(45)
    tool = ToolDefinition(name="t", description="d", category="api",
                          execution=ExecutionConfig(cacheable=True, cache_context=("workdir",)))
    session = SessionInfo(session_id="s", workdir="/w")
    for n in range(1500):
        arguments = {"a": _value(rng), "b": _string(rng)}
        former = _former_bytes(arguments)
        assert canonical_json_bytes(arguments) == former, n
        assert canonical_json(arguments) == former.decode("utf-8")
        assert canonical_json_sha256(arguments) == hashlib.sha256(former).hexdigest()
        context = {"workdir": "/w"}
        expected = hashlib.sha256(_former_bytes({"a": arguments, "c": context})).hexdigest()
        assert cache_key(tool, arguments, session) == f"t@{tool.version}:{expected}"


def test_circular_and_deep_values_fail_as_before(pieces_always: None) -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    looped: dict[str, Any] = {}
    looped["x"] = [looped]
    for value in (loop, looped):
        assert _outcome(lambda v: b"".join(model._ascii_json(v)), value) is ValueError
        assert _outcome(model._dumps_ascii, value) is ValueError
    deep: Any = "x\ud800"
    for _ in range(sys.getrecursionlimit() + 100):
        deep = [deep]
    assert _outcome(lambda v: b"".join(model._ascii_json(v)), deep) is RecursionError
    assert _outcome(model._dumps_ascii, deep) is RecursionError


def test_a_long_lone_surrogate_string_is_written_in_many_short_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Structural: no single escape call gets more than a slice of the 4 MB string (before: one
    call over all of it), and the key is the one json.dumps gave."""
    calls: list[int] = []
    real = model._escape_ascii

    def escape(text: str) -> str:
        calls.append(len(text))
        return real(text)

    monkeypatch.setattr(model, "_escape_ascii", escape)
    arguments = {"text": "\ud800" * 4_000_000, "n": 2**70}
    former = _former_bytes(arguments)
    assert canonical_json_sha256(arguments) == hashlib.sha256(former).hexdigest()
    assert canonical_json_bytes(arguments) == former
    assert max(calls) <= model._PIECE_CHARS and len(calls) > 200
