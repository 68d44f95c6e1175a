"""browser_navigate gets the time its timeout_s promises, through the whole deck and real Chromium.

The guarding proxy used to give an origin 30 s to start its answer, whatever the call's timeout_s
(up to 90 s): a page answering after 30.8 s was cut by the proxy, Chromium sent the request again,
and the call ended with TIMEOUT at its full timeout_s without ever seeing the first answer.
"""

from __future__ import annotations

import http.server
import select
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from tooldeck.testing import make_deck

# Skipped with the reason when Chromium is missing (conftest.py).
pytestmark = pytest.mark.chromium

ENTRY_POINTS = ["schema", "runner", "policy", "browser"]
#: Just over the proxy's old 30 s wait for an answer's head.
SLOW_S = 30.8


class _Origin:
    def __init__(self) -> None:
        self.requests: list[str] = []
        self.client_gone: list[str] = []
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path not in ("/slow", "/hang"):
                    self.send_error(404)  # /favicon.ico
                    return
                origin.requests.append(self.path)
                delay = SLOW_S if self.path == "/slow" else 20.0
                # Wait for the delay, or until the proxy closes its side (the browser gave up).
                readable, _, _ = select.select([self.connection], [], [], delay)
                if readable and not self.connection.recv(1, 0):
                    origin.client_gone.append(self.path)
                    return
                body = b"<html><head><title>Slow page</title></head><body>it came</body></html>"
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"


@pytest.fixture
def origin(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Origin]:
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    served = _Origin()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()


async def test_a_page_slower_than_30_s_loads_within_its_timeout(origin, tmp_path) -> None:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"browser"}, max_level="moderate")
        result = await session.call(
            "browser_navigate", {"url": origin.url + "/slow", "timeout_s": 45}
        )
    assert result.success, result.error
    assert result.data["title"] == "Slow page" and "it came" in result.data["text"]
    # One request: the proxy did not drop it and make the browser send it again.
    assert origin.requests == ["/slow"]


async def test_the_origin_connection_ends_when_the_browser_gives_up(origin, tmp_path) -> None:
    # The proxy's long wait for an answer is no leak: the call's own timeout ends it.
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"browser"}, max_level="moderate")
        result = await session.call(
            "browser_navigate", {"url": origin.url + "/hang", "timeout_s": 1.5}
        )
        assert not result.success and result.error.code == "TIMEOUT", result
        started = time.monotonic()
        while "/hang" not in origin.client_gone and time.monotonic() - started < 15:
            await trio.sleep(0.1)
    assert origin.client_gone == ["/hang"]
