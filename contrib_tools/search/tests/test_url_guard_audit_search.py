"""web_search never follows a provider's redirect, so a provider (or whoever answers in its name)
cannot send the request, or the API key riding on it, to an address the deployment did not choose.

The "provider" is a loopback server that answers every request with a redirect to a canary on
another loopback port; the canary records whatever reaches it. Through a real deck.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tooldeck.testing import make_deck

ENTRY_POINTS = ["schema", "runner", "search"]


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return server


@pytest.fixture
def redirecting(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[str], dict[str, Any]]]:
    """A provider that redirects everything to a canary; the canary's hits and the settings."""
    hits: list[str] = []
    state: dict[str, Any] = {"status": 302}

    class Canary(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _hit(self) -> None:
            hits.append(f"{self.command} {self.path} key={self.headers.get('X-Subscription-Token')}"
                        f" auth={self.headers.get('Authorization')}")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "15")
            self.end_headers()
            self.wfile.write(b'{"results": []}')

        do_GET = _hit  # http.server's naming
        do_POST = _hit

    canary = _serve(Canary)
    target = f"http://127.0.0.1:{canary.server_address[1]}/stolen"

    class Provider(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _redirect(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(state["status"])
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = _redirect
        do_POST = _redirect

    provider = _serve(Provider)
    base = f"http://127.0.0.1:{provider.server_address[1]}"
    for name in ("TOOLDECK_SEARCH_PROVIDER", "SEARXNG_URL", "BRAVE_API_KEY", "TAVILY_API_KEY",
                 "BRAVE_SEARCH_URL", "TAVILY_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SEARXNG_URL", base)
    monkeypatch.setenv("BRAVE_API_KEY", "audit-brave-key")
    monkeypatch.setenv("BRAVE_SEARCH_URL", base + "/brave")
    monkeypatch.setenv("TAVILY_API_KEY", "audit-tavily-key")
    monkeypatch.setenv("TAVILY_URL", base + "/tavily")
    try:
        yield hits, state
    finally:
        for server in (provider, canary):
            server.shutdown()
            server.server_close()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_provider_redirects_are_not_followed(
    redirecting: tuple[list[str], dict[str, Any]], status: int
) -> None:
    hits, state = redirecting
    state["status"] = status
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session()
        for provider in ("searxng", "brave", "tavily"):
            result = await session.call("web_search", {"query": f"audit {provider} {status}",
                                                       "provider": provider})
            assert not result.success, provider
            assert f"HTTP {status}" in result.error.message
    assert hits == []
