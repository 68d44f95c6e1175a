"""Register stage: tool packs hand in tools, validators check them, the catalog goes live."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._markers import hookspec
from ..model import ToolDefinition
from ..protocols import ArgumentValidator, Catalog, RegisterFn

# -------------------------------------------------------------------------
# Registration
# -------------------------------------------------------------------------


@hookspec
def tooldeck_register_tools(register: RegisterFn, settings: Mapping[str, Any]) -> None:
    """Register the tools a pack provides.

    Called once at start-up for every plugin that implements it; return values are ignored. The
    core hands each plugin its own ``register`` callable so that it records which plugin each tool
    came from. Like every hook, an implementation may accept only the parameters it uses.

    :param register: call ``register(definition)`` with a :class:`ToolDefinition`, or
        ``register(function, category=..., ...)`` with a plain or async function whose parameters
        are derived from its type hints and docstring (or given as ``parameters=`` JSON Schema).
    :param settings: the whole tooldeck configuration; read your own table (e.g.
        ``settings.get("fs", {})``). Tools also receive their plugin's table as
        ``ToolContext.settings`` at call time.

    Example::

        @hookimpl
        def tooldeck_register_tools(register):
            register(word_count, category="text")
    """


@hookspec
def tooldeck_validate_tool(tool: ToolDefinition, catalog: Catalog) -> list[str] | None:
    """Check one tool definition before it enters the catalog.

    Called for every implementation; all results are collected and every problem is reported
    together (a :class:`~tooldeck_hookspecs.RegistrationError` at start-up). At run time
    (``Deck.add_tools``) it runs in a worker thread within ``register_timeout_s``: past the
    deadline nothing of the batch is added.

    :param tool: the definition, with ``plugin`` filled in.
    :param catalog: the tools registered so far (for uniqueness checks).
    :return: readable problems, one line each naming tool, plugin and field; empty or None if fine.
    """


@hookspec(firstresult=True)
def tooldeck_argument_validator(tool: ToolDefinition) -> ArgumentValidator | None:
    """Compile the call-time argument validator of one tool.

    Called once per tool when it is registered; stops at the first non-None result. The core
    keeps the validator and calls it on every call of the tool. At run time
    (``Deck.add_tools``) it runs in a worker thread, as ``tooldeck_validate_tool`` does.

    :param tool: the definition whose ``parameters`` schema is compiled.
    :return: a callable ``validator(arguments) -> list[ArgumentProblem]``.
    """


@hookspec
def tooldeck_catalog_ready(catalog: Catalog) -> None:
    """Observe the catalog once every tool is registered and validated.

    Called once at start-up for every implementation, and again after tools are added or removed at
    run time; return values are ignored. At run time (``Deck.add_tools`` / ``remove_tools``) it
    is called in a worker thread within ``register_timeout_s``, so that a slow observer stalls
    no session: it must not use the deck's trio loop, and one still running past the deadline
    is logged and left behind.

    :param catalog: read-only view of all registered tools.
    """


# -------------------------------------------------------------------------
# Configuration
# -------------------------------------------------------------------------


@hookspec
def tooldeck_config_schema() -> Mapping[str, Mapping[str, Any]] | None:
    """Describe the configuration tables this plugin reads, as JSON Schema, one per table.

    Called once at start-up for every implementation, before any tool is registered; all results
    are collected, and the whole configuration is validated against them at once (every problem
    one line naming file, table and key). A plugin that does not implement it keeps working: its
    table is only checked for being a table. Takes no parameters.

    :return: ``{table_name: schema}``, e.g. ``{"cache": {"type": "object", "properties":
        {"max_entries": {"type": "integer", "minimum": 1}}, "additionalProperties": False}}``.
        The core understands ``type``, ``enum``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
        ``exclusiveMaximum``, ``minLength``, ``pattern``, ``items``, ``minItems``,
        ``properties``, ``additionalProperties``, ``required`` and ``anyOf``; other keywords are
        ignored. ``additionalProperties: false`` turns misspelled keys into problems with a
        "did you mean".

    Example::

        @hookimpl
        def tooldeck_config_schema():
            return {"acme": {"type": "object", "properties": {"token_env": {"type": "string"}},
                             "additionalProperties": False}}
    """
