"""web_search against local stand-ins of SearXNG, Brave and Tavily, directly and via the deck.

The stand-in is a threaded server on 127.0.0.1: each path answers from a queue of canned
responses (the last one repeats), and every request is recorded (method, path, query, headers,
body) so the tests check what the tool sent as well as what it made of the answer.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import stamina
from tooldeck_tools_search import MAX_BODY_BYTES, MAX_SNIPPET_CHARS, tools, web_search

from tooldeck.testing import make_deck
from tooldeck_hookspecs import ToolContext, ToolFailure


@attrs.frozen
class Canned:
    """One scripted answer."""

    status: int = 200
    body: bytes = b"{}"
    content_type: str = "application/json"
    headers: dict[str, str] = attrs.field(factory=dict)
    delay_s: float = 0.0

    @classmethod
    def json(cls, value: Any, **kw: Any) -> Canned:
        return cls(body=json.dumps(value).encode(), **kw)


@attrs.frozen
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@attrs.define
class FakeProviders:
    base: str
    script: dict[str, list[Canned]] = attrs.field(factory=dict)
    seen: list[Seen] = attrs.field(factory=list)

    def answer(self, path: str, *responses: Canned) -> None:
        self.script[path] = list(responses)

    def requests_to(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]


def _handler(fake: FakeProviders) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fake.seen.append(Seen(method=self.command, path=parts.path,
                                  query=urllib.parse.parse_qs(parts.query),
                                  headers={k.lower(): v for k, v in self.headers.items()},
                                  body=body))
            queue = fake.script.get(parts.path) or [Canned(status=404, body=b"no script")]
            canned = queue.pop(0) if len(queue) > 1 else queue[0]
            if canned.delay_s:
                time.sleep(canned.delay_s)
            self.send_response(canned.status)
            self.send_header("Content-Type", canned.content_type)
            self.send_header("Content-Length", str(len(canned.body)))
            for key, value in canned.headers.items():
                self.send_header(key, value)
            self.end_headers()
            try:
                self.wfile.write(canned.body)
            except OSError:
                pass  # the client gave up (timeout tests)

        do_GET = _serve  # http.server's naming
        do_POST = _serve

    return Handler


@pytest.fixture
def providers(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProviders]:
    """A fake of all three providers; the environment points every provider at it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), None)  # type: ignore[arg-type]
    fake = FakeProviders(base=f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(fake)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    for name in ("TOOLDECK_SEARCH_PROVIDER", "SEARXNG_URL", "BRAVE_API_KEY", "TAVILY_API_KEY",
                 "BRAVE_SEARCH_URL", "TAVILY_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BRAVE_SEARCH_URL", fake.base + "/brave/res/v1/web/search")
    monkeypatch.setenv("TAVILY_URL", fake.base + "/tavily/search")
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


CONTEXT = ToolContext(session_id="search-tests", workdir="/tmp")
ENTRY_POINTS = ["schema", "runner", "search"]


async def _fails(arguments) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        await web_search(arguments, CONTEXT)
    return info.value


# --- each provider: the request it gets, the answer it gives ---------------------------------


async def test_searxng_request_and_normalized_results(providers, monkeypatch):
    monkeypatch.setenv("SEARXNG_URL", providers.base + "/sx/")
    providers.answer("/sx/search", Canned.json({"query": "q", "results": [
        {"title": "Trio <b>docs</b>", "url": "https://trio.readthedocs.io/en/stable/#top",
         "content": "Structured   <em>concurrency</em> &amp; more", "engine": "ddg"},
        {"title": "Same page again", "url": "https://trio.readthedocs.io/en/stable",
         "content": "duplicate"},
        {"title": "Relative", "url": "/relative/path", "content": "made absolute"},
        {"title": "Not web", "url": "javascript:alert(1)", "content": "dropped"},
        {"title": "", "url": "https://example.org/x", "content": None},
        "not an object",
    ]}))
    out = await web_search({"query": "  trio   docs ", "max_results": 10}, CONTEXT)
    seen = providers.requests_to("/sx/search")[-1]
    assert seen.method == "GET" and seen.query == {"q": ["trio docs"], "format": ["json"]}
    assert out["provider"] == "searxng" and out["count"] == 3
    first, second, third = out["results"]
    assert first == {"title": "Trio docs", "url": "https://trio.readthedocs.io/en/stable/#top",
                     "snippet": "Structured concurrency & more",
                     "source": "trio.readthedocs.io"}
    assert second["url"] == providers.base + "/relative/path"
    assert third["title"] == "example.org" and third["snippet"] == ""


async def test_brave_request_headers_and_results(providers, monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", "brave-secret-key")
    providers.answer("/brave/res/v1/web/search", Canned.json({"type": "search", "web": {
        "type": "search", "results": [
            {"title": "Python", "url": "https://www.python.org/",
             "description": "The <strong>official</strong> home of Python", "age": "1 day"},
            {"title": "PyPI", "url": "https://pypi.org/", "description": "Packages"},
            {"title": "Docs", "url": "https://docs.python.org/3/", "description": "Docs"},
        ]}}))
    out = await web_search({"query": "python", "max_results": 2}, CONTEXT)
    seen = providers.requests_to("/brave/res/v1/web/search")[-1]
    assert seen.method == "GET" and seen.query == {"q": ["python"], "count": ["2"]}
    assert seen.headers["x-subscription-token"] == "brave-secret-key"
    assert seen.headers["accept"] == "application/json"
    assert out["provider"] == "brave"
    assert [r["title"] for r in out["results"]] == ["Python", "PyPI"]  # capped at max_results
    assert out["results"][0]["snippet"] == "The official home of Python"


async def test_tavily_posts_json_with_a_bearer_key(providers, monkeypatch):
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test-key")
    providers.answer("/tavily/search", Canned.json({"query": "q", "answer": None, "results": [
        {"title": "Result", "url": "https://example.com/a", "content": "Some content",
         "score": 0.9},
    ], "response_time": 0.5}))
    out = await web_search({"query": "what is trio", "max_results": 7}, CONTEXT)
    seen = providers.requests_to("/tavily/search")[-1]
    assert seen.method == "POST" and seen.headers["authorization"] == "Bearer tvly-test-key"
    assert json.loads(seen.body) == {"query": "what is trio", "max_results": 7}
    assert "api_key" not in json.loads(seen.body)  # the key travels in the header only
    assert out == {"query": "what is trio", "provider": "tavily", "count": 1, "results": [
        {"title": "Result", "url": "https://example.com/a", "snippet": "Some content",
         "source": "example.com"}]}


# --- choosing the provider -------------------------------------------------------------------


async def test_provider_selection_and_missing_configuration(providers, monkeypatch):
    nothing = await _fails({"query": "x"})
    assert nothing.code == "EXECUTION_ERROR"
    for name in ("SEARXNG_URL", "BRAVE_API_KEY", "TAVILY_API_KEY"):
        assert name in nothing.message
    asked = await _fails({"query": "x", "provider": "brave"})
    assert "BRAVE_API_KEY" in asked.message and asked.details["missing_env"] == "BRAVE_API_KEY"
    monkeypatch.setenv("TAVILY_API_KEY", "k")
    monkeypatch.setenv("BRAVE_API_KEY", "k")
    providers.answer("/brave/res/v1/web/search", Canned.json({"web": {"results": []}}))
    providers.answer("/tavily/search", Canned.json({"results": []}))
    assert (await web_search({"query": "x"}, CONTEXT))["provider"] == "brave"  # first set
    monkeypatch.setenv("TOOLDECK_SEARCH_PROVIDER", "tavily")
    assert (await web_search({"query": "x"}, CONTEXT))["provider"] == "tavily"
    assert (await web_search({"query": "x", "provider": "brave"}, CONTEXT))["provider"] == "brave"
    monkeypatch.setenv("TOOLDECK_SEARCH_PROVIDER", "bing")
    assert "bing" in (await _fails({"query": "x"})).message


# --- what can go wrong -----------------------------------------------------------------------


async def test_http_errors_map_to_structured_errors(providers, monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", "bad")
    path = "/brave/res/v1/web/search"
    providers.answer(path, Canned(status=401, body=b'{"error": "invalid token"}'))
    rejected = await _fails({"query": "x"})
    assert not rejected.retryable and "BRAVE_API_KEY" in rejected.suggestion
    providers.answer(path, Canned(status=422, body=b'{"error": "bad query"}'))
    bad = await _fails({"query": "x"})
    assert not bad.retryable and "422" in bad.message and "bad query" in bad.message
    providers.answer(path, Canned(status=429, headers={"Retry-After": "7"}))
    limited = await _fails({"query": "x"})
    assert limited.retryable and limited.details["retry_after_s"] == 7.0
    assert "7 s" in limited.suggestion
    providers.answer(path, Canned(status=503, body=b"<html>down</html>", content_type="text/html"))
    down = await _fails({"query": "x"})
    assert down.retryable and "503" in down.message


async def test_malformed_and_misshapen_answers(providers, monkeypatch):
    monkeypatch.setenv("SEARXNG_URL", providers.base)
    providers.answer("/search", Canned(body=b'{"results": [ {"title": '))
    broken = await _fails({"query": "x"})
    assert broken.code == "EXECUTION_ERROR" and "malformed JSON" in broken.message
    providers.answer("/search", Canned.json({"results": "nope"}))
    assert "results" in (await _fails({"query": "x"})).message
    providers.answer("/search", Canned.json(["a", "list"]))
    assert (await _fails({"query": "x"})).code == "EXECUTION_ERROR"


async def test_non_utf8_bodies_are_decoded(providers, monkeypatch):
    monkeypatch.setenv("SEARXNG_URL", providers.base)
    body = json.dumps({"results": [{"title": "Café", "url": "https://example.fr/",
                                    "content": "crème brûlée"}]}, ensure_ascii=False)
    providers.answer("/search", Canned(body=body.encode("latin-1"),
                                       content_type="application/json; charset=iso-8859-1"))
    declared = await web_search({"query": "x"}, CONTEXT)
    assert declared["results"][0]["title"] == "Café"
    providers.answer("/search", Canned(body=body.encode("latin-1")))  # no charset at all
    guessed = await web_search({"query": "x"}, CONTEXT)
    assert guessed["results"][0]["snippet"] == "crème brûlée"


async def test_huge_answers_are_capped_or_refused(providers, monkeypatch):
    monkeypatch.setenv("SEARXNG_URL", providers.base)
    many = [{"title": f"T{i}" + "x" * 1000, "url": f"https://example.com/{i}",
             "content": "word " * 2_000} for i in range(150)]
    providers.answer("/search", Canned.json({"results": many}))  # about 1.7 MB
    out = await web_search({"query": "x", "max_results": 20}, CONTEXT)
    assert out["count"] == 20
    assert all(len(r["snippet"]) <= MAX_SNIPPET_CHARS for r in out["results"])
    assert all(r["snippet"].endswith("…") for r in out["results"])
    providers.answer("/search", Canned(body=b" " * (MAX_BODY_BYTES + 1)))
    too_big = await _fails({"query": "x"})
    assert too_big.code == "TOO_LARGE"


async def test_timeouts_and_unreachable_servers(providers, monkeypatch):
    monkeypatch.setattr(tools, "REQUEST_TIMEOUT_S", 0.3)
    monkeypatch.setenv("SEARXNG_URL", providers.base)
    providers.answer("/search", Canned(delay_s=2.0))
    slow = await _fails({"query": "x"})
    assert slow.code == "TIMEOUT" and slow.retryable
    monkeypatch.setenv("SEARXNG_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    down = await _fails({"query": "x"})
    assert down.code == "EXECUTION_ERROR" and down.retryable and "reach" in down.message


# --- through the deck: validation, retries with the runner, caching -------------------------


async def test_retries_through_the_runner(providers, monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", "k")
    path = "/brave/res/v1/web/search"
    ok = Canned.json({"web": {"results": [{"title": "T", "url": "https://e.com/",
                                           "description": "d"}]}})
    providers.answer(path, Canned(status=429, headers={"Retry-After": "0"}), ok)
    with stamina.set_testing(True, attempts=10, cap=True):
        async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
            session = deck.session()
            result = await session.call("web_search", {"query": "retry me"})
            assert result.success, result.error
            assert result.metadata["attempts"] == 2 and result.data["count"] == 1
            assert len(providers.requests_to(path)) == 2
            providers.answer(path, Canned(status=500, body=b"boom"))
            failed = await session.call("web_search", {"query": "fails forever"})
            assert failed.error.code == "EXECUTION_ERROR" and failed.error.retryable
            assert failed.metadata["attempts"] == 4  # 1 + max_retries
            assert len(providers.requests_to(path)) == 2 + 4
            providers.answer(path, Canned(status=403, body=b"{}"))
            forbidden = await session.call("web_search", {"query": "no retry"})
            assert forbidden.metadata["attempts"] == 1 and not forbidden.error.retryable


async def test_deck_validates_arguments_and_caches_results(providers, monkeypatch):
    monkeypatch.setenv("SEARXNG_URL", providers.base)
    providers.answer("/search", Canned.json({"results": [
        {"title": "A", "url": "https://a.example/", "content": "a"}]}))
    async with make_deck(load_entry_points=[*ENTRY_POINTS, "cache"]) as deck:
        session = deck.session()
        for bad in ({"query": ""}, {"query": "x", "max_results": 0},
                    {"query": "x", "max_results": 21}, {"query": "x", "provider": "bing"},
                    {"query": 5}, {"max_results": 3}):
            result = await session.call("web_search", bad)
            assert result.error.code == "INVALID_ARGUMENTS", bad
        assert providers.seen == []
        first = await session.call("web_search", {"query": "cache me"})
        second = await session.call("web_search", {"query": "cache me"})
        assert first.success and second.success and second.data == first.data
        assert second.metadata.get("cached") is True
        assert len(providers.requests_to("/search")) == 1


def test_a_hostile_providers_fields_are_read_only_as_far_as_they_are_kept() -> None:
    """A backend sent one 512 kB title of '<': the tag pattern read to the end of it from every
    '<' (quadratic: 161 s through the deck, past the tool's 30 s timeout). A field is now read
    no further than 16 characters per character kept, and no tag holds a '<'."""
    from tooldeck_tools_search._normalize import MAX_URL_CHARS, normalize, strip_html
    from tooldeck_tools_search._providers import RawResult

    assert strip_html("a" * (16 * 300) + "<b>beyond</b>", 300).count("beyond") == 0
    assert strip_html("<" * 5000 + "<b>x</b>", 300).endswith("…")  # the '<'s are text
    assert strip_html("<<b>bold</b>", 300) == "< bold"
    assert strip_html("<script>" * 1000 + "<b>kept</b>", 20_000) == "kept"
    results = normalize(
        [RawResult(title="long", url="https://example.com/" + "q" * MAX_URL_CHARS, snippet=""),
         RawResult(title="fine", url="https://example.com/ok", snippet="")],
        base_url="https://search.example/", limit=10,
    )
    assert [r["title"] for r in results] == ["fine"]  # the rest of the search is kept
