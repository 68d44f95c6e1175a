"""The ``faiss`` entry point: provides the filter stage's retriever."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import hookimpl

from ._retriever import FaissRetriever, RetrieverSettings


@hookimpl
def tooldeck_retriever(settings: Mapping[str, Any]) -> FaissRetriever:
    """A hybrid BM25 + embedding retriever configured from ``settings["faiss"]``."""
    table = settings.get("faiss", {}) if isinstance(settings, Mapping) else {}
    return FaissRetriever(
        RetrieverSettings.from_mapping(table or {}),
        config=settings if isinstance(settings, Mapping) else None,
    )


@hookimpl
def tooldeck_config_schema() -> dict[str, Any]:
    """The ``[faiss]`` table: key names from :class:`RetrieverSettings` (values it checks)."""
    import attrs

    return {
        "faiss": {
            "type": "object",
            "properties": {field.name: {} for field in attrs.fields(RetrieverSettings)},
            "additionalProperties": False,
        }
    }
