"""tooldeck's register stage: tool-definition rules and compiled argument validators.

The plugin (entry point ``schema``) implements ``tooldeck_validate_tool`` and
``tooldeck_argument_validator``. The functions below are public so that other plugins and tests
can use the same rules directly.
"""

from __future__ import annotations

from ._arguments import SchemaArgumentValidator, json_path, json_type
from ._compile import SchemaCompileError, compile_schema, meta_validate
from ._metaschema import DRAFT7_METASCHEMA
from ._rules import MAX_NAME_LENGTH, NAME_RE, format_problem, validate_definition

__all__ = [
    "DRAFT7_METASCHEMA",
    "MAX_NAME_LENGTH",
    "NAME_RE",
    "SchemaArgumentValidator",
    "SchemaCompileError",
    "compile_schema",
    "format_problem",
    "json_path",
    "json_type",
    "meta_validate",
    "validate_definition",
]
