"""Runtime confinement at the gate: what a runtime's launcher attests (docs/CONFINEMENT.md).

The gate holds, per runtime, the latest verified confinement attestation
(``smf_assurance.subjects.confinement``) and says whether the runtime runs confined now
(:meth:`ConfinementDesk.standing`). A release's confinement policies apply to every
proposal of a runtime that does not (``runtime_not_confined``,
``smf_assurance.core.evaluator``); ``doctor`` shows it from the gate's status and
the model gateway learns it with each admission.

An attestation counts only when (each refusal is the ack's reason code, and the
attestation is not held):

- a registered key signed it (``unknown_signer``), and that key's role is ``launcher``
  (``signer_role_mismatch``: a runtime cannot say it is confined, whatever key it holds);
- the launcher's registry entry names the runtime attested (``runtime_identity_mismatch``:
  one runtime's launcher cannot vouch for another);
- it was issued within the freshness window (``stale_attestation``: one captured on the
  bus is not replayed later) and not before the one held (``attestation_replayed``).

A runtime is confined (:meth:`ConfinementDesk.standing` returns its profile digest) only
while all of these hold, else not, with the reason:

- an attestation is held (``confinement_not_attested``), says ``running``
  (``confinement_ended``) and is within its lease (``confinement_stale``: a launcher
  killed without a word stops counting after :data:`CONFINEMENT_LEASE_MS`);
- the runtime's latest verified attestation names a process the launcher launched
  (``confined_process_not_attested``): a second process of the same runtime that attests
  outside the sandbox makes the runtime unconfined, as does one that never attested.

Held in memory, as runtime attestations are: a gate restart forgets them and every
runtime is unconfined until its launcher attests again (within
``REATTEST_EVERY_MS``). On a cluster each replica verifies what another shares.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import msgspec
import structlog

from smf_assurance.pipeline.desks.attestation import verify_attested
from smf_assurance.pipeline.desks.signed import open_request
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects import names
from smf_assurance.subjects.confinement import (
    CONFINEMENT_LEASE_MS,
    MAX_CONFINEMENT_BYTES,
    ConfinementAck,
    ConfinementAttestation,
)
from smf_assurance.subjects.registry import KeyRegistry

log = structlog.get_logger(__name__)

NOT_ATTESTED: Final = "confinement_not_attested"
ENDED: Final = "confinement_ended"
STALE: Final = "confinement_stale"
PROCESS_NOT_CONFINED: Final = "confined_process_not_attested"


@dataclass(frozen=True, slots=True)
class Standing:
    """Whether a runtime runs confined now: its profile digest, or why not."""

    profile_digest: str | None
    reason: str | None
    attested_at_ms: int | None = None

    @property
    def confined(self) -> bool:
        return self.profile_digest is not None


@dataclass
class ConfinementDesk:
    """Receives launchers' attestations on ``smf.confinement`` and answers whether a
    runtime runs confined."""

    registry: Callable[[], KeyRegistry]
    clock: Callable[[], int]
    attested_instance: Callable[[str], str | None]
    """The process named by the runtime's latest verified attestation
    (``AttestationDesk.attested_instance``), or None."""
    lease_ms: int = CONFINEMENT_LEASE_MS
    share: Callable[[bytes], Awaitable[None]] | None = None
    """On a cluster: tell the other replicas (``replica_sync``); each verifies it itself."""
    _held: dict[str, ConfinementAttestation] = field(default_factory=dict)

    async def handle(self, data: bytes) -> bytes:
        """The ``smf.confinement`` endpoint: verify, hold, ack (never raises for input)."""
        try:
            att = self._verify(data)
        except StageRefusal as refusal:
            log.warning("confinement_refused", reason=refusal.reason_code)
            ack = ConfinementAck("smf.confinement-ack/1", "", False, (refusal.reason_code,))
            return msgspec.json.encode(ack)
        self._held[att.runtime_id] = att
        log.info(
            "runtime_confinement",
            runtime_id=att.runtime_id,
            state=att.state,
            profile_digest=att.profile_digest,
            instances=len(att.instances),
        )
        if self.share is not None:
            try:
                await self.share(data)
            except Exception as exc:  # noqa: BLE001 - the others then hold it unconfined
                log.error("confinement_share_failed", error=type(exc).__name__)
        expires = att.issued_at_ms + self.lease_ms if att.state == "running" else None
        return msgspec.json.encode(
            ConfinementAck("smf.confinement-ack/1", att.attestation_id, True, (), expires)
        )

    async def adopt(self, data: bytes) -> None:
        """An attestation another replica verified: verified here again."""
        try:
            att = self._verify(data)
        except StageRefusal as refusal:
            log.warning("confinement_not_adopted", reason=refusal.reason_code)
            return
        self._held[att.runtime_id] = att

    def _verify(self, data: bytes) -> ConfinementAttestation:
        registry = self.registry()
        att, signers = open_request(
            data,
            registry,
            ConfinementAttestation,
            names.PAYLOAD_CONFINEMENT,
            malformed="bad_signature",
            wrong_type="bad_signature",
            max_size=MAX_CONFINEMENT_BYTES,
        )
        return verify_attested(
            att, signers, "launcher", self.clock(), self.lease_ms, self._held.get
        )

    def standing(self, runtime_id: str) -> Standing:
        """Confined with its profile digest, or the reason it is not (module docstring)."""
        att = self._held.get(runtime_id)
        if att is None:
            return Standing(None, NOT_ATTESTED)
        if att.state != "running":
            return Standing(None, ENDED, att.issued_at_ms)
        if self.clock() - att.issued_at_ms > self.lease_ms:
            return Standing(None, STALE, att.issued_at_ms)
        instance = self.attested_instance(runtime_id)
        if instance is None or instance not in att.instances:
            return Standing(None, PROCESS_NOT_CONFINED, att.issued_at_ms)
        return Standing(att.profile_digest, None, att.issued_at_ms)

    def confined(self, runtime_id: str) -> bool:
        return self.standing(runtime_id).confined

    def instance_confined(self, runtime_id: str, instance_id: str | None) -> str | None:
        """The profile digest when ``instance_id`` (a process the model gateway saw prove
        itself) is one the runtime's launcher launched and still runs confined; else None."""
        att = self._held.get(runtime_id)
        if (
            att is None
            or instance_id is None
            or att.state != "running"
            or self.clock() - att.issued_at_ms > self.lease_ms
            or instance_id not in att.instances
        ):
            return None
        return att.profile_digest
