"""A big page comes back cut to the result's size limit, never dropped: real Chromium, real deck.

The snapshot's caps count characters (50 000) and links (100), not bytes: 50 000 CJK characters
(150 kB as UTF-8) and 100 links with 3 000-character tracking URLs made a 456 kB result, over
the browser tools' ``max_output_bytes`` of 400 000, and the deck dropped the whole page with
OUTPUT_TRUNCATED. Now the last links go first, then text, until it fits.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tooldeck.testing import make_deck

# Skipped with the reason when Chromium is missing (conftest.py).
pytestmark = pytest.mark.chromium

ENTRY_POINTS = ["schema", "runner", "policy", "browser"]
LONG_QUERY = "u=" + "x" * 3000


def _pages() -> dict[str, bytes]:
    links = "".join(f"<a href='/t?{i}&{LONG_QUERY}'>link {i}</a> " for i in range(100))
    head = "<html><head><meta charset='utf-8'><title>{}</title></head><body><article>"
    return {
        "/big": (head.format("Big") + "<p>" + "漢字" * 30_000 + "</p>" + links
                 + "</article></body></html>").encode(),
        "/cjk": (head.format("Text only") + "<p>" + "漢字" * 100_000 + "</p>"
                 + "</article></body></html>").encode(),
    }


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    pages = _pages()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = pages.get(self.path.split("?")[0], b"<html><title>t</title></html>")
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_page_over_the_size_limit_comes_back_cut(site, tmp_path) -> None:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"browser"}, max_level="moderate")
        big = await session.call("browser_navigate", {"url": site + "/big"})
        cjk = await session.call("browser_navigate", {"url": site + "/cjk"})
    assert big.success, big.error
    data = big.data
    assert data["title"] == "Big" and data["text"].startswith("漢字漢字")
    assert len(data["text"]) == 50_000 and data["truncated"]
    # Some links had to go, the first ones stay, and the result says so.
    assert 0 < len(data["links"]) < 100 and data["link_count"] == 100
    assert data["links_truncated"] and data["links"][0]["text"] == "link 0"
    assert cjk.success, cjk.error
    assert cjk.data["truncated"] and cjk.data["text"].startswith("漢字")
