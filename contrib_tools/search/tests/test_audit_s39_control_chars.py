"""Titles and snippets of a provider carry no terminal control sequences or bidi overrides."""

from __future__ import annotations

from tooldeck_tools_search._normalize import normalize
from tooldeck_tools_search._providers import RawResult


def test_control_characters_are_removed_from_titles_and_snippets() -> None:
    raw = [RawResult(title="Hi\x1b[2J\x1b]0;pwned\x07 &#27;[31m there",
                     url="https://example.org/a",
                     snippet="a\u202eevil\x00 b\x9b")]
    [item] = normalize(raw, base_url="https://search.example", limit=5)
    assert item["title"] == "Hi[2J]0;pwned [31m there"
    assert item["snippet"] == "aevil b"


def test_javascript_and_file_urls_are_dropped() -> None:
    raw = [RawResult(title="x", url=url, snippet="") for url in
           ("javascript:alert(1)", "file:///etc/passwd", "JaVaScRiPt:alert(1)", "data:text/html,x",
            "https://ok.example/")]
    assert [r["url"] for r in normalize(raw, base_url="https://s.example", limit=9)] == [
        "https://ok.example/"]
