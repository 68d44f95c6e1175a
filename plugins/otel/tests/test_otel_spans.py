"""The otel plugin with the real OpenTelemetry SDK: in-memory span exporter and metric reader."""

from __future__ import annotations

import pytest
import tooldeck_otel
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tooldeck import tool
from tooldeck.testing import make_deck

_EXPORTER = InMemorySpanExporter()
_READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def _providers():
    # Global providers can be set once per process: set them here, or join the ones set.
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))
    yield


@pytest.fixture(autouse=True)
def _fresh():
    _EXPORTER.clear()
    tooldeck_otel.configure(capture=None)
    yield
    tooldeck_otel.configure(capture=None)


@tool(category="text")
def shout(text: str) -> str:
    """Shout a text.

    Args:
        text: what to shout
    """
    return text.upper()


def _deck(*entry_points: str, **kw):
    return make_deck(load_entry_points=["schema", "runner", "otel", *entry_points],
                     tools=[shout], **kw)


def _finished():
    # Spans are ended on the plugin's export thread: wait for it.
    assert tooldeck_otel.flush()
    return _EXPORTER.get_finished_spans()


def _spans(name: str):
    return [s for s in _finished() if s.name == name]


async def test_a_call_is_an_execute_tool_span_under_the_agents_span():
    tracer = trace.get_tracer("agent")
    async with _deck() as deck:
        session = deck.session()
        with tracer.start_as_current_span("agent turn") as turn:
            result = await session.call("shout", {"text": "hi"}, call_id="call_42")
    assert result.success
    (span,) = _spans("execute_tool shout")
    assert span.kind is trace.SpanKind.INTERNAL
    assert span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert span.attributes["gen_ai.tool.name"] == "shout"
    assert span.attributes["gen_ai.tool.call.id"] == "call_42"
    assert span.attributes["gen_ai.tool.type"] == "function"
    assert span.attributes["tooldeck.tool.category"] == "text"
    assert span.attributes["tooldeck.cached"] is False
    assert "error.type" not in span.attributes
    assert span.status.status_code is not StatusCode.ERROR
    assert span.parent is not None and span.parent.span_id == turn.get_span_context().span_id
    assert span.context.trace_id == turn.get_span_context().trace_id
    assert span.start_time <= span.end_time


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [("shout", {"text": 3}, "INVALID_ARGUMENTS"), ("nosuchtool", {}, "TOOL_NOT_FOUND")],
)
async def test_a_failed_call_has_error_type_and_error_status(name, arguments, code):
    async with _deck() as deck:
        result = await deck.session().call(name, arguments)
    assert not result.success
    # A name no tool has is no span name (see the cardinality test below): "_OTHER".
    (span,) = _spans(f"execute_tool {name if code != 'TOOL_NOT_FOUND' else '_OTHER'}")
    assert span.attributes["gen_ai.tool.name"] == name
    assert span.attributes["error.type"] == code
    assert span.status.status_code is StatusCode.ERROR


def _points(metric_name: str):
    assert tooldeck_otel.flush()
    data = _READER.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            if scope.scope.name != "tooldeck":
                continue
            for metric in scope.metrics:
                if metric.name == metric_name:
                    found.extend(metric.data.data_points)
    return found


async def test_calls_are_counted_and_timed_per_tool_and_outcome():
    async with _deck() as deck:
        session = deck.session()
        for _ in range(3):
            await session.call("shout", {"text": "a"})
        await session.call("shout", {"text": 1})
    calls = {
        (p.attributes["gen_ai.tool.name"], p.attributes.get("error.type")): p.value
        for p in _points("tooldeck.tool.calls")
    }
    assert calls[("shout", None)] >= 3
    assert calls[("shout", "INVALID_ARGUMENTS")] >= 1
    durations = [p for p in _points("tooldeck.tool.duration")
                 if p.attributes["gen_ai.tool.name"] == "shout"]
    assert durations and sum(p.count for p in durations) >= 4


async def test_selection_is_a_span_and_the_task_text_is_recorded_only_on_request():
    async with _deck("faiss") as deck:
        session = deck.session()
        await session.select("shout a greeting")
        tooldeck_otel.configure(capture=True)
        await session.select("shout a farewell")
    quiet, loud = _spans("tooldeck.select")
    assert "shout" in quiet.attributes["tooldeck.select.tools"]
    assert quiet.attributes["tooldeck.select.hand_size"] >= 1
    assert "tooldeck.select.query" not in quiet.attributes  # content is opt-in
    assert loud.attributes["tooldeck.select.query"] == "shout a farewell"
    assert _points("tooldeck.select.duration")


async def test_the_otel_table_is_validated_and_read():
    async with _deck(config={"otel": {"capture_content": True}}):
        assert tooldeck_otel.capture_content() is True
    with pytest.raises(Exception, match="capture_content"):
        async with _deck(config={"otel": {"capture_content": "yes"}}):
            pass


async def test_invented_tool_names_add_no_metric_series_nor_span_names():
    """A prompt-injected model calling a new made-up name each time must not grow the
    backend's series: those calls share the label "_OTHER" (the span keeps the name)."""
    invented = [f"exfiltrate_{i}" for i in range(40)]
    async with _deck() as deck:
        session = deck.session()
        for name in invented:
            assert not (await session.call(name, {})).success
        await session.call("shout", {"text": "a"})
    labels = {p.attributes["gen_ai.tool.name"] for p in _points("tooldeck.tool.calls")}
    assert "_OTHER" in labels and "shout" in labels
    assert not labels & set(invented)
    span_names = {s.name for s in _finished()}
    assert span_names >= {"execute_tool _OTHER", "execute_tool shout"}
    assert not any(n.removeprefix("execute_tool ") in invented for n in span_names)
    recorded = {s.attributes["gen_ai.tool.name"] for s in _finished()
                if s.name == "execute_tool _OTHER"}
    assert recorded == set(invented)
