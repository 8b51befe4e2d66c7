"""The gate: the orchestration behind ``smf.propose``.

ARCHITECTURE.md, "One proposal through the bus":

    verify signature -> freshness -> normalize -> evaluate -> evidence ->
    deny  : reply Verdict(deny); nothing reaches smf.execute
    allow : claim once -> dispatch (one ExecuteOrder) -> reply
    hold  : the hold stage persists the binding and announces it

Fail closed everywhere: every refusal, timeout or exception between the
signature check and the reply becomes a ``deny`` with a reason code, and a
decision is never released before its evidence entry has committed (issue
7, "write-before-release"); a ledger outage is itself a denial
(``evidence_store_unavailable``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

import msgspec
import structlog

from pipeline.core.decision import Decision
from pipeline.core.normalize import Normalized
from pipeline.stages.contracts import DispatchReceipt, DispatchRequest, EvaluateRequest
from pipeline.stages.service import StageClient, StageRefusal
from pipeline.stores.claims import ClaimState, ProposalClaims
from pipeline.stores.ledger import EvidenceError, Ledger
from pipeline.stores.ledger_schema import EvidenceEntry
from pipeline.stores.sqlite_worker import StoreUnavailable
from subjects import dsse, names
from subjects.canonical import identity_of
from subjects.keyed import keyed_identifier
from subjects.keys import SigningKey, VerifyKey
from subjects.messages import Outcome, Proposal, Verdict
from subjects.registry import KeyRegistry
from subjects.verdicts import sign_verdict

log = structlog.get_logger(__name__)
T = TypeVar("T", bound=msgspec.Struct)

EVIDENCE_UNAVAILABLE: Final = "evidence_store_unavailable"
_LEDGER_DISPOSITION: Final = {"allow": "allow", "deny": "deny", "conditional": "hold"}
TENANT_DOMAIN: Final = "smf.tenant"

_SIGNATURE_REASONS: Final[dict[type[dsse.SignatureError], str]] = {
    dsse.EnvelopeTooLargeError: "proposal_too_large",
    dsse.MalformedPayloadError: "malformed_proposal",
    dsse.MalformedEnvelopeError: "malformed_proposal",
    dsse.PayloadTypeMismatchError: "wrong_payload_type",
    dsse.UnknownSignerError: "unknown_signer",
    dsse.BadSignatureError: "bad_signature",
    dsse.BelowThresholdError: "bad_signature",
}


class HoldHandler(Protocol):
    """What the gate needs from the approval hold stage (issue 4)."""

    async def hold(
        self, proposal: Proposal, normalized: Normalized, decision: Decision
    ) -> Verdict: ...


@dataclass(frozen=True, slots=True)
class GateSettings:
    tenant_key: bytes
    """Key for pseudonymous tenant identities in evidence (``subjects.keyed``)."""
    freshness_ms: int = 120_000
    """A proposal issued further than this from the gate's clock is refused as stale."""
    stage_timeout: float = 2.0
    max_proposal_bytes: int = dsse.MAX_ENVELOPE_BYTES
    max_clock_skew_ms: int = 60_000
    """How far apart the clocks of two gates sharing one claim store may be."""

    def __post_init__(self) -> None:
        if self.freshness_ms <= 0 or self.max_clock_skew_ms < 0:
            raise ValueError("freshness_ms must be positive and max_clock_skew_ms not negative")

    @property
    def claim_retention_ms(self) -> int:
        """How long a proposal claim must be kept: until no replay of its proposal
        can pass the freshness check (ARCHITECTURE.md, "One proposal through the
        bus": a replay must never produce a second order).

        A proposal issued at ``t`` is accepted while a gate's clock reads within
        ``freshness_ms`` (F) of ``t``. Claimed when the claimer's clock read ``c``,
        ``t <= c + F``, so a replay is fresh only until ``t + F <= c + 2F`` on the
        claimer's clock, which is at most ``c + 2F + skew`` on the clock of the gate
        that prunes. Retention ``2F + skew`` never forgets a claim a replay can still
        use; after it the replay is refused as ``stale_proposal`` before any claim
        is looked at.
        """
        return 2 * self.freshness_ms + self.max_clock_skew_ms


