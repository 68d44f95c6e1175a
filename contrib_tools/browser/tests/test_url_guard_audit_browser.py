"""Ways a page could make the browser reach an address the deployment did not allow.

Real Chromium through a real deck (schema, runner, policy, browser). The allowed page server runs
on 127.0.0.1 and only its port is allowed (``127.0.0.1:PORT``); canaries listen on another port of
127.0.0.1 (TCP and UDP) and on ::1 and record whatever reaches them. Every page signals through its
title when all its attempts have settled, so the tests wait for that instead of for a time.
"""

from __future__ import annotations

import http.server
import ipaddress
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from tooldeck_policy import _urls
from tooldeck_tools_browser import _guard, engine

from tooldeck.testing import make_deck

ENTRY_POINTS = ["schema", "runner", "policy", "browser"]


# Skipped with the reason when Chromium is missing (conftest.py).
needs_chromium = pytest.mark.chromium


@attrs.define
class Canaries:
    """Loopback listeners nobody may reach, and what reached them."""

    tcp4_port: int
    tcp6_port: int
    udp_port: int
    hits: list[tuple[str, bytes]] = attrs.field(factory=list)


def _tcp_canary(
    family: socket.AddressFamily, host: str, name: str, hits: list[Any]
) -> socket.socket:
    server = socket.socket(family, socket.SOCK_STREAM)
    server.bind((host, 0))
    server.listen(64)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    first = conn.recv(512)
                except OSError:
                    first = b""
                hits.append((name, first.split(b"\r\n", 1)[0]))

    threading.Thread(target=serve, daemon=True).start()
    return server


def _udp_canary(hits: list[Any]) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                data, _ = server.recvfrom(4096)
            except OSError:
                return
            hits.append(("udp", data[:20]))

    threading.Thread(target=serve, daemon=True).start()
    return server


def _rtc_page(canaries: Canaries) -> str:
    # STUN and TURN over UDP straight to the canary: WebRTC's sockets are not the page's HTTP
    # stack, so the guarding proxy never sees them; only Chromium's IP handling policy stops them.
    port = canaries.udp_port
    return f"""<!doctype html><title>start</title><script>
const report = {{candidates: [], error: null}};
window.__report = report;
try {{
  const pc = new RTCPeerConnection({{iceServers: [
    {{urls: "stun:127.0.0.1:{port}"}},
    {{urls: "turn:127.0.0.1:{port}?transport=udp", username: "u", credential: "c"}}]}});
  pc.onicecandidate = (e) => {{ if (e.candidate) report.candidates.push(e.candidate.candidate); }};
  pc.onicegatheringstatechange = () => {{
    if (pc.iceGatheringState === "complete") document.title = "done";
  }};
  pc.createDataChannel("d");
  pc.createOffer().then((offer) => pc.setLocalDescription(offer));
}} catch (e) {{ report.error = String(e); document.title = "done"; }}
</script>"""


def _channels_page(canaries: Canaries) -> str:
    q, r = canaries.tcp4_port, canaries.tcp6_port
    return f"""<!doctype html><title>start</title><body><script>
const waits = [];
const settled = (el) => new Promise((ok) => {{ el.onload = el.onerror = () => ok(); }});
const img = (src) => {{ const i = new Image(); const p = settled(i); i.src = src; return p; }};
const frame = (src) => {{
  const f = document.createElement("iframe"); const p = settled(f); f.src = src;
  document.body.appendChild(f); return p;
}};
const socket = (url) => new Promise((ok) => {{
  try {{ const w = new WebSocket(url); w.onopen = w.onerror = w.onclose = () => ok(); }}
  catch (e) {{ ok(); }}
}});
const xhr = (url) => new Promise((ok) => {{
  const x = new XMLHttpRequest(); x.onloadend = () => ok(); x.open("GET", url); x.send();
}});
waits.push(fetch("http://127.0.0.1:{q}/fetch", {{mode: "no-cors"}}).catch(() => 0));
waits.push(fetch("http://[::1]:{r}/fetch6", {{mode: "no-cors"}}).catch(() => 0));
waits.push(fetch("http://localhost:{q}/fetch-localhost", {{mode: "no-cors"}}).catch(() => 0));
waits.push(xhr("http://127.0.0.1:{q}/xhr"));
waits.push(socket("ws://127.0.0.1:{q}/ws"));
waits.push(socket("wss://[::1]:{r}/wss"));
waits.push(socket("ws://localhost:{q}/ws-localhost"));
waits.push(img("http://%31%32%37.0.0.1:{q}/percent"));
waits.push(img("http://0x7f000001:{q}/hex"));
waits.push(img("http://2130706433:{q}/decimal"));
waits.push(img("http://127.0.0.1.:{q}/dot"));
waits.push(img("http://[::ffff:127.0.0.1]:{q}/mapped"));
waits.push(img("http://foo.localhost:{q}/sublocal"));
waits.push(frame("http://[::1]:{r}/iframe"));
waits.push(frame("/redirect-out"));
Promise.allSettled(waits).then(() => {{ document.title = "done"; }});
</script></body>"""


