"""Whether a tool call's arguments certainly fail the schema the request offered.

A runtime may check a call's arguments against the tool's ``parameters`` schema
before any hook of ours runs (OpenClaw does: ``validateToolCallForBatchAdmission``
in its agent core) and answer a failing call with an error result of its own. The
model gateway names such calls to the gate (``GatewayCalls.invalid_arguments``) so
their results are recorded as refusals instead of stopping the runtime as
``ungated_tool_result``.

Which way is safe decides the whole design. "Invalid" turns an uncovered result into
a recorded refusal: if the runtime had in fact run the call past a bypassed hook,
that ungated run would no longer stop it. So :func:`certainly_invalid` says True
only when no validator of the kind runtimes use could accept the arguments; every
doubt answers False, and an uncovered result then stops the runtime as before
(fails closed). In particular:

- The runtime coerces before it checks (OpenClaw's ``coerceWithJsonSchema``, then
  TypeBox's ``Convert``: numeric strings to numbers, scalars to strings, JSON text
  to arrays and objects, null to a type's empty value). A value counts as the wrong
  type only when no such coercion could make it right: a JSON object or array
  where a scalar is wanted, or a scalar where an object is wanted.
- Keywords read: ``type`` (a name or a list of names), ``properties``,
  ``required``, ``additionalProperties`` (ignored beside ``patternProperties``,
  which widens it), ``enum``, ``const``, ``items`` (one schema or a tuple),
  ``anyOf``/``oneOf`` (invalid when every branch is), ``allOf``, ``minItems``,
  ``maxItems``, ``minLength``, ``maxLength`` (in UTF-16 units, as JavaScript
  counts), ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``.
  JSON Schema keywords only ever add constraints, so one this module does not read
  never makes a violation it found go away, and it never finds one on its own.
- Arguments that are not JSON, or JSON but not an object, are invalid: no runtime that
  checks arguments runs them (OpenClaw's chat-completions transport refuses such a
  turn whole, ``malformed_tool_call_arguments``; it repairs string literals only on
  its Anthropic transport, which a gateway speaking OpenAI's API never drives), and
  every text Python's JSON parser rejects ``JSON.parse`` rejects too (Python's also
  reads ``NaN`` and ``Infinity``, never less). Blank arguments are not: a runtime may
  read them as ``{}`` (Hermes does).
- Nesting deeper than :data:`MAX_DEPTH`, or deeper than Python's parser reads (where
  ``JSON.parse`` reads on), answers False for that branch.

A runtime may instead refuse a whole turn in which some call's arguments are not JSON
and answer each of its calls with a text of its own (Hermes does, on a turn it did not
stream): :func:`invalid_json_turn` says which calls and with which text, so the same
accounting holds for it; the gateway checks the texts when the results come back.

Pure and synchronous (ARCHITECTURE.md, "Layers of the code").
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Sequence
from typing import Any, Final, Literal

MAX_DEPTH: Final = 64
_SCALARS: Final = (str, int, float, bool)


def certainly_invalid(arguments: str, schema: object) -> bool:
    """True only when ``arguments`` (a tool call's JSON text) fail ``schema`` whatever
    coercion a runtime applies first; False on any doubt (see the module)."""
    if not arguments.strip():
        return False
    try:
        value = json.loads(arguments)
        return not isinstance(value, dict) or _fails(value, schema, 0)
    except ValueError:
        return True
    except RecursionError:
        return False


def _fails(value: Any, schema: object, depth: int) -> bool:
    if schema is False:
        return True
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return False
    types = _types(schema.get("type"))
    if types is not None and not any(_could_be(value, t) for t in types):
        return True
    if types is not None and not any(_is(value, t) for t in types):
        return False  # only a coerced value could match: what it becomes is not known here
    return (
        _fails_choice(value, schema)
        or _fails_bounds(value, schema)
        or _fails_object(value, schema, depth)
        or _fails_array(value, schema, depth)
        or _fails_branches(value, schema, depth)
    )


def _types(declared: object) -> list[str] | None:
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list) and declared and all(isinstance(t, str) for t in declared):
        return list(declared)
    return None


def _is(value: Any, type_: str) -> bool:
    """The value is of the type as it stands (JSON's types; a boolean is no number)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return {
        "string": isinstance(value, str),
        "number": number,
        "integer": number and float(value).is_integer(),
        "boolean": isinstance(value, bool),
        "null": value is None,
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }.get(type_, True)


def _could_be(value: Any, type_: str) -> bool:
    """The value is of the type, or some coercion a runtime applies could make it so."""
    if _is(value, type_):
        return True
    if type_ in ("string", "number", "integer", "boolean", "null"):
        return value is None or isinstance(value, _SCALARS)
    if type_ == "array":
        return not isinstance(value, dict)
    # object: JSON text may be parsed into one; null may stand for an empty one
    return value is None or isinstance(value, str)


def _fails_choice(value: Any, schema: dict[str, Any]) -> bool:
    options: list[Any] | None = None
    if isinstance(schema.get("enum"), list):
        options = schema["enum"]
    if "const" in schema:
        options = [schema["const"]] if options is None else [*options, schema["const"]]
        if isinstance(schema.get("enum"), list) and schema["const"] not in schema["enum"]:
            return True
    if options is None:
        return False
    return not any(_may_equal(value, option) for option in options)


def _may_equal(value: Any, option: Any) -> bool:
    """Equal as JSON, or two scalars a coercion could make equal (``"5"`` and ``5``)."""
    if isinstance(value, dict | list) or isinstance(option, dict | list):
        return type(value) is type(option) and value == option
    if type(value) is type(option) or (_is(value, "number") and _is(option, "number")):
        return bool(value == option)
    return True


def _fails_bounds(value: Any, schema: dict[str, Any]) -> bool:
    if _is(value, "number"):
        number = float(value)
        return (
            _above(schema.get("minimum"), number, strict=False)
            or _above(schema.get("exclusiveMinimum"), number, strict=True)
            or _above(number, schema.get("maximum"), strict=False)
            or _above(number, schema.get("exclusiveMaximum"), strict=True)
        )
    if isinstance(value, str):
        units = len(value.encode("utf-16-le")) // 2
        return _above(schema.get("minLength"), units, strict=False) or _above(
            units, schema.get("maxLength"), strict=False
        )
    if isinstance(value, list):
        return _above(schema.get("minItems"), len(value), strict=False) or _above(
            len(value), schema.get("maxItems"), strict=False
        )
    return False


def _above(low: object, high: object, *, strict: bool) -> bool:
    """``low > high`` (or ``>=`` when strict), only when both are finite numbers."""
    left, right = _finite(low), _finite(high)
    if left is None or right is None:
        return False
    return left >= right if strict else left > right


def _finite(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _fails_object(value: Any, schema: dict[str, Any], depth: int) -> bool:
    if not isinstance(value, dict):
        return False
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    if isinstance(required, list) and any(
        isinstance(name, str) and name not in value for name in required
    ):
        return True
    if any(
        name in value and _fails(value[name], sub, depth + 1) for name, sub in properties.items()
    ):
        return True
    extra = [name for name in value if name not in properties]
    additional = schema.get("additionalProperties")
    if not extra or "patternProperties" in schema or additional is None:
        return False
    if additional is False:
        return True
    return any(_fails(value[name], additional, depth + 1) for name in extra)


def _fails_array(value: Any, schema: dict[str, Any], depth: int) -> bool:
    if not isinstance(value, list):
        return False
    items = schema.get("items")
    if isinstance(items, list):
        return any(_fails(item, sub, depth + 1) for item, sub in zip(value, items, strict=False))
    if items is None:
        return False
    return any(_fails(item, items, depth + 1) for item in value)


def _fails_branches(value: Any, schema: dict[str, Any], depth: int) -> bool:
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if (
            isinstance(branches, list)
            and branches
            and all(_fails(value, branch, depth + 1) for branch in branches)
        ):
            return True
    branches = schema.get("allOf")
    if isinstance(branches, list):
        return any(_fails(value, branch, depth + 1) for branch in branches)
    return False


InvalidJsonAnswer = Literal["arguments", "same_tool", "skipped"]
"""How a runtime that refuses a turn whose arguments are not JSON answers one of its
calls: ``arguments``, the call's own arguments are not JSON (refused for them);
``same_tool``, another call to the same tool's are (Hermes picks its refusal by the
tool's name, so this call gets the same text); ``skipped``, any other call."""


def not_json(arguments: str) -> bool:
    """Hermes's own test of a call's arguments (0.19.0, ``agent/conversation_loop.py``):
    blank arguments are read as ``{}``; any other text Python's JSON parser rejects is
    invalid. Nesting too deep for the parser answers False (a doubt: see the module)."""
    if not arguments.strip():
        return False
    try:
        json.loads(arguments)
    except ValueError:
        return True
    except RecursionError:
        return False
    return False


def invalid_json_turn(
    calls: Sequence[tuple[str, str]], offered: Collection[str]
) -> list[InvalidJsonAnswer] | None:
    """For a turn's calls (name, arguments), how a runtime that refuses a turn whose
    arguments are not JSON answers each, or None when it runs the turn as usual.

    Mirrors Hermes 0.19.0 on a turn it did not stream: only calls to an offered tool
    have their arguments read (a call to another name is answered as an unknown tool,
    and a turn with no call to an offered tool is refused as such); when one of them is
    not JSON (:func:`not_json`), after its retries Hermes answers every call of the turn
    itself, before any hook, and runs none. A streamed turn Hermes repairs first and
    runs what it could repair through its hooks, so this is not for one."""
    read = [name in offered for name, _ in calls]
    invalid = [r and not_json(arguments) for r, (_, arguments) in zip(read, calls, strict=True)]
    if not any(invalid):
        return None
    names = {name for (name, _), bad in zip(calls, invalid, strict=True) if bad}
    return [
        "arguments" if bad else "same_tool" if name in names else "skipped"
        for (name, _), bad in zip(calls, invalid, strict=True)
    ]
