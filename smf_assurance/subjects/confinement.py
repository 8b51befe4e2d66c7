"""The launcher's word that a runtime runs confined (docs/CONFINEMENT.md, "Attestation").

A runtime's own attestation (``smf_assurance.subjects.attestation``) is a self-report
of code inside the runtime: it cannot say that the process runs in a sandbox, since a
process that does not would say the same. The launcher (``smf-assurance runtime run``)
is outside the sandbox it builds and holds a key of its own (registry role
``launcher``, one per runtime, bound to it by the entry's ``runtime_id``), which the
runtime never sees. It states, signed with that key:

- which runtime it runs confined, and with which profile: the digest of the sandbox's
  mounts, legal holds, namespaces, forwarders and flags (``runtime run --plan`` prints
  the same digest);
- the adapter processes it launched: the ``instance_id`` of every runtime attestation
  its signer signed (the adapter signs through the launcher's socket, so no process
  outside the sandbox can have one signed by it), so the gate counts the runtime as
  confined only while its latest attested process is one of them;
- ``running``, again every :data:`REATTEST_EVERY_MS` and whenever a new process attests,
  or ``ended`` when the sandbox ends.

The gate's answer is a :class:`ConfinementAck`. The ack is not signed: the launcher
only logs it; what counts is what the gate holds, which ``doctor`` reads from the
gate's signed status.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.canonical import Identity
from smf_assurance.subjects.patterns import Code, InstanceId, MessageId, Millis, Token
from smf_assurance.subjects.signer import Signer

CONFINEMENT_SCHEMA: Final = "smf.confinement-attestation/1"
MAX_INSTANCES: Final = 16
"""The most recent adapter processes a launcher names; an older one is no longer
confined to the gate (fails closed: it re-attests and is named again)."""
MAX_CONFINEMENT_BYTES: Final = 16 * 1024
REATTEST_EVERY_MS: Final = 20_000
"""How often a launcher says again that its runtime still runs confined; a gate holds
what it said for :data:`CONFINEMENT_LEASE_MS`."""
CONFINEMENT_LEASE_MS: Final = 60_000
"""After this, a launcher's last word no longer counts: a launcher killed without saying
``ended`` leaves its runtime unconfined to the gate within a minute."""

ConfinementState = Literal["running", "ended"]


class ConfinementAttestation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Signed by the launcher key (:data:`names.PAYLOAD_CONFINEMENT`); sent as a request
    on :data:`names.CONFINEMENT`."""

    schema: Literal["smf.confinement-attestation/1"]
    attestation_id: MessageId
    runtime_id: Token
    profile_digest: Identity
    instances: Annotated[tuple[InstanceId, ...], msgspec.Meta(max_length=MAX_INSTANCES)]
    state: ConfinementState
    issued_at_ms: Millis


class ConfinementAck(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer; ``accepted`` is False with the reason code otherwise."""

    schema: Literal["smf.confinement-ack/1"]
    attestation_id: str
    accepted: bool
    reason_codes: tuple[Code, ...]
    expires_at_ms: int | None = None


def sign_confinement(attestation: ConfinementAttestation, launcher_key: Signer) -> bytes:
    return dsse.encode_envelope(
        dsse.sign_struct(names.PAYLOAD_CONFINEMENT, attestation, [launcher_key])
    )
