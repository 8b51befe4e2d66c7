"""Runtime start-up attestation: what a runtime adapter says about its host.

A runtime adapter that cannot be inspected from outside (Hermes Agent runs
its hooks in-process) states, signed with its runtime key, what it found when
it started: its own version, the runtime's version against the pin it was
built for, which of its hooks are actually present in the runtime's plugin
manager, the streaming settings, and any problem it refuses to run with. The
gate answers with an ack saying whether it accepted it, until when, the
verified release in force and whether its evidence store answered.

An attestation is a self-report of code running inside the runtime: it shows
that the adapter loaded and what it saw, not that nothing else in the process
bypasses it (docs/HERMES.md lists the known bypasses).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from smf_assurance.subjects.envelope import Name
from smf_assurance.subjects.patterns import Code, InstanceId, MessageId, Millis, Token

EvidenceStoreState = Literal["reachable", "unavailable"]
Profile = Literal["block-only", "exact-hold"]
"""What the runtime can enforce: ``block-only`` cannot hold a native call for approval
(Hermes); ``exact-hold`` holds a native call until an approver's allow-once and then
runs it with exactly the params the gate decided on (OpenClaw,
``smf_assurance/adapters/openclaw``)."""


class StreamingSetting(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One place where the runtime could deliver text before the gate's verdict."""

    surface: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_.:-]{1,64}\Z")]
    enabled: bool


class RuntimeAttestation(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True
):
    """Signed by the runtime key; sent as a request on ``smf.attest``.

    ``omit_defaults``: only ``instance_id`` has a default, so an attestation without
    one encodes exactly as before it existed (the OpenClaw plugin's, the vectors)."""

    schema: Literal["smf.runtime-attestation/1"]
    attestation_id: MessageId
    runtime_id: Token
    runtime_version: Name
    """The runtime's own version string, as the runtime reports it."""
    runtime_pin: Name
    """The runtime version this adapter was built and tested for."""
    adapter_id: Name
    adapter_version: Name
    profile: Profile
    hooks_present: tuple[Name, ...]
    hooks_missing: tuple[Name, ...]
    streaming: tuple[StreamingSetting, ...]
    verified_release_id: Name | None
    """``None``: the adapter has not verified a release itself (the gate's ack names one)."""
    problems: tuple[Code, ...]
    """What the adapter refuses to run with; non-empty means it blocks every call."""
    issued_at_ms: Millis
    instance_id: InstanceId | None = None
    """The adapter's process (``smf_assurance.subjects.model_gateway``): when set, the model gateway
    serves this runtime only for requests carrying a fresh proof of an instance the
    gate holds a fresh, accepted attestation from."""


class AttestationAck(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer; ``accepted`` is False with reason codes otherwise."""

    schema: Literal["smf.attestation-ack/1"]
    attestation_id: str
    accepted: bool
    reason_codes: tuple[Code, ...]
    expires_at_ms: int | None = None
    release_id: str | None = None
    evidence_store: EvidenceStoreState | None = None
