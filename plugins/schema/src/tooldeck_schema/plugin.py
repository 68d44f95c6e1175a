"""Hook implementations of the register stage (entry point ``schema``)."""

from __future__ import annotations

from tooldeck_hookspecs import ArgumentValidator, Catalog, ToolDefinition, hookimpl

from ._arguments import SchemaArgumentValidator
from ._rules import validate_definition


@hookimpl
def tooldeck_validate_tool(tool: ToolDefinition, catalog: Catalog) -> list[str]:
    """Naming, version, schema, security and execution rules, and name uniqueness."""
    return validate_definition(tool, catalog)


@hookimpl
def tooldeck_argument_validator(tool: ToolDefinition) -> ArgumentValidator:
    """A compiled fastjsonschema validator for ``tool.parameters`` with per-field problems."""
    return SchemaArgumentValidator(tool.parameters)
