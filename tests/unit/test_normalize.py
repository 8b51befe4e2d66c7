"""Normalization refuses what it cannot map faithfully (smf_assurance/core/normalize.py).

An unknown tool yields ``capability: unknown`` (the floor denies
it); a missing required argument or fact, an argument of the wrong type,
arguments without a canonical form, an envelope that breaks its own schema,
or a mapper table that is not one, is a rejection with its own reason code.
Neither can ever become an allow.

Proposals go in as bytes through :class:`~smf_assurance.pipeline.chain.decide.NormalizeStage`,
the path the gate runs, and mapper tables through ``decode_mapper``, the one
that loads the shipped tables (``ops.gateway.load_mapper_tables``). Tables
are the shipped ``smf_assurance/pipeline/mappers/*.json`` unless a test needs a mapping no
shipped table has.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec
import pytest

from smf_assurance.core.normalize import (
    HELD_BY_GATE,
    UNKNOWN_ADAPTER,
    UNKNOWN_TOOL,
    GateHolds,
    MapperTable,
    NormalizationError,
    Normalized,
    decode_mapper,
    normalize,
)
from smf_assurance.pipeline.chain.decide import NormalizeStage
from smf_assurance.pipeline.chain.transport import serve
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.envelope import content_hash_of, destination_identity_of
from smf_assurance.subjects.holds import HOLDS_UNAVAILABLE
from smf_assurance.subjects.messages import Proposal
from tests.support.builders import (
    DELETE,
    MAPPER_TABLES,
    SHIPPED_ADAPTERS,
    normalized_proposal,
    proposal_dict,
    shipped_table,
)


def shipped(adapter_id: str = "smf-scripted-adapter") -> bytes:
    return (MAPPER_TABLES / f"{adapter_id}.json").read_bytes()


def tables(*extra: MapperTable) -> dict[str, MapperTable]:
    found = {t.adapter_id: t for t in map(shipped_table, SHIPPED_ADAPTERS)}
    found.update({t.adapter_id: t for t in extra})
    return found


async def normalized(
    overrides: dict[str, Any], *extra: MapperTable, raw: bytes | None = None
) -> Normalized:
    handle = serve(NormalizeStage(tables(*extra)), Proposal)
    data = raw if raw is not None else json.dumps(proposal_dict(overrides)).encode()
    return msgspec.json.decode(await handle(data), type=Normalized)


async def refusal(overrides: dict[str, Any], *extra: MapperTable) -> str:
    with pytest.raises(StageRefusal) as refused:
        await normalized(overrides, *extra)
    return refused.value.reason_code


SEND: Final[dict[str, Any]] = {
    "native_tool": "send_message",
    "arguments": {"to": "client@example.com", "body": "Draft attached."},
    "destination.locality": "external",
}
"""The scripted adapter's email: target and content both come from arguments."""


# --- what a faithful mapping produces -----------------------------------------------


async def test_target_and_content_come_from_the_mapped_arguments() -> None:
    result = await normalized({**SEND, "destination.address": "ignored", "content": "ignored"})
    envelope = result.envelope
    assert result.destination_address == "client@example.com"
    assert result.content == "Draft attached."
    assert envelope.destination.target_identity_hash == destination_identity_of(
        "email", "client@example.com"
    )
    assert envelope.data.content_hash == content_hash_of("Draft attached.")
    assert envelope.destination.locality == "external"  # from the proposal
    assert envelope.runtime.canonical_args_hash == identity_of(SEND["arguments"])
    assert result.notes == ()


async def test_without_mapped_arguments_the_proposals_own_destination_and_content_are_used() -> (
    None
):
    hermes = {"adapter_id": "smf-hermes-adapter", "native_tool": "delegate_task"}
    result = await normalized(
        {**hermes, "destination.address": "agent://reviewer", "content": "the text"}
        | {"destination.locality": "external"}
    )
    assert result.destination_address == "agent://reviewer"
    assert result.content == "the text"
    assert result.envelope.destination.locality == "internal"  # fixed by the mapping


async def test_an_unknown_tool_or_adapter_is_capability_unknown_with_a_note() -> None:
    tool = await normalized({"native_tool": "shell_exec", "arguments": {"command": "rm -rf /"}})
    adapter = await normalized({"adapter_id": "no-such-adapter"})
    for result, note in ((tool, UNKNOWN_TOOL), (adapter, UNKNOWN_ADAPTER)):
        assert result.envelope.capability == "unknown"
        assert result.envelope.effects.egress is True
        assert result.notes == (note,)
        assert result.connector_id is None


