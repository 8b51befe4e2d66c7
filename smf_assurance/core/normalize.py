"""Normalization: a runtime's native tool call -> an operation envelope.

Issue 3: normalization maps through versioned, per-runtime mapper tables
(data files, not code branches). An unknown tool yields ``capability:
unknown`` (which the safety floor denies); a missing required argument or
fact, arguments without a canonical form, an attachment that is not what
it claims (issue 23, :mod:`smf_assurance.subjects.attachments`), or any failure
of the mapping itself is a rejection. Neither can ever become an allow.

Identities computed here, once, for the whole pipeline: the canonical
argument hash, the content hash, the destination identity hash and the
operation hash (ARCHITECTURE.md, "Canonical bytes").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

import msgspec

from smf_assurance.subjects.attachments import AttachmentError, check_attachments
from smf_assurance.subjects.canonical import CanonicalJSONError, identity_of
from smf_assurance.subjects.envelope import (
    Capability,
    Channel,
    Data,
    Destination,
    Effects,
    EnvelopeError,
    Locality,
    OperationEnvelope,
    Professional,
    Runtime,
    Workflow,
    content_hash_of,
    destination_identity_of,
    operation_hash,
)
from smf_assurance.subjects.holds import HOLDS_UNAVAILABLE, held_under
from smf_assurance.subjects.messages import DataFacts, Proposal
from smf_assurance.subjects.patterns import ConnectorId

MAPPER_SCHEMA: Final = "smf.mapper/1"
UNKNOWN_TOOL: Final = "unknown_tool"
UNKNOWN_ADAPTER: Final = "unknown_adapter"

HELD_BY_GATE: Final = "legal_hold_set_by_gate_holds"
"""Note on a proposal whose destination the gate's hold list holds while its adapter
did not say so: the envelope's ``workflow.legal_hold`` is the gate's, not the adapter's."""
HOLD_SENSITIVE: Final = frozenset({"document.write", "document.delete"})
"""The capabilities a legal hold forbids (the scenario corpus's legal-hold rule: a
document's deletion or alteration, a move being both): without a fresh hold list the
gate cannot say whether their target is held, so they are refused."""

ArgName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}\Z")]
RequiredFact = Literal["legal_hold", "classification", "injection_taint", "locality"]


class NormalizationError(ValueError):
    """The proposal cannot be normalized; ``reason_code`` says why."""

    def __init__(self, reason_code: str, detail: str = "") -> None:
        super().__init__(f"{reason_code}: {detail}" if detail else reason_code)
        self.reason_code = reason_code


