"""A request's JSON body checked against the service's own model, as botocore ships it (its
``service-2.json``): the bounds of every member (string and list lengths, numbers' ranges), its enums, its
patterns, its required members and its types. botocore checks only minimums before sending (no pattern),
and another SDK may check nothing: the service answers the rest, here as there, with
``ValidationException`` in AWS's words ("1 validation error detected: Value at 'retrievalQuery.text'
failed to satisfy constraint: Member must have length less than or equal to 20000"). Driven by the model
itself, the limits cannot drift from AWS's.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import botocore.session
from botocore.model import OperationModel, Shape

MAX_REPORTED = 10  # AWS lists at most this many of a request's errors


@functools.cache
def operation(service: str, name: str) -> OperationModel:
    return botocore.session.get_session().get_service_model(service).operation_model(name)


def problems(service: str, name: str, body: dict[str, Any]) -> list[str]:
    """What the model refuses of ``body`` (the members sent as JSON, not those of the path or headers)."""
    shape = operation(service, name).input_shape
    found: list[str] = []
    if shape is None:
        return found
    members = {k: v for k, v in shape.members.items() if not v.serialization.get("location")}
    for member in shape.required_members:
        if member in members and member not in body:
            found.append(f"Value null at '{member}' failed to satisfy constraint: Member must not be null")
    for key, value in body.items():
        if key in members:
            _check(members[key], value, key, found)
    return found


def message(found: list[str]) -> str:
    shown = found[:MAX_REPORTED]
    count = f"{len(found)} validation error{'s' if len(found) > 1 else ''} detected"
    return f"{count}: {'; '.join(shown)}"


def _check(shape: Shape, value: Any, path: str, found: list[str]) -> None:
    kind = shape.type_name
    if shape.metadata.get("document"):
        return  # a document member (a filter's value): any JSON value
    at = f"Value at '{path}' failed to satisfy constraint: Member must"
    bounds = shape.metadata
    if kind == "structure":
        if not isinstance(value, dict):
            found.append(f"{at} be a structure")
            return
        for member in shape.required_members:
            if member not in value:
                found.append(
                    f"Value null at '{path}.{member}' failed to satisfy constraint: Member must not be null"
                )
        for key, item in value.items():
            if key in shape.members:
                _check(shape.members[key], item, f"{path}.{key}", found)
    elif kind == "list":
        if not isinstance(value, list):
            found.append(f"{at} be a list")
            return
        _length(len(value), bounds, at, found)
        for n, item in enumerate(value, 1):
            _check(shape.member, item, f"{path}.{n}.member", found)
    elif kind == "map":
        if not isinstance(value, dict):
            found.append(f"{at} be a map")
            return
        for key, item in value.items():
            _check(shape.value, item, f"{path}.{key}", found)
    elif kind == "string":
        if not isinstance(value, str):
            found.append(f"{at} be a string")
            return
        _length(len(value), bounds, at, found)
        enum = getattr(shape, "enum", None)
        if enum and value not in enum:
            found.append(f"{at} satisfy enum value set: [{', '.join(enum)}]")
        pattern = bounds.get("pattern")
        if pattern and _compiled(pattern).fullmatch(value) is None:  # the service matches the whole value
            found.append(f"{at} satisfy regular expression pattern: {pattern}")
    elif kind in {"integer", "long"}:
        if isinstance(value, bool) or not isinstance(value, int):
            found.append(f"{at} be an integer")
            return
        if "min" in bounds and value < bounds["min"]:
            found.append(f"{at} have value greater than or equal to {bounds['min']}")
        if "max" in bounds and value > bounds["max"]:
            found.append(f"{at} have value less than or equal to {bounds['max']}")
    elif kind in {"float", "double"}:
        if isinstance(value, bool) or not isinstance(value, int | float):
            found.append(f"{at} be a number")
    elif kind == "boolean" and not isinstance(value, bool):
        found.append(f"{at} be a boolean")
    # blob and timestamp members: taken as they are


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _length(length: int, bounds: dict[str, Any], at: str, found: list[str]) -> None:
    if "min" in bounds and length < bounds["min"]:
        found.append(f"{at} have length greater than or equal to {bounds['min']}")
    if "max" in bounds and length > bounds["max"]:
        found.append(f"{at} have length less than or equal to {bounds['max']}")
