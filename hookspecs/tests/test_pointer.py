"""``local_ref_target``: the one resolver of local ``$ref``s that the adapters, the schema
plugin and the retriever's tool text share."""

from __future__ import annotations

from typing import Any

import pytest

from tooldeck_hookspecs import local_ref_target

ROOT: dict[str, Any] = {
    "$defs": {"Filters": {"type": "object"}, "a/b": {"type": "string"}, "m~n": {"type": "integer"}},
    "items": [{"type": "null"}, {"type": "boolean"}],
    "with space": {"type": "number"},
}


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("#", ROOT),
        ("#/$defs/Filters", {"type": "object"}),
        ("#/$defs/a~1b", {"type": "string"}),  # RFC 6901: ~1 is "/"
        ("#/$defs/m~0n", {"type": "integer"}),  # and ~0 is "~"
        ("#/items/1", {"type": "boolean"}),
        ("#/with%20space", {"type": "number"}),  # a URI fragment is percent-decoded
    ],
)
def test_local_references_resolve(ref: str, expected: Any) -> None:
    assert local_ref_target(ROOT, ref) == expected


@pytest.mark.parametrize(
    "ref",
    [
        "https://example.invalid/schema.json#/x",  # remote: never fetched
        "other.json#/x",
        "#anchor",  # an anchor: left to the compiler
        "#/$defs/Missing",
        "#/items/2",
        "#/items/-1",
        "#/items/01x",
        "#/items/²",  # str.isdigit() says yes, int() raised ValueError
        "#/items/" + "9" * 5000,  # past int()'s digit limit: raised ValueError
        "#/items/",
        42,
        None,
    ],
)
def test_anything_else_is_none_and_never_raises(ref: Any) -> None:
    assert local_ref_target(ROOT, ref) is None
