"""The operation envelope: what the gate decides on.

Every runtime action is normalized into this one shape before any policy
sees it (ARCHITECTURE.md, "One proposal through the bus"). The Structs are
frozen and reject unknown fields, and every vocabulary is a closed
``Literal``: the schema is the validator, decoded once at the edge
(STYLE.md, "msgspec — Structs as the contract"). ``unknown`` is a value of
its own wherever it appears, never a synonym for a completed state, so a
mapper that cannot tell says so and the evaluator fails closed.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, Final, Literal, get_args

import msgspec

from smf_assurance.subjects.canonical import (
    Identity,
    identity_of,
    sha256_identity,
    struct_identity,
)

ENVELOPE_SCHEMA: Final = "smf.operation/1"

Capability = Literal[
    "external.transmit",
    "external.query",
    "document.delete",
    "document.write",
    "document.read",
    "output.deliver",
    "process.execute",
    "agent.delegate",
    "schedule.create",
    "unknown",
]
Persistence = Literal["none", "local", "external_persistent", "unknown"]
Reversibility = Literal["full", "limited", "none", "unknown"]
Channel = Literal[
    "electronic_filing", "email", "messaging", "web", "filesystem", "dms", "none", "unknown"
]
Locality = Literal["internal", "external", "unknown"]
Classification = Literal["public", "internal", "confidential", "privileged", "unknown"]
RedactionStatus = Literal["none", "pending", "complete", "unknown"]
InjectionTaint = Literal["clear", "suspected", "tainted", "unknown"]
CitationVerification = Literal["pending", "verified", "failed", "not_applicable", "unknown"]
Surface = Literal[
    "tool_call",
    "direct_reply",
    "stream",
    "gateway_delivery",
    "cron",
    "delegation",
    "background",
    "mcp",
]

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
Evidence = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]

CAPABILITIES: Final[tuple[str, ...]] = get_args(Capability)


class Effects(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    egress: bool
    persistence: Persistence
    reversibility: Reversibility


class Destination(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    channel: Channel
    locality: Locality
    target_identity_hash: Identity


class Data(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    classification: Classification
    redaction_status: RedactionStatus
    injection_taint: InjectionTaint
    content_hash: Identity
    redaction_evidence: Evidence | None = None

    def __post_init__(self) -> None:
        """A completed redaction must say what proves it; nothing else may claim proof."""
        if self.redaction_status == "complete" and self.redaction_evidence is None:
            raise ValueError("redaction_evidence is required when redaction_status is complete")
        if self.redaction_status != "complete" and self.redaction_evidence is not None:
            raise ValueError("redaction_evidence is forbidden unless redaction_status is complete")


class Professional(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    domain: Name
    tenant_id: Name
    organization_id: Name
    matter_id: Name
    actor_id: Name
    actor_roles: tuple[Name, ...]
    governing_laws: tuple[Name, ...]


class Workflow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    legal_hold: bool
    citation_verification: CitationVerification


class Runtime(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    runtime_id: Name
    runtime_version: Name
    adapter_id: Name
    surface: Surface
    native_tool: Name
    canonical_args_hash: Identity


class OperationEnvelope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One proposed action in the vocabulary the policies speak."""

    capability: Capability
    effects: Effects
    destination: Destination
    data: Data
    professional: Professional
    workflow: Workflow
    runtime: Runtime


class EnvelopeError(ValueError):
    """The envelope is not valid; the message names the first offending field."""


def _nfc_strings(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        return {_nfc_strings(k): _nfc_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nfc_strings(v) for v in value]
    return value


def decode_envelope(data: bytes | str) -> OperationEnvelope:
    """Decode and validate an envelope; strings are NFC-normalized first.

    Normalizing before validation means two spellings of the same text give
    the same envelope and so the same operation hash (ARCHITECTURE.md,
    "Canonical bytes").
    """
    try:
        raw = msgspec.json.decode(data)
        return msgspec.convert(_nfc_strings(raw), OperationEnvelope, strict=True)
    except msgspec.ValidationError as exc:
        raise EnvelopeError(str(exc)) from exc
    except msgspec.DecodeError as exc:
        raise EnvelopeError(f"not valid JSON: {exc}") from exc


def envelope_from_builtins(value: Any) -> OperationEnvelope:
    """Validate an already-parsed JSON value as an envelope."""
    try:
        return msgspec.convert(_nfc_strings(value), OperationEnvelope, strict=True)
    except msgspec.ValidationError as exc:
        raise EnvelopeError(str(exc)) from exc


def envelope_builtins(envelope: OperationEnvelope) -> dict[str, Any]:
    """The envelope as plain JSON values, optional fields left out when unset."""
    value: dict[str, Any] = msgspec.to_builtins(envelope)
    return value


def content_hash_of(text: str) -> str:
    """``data.content_hash``: SHA-256 over the NFC-normalized UTF-8 text.

    One definition for the normalizer, the approval binding and the
    approver's check, so the three can never disagree about what was shown.
    """
    return sha256_identity(unicodedata.normalize("NFC", text).encode("utf-8"))


def destination_identity_of(channel: str, address: str) -> str:
    """``destination.target_identity_hash``: the channel and address, hashed."""
    return identity_of({"channel": channel, "address": address})


def operation_hash(envelope: OperationEnvelope) -> str:
    """The operation's identity: SHA-256 over its canonical JSON."""
    return struct_identity(envelope)
