"""``smf.gate.status`` at the gate (issue 21): what this gate holds of its runtimes and
its ledger, for an operator's ``doctor``.

Read-only: answering changes nothing (no attestation is refreshed, no checkpoint
signed, nothing written to the ledger), so an operator may ask as often as it
likes. The answer is signed with the gate key (``smf_assurance.subjects.gate_status``): no
other client on the bus can tell an operator that a runtime attested or that
the ledger is anchored. A request that does not decode gets an unsigned
refusal, which no asker counts as an answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec

from smf_assurance.pipeline.desks.attestation import AttestationDesk, RuntimeRequirement
from smf_assurance.pipeline.desks.confinement import NOT_ATTESTED, ConfinementDesk, Standing
from smf_assurance.pipeline.stores.ledger import Ledger
from smf_assurance.subjects.gate_status import (
    GATE_STATUS_SCHEMA,
    MAX_REPORTED_RUNTIMES,
    GateStatus,
    GateStatusRequest,
    LedgerStanding,
    RuntimeStanding,
    sign_gate_status,
)
from smf_assurance.subjects.keys import SigningKey

MALFORMED: Final = b'{"error":"malformed_request"}'
MAX_REQUEST_BYTES: Final = 4096


@dataclass(frozen=True)
class GateStatusDesk:
    gate: str
    attestation: AttestationDesk
    ledger: Ledger
    release_id: Callable[[], str | None]
    clock: Callable[[], int]
    signer: SigningKey
    confinement: ConfinementDesk | None = None

    def status(self) -> GateStatus:
        """Every runtime of the gate's registry, sorted (a requirement for a runtime the
        registry does not name decides nothing: its key is unknown)."""
        ids = sorted(self.attestation.known_runtimes())
        runtimes = tuple(self._standing(runtime_id) for runtime_id in ids[:MAX_REPORTED_RUNTIMES])
        return GateStatus(
            schema=GATE_STATUS_SCHEMA,
            gate=self.gate,
            at_ms=self.clock(),
            release_id=self.release_id(),
            runtimes=runtimes,
            runtimes_truncated=len(ids) > MAX_REPORTED_RUNTIMES,
            ledger=LedgerStanding(
                ledger_id=self.ledger.ledger_id,
                tail_seq=self.ledger.tail_seq,
                checkpoint_seq=self.ledger.checkpoint_seq,
                pending_checkpoints=self.ledger.pending_checkpoints,
                window_start_ms=self.ledger.checkpoint_window_start,
            ),
        )

    def _standing(self, runtime_id: str) -> RuntimeStanding:
        need = self.attestation.required.get(runtime_id, RuntimeRequirement())
        reason, held = self.attestation.standing(runtime_id)
        refused = held is not None and not held.accepted
        confined = (
            Standing(None, NOT_ATTESTED)
            if self.confinement is None
            else self.confinement.standing(runtime_id)
        )
        return RuntimeStanding(
            runtime_id=runtime_id,
            must_attest=runtime_id in self.attestation.required,
            lease_ms=need.lease_ms,
            attested_at_ms=None if held is None else held.issued_at_ms,
            accepted=None if held is None else held.accepted,
            reason_codes=held.reasons if held is not None and refused else (),
            standing=reason,
            confined_profile=confined.profile_digest,
            confinement=confined.reason,
        )

    async def handle(self, data: bytes) -> bytes:
        if len(data) > MAX_REQUEST_BYTES:
            return MALFORMED
        try:
            msgspec.json.decode(data or b"{}", type=GateStatusRequest)
        except msgspec.DecodeError:  # ValidationError is a DecodeError
            return MALFORMED
        return sign_gate_status(self.status(), self.signer)