# --- rejections ----------------------------------------------------------------------


async def test_a_missing_required_argument_is_refused() -> None:
    assert await refusal({**SEND, "arguments": {"to": "x@example.com"}}) == (
        "missing_required_argument"
    )


@pytest.mark.parametrize(("argument", "value"), [("to", 42), ("body", ["Draft", "attached"])])
async def test_a_mapped_argument_that_is_not_text_is_refused(argument: str, value: Any) -> None:
    """A target or content argument of another type is never stringified into an
    address or a content hash the approver did not see."""
    arguments = {**SEND["arguments"], argument: value}
    assert await refusal({**SEND, "arguments": arguments}) == "argument_type_invalid"


def _table_requiring(*facts: str) -> MapperTable:
    """A table (through the shipped tables' decoder) whose one tool needs ``facts``."""
    table = {
        "schema": "smf.mapper/1",
        "adapter_id": "fact-test-adapter",
        "version": "1",
        "tools": {
            "publish": {
                "capability": "external.transmit",
                "effects": {"egress": True, "persistence": "external_persistent"}
                | {"reversibility": "none"},
                "channel": "web",
                "locality": "from_proposal",
                "required_facts": list(facts),
            }
        },
    }
    return decode_mapper(json.dumps(table).encode())


UNKNOWN_FACT: Final[dict[str, dict[str, Any]]] = {
    "legal_hold": {"facts.legal_hold": DELETE},
    "classification": {"facts.classification": "unknown"},
    "injection_taint": {"facts.injection_taint": "unknown"},
    "locality": {"destination.locality": "unknown"},
}
"""How each required fact is left unknown by a proposal."""

FACT_TOOL: Final[dict[str, Any]] = {
    "adapter_id": "fact-test-adapter",
    "native_tool": "publish",
    "arguments": {},
}


@pytest.mark.parametrize("fact", sorted(UNKNOWN_FACT))
async def test_a_required_fact_left_unknown_is_refused_and_only_that_one(fact: str) -> None:
    table = _table_requiring(*UNKNOWN_FACT)
    known = await normalized(FACT_TOOL, table)
    assert known.envelope.capability == "external.transmit"
    with pytest.raises(StageRefusal) as refused:
        await normalized({**FACT_TOOL, **UNKNOWN_FACT[fact]}, table)
    assert refused.value.reason_code == "missing_required_fact"
    assert str(refused.value).endswith(fact)
    others = _table_requiring(*(f for f in UNKNOWN_FACT if f != fact))
    unneeded = await normalized({**FACT_TOOL, **UNKNOWN_FACT[fact]}, others)
    assert unneeded.envelope.capability == "external.transmit"


async def test_arguments_without_a_canonical_form_are_refused() -> None:
    assert await refusal({"arguments": {"document_id": "doc-1207", "fraction": 0.5}}) == (
        "arguments_not_canonical"
    )


@pytest.mark.parametrize(
    "facts",
    [
        {"facts.redaction_status": "complete"},
        {"facts.redaction_status": "none", "facts.redaction_evidence": "redacted by R. Roe"},
        {"facts.redaction_status": "complete", "facts.redaction_evidence": ""},
    ],
    ids=["complete-without-evidence", "evidence-without-redaction", "empty-evidence"],
)
async def test_facts_that_break_the_envelope_schema_are_refused(facts: dict[str, Any]) -> None:
    """The proposal decodes, but the envelope built from it would claim a redaction
    it cannot prove (or prove one it does not claim)."""
    assert await refusal(facts) == "envelope_invalid"


# --- mapper tables ---------------------------------------------------------------------


def _with(document: dict[str, Any], path: tuple[str, ...], value: Any) -> bytes:
    node = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("comment",), "a field the format does not have"),
        (("tools", "dms_delete", "skip_legal_hold"), True),
        (("tools", "dms_delete", "required_facts"), ["legal_hold", "wishes"]),
        (("schema",), "smf.mapper/2"),
    ],
    ids=["unknown-table-field", "unknown-mapping-field", "unknown-fact", "other-schema"],
)
def test_a_shipped_table_with_a_field_it_does_not_know_is_refused(
    path: tuple[str, ...], value: Any
) -> None:
    """An unknown field in a table or one of its tool mappings would be silently
    dropped (``skip_legal_hold`` is not a field: nobody may believe it works)."""
    changed = _with(json.loads(shipped()), path, value)
    with pytest.raises(NormalizationError) as refused:
        decode_mapper(changed)
    assert refused.value.reason_code == "mapper_table_invalid"


