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

Spans are ended on the plugin's export thread, not on the deck's event loop: ending a span
exports it (with the SDK's ``SimpleSpanProcessor``, synchronously, in the thread that ends it),
and an exporter may be slow or hung. The observer, on the loop, only notes the span current where
the call was awaited (a context variable only the call's task sees), the end time and the capture
switch, and queues the event (bounded: :data:`MAX_PENDING`, then dropped and counted). A blocked
exporter delays that queue, never a call. :func:`flush` waits for it; the process's exit too.

Attribute values are capped (:data:`MAX_ATTRIBUTE_CHARS`, :data:`MAX_CONTENT_CHARS`,
:data:`MAX_LIST_ITEMS`): a model inventing a 5 MB tool name or call id must not make a 5 MB span.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from tooldeck_hookspecs import ConfigError, Event, hookimpl, nonblocking, observes

__all__ = [
    "CAPTURE_ENV",
    "INSTRUMENTATION_NAME",
    "MAX_ATTRIBUTE_CHARS",
    "MAX_CONTENT_CHARS",
    "MAX_LIST_ITEMS",
    "MAX_PENDING",
    "ExportStatistics",
    "capture_content",
    "configure",
    "flush",
    "statistics",
    "tooldeck_config_schema",
    "tooldeck_event",
    "tooldeck_register_tools",
]

log = logging.getLogger(__name__)

#: The instrumentation scope of every span and metric.
INSTRUMENTATION_NAME = "tooldeck"
#: The environment switch GenAI instrumentations share for recording content (prompts, tasks).
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: Characters kept of a name-like attribute (tool name, call id, session id, category, error
#: type); longer values are cut and end with a marker saying how much was left out.
MAX_ATTRIBUTE_CHARS = 256
#: Characters kept of recorded content (the task text of a selection, when capture is on).
MAX_CONTENT_CHARS = 4096
#: Items kept of a list attribute (the names of a hand, the excluded tools).
MAX_LIST_ITEMS = 128


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
    return _Instruments()  # on the export thread only

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
@nonblocking  # a few microseconds on the loop; spans are ended on the plugin's export thread
@observes("call.end", "select")
def tooldeck_event(event: Event) -> None:
    """Emit the span and metrics of a finished tool call or selection.

    Called on the deck's event loop: notes the span current where the call or selection was
    awaited, the end time and the capture switch, and hands the event to the export thread,
    which builds, ends (and so exports) the span and records the metrics. Call :func:`flush`
    to wait for it (tests reading an in-memory exporter).
    """
    if not _configured():
        return  # no SDK yet: skip building no-op spans on every call's fast path
    from opentelemetry import context

    _exporter.submit(event, _Noted(context.get_current(), time.time_ns(), capture_content()))


class _Noted(NamedTuple):
    """What the loop knew of an event: the parent context, the end (ns), the capture switch."""

    parent: Any
    end_ns: int
    capture: bool


@dataclasses.dataclass(frozen=True)
class ExportStatistics:
    """The export thread's state: events waiting (or being exported) and events dropped."""

    pending: int
    dropped: int


#: Events waiting for the export thread at most; more are dropped (and counted).
MAX_PENDING = 10_000
#: How long the process's exit waits for queued spans (an exporter may be hung).
EXIT_FLUSH_TIMEOUT_S = 5.0


class _Exporter:
    """One thread per process that ends spans and records metrics, behind a bounded queue.

    Ending a span exports it when the application uses the SDK's ``SimpleSpanProcessor``, in
    the thread that ends it; an exporter may be slow or hung (a collector that does not
    answer). Here that delays only this queue, never a call; past :data:`MAX_PENDING` events
    are dropped and counted, so a hung exporter cannot grow memory without bound. Not the deck's
    observer thread: the deck would hand it every event of every deck that loads the plugin,
    SDK or not (12 µs more per call without an SDK, measured), where this thread sees only the
    events there is an SDK to record.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[Event, _Noted]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending = 0
        self._dropped = 0
        self._idle = threading.Event()
        self._idle.set()

    def submit(self, event: Event, noted: _Noted) -> None:
        with self._lock:
            if self._pending >= MAX_PENDING:
                self._dropped += 1
                dropped = self._dropped
            else:
                dropped = 0
                self._pending += 1
                self._idle.clear()
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="tooldeck-otel", daemon=True
                    )
                    self._thread.start()
                    _flush_at_exit_once()
        if dropped:
            if dropped % 1000 == 1:
                log.error("the OpenTelemetry exporter is %d spans behind (slow or hung): %d "
                          "span(s) dropped so far", MAX_PENDING, dropped)
            return
        self._queue.put((event, noted))

    def _run(self) -> None:
        while True:
            event, noted = self._queue.get()
            try:
                if event.kind == "call.end":
                    _call_span(event, noted)
                elif event.kind == "select":
                    _select_span(event, noted)
            except Exception:
                log.exception("tooldeck-otel: recording the %s span failed", event.kind)
            with self._lock:
                self._pending -= 1
                if not self._pending:
                    self._idle.set()

    def flush(self, timeout_s: float | None) -> bool:
        return self._idle.wait(timeout_s)

    def statistics(self) -> ExportStatistics:
        with self._lock:
            return ExportStatistics(pending=self._pending, dropped=self._dropped)

    def _after_fork(self) -> None:
        # The thread did not survive the fork; what it had queued is the parent's to export.
        self.__init__()  # type: ignore[misc]


_exporter = _Exporter()
os.register_at_fork(after_in_child=_exporter._after_fork)


def flush(timeout_s: float | None = 10.0) -> bool:
    """Wait until every span handed to the export thread so far is ended and exported.

    Returns False when ``timeout_s`` passed first (an exporter that is slow or hung). The
    process's exit waits the same way, for up to :data:`EXIT_FLUSH_TIMEOUT_S`.
    """
    return _exporter.flush(timeout_s)


def statistics() -> ExportStatistics:
    """Spans waiting for the export thread, and spans dropped because it fell too far behind."""
    return _exporter.statistics()


@functools.cache
def _flush_at_exit_once() -> None:
    # Registered with the first span, so after the application's TracerProvider registered its
    # own shutdown at exit: atexit runs last-in first-out, so the queue is flushed into the
    # provider before it shuts down.
    atexit.register(_flush_at_exit)


def _flush_at_exit() -> None:
    if not _exporter.flush(EXIT_FLUSH_TIMEOUT_S):
        log.error("tooldeck-otel: %d span(s) were still waiting for the exporter at exit",
                  _exporter.statistics().pending)


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


def _window(duration: object, end: int) -> tuple[int, int, float | None]:
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
        return end - int(duration * 1e9), end, float(duration)
    return end, end, None


def _cap(value: object, limit: int = MAX_ATTRIBUTE_CHARS) -> str:
    """``value`` as a string of at most about ``limit`` characters (cut ones say so)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more characters]"


def _cap_list(values: object) -> list[str]:
    items = list(values) if isinstance(values, list | tuple | set | frozenset) else []
    kept = [_cap(v) for v in items[:MAX_LIST_ITEMS]]
    if len(items) > MAX_LIST_ITEMS:
        kept.append(f"...[{len(items) - MAX_LIST_ITEMS} more]")
    return kept


def _call_span(event: Event, noted: _Noted) -> None:
    otel = _instruments()
    data = event.data
    name = _cap(event.tool or "unknown")
    start, end, duration = _window(data.get("duration_s"), noted.end_ns)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
    }
    if event.call_id:
        attributes["gen_ai.tool.call.id"] = _cap(event.call_id)
    if event.session_id:
        attributes["tooldeck.session.id"] = _cap(event.session_id)
    if isinstance(data.get("category"), str):
        attributes["tooldeck.tool.category"] = _cap(data["category"])
    attributes["tooldeck.cached"] = bool(data.get("cached"))
    code = _cap(data.get("code") or "")
    failed = not data.get("success", True)
    if failed:
        attributes["error.type"] = code or "_OTHER"
    # A name no tool has (the model made it up; the core redacted it) stays an attribute of
    # its span, but never becomes a span name or a metric label: a model inventing a new name
    # per call would otherwise grow the backend's series without bound.
    # The core's call events carry the tool's category, None for a name no tool has.
    unregistered = ("category" in data and data["category"] is None) or (
        data.get("code") == "TOOL_NOT_FOUND"
    )
    known = "_OTHER" if unregistered else name
    span = otel.tracer.start_span(
        f"execute_tool {known}", context=noted.parent, kind=otel.SpanKind.INTERNAL,
        start_time=start, attributes=attributes,
    )
    if failed:
        span.set_status(otel.Status(otel.StatusCode.ERROR, code))
    span.end(end_time=end)
    labels = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": known}
    if failed:
        labels["error.type"] = code or "_OTHER"
    otel.tool_calls.add(1, labels)
    if duration is not None:
        otel.tool_duration.record(duration, labels)


def _select_span(event: Event, noted: _Noted) -> None:
    otel = _instruments()
    data = event.data
    start, end, duration = _window(data.get("duration_s"), noted.end_ns)
    tools = list(data.get("tools", ()))
    attributes: dict[str, Any] = {
        "tooldeck.operation": "select",
        "tooldeck.select.hand_size": len(tools),
        "tooldeck.select.tools": _cap_list(tools),
        "tooldeck.select.excluded": _cap_list(list(data.get("excluded", ()))),
    }
    if isinstance(data.get("candidates"), int):
        attributes["tooldeck.select.candidates"] = data["candidates"]
    if event.session_id:
        attributes["tooldeck.session.id"] = _cap(event.session_id)
    query = data.get("query")
    if noted.capture and isinstance(query, str):
        attributes["tooldeck.select.query"] = _cap(query, MAX_CONTENT_CHARS)
    span = otel.tracer.start_span(
        "tooldeck.select", context=noted.parent, kind=otel.SpanKind.INTERNAL, start_time=start,
        attributes=attributes,
    )
    span.end(end_time=end)
    if duration is not None:
        otel.select_duration.record(duration)
