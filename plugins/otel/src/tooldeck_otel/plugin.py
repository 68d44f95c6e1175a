"""The ``tooldeck_event`` observer that turns the deck's events into OpenTelemetry signals.

Spans follow the GenAI semantic conventions for tool execution
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/#execute-tool-span): name
``execute_tool {gen_ai.tool.name}``, kind ``INTERNAL``, attributes ``gen_ai.operation.name =
"execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``, and
``error.type`` (the tooldeck error code) with an ``ERROR`` status when the call failed. The span
is a child of whatever span is current where ``Session.call`` was awaited (the agent's turn),
and covers the call's whole pipeline (validation, policy, cache, execution, redaction): its
start is the event's end minus the call's ``duration_s``.

Selection gets a ``tooldeck.select`` span (hand size, candidates, the names dealt; the task
text only when content capture is on: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``,
the switch GenAI instrumentations share, or ``[otel] capture_content = true``). Events reach
observers redacted by the deck (``Deck.redact``): the task and a made-up tool's name carry no
secret here.

Metrics: ``tooldeck.tool.duration`` (histogram, s) and ``tooldeck.tool.calls`` (counter), both with
``gen_ai.tool.name``, ``gen_ai.operation.name`` and, on failure, ``error.type``; and
``tooldeck.select.duration`` (histogram, s). A call of a name no tool has is named ``_OTHER``
in span names and metric labels (its span's ``gen_ai.tool.name`` attribute keeps the redacted
name): the model's inventions must not grow the number of series.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import ConfigError, Event, hookimpl, nonblocking, observes

__all__ = [
    "CAPTURE_ENV",
    "INSTRUMENTATION_NAME",
    "capture_content",
    "configure",
    "tooldeck_config_schema",
    "tooldeck_event",
    "tooldeck_register_tools",
]

log = logging.getLogger(__name__)

#: The instrumentation scope of every span and metric.
INSTRUMENTATION_NAME = "tooldeck"
#: The environment switch GenAI instrumentations share for recording content (prompts, tasks).
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


class _Instruments:
    """The tracer and the metric instruments, made at the first signal.

    The OpenTelemetry API is imported here, not when the plugin loads: every ``tooldeck``
    command loads the plugin, and most processes never set a provider. Made from the global
    providers, these follow them (proxies) when the application sets its SDK later.
    """

    def __init__(self) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.SpanKind, self.Status, self.StatusCode = SpanKind, Status, StatusCode
        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, "0.1.0")
        meter = metrics.get_meter(INSTRUMENTATION_NAME, "0.1.0")
        self.tool_duration = meter.create_histogram(
            "tooldeck.tool.duration", unit="s",
            description="Duration of tool calls through the deck.",
        )
        self.tool_calls = meter.create_counter(
            "tooldeck.tool.calls", unit="{call}", description="Tool calls through the deck."
        )
        self.select_duration = meter.create_histogram(
            "tooldeck.select.duration", unit="s", description="Duration of hand selection."
        )


@functools.cache
def _instruments() -> _Instruments:
    return _Instruments()

_capture_setting: bool | None = None


def configure(*, capture: bool | None = None) -> None:
    """Record task texts in selection spans (``capture=True``), or follow the environment."""
    global _capture_setting
    _capture_setting = capture


def capture_content() -> bool:
    """Whether content (the task text of a selection) goes into spans; off by default."""
    if _capture_setting is not None:
        return _capture_setting
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")


@hookimpl
def tooldeck_config_schema() -> dict[str, Any]:
    """The ``[otel]`` table, checked by the core at start-up."""
    return {
        "otel": {
            "type": "object",
            "properties": {"capture_content": {"type": "boolean"}},
            "additionalProperties": False,
        }
    }


@hookimpl
def tooldeck_register_tools(settings: Mapping[str, Any]) -> None:
    """Register no tool: read ``[otel] capture_content`` at start-up."""
    table = settings.get("otel", {})
    if not isinstance(table, Mapping):
        raise ConfigError("'otel' must be a table")
    value = table.get("capture_content")
    if value is not None and not isinstance(value, bool):
        raise ConfigError("[otel] capture_content must be true or false")
    if value is not None:
        configure(capture=value)


@hookimpl
@nonblocking  # builds spans from the event; exporting is the SDK's processor's business
@observes("call.end", "select")
def tooldeck_event(event: Event) -> None:
    """Emit the span and metrics of a finished tool call or selection."""
    if not _configured():
        return  # no SDK yet: skip building no-op spans on every call's fast path
    if event.kind == "call.end":
        _call_span(event)
    elif event.kind == "select":
        _select_span(event)


def _configured() -> bool:
    """Whether the application has set a tracer or meter provider (an SDK)."""
    global _seen_provider
    if _seen_provider:
        return True  # providers are set once per process and never unset
    if "opentelemetry.trace" not in sys.modules and "opentelemetry.metrics" not in sys.modules:
        # Setting a provider imports the API: nobody did, so there is no SDK (and the API's
        # import is not paid by processes that never use it).
        return False
    from opentelemetry import metrics, trace
    from opentelemetry import trace as _trace_api
    from opentelemetry.metrics import _internal as _metrics_api

    # The API keeps the providers set by the application in these module globals (None until
    # then); reading them costs nothing, where get_tracer_provider() reads the environment.
    tracer_set = getattr(_trace_api, "_TRACER_PROVIDER", _UNKNOWN)
    meter_set = getattr(_metrics_api, "_METER_PROVIDER", _UNKNOWN)
    if tracer_set is _UNKNOWN or meter_set is _UNKNOWN:  # another API version: ask it
        tracer_set = None if isinstance(trace.get_tracer_provider(),
                                        trace.ProxyTracerProvider) else True
        meter_set = None if type(metrics.get_meter_provider()).__name__.startswith(
            "_Proxy") else True
    _seen_provider = tracer_set is not None or meter_set is not None
    return _seen_provider


_UNKNOWN = object()
_seen_provider = False


def _window(duration: object) -> tuple[int, int, float | None]:
    end = time.time_ns()
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
        return end - int(duration * 1e9), end, float(duration)
    return end, end, None


def _call_span(event: Event) -> None:
    otel = _instruments()
    data = event.data
    name = event.tool or "unknown"
    start, end, duration = _window(data.get("duration_s"))
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
    }
    if event.call_id:
        attributes["gen_ai.tool.call.id"] = event.call_id
    if event.session_id:
        attributes["tooldeck.session.id"] = event.session_id
    if isinstance(data.get("category"), str):
        attributes["tooldeck.tool.category"] = data["category"]
    attributes["tooldeck.cached"] = bool(data.get("cached"))
    code = data.get("code")
    failed = not data.get("success", True)
    if failed:
        attributes["error.type"] = str(code or "_OTHER")
    # A name no tool has (the model made it up; the core redacted it) stays an attribute of
    # its span, but never becomes a span name or a metric label: a model inventing a new name
    # per call would otherwise grow the backend's series without bound.
    # The core's call events carry the tool's category, None for a name no tool has.
    unregistered = ("category" in data and data["category"] is None) or (
        data.get("code") == "TOOL_NOT_FOUND"
    )
    known = "_OTHER" if unregistered else name
    span = otel.tracer.start_span(
        f"execute_tool {known}", kind=otel.SpanKind.INTERNAL, start_time=start,
        attributes=attributes,
    )
    if failed:
        span.set_status(otel.Status(otel.StatusCode.ERROR, str(code or "")))
    span.end(end_time=end)
    labels = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": known}
    if failed:
        labels["error.type"] = str(code or "_OTHER")
    otel.tool_calls.add(1, labels)
    if duration is not None:
        otel.tool_duration.record(duration, labels)


def _select_span(event: Event) -> None:
    otel = _instruments()
    data = event.data
    start, end, duration = _window(data.get("duration_s"))
    tools = [str(t) for t in data.get("tools", ())]
    attributes: dict[str, Any] = {
        "tooldeck.operation": "select",
        "tooldeck.select.hand_size": len(tools),
        "tooldeck.select.tools": tools,
        "tooldeck.select.excluded": [str(t) for t in data.get("excluded", ())],
    }
    if isinstance(data.get("candidates"), int):
        attributes["tooldeck.select.candidates"] = data["candidates"]
    if event.session_id:
        attributes["tooldeck.session.id"] = event.session_id
    query = data.get("query")
    if capture_content() and isinstance(query, str):
        attributes["tooldeck.select.query"] = query
    span = otel.tracer.start_span(
        "tooldeck.select", kind=otel.SpanKind.INTERNAL, start_time=start, attributes=attributes
    )
    span.end(end_time=end)
    if duration is not None:
        otel.select_duration.record(duration)
