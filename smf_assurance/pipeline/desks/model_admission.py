"""``smf.gateway.admit``: the gate tells the model gateway whom it may serve.

The model gateway is the one place every model turn crosses, outside the
runtime. It serves a runtime only while this desk says so, and this desk says
so only while the runtime holds a fresh, accepted attestation
(``AttestationDesk.standing``), whatever the runtime's opt-in for proposals:
a runtime in safe mode or with its plugin disabled never attests, and so gets
no completion at all (RUNTIMES.md, "Hermes Agent"). When the runtime's
attestation names its process, the request must also prove that process
(``AttestationDesk.admit_instance``): another process of the same runtime id,
within the lease of the first, is refused too.

The admission names the runtime's confinement as the gate holds it (the profile
digest its launcher attests, ``smf_assurance.pipeline.desks.confinement``), so the
gateway learns which runtimes it serves run confined.

An admission of an instance proof names what the gateway needs to check the
next proofs of that process itself (``ProofStanding``: public keys and the
freshness window, never a secret); a proof the gateway says it saw before
(``proof_seen``) is refused ``instance_proof_replayed``, since the gateway may
have served it on a kept admission the gate never heard of.

It also governs the request as an egress: the provider must be
one the release in force names, for the request's classification
(``model_provider_not_in_release``, ``model_egress_not_approved``).

Every refusal is evidence: one ledger entry (the request's ids and the
reasons, never the prompt) before the reply. A ledger outage adds
``evidence_store_unavailable`` to the refusal; it never turns one into an
admission. The reply is signed with the gate key, so no other client on the
bus can tell the gateway to serve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec
import structlog

from smf_assurance.core.projection import PolicySet
from smf_assurance.pipeline.desks.attestation import INSTANCE_PROOF_REPLAYED, AttestationDesk
from smf_assurance.pipeline.desks.confinement import ConfinementDesk
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.model_gateway import GatewayAdmission, GatewayAdmit
from smf_assurance.subjects.release import ReleaseCheckError

log = structlog.get_logger(__name__)

MAX_ADMIT_BYTES: Final = 4096
REFUSED: Final = "model_request_refused"
PROVIDER_NOT_IN_RELEASE: Final = "model_provider_not_in_release"
EGRESS_NOT_APPROVED: Final = "model_egress_not_approved"


@dataclass(frozen=True)
class ModelAdmissionDesk:
    attestation: AttestationDesk
    evidence: EvidenceWriter
    release_id: Callable[[], str | None]
    policy_set: Callable[[], PolicySet]
    """The release in force; raises ``ReleaseCheckError`` when there is none to use."""
    signer: SigningKey
    confinement: ConfinementDesk
    """Whether the runtime runs confined: the admission tells the gateway so."""

    async def handle(self, data: bytes) -> bytes:
        """Answer one admission question; input that is not one is refused."""
        if len(data) > MAX_ADMIT_BYTES:
            raise StageRefusal("malformed_admit", "too large")
        try:
            ask = msgspec.json.decode(data, type=GatewayAdmit)
        except msgspec.ValidationError as exc:
            raise StageRefusal("malformed_admit", "invalid message") from exc
        except msgspec.DecodeError as exc:
            raise StageRefusal("malformed_admit", "not JSON") from exc
        reason, held = self.attestation.standing(ask.runtime_id)
        instance_end: int | None = None
        instance_id: str | None = None
        if reason is None and held is not None and not ask.model_list:
            reason, instance_end, instance_id = self.attestation.admit_instance(
                ask.runtime_id, held, ask.instance_proof, ask.request_digest
            )
            if reason is None and instance_id is not None and ask.proof_seen is True:
                # the gateway saw this nonce before: it may have served it without us
                reason = INSTANCE_PROOF_REPLAYED
        window: int | None = None
        if reason is None:
            reason, window = self._egress(ask)
        if reason is None and held is not None:
            expires = self.attestation.lease_end(ask.runtime_id, held)
            answer = GatewayAdmission(
                schema="smf.gateway-admission/1",
                request_id=ask.request_id,
                runtime_id=ask.runtime_id,
                admitted=True,
                reason_codes=(),
                runtime_version=held.runtime_version,
                expires_at_ms=expires if instance_end is None else min(expires, instance_end),
                confined_profile=self.confinement.standing(ask.runtime_id).profile_digest,
                detection_window_chars=msgspec.UNSET if window is None else window,
                proof_standing=(
                    msgspec.UNSET
                    if instance_id is None
                    else self.attestation.proof_standing(ask.runtime_id, instance_id)
                ),
            )
        else:
            answer = await self._refuse(ask, (reason or "runtime_attestation_missing", REFUSED))
        return dsse.encode_envelope(
            dsse.sign_struct(names.PAYLOAD_GATEWAY_ADMISSION, answer, [self.signer])
        )

    def _egress(self, ask: GatewayAdmit) -> tuple[str | None, int | None]:
        """Why the release in force does not let this request go to its provider
        (model egress is governed), or None; and that release's detection
        window, which the gateway sends with each turn's output close."""
        try:
            policy_set = self.policy_set()
        except ReleaseCheckError as exc:
            return exc.reason_code, None
        approved = policy_set.model_providers.get(ask.provider)
        if approved is None:
            return PROVIDER_NOT_IN_RELEASE, None
        if ask.classification not in approved:
            return EGRESS_NOT_APPROVED, None
        return None, policy_set.detection_window_chars

    async def _refuse(self, ask: GatewayAdmit, reasons: tuple[str, ...]) -> GatewayAdmission:
        subject = {
            "model_request": ask.request_id,
            "runtime_id": ask.runtime_id,
            "provider": ask.provider,
            "classification": ask.classification,
        }
        reasons, recorded = await self.evidence.refuse(
            subject, ask.tenant_id, self.release_id(), reasons
        )
        log.warning("model_request_refused", runtime_id=ask.runtime_id, reasons=list(reasons))
        return GatewayAdmission(
            schema="smf.gateway-admission/1",
            request_id=ask.request_id,
            runtime_id=ask.runtime_id,
            admitted=False,
            reason_codes=reasons,
            evidence=recorded,
        )
