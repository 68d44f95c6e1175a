"""A slow or hung exporter never holds up a call, and a huge invented name makes no huge span.

Ending a span exports it: with the SDK's ``SimpleSpanProcessor``, in the thread that ends it.
The observer ended spans on the deck's event loop, in every call's path: with an exporter
sleeping 2 s, six cheap concurrent calls across two sessions took 12 s, one after another. The
plugin now ends them on its export thread, so calls finish while the exporter is blocked; the
parent span is still the one current where each call was awaited.
"""

from __future__ import annotations

import threading

import pytest
import tooldeck_otel
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tooldeck_otel import plugin as otel_plugin

from tooldeck import tool
from tooldeck.testing import make_deck
from tooldeck_hookspecs import Event, ToolCall

_EXPORTER = InMemorySpanExporter()


class _Gate(SpanExporter):
    """An exporter that, while armed, blocks on tooldeck's spans until released (a collector
    that hangs). The agent's own spans pass: the test ends them on the loop itself.

    The wait is bounded so that a regression fails instead of hanging the suite: a wait that
    ran out is counted in ``gave_up`` and disarms the gate.
    """

    def __init__(self) -> None:
        self.armed = False
        self.release = threading.Event()
        self.entered = threading.Event()
        self.gave_up = 0

    def export(self, spans):
        if self.armed and any(s.instrumentation_scope.name == "tooldeck" for s in spans):
            self.entered.set()
            if not self.release.wait(timeout=5):
                self.gave_up += 1
                self.armed = False
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


_GATE = _Gate()


@pytest.fixture(scope="module", autouse=True)
def _provider():
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    # The gate first: a span reaches the in-memory exporter only once the gate let it through.
    provider.add_span_processor(SimpleSpanProcessor(_GATE))
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    yield


@pytest.fixture(autouse=True)
def _fresh():
    _EXPORTER.clear()
    tooldeck_otel.configure(capture=None)
    yield
    _GATE.armed = False
    _GATE.release.set()
    tooldeck_otel.configure(capture=None)


@tool(category="text")
def shout(text: str) -> str:
    """Shout a text.

    Args:
        text: what to shout
    """
    return text.upper()


def _deck():
    return make_deck(load_entry_points=["schema", "runner", "otel"], tools=[shout])


def _arm() -> None:
    _GATE.release.clear()
    _GATE.entered.clear()
    _GATE.gave_up = 0
    _GATE.armed = True


async def test_calls_finish_while_the_exporter_is_blocked_and_keep_their_parents():
    _arm()
    tracer = trace.get_tracer("agent")
    turns: dict[str, int] = {}
    finished: list[str] = []
    async with _deck() as deck:
        sessions = [deck.session(), deck.session()]

        async def turn(session, key: str) -> None:
            with tracer.start_as_current_span(f"turn {key}") as span:
                turns[key] = span.get_span_context().span_id
                result = await session.call("shout", {"text": key}, call_id=key)
            assert result.success
            finished.append(key)

        async with trio.open_nursery() as nursery:
            for i in range(3):
                for s, session in enumerate(sessions):
                    nursery.start_soon(turn, session, f"s{s}c{i}")
        # Every call came back while the exporter still held the first span.
        assert len(finished) == 6
        await trio.to_thread.run_sync(_GATE.entered.wait)
        assert _GATE.gave_up == 0 and tooldeck_otel.statistics().pending >= 1
        _GATE.release.set()
    assert tooldeck_otel.flush()
    assert _GATE.gave_up == 0
    spans = {s.attributes["gen_ai.tool.call.id"]: s
             for s in _EXPORTER.get_finished_spans() if s.name == "execute_tool shout"}
    assert set(spans) == set(turns)
    for key, span in spans.items():
        assert span.parent is not None and span.parent.span_id == turns[key]


async def test_a_hung_exporter_holds_a_bounded_queue(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(otel_plugin, "MAX_PENDING", 4)
    _arm()
    dropped_before = tooldeck_otel.statistics().dropped
    async with _deck() as deck:
        session = deck.session()
        results = [await session.call("shout", {"text": str(i)}, call_id=f"q{i}")
                   for i in range(12)]
        assert all(r.success for r in results)
        await trio.to_thread.run_sync(_GATE.entered.wait)
        stats = tooldeck_otel.statistics()
        assert stats.pending == 4 and stats.dropped - dropped_before == 8
        _GATE.release.set()
    assert tooldeck_otel.flush()
    assert _GATE.gave_up == 0
    kept = [s for s in _EXPORTER.get_finished_spans() if s.name == "execute_tool shout"]
    assert len(kept) == 4


async def test_a_huge_invented_name_and_call_id_make_capped_attributes():
    huge = 200_000
    async with _deck() as deck:
        result = await deck.session().call(ToolCall(name="x" * huge, arguments={}, id="c" * huge))
    assert not result.success
    assert tooldeck_otel.flush()
    (span,) = [s for s in _EXPORTER.get_finished_spans() if s.name == "execute_tool _OTHER"]
    limit = tooldeck_otel.MAX_ATTRIBUTE_CHARS
    # The deck itself already cuts a name no tool has (78443dd) and bounds a call id (its
    # first characters and a hash of the whole: distinct ids stay distinct).
    name = span.attributes["gen_ai.tool.name"]
    assert name.startswith("x" * 100) and len(name) < limit + 64
    call_id = span.attributes["gen_ai.tool.call.id"]
    assert call_id.startswith("c" * 32) and "~" in call_id and len(call_id) <= 128
    assert all(len(str(v)) < limit + 64 for v in span.attributes.values())


def test_selection_attributes_are_capped_too():
    otel_plugin._configured()  # the providers are set (module fixture)
    many = [f"tool_{i}_" + "n" * 1000 for i in range(500)]
    tooldeck_otel.configure(capture=True)
    tooldeck_otel.tooldeck_event(Event(kind="select", session_id="s" * 10_000, data={
        "tools": many, "excluded": many, "query": "q" * 100_000, "duration_s": 0.01,
    }))
    assert tooldeck_otel.flush()
    (span,) = [s for s in _EXPORTER.get_finished_spans() if s.name == "tooldeck.select"]
    assert span.attributes["tooldeck.select.hand_size"] == 500
    tools = span.attributes["tooldeck.select.tools"]
    assert len(tools) == tooldeck_otel.MAX_LIST_ITEMS + 1 and tools[-1].endswith("more]")
    assert all(len(t) < tooldeck_otel.MAX_ATTRIBUTE_CHARS + 64 for t in tools)
    assert len(span.attributes["tooldeck.select.query"]) < tooldeck_otel.MAX_CONTENT_CHARS + 64
    assert len(span.attributes["tooldeck.session.id"]) < tooldeck_otel.MAX_ATTRIBUTE_CHARS + 64
