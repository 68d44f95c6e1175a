"""Local ``$ref`` targets in a JSON Schema: one resolver for every plugin that follows them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

__all__ = ["local_ref_target"]


def _is_index(part: str) -> bool:
    # ASCII digits only: str.isdigit() admits "²" and other digits int() refuses, and a
    # 5,000-digit part would hit int()'s digit limit; both raised ValueError from a hostile schema.
    return 0 < len(part) <= 18 and part.isascii() and part.isdigit()


def local_ref_target(root: Any, ref: Any) -> Any:
    """The node a local ``$ref`` (``#``, or a JSON pointer such as ``#/$defs/Filters``) points
    at in ``root``, or None: remote references, anchors and ``$id``-relative ones are never
    followed here. Pointer parts are URI fragments (RFC 6901 section 6): percent-decoded, then
    ``~1`` and ``~0`` unescaped; list items are named by their index."""
    if not isinstance(ref, str):
        return None
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for part in ref[2:].split("/"):
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and _is_index(part) and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