@attrs.define
class Site:
    base: str
    port: int
    canaries: Canaries


def _handler(pages: dict[str, str], redirects: dict[str, str]) -> type[Any]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            if path in redirects:
                self.send_response(302)
                self.send_header("Location", redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = pages.get(path, "<title>none</title>").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    hits: list[tuple[str, bytes]] = []
    tcp4 = _tcp_canary(socket.AF_INET, "127.0.0.1", "tcp4", hits)
    tcp6 = _tcp_canary(socket.AF_INET6, "::1", "tcp6", hits)
    udp = _udp_canary(hits)
    canaries = Canaries(tcp4_port=tcp4.getsockname()[1], tcp6_port=tcp6.getsockname()[1],
                        udp_port=udp.getsockname()[1], hits=hits)
    pages = {"/rtc": _rtc_page(canaries), "/channels": _channels_page(canaries)}
    redirects = {"/redirect-out": f"http://127.0.0.1:{canaries.tcp4_port}/redirected"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(pages, redirects))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        yield Site(base=f"http://127.0.0.1:{port}", port=port, canaries=canaries)
    finally:
        server.shutdown()
        server.server_close()
        for sock in (tcp4, tcp6, udp):
            sock.close()


async def _settled_report(session_id: str, page_id: str, hits: list[Any]) -> Any:
    """Wait (on the engine's loop) until the page says its attempts settled, and return its
    report; or stop early (None) as soon as a canary was reached, which already decides."""

    async def wait() -> Any:
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        page = engine().get_page(session_id, page_id).page
        for _ in range(120):
            if hits:
                return None
            try:
                await page.wait_for_function("document.title === 'done'", timeout=500)
            except PlaywrightTimeout:
                continue
            return await page.evaluate("window.__report || null")
        raise AssertionError("the page never reported that its attempts settled")

    return await engine().run(wait)


async def _open(site: Site, tmp_path: Path, path: str, session_id: str) -> tuple[Any, Any]:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(
            session_id=session_id, workdir=str(tmp_path), max_level="moderate",
            grants={"browser"}, attributes={"url_allow": f"127.0.0.1:{site.port}"},
        )
        result = await session.call("browser_navigate", {"url": site.base + path})
        assert result.success, result.error
        report = await _settled_report(session_id, result.data["page_id"], site.canaries.hits)
        await session.call("browser_close", {"page_id": result.data["page_id"]})
    return result, report


@needs_chromium
async def test_webrtc_sends_no_udp_around_the_proxy(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before the fix the launch flag was misspelled (--force-webrtc-ip-handling-policy, which
    # Chromium does not know): STUN binding and TURN allocate requests reached the UDP canary.
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    site.canaries.hits.clear()
    _, report = await _open(site, tmp_path, "/rtc", "url-audit-rtc")
    udp = [hit for hit in site.canaries.hits if hit[0] == "udp"]
    assert udp == []
    assert report is not None and report["error"] is None  # WebRTC itself ran
    assert not [c for c in report["candidates"] if " udp " in c.lower()]


@needs_chromium
async def test_page_scripts_reach_no_internal_address_by_any_channel(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Held before this audit: every request of the page goes through the guarding proxy.
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    site.canaries.hits.clear()
    result, _ = await _open(site, tmp_path, "/channels", "url-audit-channels")
    assert site.canaries.hits == []
    hosts = {b["host"] for b in result.data.get("blocked_requests", [])}
    assert {"127.0.0.1", "::1"} <= hosts


def test_the_proxy_refuses_metadata_that_python_calls_global(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nothing connects here: allowed_addresses only answers which addresses it would use.
    for host in ("192.0.0.192", "168.63.129.16", "fec0::1", "192.0.0.8"):
        assert isinstance(_guard.allowed_addresses("http", host, 80, ()), str), host
    public = ipaddress.ip_address("93.184.216.34")
    monkeypatch.setattr(_urls, "_resolve", lambda host, timeout_s: [public])

    def rebinding(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        # The policy's look-up saw a public address; the proxy's own look-up, the one it
        # connects with, sees metadata: the second answer is the one checked.
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.0.192", port or 0))]

    monkeypatch.setattr(_guard.socket, "getaddrinfo", rebinding)
    verdict = _guard.allowed_addresses("http", "rebind.test", 80, ())
    assert isinstance(verdict, str) and "192.0.0.192" in verdict
    # Allowing a range around the metadata address does not open it.
    verdict = _guard.allowed_addresses("http", "rebind.test", 80, ("192.0.0.0/24",))
    assert isinstance(verdict, str)


@pytest.fixture
def keep_alive_origin() -> Iterator[tuple[int, list[tuple[int, bytes]]]]:
    """An origin on 127.0.0.1 that keeps every connection open whatever the request says (as
    any allowed host may); records (connection number, request line) of each request."""
    seen: list[tuple[int, bytes]] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    body = b"<!doctype html><title>kept alive</title><p>page</p>"
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: keep-alive\r\n"
              b"Keep-Alive: timeout=60\r\nContent-Length: %d\r\n\r\n" % len(body)) + body

    def one(conn: socket.socket, number: int) -> None:
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    buffer += data
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                seen.append((number, head.split(b"\r\n", 1)[0]))
                conn.sendall(answer)

    def serve() -> None:
        number = 0
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            number += 1
            threading.Thread(target=one, args=(conn, number), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1], seen
    finally:
        server.close()


@needs_chromium
async def test_a_proxy_connection_carries_one_checked_request(
    keep_alive_origin: tuple[int, list[tuple[int, bytes]]], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The proxy checks the first request of a client connection and pipes the rest to the same
    # origin. Before the fix an origin ignoring 'Connection: close' kept the browser reusing the
    # connection: later requests reached it unchecked, in proxy (absolute) form.
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    port, seen = keep_alive_origin
    base = f"http://127.0.0.1:{port}"
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(
            session_id="url-audit-keepalive", workdir=str(tmp_path), max_level="moderate",
            grants={"browser"}, attributes={"url_allow": f"127.0.0.1:{port}"},
        )
        first = await session.call("browser_navigate", {"url": base + "/one"})
        assert first.success, first.error
        page_id = first.data["page_id"]
        for path in ("/two", "/three"):
            again = await session.call("browser_navigate", {"url": base + path,
                                                            "page_id": page_id})
            assert again.success, again.error
            assert again.data["title"] == "kept alive"
        await session.call("browser_close", {"page_id": page_id})
    lines = [line for _, line in seen]
    assert {b"GET /one HTTP/1.1", b"GET /two HTTP/1.1", b"GET /three HTTP/1.1"} <= set(lines)
    assert all(line.split(b" ")[1].startswith(b"/") for line in lines), lines
    connections = [number for number, _ in seen]
    assert len(connections) == len(set(connections)), seen


def test_a_stalled_dns_answer_is_given_up_on_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # getaddrinfo has no time limit: a DNS server the page's author runs could hold the proxy's
    # look-ups (in asyncio's small default pool) for every session. The proxy gives up after
    # TOOLDECK_DNS_TIMEOUT and refuses the connection.
    public = ipaddress.ip_address("93.184.216.34")
    monkeypatch.setattr(_urls, "_resolve", lambda host, timeout_s: [public])
    monkeypatch.setenv("TOOLDECK_DNS_TIMEOUT", "0.1")
    release = threading.Event()

    def stalled(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        release.wait(30)  # an answer that never comes while the proxy waits
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port or 0))]

    monkeypatch.setattr(_guard.socket, "getaddrinfo", stalled)
    try:
        verdict = _guard.allowed_addresses("http", "slow.test", 80, ())
    finally:
        release.set()
    assert isinstance(verdict, str) and "took longer than 0.1 s" in verdict
