"""JSON-schema descriptions of tools, built from their signatures and docstrings, for offering to a model."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
_ARG_LINE = re.compile(r"^\s{4,}(\w+):\s*(.+)$")


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(options) == 1:
            return _json_type(options[0])
        if set(options) == {int, float}:
            return {"type": "number"}
        return {"anyOf": [_json_type(o) for o in options]}
    if origin in (list, tuple, set):
        args = typing.get_args(annotation)
        return {"type": "array", "items": _json_type(args[0])} if args else {"type": "array"}
    base = origin or annotation
    return {"type": _JSON_TYPES[base]} if base in _JSON_TYPES else {}


def _argument_docs(doc: str) -> dict[str, str]:
    described: dict[str, str] = {}
    in_args = False
    for line in doc.splitlines():
        if line.strip() in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            match = _ARG_LINE.match(line)
            if match:
                described[match.group(1)] = match.group(2).strip()
            elif line.strip() and not line.startswith(" "):
                in_args = False
    return described


def tool_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """``{"name", "description", "parameters"}`` for ``fn``, the shape model APIs take for function tools."""
    target = inspect.unwrap(fn)
    hints = typing.get_type_hints(target)
    doc = inspect.getdoc(target) or ""
    described = _argument_docs(doc)
    properties: dict[str, Any] = {}
    required = []
    for parameter in inspect.signature(target).parameters.values():
        if parameter.name in ("self", "cls") or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        spec = _json_type(hints.get(parameter.name, Any))
        if parameter.name in described:
            spec["description"] = described[parameter.name]
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        else:
            spec["default"] = parameter.default
        properties[parameter.name] = spec
    return {
        "name": name or target.__name__,
        "description": doc.split("\n\n", 1)[0].replace("\n", " ").strip(),
        "parameters": {"type": "object", "properties": properties, "required": required, "additionalProperties": False},
    }
