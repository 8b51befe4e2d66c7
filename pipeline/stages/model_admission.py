"""``smf.gateway.admit``: the gate tells the model gateway whom it may serve (issue 16).

The model gateway is the one place every model turn crosses, outside the
runtime. It serves a runtime only while this desk says so, and this desk says
so only while the runtime holds a fresh, accepted attestation
(``AttestationDesk.standing``), whatever the runtime's opt-in for proposals:
a runtime in safe mode or with its plugin disabled never attests, and so gets
no completion at all (RUNTIMES.md, "Hermes Agent").

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

from pipeline.service import StageRefusal
from pipeline.stages.attestation import AttestationDesk
from pipeline.stages.evidence import EvidenceWriter
from pipeline.stores.ledger import EvidenceError
from subjects import dsse, names
from subjects.keys import SigningKey
from subjects.model_gateway import GatewayAdmission, GatewayAdmit

log = structlog.get_logger(__name__)

MAX_ADMIT_BYTES: Final = 4096
REFUSED: Final = "model_request_refused"


@dataclass(frozen=True)
class ModelAdmissionDesk:
    attestation: AttestationDesk
    evidence: EvidenceWriter
    release_id: Callable[[], str | None]
    signer: SigningKey

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
        if reason is None and held is not None:
            answer = GatewayAdmission(
                schema="smf.gateway-admission/1",
                request_id=ask.request_id,
                runtime_id=ask.runtime_id,
                admitted=True,
                reason_codes=(),
                runtime_version=held.runtime_version,
                expires_at_ms=self.attestation.lease_end(ask.runtime_id, held),
            )
        else:
            answer = await self._refuse(ask, (reason or "runtime_attestation_missing", REFUSED))
        return dsse.encode_envelope(
            dsse.sign_struct(names.PAYLOAD_GATEWAY_ADMISSION, answer, [self.signer])
        )

    async def _refuse(self, ask: GatewayAdmit, reasons: tuple[str, ...]) -> GatewayAdmission:
        entry = self.evidence.for_refusal(
            {"model_request": ask.request_id, "runtime_id": ask.runtime_id},
            self.evidence.tenant_ref(ask.tenant_id),
            self.release_id(),
            reasons,
        )
        recorded: tuple[str, ...] = ()
        try:
            recorded = ((await self.evidence.append(entry)).entry_hash,)
        except EvidenceError:
            log.error("evidence_unavailable", request_id=ask.request_id)
            reasons = (*reasons, "evidence_store_unavailable")
        log.warning("model_request_refused", runtime_id=ask.runtime_id, reasons=list(reasons))
        return GatewayAdmission(
            schema="smf.gateway-admission/1",
            request_id=ask.request_id,
            runtime_id=ask.runtime_id,
            admitted=False,
            reason_codes=reasons,
            evidence=recorded,
        )
