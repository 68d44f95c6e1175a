"""Fixtures of the browser pack's tests: real pages served on loopback by a threaded server.

``site`` serves the pages on 127.0.0.1 (the allowed host); ``canary`` listens on ::1, a loopback
address the tests never allow, and records every request that reaches it, so a test can show
that a redirect or a subresource aimed at it was stopped before it left the browser.
"""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

HUGE_WORDS = 30_000  # about 180 kB of text: well over the 50 k characters cap

#: Hostile pages (test_browser_hostile_pages): a script looping after the load event, 30
#: pop-ups, a 600 kB title, a 1.5 MB URL; and one taking memory without end.
HOSTILE_PAGES = {
    "/loop": "<title>loop</title><p>x</p>"
             "<script>window.onload=()=>setTimeout(()=>{while(true){}},0)</script>",
    # Loops a second and a half after its load event: read at once, busy at the next call.
    "/loop-later": "<title>later</title><p>x</p>"
                   "<script>window.onload=()=>setTimeout(()=>{while(true){}},1500)</script>",
    "/popups": "<title>pop</title><p>x</p>"
               "<script>for(let i=0;i<30;i++){window.open('/form?'+i)}</script>",
    "/bigtitle": "<title>" + "t" * 600_000 + "</title><p>hello</p>",
    "/bigurl": "<title>u</title><p>x</p>"
               "<script>history.replaceState(null,'','/bigurl?'+'q'.repeat(1500000))</script>",
    # Takes memory 256 MiB at a time, touched, after its load event: 8 GiB if nothing stops it
    # (only served to a browser under a memory cap, test_browser_sandbox.py).
    # s43: pages that navigate, block on dialogs or loop while a call uses them.
    "/reload-loop": "<title>reload</title><p>RELOAD-TEXT</p><script>window.onload=()=>"
                    "location.reload()</script>",
    "/meta-refresh": "<title>meta</title><meta http-equiv='refresh' content='0'>"
                     "<p>META-TEXT</p>",
    "/redirect-now": "<title>now</title><script>location.replace('/form')</script><p>x</p>",
    "/pushstate": "<title>push</title><p>PUSH-TEXT</p><script>for(let i=0;i<5000;i++)"
                  "{history.pushState(null,'','/pushstate?'+i)}</script>",
    "/pushstate-loop": "<title>pushloop</title><p>PUSHLOOP-TEXT</p><script>setInterval(()=>"
                       "{for(let i=0;i<200;i++)history.pushState(null,'','/pushstate-loop?'+"
                       "Math.random())},0)</script>",
    "/alert-load": "<title>alert</title><p>ALERT-TEXT</p><script>alert('hi')</script>",
    "/alert-loop": "<title>alerts</title><p>ALERTS-TEXT</p><script>window.onload=()=>"
                   "setInterval(()=>alert('again'),0)</script>",
    "/confirm-load": "<title>confirm</title><p>CONFIRM-TEXT</p><script>confirm('ok?');"
                     "prompt('name?')</script>",
    "/print": "<title>print</title><p>PRINT-TEXT</p><script>window.onload=()=>window.print()"
              "</script>",
    "/print-loop": "<title>prints</title><p>PRINTS-TEXT</p><script>window.onload=()=>"
                   "setInterval(()=>window.print(),0)</script>",
    "/beforeunload": "<title>stay</title><p>STAY-TEXT</p><button id=b>touch</button><input id=i>"
                     "<script>window.onbeforeunload=e=>{e.preventDefault();e.returnValue='';"
                     "return ''}</script>",
    "/click-redirect": "<title>cr</title><button id=b onclick=\"location.href='/js-redirect-loop'"
                       "\">go</button>",
    "/click-busy": "<title>cb</title><button id=b onclick='while(true){}'>spin</button>",
    "/click-popups-nav": "<title>cpn</title><button id=b onclick=\"for(let i=0;i<20;i++)"
                         "window.open('/popups?'+i);location.href='/popups'\">go</button>",
    "/type-redirect": "<title>tr</title><input id=i oninput=\"location.href='/type-redirect?'+"
                      "Math.random()\">",
    "/type-busy": "<title>tb</title><input id=i onkeydown='while(true){}'>",
    "/click-reload": "<title>crl</title><button id=b onclick='location.reload()'>r</button>"
                     "<script>window.onload=()=>{if(sessionStorage.n>0)location.reload();"
                     "sessionStorage.n=1}</script>",
    # A click sends it to a page that never finishes loading (an image that never comes) and
    # whose script then holds its thread.
    "/click-stall": "<title>cs</title><button id=b onclick=\"location.href='/stall'\">go</button>",
    "/stall": "<title>stall</title><p>STALL-TEXT</p><img src='/hang'>"
              "<script>setTimeout(()=>{while(true){}},300)</script>",
    "/memory-hog": "<title>hog</title><p>x</p><script>window.kept = []; window.onload = () => "
                   "{ const grow = () => { if (kept.length < 32) { const b = new Uint8Array("
                   "256 << 20); b.fill(7); kept.push(b); setTimeout(grow, 20) } }; grow() }"
                   "</script>",
}


