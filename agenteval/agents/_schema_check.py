"""Whether a model's tool-call arguments fit the tool's JSON schema: the subset :mod:`agenteval.tools._schema`
writes (types, enums, unions, arrays, required and no other properties)."""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def schema_problem(value: Any, schema: dict[str, Any], where: str = "arguments") -> str | None:
    """What is wrong with ``value`` under ``schema`` (the first problem), or None when it fits."""
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {schema['enum']}, not {value!r}"
    if "anyOf" in schema:
        if all(schema_problem(value, option, where) for option in schema["anyOf"]):
            return f"{where} fits none of the types allowed"
        return None
    kind = schema.get("type")
    if kind is not None and not _is(value, kind):
        return f"{where} must be {kind}, not {type(value).__name__}"
    if kind == "object":
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                return f"{where} lacks {name!r}"
        if schema.get("additionalProperties") is False:
            unknown = sorted(set(value) - set(properties))
            if unknown:
                return f"{where} has unknown {', '.join(map(repr, unknown))}"
        for name, item in value.items():
            if name in properties:
                problem = schema_problem(item, properties[name], f"{name!r}")
                if problem is not None:
                    return problem
    if kind == "array" and "items" in schema:
        for index, item in enumerate(value):
            problem = schema_problem(item, schema["items"], f"{where}[{index}]")
            if problem is not None:
                return problem
    return None


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False  # JSON's true is not a number
    return isinstance(value, _TYPES.get(kind, (object,)))
