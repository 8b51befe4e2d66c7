"""``smf.gate.status``: what one gate knows of its runtimes and its ledger.

``smf-assurance doctor`` checks a running deployment from the operator's seat.
Two things it must know live only in a gate's memory: each runtime's last
attestation (attestations are held in memory and never written to the
ledger) and how far the gate's ledger runs past its last published
checkpoint. The operator may read every subject (``smf_assurance.subjects.bus_access``);
no other role may ask this one, and only gates serve it.

Every gate answers (a queue group per gate name, as ``smf.release.report``),
signed with its gate key, so an operator counts an answer only when a gate
key it trusts signed it: anyone else on the bus could answer "all attested".
The report names runtime ids, times, reason codes and ledger positions, never
a key, a payload or an instance id (a process id would let a reader of the
report tell the model gateway which process to impersonate; it needs the
runtime key as well, but it need not be told).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.canonical import Identity
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.patterns import Code, Millis, Token

GATE_STATUS_SCHEMA: Final = "smf.gate-status/1"
MAX_GATE_STATUS_BYTES: Final = 1024 * 1024
MAX_REPORTED_RUNTIMES: Final = 1024
"""A registry with more runtimes is reported in part (``runtimes_truncated``)."""

StatusText = Annotated[str, msgspec.Meta(max_length=256)]


class GateStatusRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``smf.gate.status``: nothing to ask but the status (a later version may narrow it)."""


class RuntimeStanding(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One runtime of the gate's registry, as the gate's attestation desk holds it."""

    runtime_id: Token
    must_attest: bool
    """Its proposals are refused without a fresh accepted attestation (the opt-in)."""
    lease_ms: Annotated[int, msgspec.Meta(ge=0)]
    """How long an accepted attestation counts after it was issued."""
    attested_at_ms: Millis | None
    """When its last verified attestation was issued; None: none since the gate started."""
    accepted: bool | None
    """Whether that attestation was accepted; None with no attestation."""
    reason_codes: tuple[Code, ...]
    """Why it was refused (empty when accepted or absent)."""
    standing: Code | None
    """Why the gate would refuse it now (``runtime_attestation_missing``, ``_stale``,
    ``_rejected``, ``runtime_release_mismatch``, a stop), or None: it stands."""
    confined_profile: Identity | None = None
    """The profile digest its launcher attests while the runtime runs confined
    (``smf_assurance.subjects.confinement``), or None: not confined."""
    confinement: Code | None = None
    """Why it is not confined (``confinement_not_attested``, ``_stale``, ``_ended``,
    ``confined_process_not_attested``), or None."""


class LedgerStanding(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's evidence ledger: its tail and its last signed checkpoint."""

    ledger_id: StatusText
    tail_seq: Annotated[int, msgspec.Meta(ge=0)]
    checkpoint_seq: Annotated[int, msgspec.Meta(ge=0)]
    """The seq the newest checkpoint signed (0: none yet)."""
    pending_checkpoints: Annotated[int, msgspec.Meta(ge=0)]
    """Checkpoints signed but not yet accepted by the bus (a sink that fails)."""
    window_start_ms: Millis | None
    """Since when the entries after the last checkpoint wait for the next one: the last
    checkpoint's time, or the first entry's when none was signed (None: empty)."""


class GateStatus(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One gate's status, signed with its gate key (:data:`names.PAYLOAD_GATE_STATUS`)."""

    schema: Literal["smf.gate-status/1"]
    gate: StatusText
    at_ms: Millis
    release_id: StatusText | None
    """The release the gate decides with, or None."""
    runtimes: Annotated[tuple[RuntimeStanding, ...], msgspec.Meta(max_length=MAX_REPORTED_RUNTIMES)]
    runtimes_truncated: bool
    ledger: LedgerStanding


def sign_gate_status(status: GateStatus, gate_key: SigningKey) -> bytes:
    return dsse.encode_envelope(dsse.sign_struct(names.PAYLOAD_GATE_STATUS, status, [gate_key]))


def open_gate_status(data: bytes, gate_keys: Mapping[str, VerifyKey]) -> GateStatus:
    """The status, if a gate key of ``gate_keys`` signed it; raises
    :class:`~smf_assurance.subjects.dsse.SignatureError` otherwise (an unsigned or foreign answer
    is not a gate's word)."""
    status, _ = dsse.open_struct(
        dsse.decode_envelope(data, MAX_GATE_STATUS_BYTES),
        gate_keys,
        GateStatus,
        names.PAYLOAD_GATE_STATUS,
    )
    return status
