"""Counting the JSON values of a raw text before it is parsed.

Parsing multiplies a text's size in memory and costs time in one C call that holds the GIL
(a 9 MB object of a million keys: ~0.8 s, every other session of the deck's loop stalled), so
a text with more values than anything reads must be refused before ``json.loads`` sees it. The
MCP server counts its messages this way, the core a model's tool-call arguments.
"""

from __future__ import annotations

import re
from typing import AnyStr, cast

__all__ = ["json_values"]

#: A JSON string (escapes included), to leave out of the count of values.
_STRING_BYTES_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_STRING_TEXT_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_values(raw: str | bytes | bytearray, limit: int) -> int:
    """About how many JSON values the raw text ``raw`` holds (``{``, ``[`` and ``,`` outside
    strings), without parsing it; the count is exact up to ``limit``, and anything over it is
    some number over ``limit``.

    For valid JSON it is never below the number of items of its objects and arrays (each
    object or array adds one for itself and one per comma: its items, or one when empty).

    A count of the three characters anywhere is an upper bound found at C speed; only a text
    whose bound is over ``limit`` is scanned again, string by string, until the count passes
    ``limit`` (run it off the event loop for long texts). Nothing is copied."""
    if isinstance(raw, str):
        return _count(raw, ("{", "[", ","), _STRING_TEXT_RE, limit)
    # A bytearray is read in place, as bytes (count() and the pattern take either).
    return _count(cast(bytes, raw), (b"{", b"[", b","), _STRING_BYTES_RE, limit)


def _count(raw: AnyStr, marks: tuple[AnyStr, AnyStr, AnyStr], strings: re.Pattern[AnyStr],
           limit: int) -> int:
    brace, bracket, comma = marks
    bound = raw.count(brace) + raw.count(bracket) + raw.count(comma)
    if bound <= limit:
        return bound
    count = 0
    position = 0
    for string in strings.finditer(raw):
        start = string.start()
        count += (raw.count(brace, position, start) + raw.count(bracket, position, start)
                  + raw.count(comma, position, start))
        if count > limit:
            return count
        position = string.end()
    return (count + raw.count(brace, position) + raw.count(bracket, position)
            + raw.count(comma, position))
