"""``canonical_json`` never raises on arguments a Python caller builds (its docstring's promise):
keys of mixed types that cannot be sorted together (``1`` and ``(1, 2)``) made it raise
``TypeError``, which failed a cacheable call as a ``PLUGIN_ERROR`` of "a stage of the pipeline".
"""

from __future__ import annotations

from tooldeck_hookspecs import canonical_json, canonical_json_bytes


def test_mixed_key_types_are_written_as_text() -> None:
    assert canonical_json({"a": {1: "x", (1, 2): "y"}}) == '{"a":{"(1, 2)":"y","1":"x"}}'


def test_mixed_keys_with_a_huge_integer_and_nan_still_hash() -> None:
    value = {"a": {1: "x", (1, 2): "y", "n": 10**5000, "f": float("nan")}}
    first = canonical_json_bytes(value)
    assert first == canonical_json_bytes(value)
    assert b'"(1, 2)"' in first and b"NaN" in first


def test_a_key_whose_str_fails_is_named_by_its_type() -> None:
    class Odd:
        def __str__(self) -> str:
            raise RuntimeError("no")

        def __lt__(self, other: object) -> bool:
            raise TypeError("no order")

    assert "<Odd>" in canonical_json({Odd(): 1, 2: 3})