class ToolMapping(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How one native tool maps into the envelope's vocabulary."""

    capability: Capability
    effects: Effects
    channel: Channel
    locality: Locality | Literal["from_proposal"]
    target_arg: ArgName | None = None
    content_arg: ArgName | None = None
    connector: ConnectorId | None = None
    required_args: tuple[ArgName, ...] = ()
    required_facts: tuple[RequiredFact, ...] = ()
    attachment_args: tuple[ArgName, ...] = ()
    """The arguments that carry a document the action sends (issue 23): each present
    one must be a valid :class:`~smf_assurance.subjects.attachments.Attachment`, so the
    bytes are in the arguments, bound by their hash, and shown to the approver."""


class MapperTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.mapper/1"]
    adapter_id: str
    version: str
    tools: dict[str, ToolMapping]


class Normalized(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The stage's output: the envelope, its hash, where it executes, and notes."""

    envelope: OperationEnvelope
    operation_hash: str
    connector_id: str | None
    destination_address: str
    content: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GateHolds:
    """The gate's hold list as the decision sees it: a plain value taken from the
    in-memory mirror (``smf_assurance.pipeline.desks.holds.HoldsMirror``), so
    normalization stays pure. ``fresh`` False: never read, or not read for longer than
    the mirror's bound (docs/CONFINEMENT.md, "Legal holds")."""

    paths: frozenset[str]
    fresh: bool


_UNKNOWN_MAPPING: Final = ToolMapping(
    capability="unknown",
    effects=Effects(egress=True, persistence="unknown", reversibility="unknown"),
    channel="unknown",
    locality="unknown",
)
"""What an unmapped tool is assumed to be: anything, so the floor denies it."""


def decode_mapper(data: bytes) -> MapperTable:
    try:
        return msgspec.json.decode(data, type=MapperTable)
    except msgspec.DecodeError as exc:
        raise NormalizationError("mapper_table_invalid", str(exc)) from exc


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise NormalizationError("argument_type_invalid", f"argument {name} must be text")
    return value


def _with_gate_holds(
    proposal: Proposal, mapping: ToolMapping, holds: GateHolds, notes: list[str]
) -> DataFacts:
    """The proposal's facts with the gate's hold list applied (fail closed):

    - the list not fresh: a document write or delete is refused (``holds_unavailable``),
      anything else keeps the adapter's fact;
    - the destination (the mapping's target argument, else the proposal's address) an
      absolute path equal to or under a held path: ``legal_hold`` is True whatever
      the adapter said, so the release's legal-hold rule decides it;
    - a destination that is not an absolute path (a relative path, a document id)
      cannot be matched: the adapter's fact stands."""
    facts = proposal.facts
    if not holds.fresh:
        if mapping.capability in HOLD_SENSITIVE:
            raise NormalizationError(HOLDS_UNAVAILABLE, "the gate's hold list is not fresh")
        return facts
    if facts.legal_hold is True:
        return facts
    target = (
        proposal.arguments.get(mapping.target_arg)
        if mapping.target_arg is not None
        else proposal.destination.address
    )
    if isinstance(target, str) and held_under(target, holds.paths):
        notes.append(HELD_BY_GATE)
        return msgspec.structs.replace(facts, legal_hold=True)
    return facts


def normalize(
    proposal: Proposal, tables: Mapping[str, MapperTable], holds: GateHolds | None = None
) -> Normalized:
    """Map one verified proposal through its adapter's table; with ``holds`` (the gate
    passes its list always), a held destination is held whatever the adapter said."""
    notes: list[str] = []
    table = tables.get(proposal.adapter_id)
    mapping = table.tools.get(proposal.native_tool) if table is not None else None
    if mapping is None:
        notes.append(UNKNOWN_ADAPTER if table is None else UNKNOWN_TOOL)
        mapping = _UNKNOWN_MAPPING
    args = proposal.arguments
    for name in mapping.required_args:
        if name not in args:
            raise NormalizationError("missing_required_argument", name)
    try:
        check_attachments(args, mapping.attachment_args)
    except AttachmentError as exc:
        raise NormalizationError(exc.reason_code) from exc
    facts = proposal.facts if holds is None else _with_gate_holds(proposal, mapping, holds, notes)
    for fact in mapping.required_facts:
        missing = (
            (fact == "legal_hold" and facts.legal_hold is None)
            or (fact == "classification" and facts.classification == "unknown")
            or (fact == "injection_taint" and facts.injection_taint == "unknown")
            or (fact == "locality" and proposal.destination.locality == "unknown")
        )
        if missing:
            raise NormalizationError("missing_required_fact", fact)

    address = (
        _text(args[mapping.target_arg], mapping.target_arg)
        if mapping.target_arg is not None
        else proposal.destination.address
    )
    content = (
        _text(args[mapping.content_arg], mapping.content_arg)
        if mapping.content_arg is not None
        else proposal.content
    )
    locality = (
        proposal.destination.locality if mapping.locality == "from_proposal" else mapping.locality
    )
    try:
        args_hash = identity_of(args)
    except CanonicalJSONError as exc:
        raise NormalizationError("arguments_not_canonical", str(exc)) from exc
    try:
        envelope = OperationEnvelope(
            capability=mapping.capability,
            effects=mapping.effects,
            destination=Destination(
                channel=mapping.channel,
                locality=locality,
                target_identity_hash=destination_identity_of(mapping.channel, address),
            ),
            data=Data(
                classification=facts.classification,
                redaction_status=facts.redaction_status,
                injection_taint=facts.injection_taint,
                content_hash=content_hash_of(content),
                redaction_evidence=facts.redaction_evidence,
            ),
            professional=Professional(
                domain=proposal.actor.domain,
                tenant_id=proposal.actor.tenant_id,
                organization_id=proposal.actor.organization_id,
                matter_id=proposal.actor.matter_id,
                actor_id=proposal.actor.actor_id,
                actor_roles=proposal.actor.actor_roles,
                governing_laws=proposal.actor.governing_laws,
            ),
            workflow=Workflow(
                legal_hold=bool(facts.legal_hold),
                citation_verification=facts.citation_verification,
            ),
            runtime=Runtime(
                runtime_id=proposal.runtime_id,
                runtime_version=proposal.runtime_version,
                adapter_id=proposal.adapter_id,
                surface=proposal.surface,
                native_tool=proposal.native_tool,
                canonical_args_hash=args_hash,
            ),
        )
        # Structs skip validation on construction; a round trip through the
        # validating decoder enforces every Literal, pattern and rule.
        envelope = msgspec.convert(msgspec.to_builtins(envelope), OperationEnvelope)
    except (msgspec.ValidationError, EnvelopeError, ValueError) as exc:
        raise NormalizationError("envelope_invalid", str(exc)) from exc
    return Normalized(
        envelope=envelope,
        operation_hash=operation_hash(envelope),
        connector_id=mapping.connector,
        destination_address=address,
        content=content,
        notes=tuple(notes),
    )
