"""Spans never record a secret: the task a selection records when content capture is on, and
the name of a tool the model made up (span name, ``gen_ai.tool.name``), arrive redacted.

The deck redacts every event before observers see it (``Deck.redact``, the ``tooldeck_redact``
hook, which the policy plugin implements); here with the real OpenTelemetry SDK's in-memory
exporter.
"""

from __future__ import annotations

import random
import string

import pytest
import tooldeck_otel
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tooldeck import tool
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck

_EXPORTER = InMemorySpanExporter()


def _token(prefix: str, n: int, seed: int) -> str:
    # Built at run time: no realistic-looking token is committed.
    rng = random.Random(seed)
    return prefix + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


# (what the model writes, the part that must not be recorded)
SECRETS = {
    "aws-access-key-id": ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),  # AWS's documented one
    "github-pat": (_token("ghp_", 36, 3), _token("ghp_", 36, 3)),
    "url-credentials": ("https://deploy:" + _token("", 20, 4) + "@example.com/repo",
                        _token("", 20, 4)),
    "known-secret": (_token("", 26, 9), _token("", 26, 9)),
}


@pytest.fixture(scope="module", autouse=True)
def _provider():
    # A tracer provider can be set once per process: set it here, or join the one set. The
    # meter provider is left to the other modules (they read their metrics from it).
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    yield


@pytest.fixture(autouse=True)
def _fresh():
    from tooldeck_policy import redact

    _EXPORTER.clear()
    saved = redact._known
    redact._known = redact._KnownSecrets()
    yield
    redact._known = saved
    redact._clean.clear()
    tooldeck_otel.configure(capture=None)


@tool(category="text")
def shout(text: str) -> str:
    """Shout a text.

    Args:
        text: what to shout
    """
    return text.upper()


def _deck():
    return make_deck(
        inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(), name="keywords"),
        load_entry_points=["schema", "runner", "policy", "otel"],
        tools=[shout],
        config={"otel": {"capture_content": True},
                "policy": {"secrets": [SECRETS["known-secret"][1]]}},
    )


def _finished():
    # Spans are ended on the plugin's export thread: wait for it.
    assert tooldeck_otel.flush()
    return _EXPORTER.get_finished_spans()


def _recorded() -> str:
    return "\n".join(
        f"{s.name} {dict(s.attributes or {})} {s.status.description}"
        for s in _finished()
    )


@pytest.mark.parametrize("kind", sorted(SECRETS))
async def test_content_capture_records_the_task_redacted(kind: str, tmp_path) -> None:
    text, secret = SECRETS[kind]
    async with _deck() as deck:
        hand = await deck.session(workdir=tmp_path).select(f"shout a greeting with {text}")
    assert hand.names == ["shout"]
    (span,) = [s for s in _finished() if s.name == "tooldeck.select"]
    query = span.attributes["tooldeck.select.query"]
    assert query.startswith("shout a greeting with ") and "[REDACTED:" in query
    assert secret not in _recorded()


@pytest.mark.parametrize("kind", sorted(SECRETS))
async def test_an_invented_tool_name_is_recorded_redacted(kind: str, tmp_path) -> None:
    text, secret = SECRETS[kind]
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path)
        made_up = await session.call(f"upload_{text}", {})
        known = await session.call("shout", {"text": "hi"})
    assert not made_up.success and known.success
    spans = {s.attributes["gen_ai.tool.name"]: s for s in _finished()
             if s.name.startswith("execute_tool ")}
    assert "shout" in spans and len(spans) == 2
    (invented,) = [name for name in spans if name != "shout"]
    assert invented.startswith("upload_") and "[REDACTED:" in invented
    assert spans[invented].attributes["error.type"] == "TOOL_NOT_FOUND"
    assert secret not in _recorded()