def _page(title: str, body: str, charset: str = "utf-8") -> str:
    return (f"<!doctype html><html><head><meta charset='{charset}'><title>{title}</title>"
            f"</head><body>{body}</body></html>")


@attrs.define
class Site:
    """A running test site: its base URL, what it saw, and a canary URL on ::1."""

    base: str
    canary_base: str
    submitted: list[dict[str, list[str]]]
    canary_hits: list[str]
    port: int

    def url(self, path: str) -> str:
        return self.base + path


def _handler(site: dict[str, Any]) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8",
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass  # the browser gave up on a slow page (timeout tests)

        def do_GET(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            if path == "/":
                body = _page(
                    "Tooldeck Test Home",
                    "<nav><a href='/nav-only'>NAVLINK</a> Menu text</nav>"
                    "<script>document.title = document.title; var secret='SCRIPTTEXT';</script>"
                    "<style>.x{color:red} STYLETEXT</style>"
                    "<article><h1>Main   heading</h1><p>First    paragraph with "
                    "<b>bold</b> words.</p>\n\n\n\n<p>Second paragraph.</p>"
                    "<a href='/form'>Go to the form</a> <a href='page2?x=1'>Relative link</a>"
                    "<a href='https://example.org/abs'>Absolute</a>"
                    "<a href='mailto:a@b.c'>Mail</a></article>",
                )
                self._send(200, body.encode())
            elif path == "/form":
                body = _page(
                    "Form page",
                    "<main><form method='post' action='/submit'>"
                    "<input name='q' id='q'><textarea name='note' id='note'></textarea>"
                    "<button type='submit' id='go'>Send it</button></form></main>",
                )
                self._send(200, body.encode())
            elif path == "/redirect-out":
                self._send(302, b"", headers={"Location": site["canary_base"] + "/secret"})
            elif path == "/redirect-in":
                self._send(302, b"", headers={"Location": "/form"})
            elif path == "/subresource":
                body = _page("Sub", f"<main>Image below<img src='{site['canary_base']}/pixel'>"
                             "</main>")
                self._send(200, body.encode())
            elif path == "/img-port":
                # An image on another port of the same host (the port allow-list tests).
                port = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["port"][0]
                body = _page("Port", f"<main>Other port<img src='http://127.0.0.1:{port}/pixel'>"
                             "</main>")
                self._send(200, body.encode())
            elif path == "/latin1":
                body = _page("Caf\u00e9 page", "<p>Caf\u00e9 na\u00efve \u00e0 la carte</p>",
                             charset="windows-1252")
                self._send(200, body.encode("cp1252"), "text/html; charset=windows-1252")
            elif path == "/latin1-nocharset":
                body = ("<html><head><meta http-equiv='Content-Type' content='text/html; "
                        "charset=iso-8859-1'><title>Sans</title></head><body><p>Cr\u00e8me "
                        "br\u00fbl\u00e9e</p></body></html>")
                self._send(200, body.encode("latin-1"), "text/html")
            elif path == "/slow":
                time.sleep(2.0)
                self._send(200, _page("Slow", "<p>finally</p>").encode())
            elif path == "/binary":
                self._send(200, os.urandom(4096), "application/octet-stream")
            elif path == "/js-redirect":
                # Sends itself to the form page by script, ``d`` ms after its load event: the
                # new document can replace this one while the tool reads it.
                delay = int(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["d"][0])
                body = _page("Before", "<main>BEFORE-TEXT</main><script>window.addEventListener("
                             f"'load',()=>setTimeout(()=>{{location.href='/form'}},{delay}))"
                             "</script>")
                self._send(200, body.encode())
            elif path == "/js-redirect-loop":
                # Sends itself to itself again at each load event, without end.
                body = _page("Loop", "<main>LOOP-TEXT</main><script>window.addEventListener("
                             "'load',()=>setTimeout(()=>{location.replace('/js-redirect-loop?n='"
                             "+Date.now())},0))</script>")
                self._send(200, body.encode())
            elif path == "/hang":
                time.sleep(30.0)  # a subresource that keeps its page from loading
                self._send(404, b"")
            elif path in HOSTILE_PAGES:
                self._send(200, HOSTILE_PAGES[path].encode())
            elif path == "/huge":
                words = " ".join(f"word{i}" for i in range(HUGE_WORDS))
                self._send(200, _page("Huge", f"<main><p>{words}</p><p>THE-END</p></main>")
                           .encode())
            else:
                self._send(404, _page("Not found", "<p>nothing here</p>").encode())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            fields = urllib.parse.parse_qs(self.rfile.read(length).decode())
            site["submitted"].append(fields)
            value = fields.get("q", [""])[0]
            self._send(200, _page("Thanks", f"<main>Received: {value}</main>").encode())

    return Handler


class _V6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


@pytest.fixture(scope="session")
def site() -> Iterator[Site]:
    canary_hits: list[str] = []

    class Canary(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            canary_hits.append(self.path)
            body = b"<html><head><title>CANARY</title></head><body>INTERNAL SECRET</body></html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    canary = _V6Server(("::1", 0), Canary)
    shared: dict[str, Any] = {"submitted": [],
                              "canary_base": f"http://[::1]:{canary.server_address[1]}"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(shared))
    for srv in (server, canary):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        yield Site(base=f"http://127.0.0.1:{port}", canary_base=shared["canary_base"],
                   submitted=shared["submitted"], canary_hits=canary_hits, port=port)
    finally:
        server.shutdown()
        canary.shutdown()
        server.server_close()
        canary.server_close()


@pytest.fixture
def limited_deck() -> Any:
    """``limited_deck({"browser_click": 8.0}, browser={...})``: a deck with the browser pack
    (and schema, runner, policy) whose named tools have the deployment's own
    ``execution.timeout_s``; further keyword arguments are more configuration tables."""
    from tooldeck.testing import make_deck

    def make(limits: dict[str, float], **config: Any) -> Any:
        tools = {name: {"execution": {"timeout_s": seconds}} for name, seconds in limits.items()}
        return make_deck(load_entry_points=["schema", "runner", "policy", "browser"],
                         config={"tools": tools, **config})

    return make


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


def _chromium_missing() -> str | None:
    """Why Debian's Chromium cannot be used here, or None when it can."""
    from tooldeck_tools_browser import find_executable

    from tooldeck_hookspecs import ToolFailure

    try:
        find_executable()
    except ToolFailure as exc:
        return exc.message
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chromium: drives real Chromium; skipped, with the reason, where it is missing"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [item for item in items if item.get_closest_marker("chromium") is not None]
    if not marked:
        return
    missing = _chromium_missing()
    if missing is None:
        return
    skip = pytest.mark.skip(
        reason=f"Chromium is not installed ({missing}); `apt-get install chromium`"
    )
    for item in marked:
        item.add_marker(skip)
