"""Check JSON arguments against a tool's schema: the small JSON-Schema subset the table uses.

Supported keywords: type (object, string, integer, boolean, array), properties, required,
additionalProperties (false only), enum, minimum, maximum, minLength, maxLength, minItems,
items. A keyword outside this set in the table is a bug, caught by the table's own test.
"""

from __future__ import annotations

from .result import UsageError

TYPE_CHECKING = False  # typing is not imported at run time (the call's start)
if TYPE_CHECKING:
    from typing import Any

SUPPORTED = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "enum", "minimum", "maximum",
        "minLength", "maxLength", "minItems", "items", "description", "default",
    }
)

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "string": (str,),
    "integer": (int,),
    "boolean": (bool,),
    "array": (list,),
}


def validate(value: Any, schema: dict[str, Any], where: str = "arguments") -> None:
    """Raise UsageError naming the first field that does not fit ``schema``."""
    expected = schema.get("type")
    if expected is not None:
        ok = isinstance(value, _TYPES[expected])
        if expected == "integer" and isinstance(value, bool):
            ok = False  # JSON true is not a number
        if not ok:
            raise UsageError(f"{where}: expected {expected}, got {_json_type(value)}")
    if "enum" in schema and value not in schema["enum"]:
        raise UsageError(f"{where}: must be one of {schema['enum']}, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool):
        _check_bounds(value, schema, where)
    if isinstance(value, str):
        _check_length(len(value), schema, where, "minLength", "maxLength", "characters")
    if isinstance(value, list):
        _check_length(len(value), schema, where, "minItems", None, "items")
        for index, item in enumerate(value):
            validate(item, schema.get("items", {}), f"{where}[{index}]")
    if isinstance(value, dict):
        _check_object(value, schema, where)


def _check_object(value: dict[str, Any], schema: dict[str, Any], where: str) -> None:
    properties = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            raise UsageError(f"{where}: missing required field {name!r}")
    if schema.get("additionalProperties") is False:
        unknown = sorted(set(value) - set(properties))
        if unknown:
            raise UsageError(f"{where}: unknown field {unknown[0]!r}")
    for name, item in value.items():
        if name in properties:
            validate(item, properties[name], f"{where}.{name}")


def _check_bounds(value: int, schema: dict[str, Any], where: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise UsageError(f"{where}: must be at least {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        raise UsageError(f"{where}: must be at most {schema['maximum']}")


def _check_length(
    size: int, schema: dict[str, Any], where: str, low: str, high: str | None, unit: str
) -> None:
    if low in schema and size < schema[low]:
        raise UsageError(f"{where}: needs at least {schema[low]} {unit}")
    if high is not None and high in schema and size > schema[high]:
        raise UsageError(f"{where}: allows at most {schema[high]} {unit}")


def _json_type(value: Any) -> str:
    for name, kinds in _TYPES.items():
        if isinstance(value, kinds) and not (name == "integer" and isinstance(value, bool)):
            return name
    return "null" if value is None else type(value).__name__