def test_every_shipped_table_decodes() -> None:
    for adapter in SHIPPED_ADAPTERS:
        assert decode_mapper(shipped(adapter)).adapter_id == adapter


# --- the gate's hold list, attachments, and the stage's own types ------------------------

HELD = "/srv/matters/2026-0042/held"


def with_holds(overrides: dict[str, Any], holds: GateHolds) -> Normalized:
    """``normalize`` as the gate calls it, with its hold list."""
    data = json.dumps(proposal_dict(overrides)).encode()
    return normalize(msgspec.json.decode(data, type=Proposal), tables(), holds)


@pytest.mark.parametrize(
    ("adapter", "tool", "arguments"),
    [
        ("smf-hermes-adapter", "write_file", {"path": f"{HELD}/brief.docx", "content": "x"}),
        ("smf-hermes-adapter", "patch", {"patch": "*** Begin Patch"}),
        ("smf-scripted-adapter", "dms_delete", {"document_id": "doc-1207"}),
    ],
    ids=["write", "write-without-target", "delete"],
)
def test_without_a_fresh_hold_list_a_write_or_a_delete_is_refused(
    adapter: str, tool: str, arguments: dict[str, Any]
) -> None:
    """A hold forbids altering and deleting: with no fresh list the gate cannot say the
    target is not held, so both capabilities are refused; a read still normalizes."""
    stale = GateHolds(frozenset(), fresh=False)
    overrides = {"adapter_id": adapter, "native_tool": tool, "arguments": arguments}
    with pytest.raises(NormalizationError) as refused:
        with_holds(overrides, stale)
    assert refused.value.reason_code == HOLDS_UNAVAILABLE
    assert with_holds({}, stale).notes == ()  # the base proposal: a DMS read


def test_a_held_destination_is_held_whether_an_argument_or_the_proposal_names_it() -> None:
    """The target is the mapped argument when the tool has one (``write_file``'s
    ``path``), else the proposal's destination (``patch``); either under a held path is
    held by the gate, whatever the adapter said."""
    holds = GateHolds(frozenset({HELD}), fresh=True)
    by_argument = {
        "adapter_id": "smf-hermes-adapter",
        "native_tool": "write_file",
        "arguments": {"path": f"{HELD}/brief.docx", "content": "x"},
    }
    by_destination = {
        "adapter_id": "smf-hermes-adapter",
        "native_tool": "patch",
        "arguments": {"patch": "*** Begin Patch"},
        "destination.address": f"{HELD}/brief.docx",
    }
    for overrides in (by_argument, by_destination):
        result = with_holds(overrides, holds)
        assert result.envelope.workflow.legal_hold is True, overrides
        assert result.notes == (HELD_BY_GATE,), overrides
    elsewhere = {**by_destination, "destination.address": "/srv/matters/other/brief.docx"}
    assert with_holds(elsewhere, holds).envelope.workflow.legal_hold is False


def test_a_target_argument_that_is_not_text_is_refused_as_such_with_a_hold_list() -> None:
    """The hold list reads only a text target: another value is refused by the mapped
    argument's own check, as without the list, never taken for a path."""
    holds = GateHolds(frozenset({HELD}), fresh=True)
    overrides = {"native_tool": "dms_delete", "arguments": {"document_id": 1207}}
    with pytest.raises(NormalizationError) as refused:
        with_holds(overrides, holds)
    assert refused.value.reason_code == "argument_type_invalid"


async def test_a_declared_attachment_that_is_not_one_is_refused() -> None:
    filing = {
        "native_tool": "court_efile",
        "arguments": {
            "court": "sdny",
            "document": "brief.pdf",
            "document_file": {"name": "brief.pdf"},
        },
    }
    assert await refusal(filing) == "attachment_invalid"


def test_a_normalization_error_says_its_reason_and_only_then_a_detail() -> None:
    assert str(NormalizationError("unknown_tool")) == "unknown_tool"
    assert str(NormalizationError("missing_required_argument", "to")) == (
        "missing_required_argument: to"
    )


def test_the_stages_answer_refuses_a_field_it_does_not_know() -> None:
    """The normalize stage's reply is decoded by the gate over the bus: an extra field
    (a stage that is not ours, or another version) is refused, not dropped."""
    answer = json.loads(msgspec.json.encode(normalized_proposal()))
    answer["legal_hold_override"] = False
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.json.decode(json.dumps(answer), type=Normalized)
