"""The OpenTelemetry API is imported at the first signal, not when the plugin loads.

Every ``tooldeck`` command loads the plugin; a process that sets no provider must not pay for
the API. Each check runs in a new interpreter, where nothing else imported OpenTelemetry.
"""

from __future__ import annotations

from tooldeck.testing import run_python


def _run(code: str) -> str:
    return run_python(code).strip()


def test_loading_the_plugin_and_emitting_without_a_provider_imports_no_opentelemetry():
    out = _run(
        """
        import sys
        import tooldeck_otel
        from tooldeck_hookspecs import Event

        tooldeck_otel.tooldeck_event(Event(kind="call.end", tool="t", data={"duration_s": 0.1}))
        print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
        """
    )
    assert out == "[]"


def test_a_provider_set_after_the_plugin_loaded_gets_the_spans():
    out = _run(
        """
        import tooldeck_otel
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from tooldeck_hookspecs import Event

        tooldeck_otel.tooldeck_event(Event(kind="call.end", tool="early", data={}))
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        tooldeck_otel.tooldeck_event(
            Event(kind="call.end", tool="late", data={"success": False, "code": "TIMEOUT"})
        )
        assert tooldeck_otel.flush()  # spans are ended on the plugin's export thread
        for span in exporter.get_finished_spans():
            print(span.name, span.status.status_code.name, span.attributes["error.type"])
        """
    )
    assert out == "execute_tool late ERROR TIMEOUT"
