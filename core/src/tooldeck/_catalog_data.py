"""The embedded demo catalog: a few hundred realistic tool definitions without executables.

``tooldeck demo`` registers them next to its own runnable tools to show how the retriever deals
the model the 10-15 tools that matter out of a large catalog. The definitions live in
``tooldeck/data/demo_catalog.json`` (``{"source": ..., "tools": [...]}``); each tool there has a
``name``, ``description``, ``category``, JSON Schema ``parameters`` and a security ``level``.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

from tooldeck_hookspecs import SecurityConfig, ToolDefinition

__all__ = ["load_demo_catalog"]


def load_demo_catalog() -> list[ToolDefinition]:
    """Read the embedded demo catalog and build one :class:`ToolDefinition` per entry.

    The tools have no ``execute`` callable: they exist to be indexed, selected and exported, not
    called. Each entry's ``level`` (``safe``, ``moderate`` or ``dangerous``) becomes its
    :class:`SecurityConfig` level.

    :returns: the definitions, in the order of the data file.
    """
    resource = files("tooldeck") / "data" / "demo_catalog.json"
    data: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return [
        ToolDefinition(
            name=entry["name"],
            description=entry["description"],
            category=entry["category"],
            parameters=entry["parameters"],
            security=SecurityConfig(level=entry["level"]),
            execute=None,
        )
        for entry in data["tools"]
    ]