@dataclass
class Gate:
    settings: GateSettings
    registry: KeyRegistry
    normalize: StageClient
    evaluate: StageClient
    dispatch: StageClient
    ledger: Ledger
    claims: ProposalClaims
    clock: Callable[[], int]
    signer: SigningKey
    """The gate key: signs every verdict this gate answers with."""
    hold: HoldHandler | None = None
    _all_keys: dict[str, VerifyKey] = field(init=False)

    def __post_init__(self) -> None:
        self._all_keys = {k: p.verify_key for k, p in self.registry.principals.items()}

    # -- the edge -----------------------------------------------------------

    def verify_runtime_message(self, data: bytes, type_: type[T], payload_type: str) -> T:
        """Decode once, verify against the registry, check the signer is that runtime.

        Used for proposals and for the signed close of an output stream; the
        message's ``runtime_id`` must be the signer's registered runtime and
        its ``issued_at_ms`` within the freshness window of the gate's clock.
        """
        try:
            envelope = dsse.decode_envelope(data, self.settings.max_proposal_bytes)
            message, verified = dsse.open_struct(envelope, self._all_keys, type_, payload_type)
        except dsse.SignatureError as exc:
            reason = next(r for t, r in _SIGNATURE_REASONS.items() if isinstance(exc, t))
            raise StageRefusal(reason, str(exc)) from exc
        except msgspec.ValidationError as exc:
            raise StageRefusal("malformed_proposal", str(exc)) from exc
        signers = [self.registry.principals[k] for k in verified.key_ids]
        runtimes = [p for p in signers if p.entry.role == "runtime"]
        runtime_id = getattr(message, "runtime_id", None)
        issued_at = getattr(message, "issued_at_ms", None)
        if not runtimes:
            raise StageRefusal("signer_role_mismatch")
        if all(p.entry.runtime_id != runtime_id for p in runtimes):
            raise StageRefusal("runtime_identity_mismatch")
        if not isinstance(issued_at, int) or (
            abs(self.clock() - issued_at) > self.settings.freshness_ms
        ):
            raise StageRefusal("stale_proposal")
        return message

    async def prune_claims(self) -> int:
        """Forget the claims older than :attr:`GateSettings.claim_retention_ms`, so
        the claim store stays bounded; returns how many. A failure raises and
        forgets nothing, which only keeps replays refused longer."""
        return await self.claims.prune(self.clock() - self.settings.claim_retention_ms)

    def verify_proposal(self, data: bytes) -> Proposal:
        return self.verify_runtime_message(data, Proposal, names.PAYLOAD_PROPOSAL)

    async def handle_propose(self, data: bytes) -> bytes:
        """The ``smf.propose`` handler: a Verdict for a verified proposal.

        Input that is not a verified proposal is refused (error reply, nothing
        changes). Everything after verification yields a Verdict, signed with the
        gate key (``subjects.verdicts``): a runtime acts only on a verdict it can
        verify, so no other client answering ``smf.propose`` can release a call.
        """
        return sign_verdict(await self.decide(self.verify_proposal(data)), self.signer)

    async def decide(self, proposal: Proposal, notes: tuple[str, ...] = ()) -> Verdict:
        """Decide a verified proposal; never raises (an internal error is a denial)."""
        try:
            verdict = await self._decide(proposal, notes)
        except Exception:
            log.exception("gate_internal_error", proposal_id=proposal.proposal_id)
            verdict = self._deny(proposal, ("gate_internal_error",))
        return verdict

    # -- the pipeline -------------------------------------------------------

    async def _decide(self, proposal: Proposal, notes: tuple[str, ...]) -> Verdict:
        timeout = self.settings.stage_timeout
        try:
            normalized = msgspec.json.decode(
                await self.normalize.call(msgspec.json.encode(proposal), timeout),
                type=Normalized,
            )
            request = EvaluateRequest(normalized=normalized, operation_id=proposal.proposal_id)
            decision = msgspec.json.decode(
                await self.evaluate.call(msgspec.json.encode(request), timeout), type=Decision
            )
        except StageRefusal as refusal:
            return self._deny(proposal, (refusal.reason_code,))

        reasons = (*decision.reason_codes, *normalized.notes, *notes)
        tenant_ref = keyed_identifier(
            self.settings.tenant_key, TENANT_DOMAIN, proposal.actor.tenant_id
        )
        try:
            receipt = await self.ledger.append(
                self._entry(decision, tenant_ref, "decision", reasons=reasons)
            )
        except EvidenceError:
            log.error("evidence_unavailable", proposal_id=proposal.proposal_id)
            return self._deny(proposal, (EVIDENCE_UNAVAILABLE,), decision)
        evidence = (receipt.entry_hash,)

        if decision.disposition == "deny":
            return self._deny(proposal, reasons, decision, evidence)
        if decision.disposition == "conditional":
            if self.hold is None:
                return self._deny(proposal, ("approval_hold_unavailable",), decision, evidence)
            held = await self.hold.hold(proposal, normalized, decision)
            return msgspec.structs.replace(
                held, reason_codes=tuple(dict.fromkeys((*held.reason_codes, *reasons)))
            )
        return await self._allow(proposal, normalized, decision, tenant_ref, reasons, evidence)

    async def _allow(
        self,
        proposal: Proposal,
        normalized: Normalized,
        decision: Decision,
        tenant_ref: str,
        reasons: tuple[str, ...],
        evidence: tuple[str, ...],
    ) -> Verdict:
        try:
            claimed = await self.claims.claim(
                proposal.proposal_id, decision.operation_hash, decision.decision_id, self.clock()
            )
        except StoreUnavailable:
            return self._deny(proposal, ("claim_store_unavailable",), decision, evidence)
        if not claimed:
            return self._deny(proposal, ("duplicate_proposal",), decision, evidence)
        connector = normalized.connector_id
        if connector is None:
            # The runtime executes this tool itself; there is no connector order.
            await self._settle(proposal.proposal_id, "published")
            return self._verdict(proposal, "allow", reasons, decision, evidence)
        dispatch = DispatchRequest(
            decision=decision,
            connector_id=connector,
            native_tool=proposal.native_tool,
            arguments=proposal.arguments,
            content=normalized.content,
            destination_address=normalized.destination_address,
        )
        try:
            receipt = msgspec.json.decode(
                await self.dispatch.call(
                    msgspec.json.encode(dispatch), self.settings.stage_timeout
                ),
                type=DispatchReceipt,
            )
        except StageRefusal as refusal:
            await self._settle(proposal.proposal_id, "failed")
            await self._record_failure(decision, tenant_ref, refusal.reason_code)
            return self._deny(
                proposal, ("dispatch_failed", refusal.reason_code), decision, evidence
            )
        await self._settle(proposal.proposal_id, "published")
        return msgspec.structs.replace(
            self._verdict(proposal, "allow", reasons, decision, evidence),
            order_id=receipt.order_id,
            connector_id=connector,
        )

    async def _settle(self, proposal_id: str, state: ClaimState) -> None:
        """Record how a claim ended, best effort: the claim itself already stops any
        replay, and the order (if any) is already in the stream. A store outage here
        must not turn an order that exists into a reply that says "deny"."""
        try:
            await self.claims.settle(proposal_id, state)
        except StoreUnavailable:
            log.error("claim_settle_failed", proposal_id=proposal_id, state=state)

    async def _record_failure(self, decision: Decision, tenant_ref: str, reason: str) -> None:
        try:
            await self.ledger.append(
                self._entry(decision, tenant_ref, "transition", status="failed", reasons=(reason,))
            )
        except EvidenceError:
            log.error("evidence_unavailable_for_failure", decision_id=decision.decision_id)

    # -- building replies and evidence ---------------------------------------

    def _entry(
        self,
        decision: Decision,
        tenant_ref: str,
        kind: str,
        *,
        status: str | None = None,
        reasons: tuple[str, ...] = (),
    ) -> EvidenceEntry:
        return msgspec.convert(
            {
                "kind": kind,
                "operation_hash": decision.operation_hash,
                "decision_id": decision.decision_id,
                "release_id": release_ref(decision.release_id),
                "projection_id": decision.projection_id,
                "tenant_ref": tenant_ref,
                "at": self.clock(),
                "disposition": _LEDGER_DISPOSITION[decision.disposition]
                if kind == "decision"
                else None,
                "status": status,
                "reason_codes": list(dict.fromkeys(reasons))[:32],
            },
            EvidenceEntry,
        )

    def _verdict(
        self,
        proposal: Proposal,
        outcome: Outcome,
        reasons: tuple[str, ...],
        decision: Decision | None,
        evidence: tuple[str, ...] = (),
    ) -> Verdict:
        return Verdict(
            schema="smf.verdict/1",
            proposal_id=proposal.proposal_id,
            outcome=outcome,
            reason_codes=tuple(dict.fromkeys(reasons)),
            decision_id=decision.decision_id if decision else None,
            operation_hash=decision.operation_hash if decision else None,
            release_id=decision.release_id if decision else None,
            evidence=evidence,
        )

    def _deny(
        self,
        proposal: Proposal,
        reasons: tuple[str, ...],
        decision: Decision | None = None,
        evidence: tuple[str, ...] = (),
    ) -> Verdict:
        return self._verdict(proposal, "deny", reasons, decision, evidence)


def release_ref(release_id: str) -> str:
    """The release as an identity for evidence (the ledger holds identities only)."""
    return identity_of({"release_id": release_id})
