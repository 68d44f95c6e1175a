"""The JSON Schema Draft 7 metaschema, extended with the 2019-09/2020-12 keywords tools use.

Kept in-process (no network, no file) so meta-validation works offline. ``$id`` is left out on
purpose: with it, fastjsonschema would resolve ``#`` against the remote URI.
"""

from __future__ import annotations

from typing import Any

_REF_ROOT: dict[str, Any] = {"$ref": "#"}
_NON_NEGATIVE = {"$ref": "#/definitions/nonNegativeInteger"}
_NON_NEGATIVE_0 = {"$ref": "#/definitions/nonNegativeIntegerDefault0"}
_SCHEMA_ARRAY = {"$ref": "#/definitions/schemaArray"}
_SCHEMA_MAP = {"type": "object", "additionalProperties": _REF_ROOT}

#: Draft 7 metaschema (json-schema.org/draft-07/schema), plus ``$defs``, ``prefixItems``,
#: ``dependentRequired``/``dependentSchemas`` and ``unevaluatedProperties`` so that schemas
#: written for 2020-12 are checked structurally too.
DRAFT7_METASCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Core schema meta-schema",
    "definitions": {
        "schemaArray": {"type": "array", "minItems": 1, "items": _REF_ROOT},
        "nonNegativeInteger": {"type": "integer", "minimum": 0},
        "nonNegativeIntegerDefault0": {"allOf": [_NON_NEGATIVE]},
        "simpleTypes": {
            "enum": ["array", "boolean", "integer", "null", "number", "object", "string"]
        },
        "stringArray": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    },
    "type": ["object", "boolean"],
    "properties": {
        "$id": {"type": "string"},
        "$schema": {"type": "string"},
        "$ref": {"type": "string"},
        "$comment": {"type": "string"},
        "title": {"type": "string"},
        "description": {"type": "string"},
        "default": True,
        "readOnly": {"type": "boolean"},
        "writeOnly": {"type": "boolean"},
        "examples": {"type": "array"},
        "multipleOf": {"type": "number", "exclusiveMinimum": 0},
        "maximum": {"type": "number"},
        "exclusiveMaximum": {"type": "number"},
        "minimum": {"type": "number"},
        "exclusiveMinimum": {"type": "number"},
        "maxLength": _NON_NEGATIVE,
        "minLength": _NON_NEGATIVE_0,
        "pattern": {"type": "string", "format": "regex"},
        "additionalItems": _REF_ROOT,
        "items": {"anyOf": [_REF_ROOT, _SCHEMA_ARRAY]},
        "prefixItems": _SCHEMA_ARRAY,
        "maxItems": _NON_NEGATIVE,
        "minItems": _NON_NEGATIVE_0,
        "uniqueItems": {"type": "boolean"},
        "contains": _REF_ROOT,
        "maxProperties": _NON_NEGATIVE,
        "minProperties": _NON_NEGATIVE_0,
        "required": {"$ref": "#/definitions/stringArray"},
        "additionalProperties": _REF_ROOT,
        "unevaluatedProperties": _REF_ROOT,
        "definitions": _SCHEMA_MAP,
        "$defs": _SCHEMA_MAP,
        "properties": _SCHEMA_MAP,
        "patternProperties": {
            "type": "object",
            "additionalProperties": _REF_ROOT,
            "propertyNames": {"format": "regex"},
        },
        "dependencies": {
            "type": "object",
            "additionalProperties": {"anyOf": [_REF_ROOT, {"$ref": "#/definitions/stringArray"}]},
        },
        "dependentSchemas": _SCHEMA_MAP,
        "dependentRequired": {
            "type": "object",
            "additionalProperties": {"$ref": "#/definitions/stringArray"},
        },
        "propertyNames": _REF_ROOT,
        "const": True,
        "enum": {"type": "array", "minItems": 1},
        "type": {
            "anyOf": [
                {"$ref": "#/definitions/simpleTypes"},
                {
                    "type": "array",
                    "items": {"$ref": "#/definitions/simpleTypes"},
                    "minItems": 1,
                    "uniqueItems": True,
                },
            ]
        },
        "format": {"type": "string"},
        "contentMediaType": {"type": "string"},
        "contentEncoding": {"type": "string"},
        "if": _REF_ROOT,
        "then": _REF_ROOT,
        "else": _REF_ROOT,
        "allOf": _SCHEMA_ARRAY,
        "anyOf": _SCHEMA_ARRAY,
        "oneOf": _SCHEMA_ARRAY,
        "not": _REF_ROOT,
    },
}
