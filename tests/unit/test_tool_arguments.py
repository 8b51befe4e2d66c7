"""Whether a tool call's arguments certainly fail the offered schema
(``smf_assurance.core.tool_arguments``).

Proves: a violation no coercion of a runtime could repair is found (a JSON object or
array where a scalar is wanted, a scalar where an object is wanted, a required
property missing, a property ``additionalProperties: false`` forbids, an enum or const
missed, bounds crossed, every ``anyOf``/``oneOf`` branch failed, one ``allOf`` branch
failed, nested in properties and items), and every doubt answers "not certainly
invalid": a value OpenClaw or TypeBox could coerce (``"5"`` for a number, ``5`` for a
string, JSON text for an array), a schema that
is not one, ``patternProperties`` beside ``additionalProperties``, keywords not read,
nesting past the depth bound, blank arguments. Arguments that are not a JSON object are
invalid. The schema of OpenClaw's ``read`` tool (2026.9.6,
``readToolInputSchema``, as TypeBox emits it) is read as OpenClaw's validator reads it
for the cases it rejects.

A turn Hermes refuses whole for arguments that are not JSON is found as Hermes finds it
(its own test, on the calls to offered tools only) with the text it gives each call, and
only Hermes's own texts for that case, whole, are taken for its refusal.

Does not prove: agreement with OpenClaw's validator on the real runtime (that is
``tests/runtimes/test_openclaw_gateway.py``), nor with Hermes on the real runtime
(``tests/runtimes/test_hermes_gateway.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from smf_assurance.core.model_turns import (
    ARGUMENT_CHECK_REFUSAL,
    INVALID_JSON_SKIPPED,
    ChatRequest,
    is_invalid_json_refusal,
    read_request,
)
from smf_assurance.core.tool_arguments import (
    MAX_DEPTH,
    certainly_invalid,
    invalid_json_turn,
    not_json,
)

OPENCLAW_READ: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "File path; relative/absolute."},
        "offset": {"type": "integer", "minimum": 1, "description": "Start line; 1-based."},
        "limit": {"type": "number", "description": "Max lines."},
        "cursor": {"type": "integer", "minimum": 0},
        "optional": {"const": True},
    },
    "required": ["path"],
}


def invalid(arguments: Any, schema: object) -> bool:
    return certainly_invalid(json.dumps(arguments), schema)


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"offset": 1},
        {"path": {"file": "a"}},
        {"path": ["a"]},
        {"path": "a", "offset": 0},
        {"path": "a", "cursor": -1},
        {"path": "a", "limit": {"n": 1}},
        {"path": "a", "optional": False},
    ],
)
@pytest.mark.claim("model-gateway.invalid-arguments-accounted")
def test_what_openclaws_read_schema_certainly_rejects_is_found(arguments: Any) -> None:
    assert invalid(arguments, OPENCLAW_READ)


@pytest.mark.parametrize(
    "arguments",
    [
        {"path": "a"},
        {"path": 5},  # coerced to "5"
        {"path": None},  # coerced to ""
        {"path": True},
        {"path": "a", "offset": "3"},  # a numeric string, coerced
        {"path": "a", "offset": 2.5},  # TypeBox may convert a number to an integer
        {"path": "a", "limit": "ten"},
        {"path": "a", "optional": "true"},
        {"path": "a", "extra": {"x": 1}},  # no additionalProperties: allowed
    ],
)
def test_what_a_runtime_could_accept_is_not_called_invalid(arguments: Any) -> None:
    assert not invalid(arguments, OPENCLAW_READ)


OBJECT = {"type": "object", "properties": {"options": {"type": "object"}}}
ARRAY = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}}


@pytest.mark.parametrize(
    ("schema", "arguments", "expected"),
    [
        # types, as a name or a list of names
        (OBJECT, {"options": 5}, True),
        (OBJECT, {"options": ["a"]}, True),
        (OBJECT, {"options": '{"a": 1}'}, False),  # JSON text parsed into an object
        (OBJECT, {"options": None}, False),
        (ARRAY, {"items": {"a": 1}}, True),
        (ARRAY, {"items": '["a"]'}, False),  # JSON text parsed into an array
        (ARRAY, {"items": ["a", {"b": 1}]}, True),
        (ARRAY, {"items": ["a", 1]}, False),
        ({"type": "object", "properties": {"v": {"type": ["string", "null"]}}}, {"v": [1]}, True),
        ({"type": "object", "properties": {"v": {"type": ["string", "array"]}}}, {"v": [1]}, False),
        ({"type": "object", "properties": {"v": {"type": "mystery"}}}, {"v": [1]}, False),
        ({"type": "object", "properties": {"v": {"type": []}}}, {"v": [1]}, False),
        ({"type": "object", "properties": {"v": {"type": "boolean"}}}, {"v": {}}, True),
        ({"type": "object", "properties": {"v": {"type": "null"}}}, {"v": []}, True),
        # required, additionalProperties
        ({"type": "object", "required": ["a", 3]}, {"a": 1}, False),
        ({"type": "object", "additionalProperties": False}, {"a": 1}, True),
        ({"type": "object", "additionalProperties": False}, {}, False),
        (
            {"type": "object", "additionalProperties": False, "patternProperties": {"^a": {}}},
            {"a": 1},
            False,
        ),
        ({"type": "object", "additionalProperties": {"type": "string"}}, {"a": [1]}, True),
        ({"type": "object", "additionalProperties": {"type": "string"}}, {"a": "b"}, False),
        ({"type": "object", "additionalProperties": True}, {"a": [1]}, False),
        # enum and const
        ({"properties": {"m": {"enum": ["r", "w"]}}}, {"m": "x"}, True),
        ({"properties": {"m": {"enum": ["r", "w"]}}}, {"m": "r"}, False),
        ({"properties": {"m": {"enum": [1, 2]}}}, {"m": "1"}, False),  # could be coerced
        ({"properties": {"m": {"enum": [1, 2]}}}, {"m": 3}, True),
        ({"properties": {"m": {"enum": [{"a": 1}]}}}, {"m": {"a": 2}}, True),
        ({"properties": {"m": {"enum": [{"a": 1}]}}}, {"m": {"a": 1}}, False),
        ({"properties": {"m": {"const": "r"}}}, {"m": ["r"]}, True),
        ({"properties": {"m": {"const": "r", "enum": ["w"]}}}, {"m": "r"}, True),
        ({"properties": {"m": {"const": "r", "enum": ["r"]}}}, {"m": "r"}, False),
        # bounds: numbers, strings (UTF-16 units), arrays
        ({"properties": {"n": {"maximum": 3}}}, {"n": 4}, True),
        ({"properties": {"n": {"exclusiveMaximum": 3}}}, {"n": 3}, True),
        ({"properties": {"n": {"exclusiveMinimum": 3}}}, {"n": 3}, True),
        ({"properties": {"n": {"minimum": 3}}}, {"n": 3}, False),
        ({"properties": {"n": {"minimum": 3}}}, {"n": "1"}, False),  # a string is coerced
        ({"properties": {"n": {"minimum": "3"}}}, {"n": 1}, False),  # a bound not a number
        ({"properties": {"n": {"minimum": True}}}, {"n": 0}, False),
        ({"properties": {"s": {"maxLength": 2}}}, {"s": "abc"}, True),
        ({"properties": {"s": {"minLength": 2}}}, {"s": "\U0001f600"}, False),  # 2 units
        ({"properties": {"s": {"minLength": 3}}}, {"s": "\U0001f600"}, True),
        ({"properties": {"l": {"minItems": 1}}}, {"l": []}, True),
        ({"properties": {"l": {"maxItems": 1}}}, {"l": [1, 2]}, True),
        ({"properties": {"b": {"maxItems": 1}}}, {"b": True}, False),
        # items as a tuple
        ({"properties": {"t": {"items": [{"type": "string"}]}}}, {"t": [[1], 2]}, True),
        ({"properties": {"t": {"items": [{"type": "string"}]}}}, {"t": ["a", [2]]}, False),
        # anyOf / oneOf / allOf, boolean schemas
        ({"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"c": 1}, True),
        ({"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"b": 1}, False),
        ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"c": 1}, True),
        ({"oneOf": []}, {"c": 1}, False),
        ({"allOf": [{"required": ["a"]}, {}]}, {"b": 1}, True),
        ({"allOf": [{}, {}]}, {"b": 1}, False),
        ({"properties": {"x": False}}, {"x": 1}, True),
        ({"properties": {"x": True}}, {"x": 1}, False),
        # keywords not read never find a violation on their own
        ({"not": {}}, {"a": 1}, False),
        ({"$ref": "#/definitions/x", "if": {}, "then": False}, {"a": 1}, False),
    ],
)
def test_each_keyword_read_finds_only_certain_violations(
    schema: object, arguments: Any, expected: bool
) -> None:
    assert invalid(arguments, schema) is expected


@pytest.mark.parametrize(
    "arguments", ["{", '{"path": "a"', "{'path': 'a'}", "None", "[1]", '"text"', "null", "3"]
)
def test_arguments_that_are_not_a_json_object_are_invalid(arguments: str) -> None:
    """OpenClaw runs no such call (its transport refuses the turn whole)."""
    assert certainly_invalid(arguments, OPENCLAW_READ)


@pytest.mark.parametrize("arguments", ["", "  \n"])
def test_blank_arguments_are_not_called_invalid(arguments: str) -> None:
    """A runtime may read blank arguments as ``{}`` (Hermes does)."""
    assert not certainly_invalid(arguments, OPENCLAW_READ)


@pytest.mark.parametrize("schema", [None, "object", ["object"], 3])
def test_a_schema_that_is_not_one_finds_nothing(schema: object) -> None:
    assert not invalid({}, schema)


def test_nesting_past_the_depth_bound_is_not_called_invalid() -> None:
    """Deep nesting is read up to its bound; beyond it, nothing is certain."""

    def nested(levels: int, leaf: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        schema: dict[str, Any] = leaf
        value: Any = ["wrong"]
        for _ in range(levels):
            schema = {"type": "object", "properties": {"a": schema}}
            value = {"a": value}
        return schema, value

    schema, value = nested(MAX_DEPTH, {"type": "string"})
    assert invalid(value, schema)
    schema, value = nested(MAX_DEPTH + 2, {"type": "string"})
    assert not invalid(value, schema)


def test_arguments_nested_past_what_can_be_read_are_not_called_invalid() -> None:
    deep = '{"path": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert not certainly_invalid(deep, OPENCLAW_READ)


def _results(*results: tuple[str, object]) -> ChatRequest:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    messages += [{"role": "tool", "tool_call_id": i, "content": c} for i, c in results]
    return read_request(json.dumps({"model": "m", "messages": messages}).encode())


REFUSAL = ARGUMENT_CHECK_REFUSAL + 'exec":\n  - command: must be string'


def test_only_the_runtimes_own_refusal_counts_as_a_call_that_ran_nowhere() -> None:
    """A call the gateway found invalid counts as refused by the runtime only when every
    result answering it is the runtime's refusal text: a result with the tool's output
    (the runtime repaired the arguments and ran it), a second result beside the refusal,
    the text further in, or no result at all is not taken for a refusal."""
    assert _results(("a", REFUSAL)).refused_by_argument_check("a")
    assert _results(("a", [{"type": "text", "text": REFUSAL}])).refused_by_argument_check("a")
    assert not _results(("a", "Hearing on Monday.")).refused_by_argument_check("a")
    assert not _results(("a", REFUSAL), ("a", "ran")).refused_by_argument_check("a")
    assert not _results(("a", "output\n" + REFUSAL)).refused_by_argument_check("a")
    assert not _results(("b", REFUSAL)).refused_by_argument_check("a")


def hermes_refusal(arguments: str) -> str:
    """The text Hermes 0.19.0 gives a call refused for arguments that are not JSON,
    built as ``agent/conversation_loop.py`` builds it."""
    try:
        json.loads(arguments)
    except json.JSONDecodeError as e:
        err = str(e)
    else:
        raise AssertionError("valid JSON")
    return (
        f"Error: Invalid JSON arguments. {err}. "
        f"For tools with no required parameters, use an empty object: {{}}. "
        f"Please retry with valid JSON."
    )


OFFERED = frozenset({"read_file", "write_file"})


@pytest.mark.claim("model-gateway.invalid-json-turns-accounted")
def test_a_turn_with_arguments_that_are_not_json_is_found_as_hermes_finds_it() -> None:
    """Hermes reads blank arguments as ``{}`` and refuses any other text Python's JSON
    parser rejects; it reads only the arguments of calls to offered tools (a call to
    another name is an unknown tool), and answers a call by the tool's name: the
    invalid call and another call to the same tool get the refusal, the rest the
    "skipped" text. A turn with no such call, or whose only bad arguments are those
    of a call to a name it did not offer, is run as usual (None)."""
    assert [not_json(a) for a in ("", "  ", "{}", '{"a": NaN}', "[1]")] == [False] * 5
    assert [not_json(a) for a in ('{"a": 1,}', "{'a': 1}", "None", '{"a"')] == [True] * 4
    assert not not_json("[" * 100_000 + "]" * 100_000)  # past what the parser reads
    turn = [
        ("read_file", '{"path": "a",}'),
        ("read_file", '{"path": "b"}'),
        ("write_file", '{"path": "c", "content": "x"}'),
    ]
    assert invalid_json_turn(turn, OFFERED) == ["arguments", "same_tool", "skipped"]
    assert invalid_json_turn([turn[1], turn[2], ("read_file", "")], OFFERED) is None
    mixed = [("rm_rf", "{not json"), turn[1]]
    assert invalid_json_turn(mixed, OFFERED) is None  # Hermes runs read_file, errs rm_rf
    assert invalid_json_turn([("rm_rf", "{not json")], OFFERED) is None
    assert invalid_json_turn([*mixed, turn[0]], OFFERED) == ["skipped", "same_tool", "arguments"]


@pytest.mark.claim("model-gateway.invalid-json-turns-accounted")
@pytest.mark.parametrize("arguments", ['{"path": "a",}', "{'path': 'a'}", '{"path": "a"}}'])
def test_only_hermess_own_texts_count_as_its_refusal_of_a_turn(arguments: str) -> None:
    """Hermes's refusal is recognised by its fixed start and end with one line of the
    parser's message between, its "skipped" text only whole: a tool's output, the
    refusal with output before or after it, across lines, or the start alone is not."""
    refusal = hermes_refusal(arguments)
    assert is_invalid_json_refusal(refusal)
    start, end = refusal.split(". For tools")
    for text in (
        "Hearing on Monday.",
        start,
        start + ".",
        "Hearing on Monday.\n" + refusal,
        refusal + "\nHearing on Monday.",
        start + "\nHearing on Monday" + ". For tools" + end,
        "Error: Invalid JSON arguments. . For tools with no required parameters, use an empty "
        "object: {}. Please retry with valid JSON.",
    ):
        assert not is_invalid_json_refusal(text), text
    skipped = _results(("a", INVALID_JSON_SKIPPED))

    def exact(text: str) -> bool:
        return text == INVALID_JSON_SKIPPED

    assert skipped.answered_only_by("a", exact)
    assert not skipped.answered_only_by("b", exact)
    assert not _results(("a", INVALID_JSON_SKIPPED + " Ran.")).answered_only_by("a", exact)
    assert not _results(("a", INVALID_JSON_SKIPPED), ("a", "ran")).answered_only_by("a", exact)
    assert _results(("a", refusal)).answered_only_by("a", is_invalid_json_refusal)
