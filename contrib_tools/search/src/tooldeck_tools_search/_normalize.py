"""Turning a provider's results into the same clean list, whoever answered.

Titles and snippets lose their HTML (Brave marks matches with ``<strong>``) and entities, and are
capped; URLs are made absolute against the provider's endpoint and kept only when http(s); results
with the same URL (fragment and trailing slash aside) are kept once; the list is cut at the count
asked for.
"""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

from ._providers import RawResult

__all__ = ["MAX_SNIPPET_CHARS", "MAX_TITLE_CHARS", "MAX_URL_CHARS", "normalize", "strip_html"]

MAX_TITLE_CHARS = 300
MAX_SNIPPET_CHARS = 600

# A tag cannot hold '<': '<[^>]*>' read to the end of the text from every '<' of a title that
# never closed one (64,000 '<' took 2.5 s, quadratic).
_TAG = re.compile(r"<[^<>]*>")
_SPACE = re.compile(r"\s+")
#: Control characters other than whitespace (ESC of ANSI sequences, NUL, C1 controls,
#: bidirectional overrides): a provider's title must not repaint the terminal that shows it or
#: reorder what the model and the user read.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_HIDDEN = re.compile(r"<(script|style)\b[^<>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
#: How much of a field is read at most, per character kept: markup and entities shrink, but a
#: provider's field is never read past this (a hostile one sent 4 MB titles).
_READ_FACTOR = 16
#: The longest URL kept: a longer one is not a result a model can use (and one of 250 kB lost
#: the whole search to the output cap).
MAX_URL_CHARS = 2048


def strip_html(text: str, limit: int) -> str:
    """Plain text of an HTML fragment: no tags, entities decoded, whitespace collapsed, capped
    (with an ellipsis when cut). At most ``16 * limit`` characters of it are read."""
    text = text[: max(limit, 1) * _READ_FACTOR]
    text = _HIDDEN.sub(" ", text)
    text = html.unescape(_TAG.sub(" ", text))
    text = _CONTROL.sub("", text)  # after unescaping: &#27; is an ESC too
    # Markup inside entities (&lt;b&gt;) is text the page meant to show; leave it.
    text = _SPACE.sub(" ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def _dedupe_key(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/") or "/"
    return urllib.parse.urlunsplit(
        (parts.scheme.lower(), parts.netloc.lower(), path, parts.query, "")
    )


def normalize(raw: Iterable[RawResult], *, base_url: str, limit: int) -> list[dict[str, Any]]:
    """Clean, absolute, deduplicated results, at most ``limit`` of them."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in raw:
        url = item.url.strip()
        if not url or len(url) > MAX_URL_CHARS:
            continue
        try:
            url = urllib.parse.urljoin(base_url, url)
            parts = urllib.parse.urlsplit(url)
        except ValueError:
            continue
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            continue
        key = _dedupe_key(url)
        if key in seen:
            continue
        seen.add(key)
        out.append({
            "title": strip_html(item.title, MAX_TITLE_CHARS) or parts.hostname,
            "url": url,
            "snippet": strip_html(item.snippet, MAX_SNIPPET_CHARS),
            "source": parts.hostname,
        })
        if len(out) >= limit:
            break
    return out
