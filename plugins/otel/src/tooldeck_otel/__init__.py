"""OpenTelemetry for tooldeck: one ``execute_tool`` span per tool call, one span per selection,
and tool-call metrics, following the OpenTelemetry GenAI semantic conventions.

Install ``tooldeck-otel`` and configure the OpenTelemetry SDK as usual (a ``TracerProvider`` with
an exporter, a ``MeterProvider`` with a reader); without an SDK every span is a no-op. See the
README for the attributes.
"""

from __future__ import annotations

from .plugin import (
    CAPTURE_ENV,
    INSTRUMENTATION_NAME,
    MAX_ATTRIBUTE_CHARS,
    MAX_CONTENT_CHARS,
    MAX_LIST_ITEMS,
    MAX_PENDING,
    ExportStatistics,
    capture_content,
    configure,
    flush,
    statistics,
    tooldeck_config_schema,
    tooldeck_event,
    tooldeck_register_tools,
)

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
