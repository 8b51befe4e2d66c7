"""The approval desk: hold, resolve, claim once, follow the order to its outcome.

ARCHITECTURE.md, "Exact-action approval":

- hold: a conditional decision becomes an ApprovalBinding persisted in the
  approval store, announced on ``smf.approval.pending.<tenant>`` (JetStream,
  so a console that connects later still sees it), and answered ``held``.
- resolve: an approver's signed allow-once or deny is accepted only when the
  signature verifies against the approver roster, the resolver holds every
  required role for the binding's tenant, is not the requesting actor, the
  approval is pending and unexpired and the binding digest matches. Every
  refusal has its own reason code.
- claim: the binding is rebuilt from what the gate holds now (arguments,
  content, destination, current release and projection) and the store moves
  ``approved -> executing`` only if the whole binding is unchanged; exactly
  one claimant wins. Then exactly one ExecuteOrder is dispatched.
- outcome: the held proposal's final Verdict goes to its runtime on
  ``smf.approval.outcome.<approval>`` signed with the gate key
  (``smf_assurance.subjects.approvals.sign_outcome``): the pending announcement makes the
  approval id, decision id and operation hash public, so an unsigned outcome
  would let any bus client release a held call. No key, no outcome (the
  runtime times out and blocks).
- reports: the signed report of whoever was given the order moves the
  approval to ``consumed``, ``failed`` or ``execution_unknown``: for a
  connector order, that connector's key; for a runtime-executed action (no
  connector), the key of the runtime that proposed it, for exactly the order
  ``order_id_for`` the binding's decision, recorded at the claim. A
  report that the executed params were not the approved ones is a broken
  binding (``binding_broken``), ``execution_unknown``, never ``consumed``. No
  report by the deadline -> ``execution_unknown``, terminal, never retried.
- restart: a pending approval stays pending, with its content, until an
  approver answers it or its TTL ends it (at the first sweep, which runs at
  start); an approved approval no claim followed is invalidated and executing
  work becomes ``execution_unknown``; both are written to the evidence ledger.

Every state change is written to the evidence ledger before anything is
released to a runtime or a connector.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec
import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.client import JetStreamContext
from nats.js.errors import Error as JetStreamError

from smf_assurance.core.approval_rules import (
    BINDING_BROKEN,
    ApprovalRuleError,
    Finish,
    HeldAction,
    approver_of,
    bind,
    check_entitled,
    check_may_resolve,
    settlement,
    signed_by_executor,
)
from smf_assurance.core.decision import Decision
from smf_assurance.core.explanation import reason_words, rule_texts
from smf_assurance.core.normalize import Normalized
from smf_assurance.core.projection import AnalysisProjection, PolicySet
from smf_assurance.pipeline.chain.contracts import DispatchReceipt, DispatchRequest, order_request
from smf_assurance.pipeline.chain.dispatch import (
    CERTAIN_NOT_STORED,
    DEFAULT_ORDER_TTL_MS,
    DISPATCH_UNCONFIRMED,
)
from smf_assurance.pipeline.chain.outcomes import (
    DEFAULT_EXECUTION_DEADLINE_MS,
    ReportRefused,
    VerifiedReport,
    open_report,
)
from smf_assurance.pipeline.chain.transport import StageClient
from smf_assurance.pipeline.desks.signed import check_fresh, open_request
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.pipeline.stores.approvals import (
    ApprovalError,
    ApprovalExpired,
    ApprovalRecord,
    ApprovalStore,
)
from smf_assurance.pipeline.stores.evidence import (
    EvidenceWriter,
    outcome_verdict,
    verdict,
)
from smf_assurance.pipeline.stores.ledger import EvidenceError, Ledger
from smf_assurance.pipeline.stores.ledger_schema import Status
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    TERMINAL_STATES,
    ApprovalBinding,
    ApprovalResolution,
    ApprovalView,
    AskAgain,
    PendingAnnouncement,
    ReasonShown,
    ReRequest,
    ReRequestReply,
    ResolutionReply,
    RuleShown,
    ShowRequest,
    TrackedApproval,
    TrackRelation,
    TrackReply,
    TrackRequest,
    sign_ask_again,
    sign_outcome,
)
from smf_assurance.subjects.keyed import PseudonymKey
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.messages import Proposal, Verdict, order_id_for
from smf_assurance.subjects.names import SubjectError
from smf_assurance.subjects.registry import KeyRegistry, Principal

log = structlog.get_logger(__name__)

PersonRequest = TypeVar("PersonRequest", TrackRequest, ReRequest)

SHOW_FRESHNESS_MS: Final = 60_000
"""How far a signed show request's time may be from the gate's clock."""
DEFAULT_CLAIM_GRACE_MS: Final = 10_000
"""An accepted allow-once is claimed in the same request, after one ledger write; ten
seconds is far beyond that even under load, and well inside the order budget."""
CLAIM_ABANDONED: Final = "approval_claim_abandoned"
STATE_RESTORED: Final = "state_restored"
"""Why an approval open in a state restored from a backup was closed at start."""
DEFAULT_REREQUEST_WAIT_MS: Final = 3_000
"""How long a re-request waits for the runtime's new proposal before it answers: a
runtime that holds the action proposes it within milliseconds of the notice (one
request to this gate); three seconds keeps the requester's click answered in time."""

__all__ = ["ApprovalDesk", "DeskError", "HeldAction", "ProposalsSeen", "bind"]


class ProposalsSeen:
    """The verdicts this gate decides, for whoever waits for one of an operation.

    A re-request tells the runtimes to propose an expired action anew and answers
    what came of it (``ReRequestReply.proposed_again``): the gate registers here
    before the notice goes out (:meth:`expect`), so only a proposal decided after it
    counts, and the chain tells every verdict that names its operation
    (:meth:`seen`). An operation hash names the action, not the proposal: a new
    proposal of the same action has the same one (``subjects/envelope.py``).
    """

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[Verdict]]] = {}

    def expect(self, operation_hash: str) -> asyncio.Future[Verdict]:
        """A future for the next verdict of ``operation_hash``; :meth:`forget` it after."""
        waiter: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(operation_hash, []).append(waiter)
        return waiter

    def forget(self, operation_hash: str, waiter: asyncio.Future[Verdict]) -> None:
        waiters = self._waiting.get(operation_hash, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if not waiters:
            self._waiting.pop(operation_hash, None)

    def seen(self, verdict: Verdict) -> None:
        """Tell the waiters of the verdict's operation (a verdict without one: none)."""
        if verdict.operation_hash is None:
            return
        for waiter in self._waiting.get(verdict.operation_hash, ()):
            if not waiter.done():
                waiter.set_result(verdict)


class DeskError(Exception):
    """A resolution or show request is refused; ``reason_code`` says why.

    ``recorded``: the step that refused already wrote the refusal's one ledger
    entry (the transition it made: ``expired``, ``invalidated``,
    ``execution_unknown``), so :meth:`ApprovalDesk._refusal` writes none.
    """

    def __init__(self, reason_code: str, *, recorded: bool = False) -> None:
        super().__init__(reason_code)
        self.reason_code = reason_code
        self.recorded = recorded


@dataclass
class ApprovalDesk:
    store: ApprovalStore
    nc: Client
    js: JetStreamContext
    registry: KeyRegistry
    ledger: Ledger
    dispatch: StageClient[DispatchRequest, DispatchReceipt]
    policy_set: Callable[[], PolicySet]
    clock: Callable[[], int]
    tenant_key: PseudonymKey
    stage_timeout: float = 2.0
    execution_deadline_ms: int = DEFAULT_EXECUTION_DEADLINE_MS
    order_ttl_ms: int = DEFAULT_ORDER_TTL_MS
    """The order budget: an approved order is executable until its claim plus this,
    the deadline the allow outcome promises (``expires_at_ms``)."""
    claim_grace_ms: int = DEFAULT_CLAIM_GRACE_MS
    """How long an accepted allow-once may stay ``approved`` before the sweep takes
    its claim for abandoned (the gate that accepted it died before claiming)."""
    signer: SigningKey | None = None
    """The gate key that signs approval outcomes; without it no outcome is published."""
    stop_runtime: Callable[[str, str, dict[str, str]], Awaitable[object]] | None = None
    """``(runtime_id, tenant_id, subject)``: stop a runtime whose report broke its
    approval's binding (``RuntimeStops.stop_recorded``); None where no stops are kept."""
    restored_until_ms: int | None = None
    """On a state restored from a backup, ``GateSettings.record_only_until_ms``: every
    approval opened at or before it is invalidated at start (:meth:`recover`). None was
    opened by this gate: it holds no proposal issued by then."""
    analysis: Callable[[], AnalysisProjection | None] = field(default=lambda: None)
    """The active release's analysis projection (None on a projection folder): where a
    shown approval's rules are read in the release's own words."""
    rerequest_wait_ms: int = DEFAULT_REREQUEST_WAIT_MS
    """How long a re-request waits for the new proposal it asked for."""
    proposals_seen: ProposalsSeen = field(default_factory=ProposalsSeen)
    """Told every verdict the gate's chain decides (the gate holds the same one)."""
    _evidence: EvidenceWriter = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Through _now: tests and operators may replace ``clock`` on a running desk.
        self._evidence = EvidenceWriter(self.ledger, self.tenant_key, self._now)

    def _now(self) -> int:
        return self.clock()

    # -- evidence -----------------------------------------------------------

    async def _record(
        self, binding: ApprovalBinding, status: Status | None, reasons: tuple[str, ...] = ()
    ) -> str:
        """Write one transition; raises EvidenceError (callers fail closed)."""
        entry = self._evidence.for_binding(binding, status, reasons)
        return (await self._evidence.append(entry)).entry_hash

    # -- hold ---------------------------------------------------------------

    async def hold(self, proposal: Proposal, normalized: Normalized, decision: Decision) -> Verdict:
        """Persist, record, announce, then answer ``held``; any failure denies."""

        def deny(*reasons: str) -> Verdict:
            return verdict(proposal.proposal_id, "deny", reasons, decision)

        if decision.requirements.approval_count > 1:
            return deny("multiple_approvals_unsupported")
        now = self.clock()
        held = HeldAction.of(proposal, normalized, decision)
        ttl_ms = decision.requirements.ttl_seconds * 1000
        binding = bind(held, decision.release_id, decision.projection_id, now, now + ttl_ms)
        try:
            subject = names.approval_pending_subject(binding.tenant_id)
        except SubjectError:
            return deny("tenant_not_addressable")
        try:
            await self.store.create(binding, msgspec.json.encode(held), now)
        except ApprovalError as exc:
            return deny(exc.reason_code)
        try:
            evidence = await self._record(binding, "held", decision.reason_codes)
        except EvidenceError:
            await self._invalidate(binding, ("evidence_store_unavailable",))
            return deny("evidence_store_unavailable")
        announcement = PendingAnnouncement(
            schema="smf.approval-pending/2",
            approval_id=binding.approval_id,
            tenant_id=binding.tenant_id,
            required_roles=binding.required_roles,
            required_approvals=binding.required_approvals,
            created_at_ms=binding.created_at_ms,
            expires_at_ms=binding.expires_at_ms,
            capability=normalized.envelope.capability,
            channel=normalized.envelope.destination.channel,
            locality=normalized.envelope.destination.locality,
            native_tool=proposal.native_tool,
            rule_ids=decision.rule_ids,
            reason_codes=decision.reason_codes,
        )
        try:
            await self.js.publish(
                subject,
                msgspec.json.encode(announcement),
                timeout=self.stage_timeout,
                headers={names.HEADER_MSG_ID: binding.approval_id},
            )
        except (NatsError, JetStreamError, TimeoutError):
            await self._invalidate(binding, ("approval_announcement_failed",))
            return deny("approval_announcement_failed")
        log.info("approval_held", approval_id=binding.approval_id)
        return msgspec.structs.replace(
            verdict(proposal.proposal_id, "held", decision.reason_codes, decision, (evidence,)),
            approval_id=binding.approval_id,
            expires_at_ms=binding.expires_at_ms,
            required_roles=binding.required_roles,
        )

    async def _invalidate(self, binding: ApprovalBinding, reasons: tuple[str, ...]) -> bool:
        """Close an open approval the gate could not complete, so it can never be
        approved later; the transition is recorded (with ``reasons``) only when this
        call made it, so an approval ends in the ledger once. True when it did."""
        try:
            moved = await self.store.invalidate(binding.approval_id, self.clock())
        except ApprovalError:
            log.exception("approval_invalidate_failed", approval_id=binding.approval_id)
            return False
        if moved:
            await self._safe_record(binding, "invalidated", reasons)
        return bool(moved)

    # -- resolve ------------------------------------------------------------

    def _verify_resolution(self, data: bytes) -> tuple[ApprovalResolution, Principal]:
        try:
            resolution, signers = open_request(
                data,
                self.registry,
                ApprovalResolution,
                names.PAYLOAD_RESOLUTION,
                malformed="malformed_resolution",
                person="decision",
            )
        except StageRefusal as refusal:
            raise DeskError(refusal.reason_code) from refusal
        return resolution, self._approver(signers, resolution.resolver_id)

    def _approver(self, signers: tuple[Principal, ...], resolver_id: str) -> Principal:
        try:
            return approver_of(signers, resolver_id)
        except ApprovalRuleError as exc:
            raise DeskError(exc.reason_code) from exc

    async def handle_resolve(self, data: bytes) -> bytes:
        """The ``smf.approval.resolve`` handler; always answers a ResolutionReply."""
        approval_id = ""
        try:
            resolution, principal = self._verify_resolution(data)
            approval_id = resolution.approval_id
            reply = await self._resolve(resolution, principal)
        except DeskError as exc:
            log.info("resolution_refused", approval_id=approval_id, reason=exc.reason_code)
            reply = await self._refusal(approval_id, exc.reason_code, recorded=exc.recorded)
        return msgspec.json.encode(reply)

    async def _refusal(
        self, approval_id: str, reason: str, *, recorded: bool = False
    ) -> ResolutionReply:
        """Refusals are recorded too, when the approval is known, each with
        one entry: a refusal changes no state, so its entry repeats a state only while
        the approval is open. An approval's terminal state is written once, by the step
        that moved it there (ARCHITECTURE.md, "Exact-action approval"): a refusal after
        it (a duplicate resolution, an allow after a deny) names no status, so it can
        never read as a second end. ``recorded``: the refusing step wrote its entry."""
        record = await self._get(approval_id) if approval_id else None
        if record is not None and not recorded:
            await self._record_refusal(record, reason)
        return ResolutionReply(
            schema="smf.resolution-reply/1",
            approval_id=approval_id,
            accepted=False,
            state=record.state if record is not None else "unknown",
            reason_codes=(reason,),
        )

    async def _record_refusal(self, record: ApprovalRecord, reason: str) -> None:
        status = None if record.state in TERMINAL_STATES else record.state
        try:
            await self._record(record.binding, status, (reason,))
        except EvidenceError:
            log.error("evidence_unavailable_for_refusal", approval_id=record.binding.approval_id)

    async def _get(self, approval_id: str) -> ApprovalRecord | None:
        try:
            return await self.store.get(approval_id)
        except ApprovalError:
            return None

    async def _resolve(
        self, resolution: ApprovalResolution, principal: Principal
    ) -> ResolutionReply:
        record = await self._get(resolution.approval_id)
        if record is None:
            raise DeskError("approval_not_found")
        binding = record.binding
        try:
            check_may_resolve(principal, binding)
        except ApprovalRuleError as exc:
            raise DeskError(exc.reason_code) from exc
        now = self.clock()
        try:
            if resolution.decision == "deny":
                record = await self.store.deny(
                    binding.approval_id,
                    resolution.binding_digest,
                    principal.name,
                    now,
                    resolution.denial_reason_codes(),
                )
            else:
                record = await self.store.approve(
                    binding.approval_id, resolution.binding_digest, principal.name, now
                )
        except ApprovalExpired as exc:
            # The store moved the approval to expired in this refusing step: the
            # refusal's entry is that transition, written once, here.
            await self._safe_record(binding, "expired", (exc.reason_code,))
            raise DeskError(exc.reason_code, recorded=True) from exc
        except ApprovalError as exc:
            raise DeskError(exc.reason_code) from exc
        if resolution.decision == "deny":
            return await self._denied(binding, resolution)
        try:
            await self._record(binding, "approved")
        except EvidenceError:
            await self._invalidate(binding, ("evidence_store_unavailable",))
            raise DeskError("evidence_store_unavailable", recorded=True) from None
        return await self._claim_and_dispatch(record)

    async def _denied(
        self, binding: ApprovalBinding, resolution: ApprovalResolution
    ) -> ResolutionReply:
        """Record and announce an approver's deny, with its closed reason and note.

        The evidence and the outcome carry the closed reason as a reason code
        (``ApprovalResolution.denial_reason_codes``); the approver's note goes to
        the waiting runtime in the gate-signed outcome only, never to the ledger
        or a log line.
        """
        reasons = resolution.denial_reason_codes()
        await self._safe_record(binding, "denied", reasons)
        outcome = outcome_verdict(binding, "deny", reasons)
        if resolution.note is not None:
            outcome = msgspec.structs.replace(outcome, approver_note=resolution.note)
        await self._notify(binding, outcome)
        return msgspec.structs.replace(
            _accepted(binding.approval_id, "denied"), reason_codes=reasons
        )

    async def _claim_and_dispatch(self, record: ApprovalRecord) -> ResolutionReply:
        stored = record.binding
        if record.held_payload is None:
            raise DeskError("held_action_missing")
        held = msgspec.json.decode(record.held_payload, type=HeldAction)
        current = self.policy_set()
        expected = bind(
            held,
            current.release_id,
            current.projection_id,
            stored.created_at_ms,
            stored.expires_at_ms,
        )
        try:
            claimed = await self.store.claim(stored.approval_id, expected, self.clock())
        except ApprovalExpired as exc:
            # The claim found it expired and moved it there: its one terminal entry.
            await self._safe_record(stored, "expired", (exc.reason_code,))
            raise DeskError(exc.reason_code, recorded=True) from exc
        except ApprovalError as exc:
            # A refused claim never leaves the approval open to a later claim, and the
            # evidence names the state the store now holds (``invalidated`` when this
            # step closed it, else the refusal on the state another step left, e.g.
            # ``executing`` when another claimant won), never one it does not.
            if not await self._invalidate(stored, (exc.reason_code,)):
                after = await self._get(stored.approval_id)
                if after is not None:
                    await self._record_refusal(after, exc.reason_code)
            raise DeskError(exc.reason_code, recorded=True) from exc
        held = msgspec.json.decode(claimed.held_payload or record.held_payload, type=HeldAction)
        try:
            await self._record(stored, "executing")
        except EvidenceError:
            await self._finish(stored, "execution_unknown", ("evidence_store_unavailable",))
            raise DeskError("evidence_store_unavailable", recorded=True) from None
        if held.connector_id is None:
            return await self._release_to_runtime(stored)
        now = self.clock()
        stage_ms = int(self.stage_timeout * 1000)
        request = order_request(
            held,
            held.connector_id,
            not_after_ms=now + self.order_ttl_ms,
            publish_until_ms=now + stage_ms - min(250, stage_ms // 4),
            approval_id=stored.approval_id,
        )
        try:
            receipt = await self.dispatch.call(request, self.stage_timeout)
        except StageRefusal as refusal:
            await self._undelivered(stored, refusal.reason_code)
            raise DeskError("dispatch_failed", recorded=True) from None
        await self.store.record_order(stored.approval_id, receipt.order_id, self.clock())
        verdict = msgspec.structs.replace(
            outcome_verdict(stored, "allow", ("approved_once",)),
            order_id=receipt.order_id,
            connector_id=held.connector_id,
            expires_at_ms=receipt.not_after_ms,
        )
        await self._notify(stored, verdict)
        return msgspec.structs.replace(
            _accepted(stored.approval_id, "executing"), order_id=receipt.order_id
        )

    async def _undelivered(self, stored: ApprovalBinding, reason: str) -> None:
        """A claimed approval whose order the dispatch did not confirm. Refused before
        anything was stored (:data:`CERTAIN_NOT_STORED`): ``failed``, and the runtime
        is told ``deny``. Otherwise the order may be stored: it is recorded against the
        approval, which stays ``executing`` so that its connector's report settles it
        (or the deadline sweep ends it ``execution_unknown``), and the runtime is told
        nothing it could take for a deny; it learns the end on ``smf.approval.status``."""
        if reason in CERTAIN_NOT_STORED:
            await self._finish(stored, "failed", ("dispatch_failed", reason))
            await self._notify(stored, outcome_verdict(stored, "deny", ("dispatch_failed",)))
            return
        order_id = order_id_for(stored)
        log.error("dispatch_unconfirmed", approval_id=stored.approval_id, reason=reason)
        try:
            await self.store.record_order(stored.approval_id, order_id, self.clock())
        except ApprovalError as exc:
            await self._finish(stored, "execution_unknown", (DISPATCH_UNCONFIRMED, reason))
            log.error("approval_order_record_failed", reason=exc.reason_code)
            return
        await self._safe_record(stored, None, (DISPATCH_UNCONFIRMED, reason))

    # -- what a requester that stopped waiting left -------------------------------

    async def held_for(self, proposal: Proposal) -> Verdict | None:
        """The ``held`` verdict of an approval still open for ``proposal`` (same proposal
        id, same runtime), for a requester whose held reply never reached it; None when
        there is none. Reads every open approval: asked only after a requester's
        deadline passed, never on a decision's way."""
        for record in await self._open_records():
            if record.held_payload is None:
                continue
            try:
                held = msgspec.json.decode(record.held_payload, type=HeldAction)
            except msgspec.DecodeError:
                continue
            if held.proposal_id == proposal.proposal_id and held.runtime_id == proposal.runtime_id:
                binding = record.binding
                return msgspec.structs.replace(
                    verdict(
                        proposal.proposal_id, "held", held.decision.reason_codes, held.decision
                    ),
                    approval_id=binding.approval_id,
                    expires_at_ms=binding.expires_at_ms,
                    required_roles=binding.required_roles,
                )
        return None

    async def _open_records(self) -> list[ApprovalRecord]:
        try:
            return await self.store.list_open()
        except ApprovalError as exc:
            raise StoreUnavailable(exc.reason_code) from exc

    async def withdraw(self, approval_id: str, reason: str) -> bool:
        """Close an open approval whose requester stopped waiting before it was held,
        so that it can never be approved behind the requester's timeout."""
        record = await self._get(approval_id)
        if record is None:
            return False
        return await self._invalidate(record.binding, (reason,))

    async def _release_to_runtime(self, stored: ApprovalBinding) -> ResolutionReply:
        """The runtime executes this action itself: record its order, then release it.

        The order id is ``order_id_for`` the binding's decision, the one the
        runtime reports on, recorded BEFORE the allow is published so that the
        report can never arrive first (an approval without a recorded order can
        only end ``execution_unknown``). If it cannot be recorded nothing is
        released: the claim is spent, the approval ends ``execution_unknown`` and
        the runtime is told ``deny`` (fail closed).
        """
        order_id = order_id_for(stored)
        try:
            await self.store.record_order(stored.approval_id, order_id, self.clock())
        except ApprovalError as exc:
            await self._finish(
                stored, "execution_unknown", ("order_record_failed", exc.reason_code)
            )
            await self._notify(stored, outcome_verdict(stored, "deny", ("order_record_failed",)))
            raise DeskError("order_record_failed", recorded=True) from None
        await self._notify(stored, outcome_verdict(stored, "allow", ("approved_once",)))
        return _accepted(stored.approval_id, "executing")

    async def _finish(
        self,
        binding: ApprovalBinding,
        outcome: Finish,
        reasons: tuple[str, ...],
        receipt: str | None = None,
    ) -> None:
        """End a claimed approval; the connector's receipt goes to the store with it
        (for the requester's view), never to the ledger (whose entry has the reason
        codes only)."""
        try:
            await self.store.finish(binding.approval_id, outcome, self.clock(), receipt)
        except ApprovalError as exc:
            log.error(
                "approval_finish_failed", approval_id=binding.approval_id, reason=exc.reason_code
            )
            return
        await self._safe_record(binding, outcome, reasons)

    async def _safe_record(
        self, binding: ApprovalBinding, status: Status | None, reasons: tuple[str, ...]
    ) -> None:
        try:
            await self._record(binding, status, reasons)
        except EvidenceError:
            log.error("evidence_unavailable", approval_id=binding.approval_id, status=status)

    async def _notify(self, binding: ApprovalBinding, verdict: Verdict) -> None:
        """Tell the waiting runtime adapter, signed with the gate key; best effort
        (the adapter also times out closed).

        Signed because the approval id, decision id and operation hash are public
        (the pending announcement carries them): an unsigned allow could be
        forged by any bus client (docs/SUBJECTS.md, ``smf.approval.outcome``).
        Without a gate key nothing is published rather than something unsigned.
        """
        if self.signer is None:
            log.error("approval_outcome_unsigned_withheld", approval_id=binding.approval_id)
            return
        try:
            await self.nc.publish(
                names.approval_outcome_subject(binding.approval_id),
                sign_outcome(verdict, self.signer),
            )
        except NatsError:
            log.warning("approval_outcome_publish_failed", approval_id=binding.approval_id)

    # -- connector reports, deadlines, restart -------------------------------

    async def handle_report(self, data: bytes) -> None:
        """A signed execution report, opened against connector and runtime keys,
        then :meth:`settle_report`; a report that does not verify is ignored."""
        try:
            verified = open_report(data, self.registry)
        except ReportRefused:
            log.warning("execution_report_refused")
            return
        if not await self.settle_report(verified):
            log.warning("execution_report_unknown_order", order_id=verified.report.order_id)

    async def settle_report(self, verified: VerifiedReport) -> bool:
        """A verified report settles the approval whose order it names, when it is
        signed by whoever was given that order, and only then; True when the order
        is an approval's (settled now or not), so the report goes no further.

        The approval recorded for the order must be ``executing`` and
        :func:`signed_by_executor` must hold: a connector order is settled by that
        connector's key only, a runtime-executed order by the proposing runtime's
        key only, so a runtime key never settles a connector order or another
        runtime's order, and a connector key never settles a runtime's. Everything
        else is ignored (logged), and the deadline sweep ends the approval
        ``execution_unknown``.
        """
        report = verified.report
        try:
            approval_id = await self.store.find_by_order(report.order_id)
        except ApprovalError as exc:
            log.error("approval_order_lookup_failed", reason=exc.reason_code)
            return False
        if approval_id is None:
            return False
        record = await self._get(approval_id)
        if record is None or record.state != "executing" or record.held_payload is None:
            log.info("execution_report_after_outcome", approval_id=approval_id)
            return True
        try:
            held = msgspec.json.decode(record.held_payload, type=HeldAction)
        except msgspec.DecodeError:
            log.error("held_action_unreadable", approval_id=approval_id)
            return True
        if record.order_id != report.order_id or not signed_by_executor(
            held, record.binding, report, verified.signers
        ):
            log.warning("execution_report_wrong_signer", order_id=report.order_id)
            return True
        outcome, reasons = settlement(report)
        await self._finish(record.binding, outcome, reasons, report.external_ref)
        if BINDING_BROKEN in reasons:
            await self._stop_for_broken_binding(record.binding, held, report.order_id)
        return True

    async def _stop_for_broken_binding(
        self, binding: ApprovalBinding, held: HeldAction, order_id: str
    ) -> None:
        """A runtime that executed other parameters than an attorney approved is
        stopped like one that ran an ungated tool (``runtime_stopped_binding_broken``),
        and the stop is a ledger entry: whatever swapped the call is still loaded in
        it. Only an operator's clear lets it be served again."""
        if self.stop_runtime is None or held.runtime_id is None:
            return
        subject = {
            "approval": binding.approval_id,
            "order": order_id,
            "runtime_id": held.runtime_id,
        }
        try:
            await self.stop_runtime(held.runtime_id, binding.tenant_id, subject)
        except Exception as exc:  # noqa: BLE001 - the approval has ended either way; logged
            log.error("binding_broken_stop_failed", error=type(exc).__name__)

    async def sweep(self) -> None:
        """Expire overdue approvals; executing work past its deadline is unknown; an
        accepted allow-once no claim followed within :attr:`claim_grace_ms` is
        invalidated (by whichever gate sweeps first: on a cluster, a live replica
        settles what a dead one left ``approved``)."""
        now = self.clock()
        for approval_id in await self.store.expire_due(now):
            record = await self._get(approval_id)
            if record is not None:
                await self._safe_record(record.binding, "expired", ("approval_expired",))
                await self._notify(
                    record.binding, outcome_verdict(record.binding, "deny", ("approval_expired",))
                )
        for record in await self.store.list_executing(before_ms=now - self.execution_deadline_ms):
            await self._finish(record.binding, "execution_unknown", ("no_execution_report",))
        for approval_id in await self.store.invalidate_unclaimed(now - self.claim_grace_ms, now):
            # Accepted, never claimed: the gate that accepted it died in between (on a
            # cluster, another replica). Closed within the grace, never claimed late.
            record = await self._get(approval_id)
            if record is not None:
                await self._safe_record(record.binding, "invalidated", (CLAIM_ABANDONED,))
                await self._notify(
                    record.binding, outcome_verdict(record.binding, "deny", (CLAIM_ABANDONED,))
                )

    async def recover(self) -> None:
        """Start-up recovery: never resume work a crash interrupted, and lose no
        approval a restart did not interrupt.

        - ``pending`` survives: the binding, its digest and the held content are in
          the store, the announcement in its stream, and the runtime waits on a
          subject no restart changes; an approver answers it after the restart as
          before, and only its TTL ends it otherwise (the sweep run here expires
          those that ran out while the gate was down, and tells their runtimes).
        - ``approved`` (an allow-once accepted, its claim not made) is invalidated:
          the claim follows the approval in the same request, so an approved row at
          start means the gate died inside it; its approver was never told the action
          runs and its runtime may have stopped waiting. Claiming it now would run an
          action no one is waiting for, after an unknown delay; the requester asks
          again instead.
        - ``executing`` becomes ``execution_unknown``: the order may have run; it is
          never claimed or dispatched again.
        """
        invalidated, unknown = await self.store.recover(self.clock())
        ended: list[tuple[str, Status]] = [(a, "invalidated") for a in invalidated]
        ended += [(a, "execution_unknown") for a in unknown]
        for approval_id, status in ended:
            record = await self._get(approval_id)
            if record is not None:
                await self._safe_record(record.binding, status, ("gate_restarted",))
        await self._close_restored()
        await self.sweep()

    async def _close_restored(self) -> None:
        """On a state restored from a backup, invalidate every approval the gate the
        backup came from may have opened (:attr:`restored_until_ms`), and tell its
        runtime (``state_restored``).

        The backup may be older than the last moment its gate served: an approval
        pending in it may have been allowed and executed since, which the restored
        store cannot know. Left pending, the attorney's very allow-once (or a new one)
        would be accepted again and the action run twice; the requester asks again
        instead. Runs at every start; after the first, no such approval is open."""
        restored = self.restored_until_ms
        if restored is None:
            return
        for record in await self._open_records():
            if record.binding.created_at_ms > restored:
                continue
            if await self._invalidate(record.binding, (STATE_RESTORED,)):
                await self._notify(
                    record.binding, outcome_verdict(record.binding, "deny", (STATE_RESTORED,))
                )

    # -- show and status --------------------------------------------------------

    async def handle_show(self, data: bytes) -> bytes:
        """An entitled approver sees the binding and exactly what would be sent."""
        request, signers = open_request(
            data,
            self.registry,
            ShowRequest,
            names.PAYLOAD_SHOW_REQUEST,
            malformed="malformed_resolution",
            person="request",
            now_ms=self.clock(),
        )
        try:
            principal = self._approver(signers, request.resolver_id)
            record = await self._get(request.approval_id)
            if record is None:
                raise DeskError("approval_not_found")
            # The content is shown only to an approver who could resolve it here.
            check_entitled(principal, record.binding)
        except ApprovalRuleError as exc:
            raise StageRefusal(exc.reason_code) from exc
        except DeskError as exc:
            raise StageRefusal(exc.reason_code) from exc
        if record.held_payload is None:
            raise StageRefusal("approval_closed")
        # A captured show request must not reopen the content later.
        check_fresh(request.requested_at_ms, self.clock(), SHOW_FRESHNESS_MS, "stale_show_request")
        held = msgspec.json.decode(record.held_payload, type=HeldAction)
        view = ApprovalView(
            schema="smf.approval-view/1",
            binding=record.binding,
            binding_digest=record.digest,
            state=record.state,
            native_tool=held.native_tool,
            destination_address=held.destination_address,
            content=held.content,
            arguments_json=msgspec.json.encode(held.arguments).decode(),
            rules=rules_requiring_approval(held.decision, self.analysis()),
            reasons=tuple(
                ReasonShown(code=code, words=reason_words(code))
                for code in held.decision.reason_codes
            ),
        )
        return msgspec.json.encode(view)

    async def handle_track(self, data: bytes) -> bytes:
        """Where approvals stand, for the person who signed the request: a requester
        sees the state of their own requests, and only their own.

        The signer must be a person on the roster (an ``approver`` key) naming
        themselves, and the request must be fresh, like a show request. Of the ids
        asked about, the answer holds only those whose binding names the signer as
        the requesting actor within one of the signer's tenants (``requester``), or
        that the signer could resolve (``approver``); every other id is left out,
        as an id the gate never held is, so nobody learns of another's request.
        A store that cannot answer for an id leaves it out too (fail closed).
        """
        try:
            request, principal = self._person_request(
                data, TrackRequest, names.PAYLOAD_TRACK_REQUEST, "stale_track_request"
            )
        except DeskError as exc:
            raise StageRefusal(exc.reason_code) from exc
        shown = []
        for approval_id in dict.fromkeys(request.approval_ids):
            record = await self._get(approval_id)
            relation = None if record is None else track_relation(principal, record.binding)
            if record is not None and relation is not None:
                shown.append(tracked(record, relation))
        reply = TrackReply(schema="smf.approval-track-reply/1", approvals=tuple(shown))
        return msgspec.json.encode(reply)

    async def handle_rerequest(self, data: bytes) -> bytes:
        """Ask an expired approval again (a new proposal, a new binding; never a revival
        of the old one); always answers a ReRequestReply.

        Accepted only for a fresh request signed by a person on the roster naming
        themselves, about an approval whose binding names them as the requesting actor
        within one of their tenants (any other id is ``approval_not_found``, as an id
        never held) and which is ``expired``. The old approval is not touched: it stays
        expired, its binding and digest cannot be claimed (the store's transition table
        has no way out of ``expired``). The request is written to the evidence ledger
        against the old binding, then the gate-signed :class:`AskAgain` goes to the
        runtimes; the one holding that proposal proposes it anew, and the gate decides
        that new proposal from the start. No evidence, no key or no bus: nothing is sent.
        The answer says what came of it (``proposed_again``): the new proposal's verdict
        if this gate decided one in time, never "asked again" when nothing was proposed.
        """
        approval_id = ""
        try:
            request, principal = self._person_request(
                data, ReRequest, names.PAYLOAD_REREQUEST, "stale_rerequest"
            )
            approval_id = request.approval_id
            again = await self._rerequest(request, principal)
        except DeskError as exc:
            log.info("rerequest_refused", approval_id=approval_id, reason=exc.reason_code)
            return msgspec.json.encode(
                ReRequestReply(
                    schema="smf.approval-rerequest-reply/1",
                    approval_id=approval_id,
                    accepted=False,
                    reason_codes=(exc.reason_code,),
                )
            )
        log.info(
            "rerequest_sent",
            approval_id=approval_id,
            proposed_again=None if again is None else again.outcome,
        )
        return msgspec.json.encode(
            ReRequestReply(
                schema="smf.approval-rerequest-reply/1",
                approval_id=approval_id,
                accepted=True,
                proposed_again=None if again is None else again.outcome,
                new_approval_id=None if again is None else again.approval_id,
                waited_ms=self.rerequest_wait_ms,
            )
        )

    def _person_request(
        self, data: bytes, kind: type[PersonRequest], payload_type: str, stale: str
    ) -> tuple[PersonRequest, Principal]:
        """A signed request of a person on the roster, about their own standing:
        signed by an ``approver`` key naming itself (``viewer_id`` / ``requester_id``), and
        fresh, so a captured one cannot be replayed later (``stale``); raises DeskError."""
        try:
            request, signers = open_request(
                data,
                self.registry,
                kind,
                payload_type,
                malformed="malformed_request",
                person="request",
                now_ms=self.clock(),
            )
            named = request.viewer_id if isinstance(request, TrackRequest) else request.requester_id
            principal = self._approver(signers, named)
            check_fresh(request.requested_at_ms, self.clock(), SHOW_FRESHNESS_MS, stale)
        except StageRefusal as refusal:
            raise DeskError(refusal.reason_code) from refusal
        return request, principal

    async def _rerequest(self, request: ReRequest, principal: Principal) -> Verdict | None:
        """Tell the runtimes, then wait up to :attr:`rerequest_wait_ms` for the verdict of
        a new proposal of the same operation: that verdict, or None."""
        record = await self._get(request.approval_id)
        if record is None or track_relation(principal, record.binding) != "requester":
            raise DeskError("approval_not_found")
        if record.state != "expired":
            raise DeskError("approval_not_expired")
        if self.signer is None:
            raise DeskError("gate_key_missing")
        binding = record.binding
        try:
            # A request, not a transition: the approval ended once, as ``expired``.
            await self._record(binding, None, ("approval_rerequested",))
        except EvidenceError:
            raise DeskError("evidence_store_unavailable") from None
        notice = AskAgain(
            schema="smf.approval-ask-again/1",
            approval_id=binding.approval_id,
            decision_id=binding.decision_id,
            operation_hash=binding.operation_hash,
            asked_at_ms=self.clock(),
        )
        waiter = self.proposals_seen.expect(binding.operation_hash)
        try:
            try:
                await self.nc.publish(
                    names.approval_again_subject(binding.approval_id),
                    sign_ask_again(notice, self.signer),
                )
                await self.nc.flush(timeout=math.ceil(self.stage_timeout))
            except (NatsError, TimeoutError):
                raise DeskError("rerequest_publish_failed") from None
            try:
                return await asyncio.wait_for(waiter, self.rerequest_wait_ms / 1000)
            except TimeoutError:
                return None
        finally:
            self.proposals_seen.forget(binding.operation_hash, waiter)

    async def handle_status(self, data: bytes) -> bytes:
        approval_id = data.decode("utf-8", "replace").strip()
        record = await self._get(approval_id)
        return msgspec.json.encode(
            {"approval_id": approval_id, "state": record.state if record else "unknown"}
        )


def track_relation(principal: Principal, binding: ApprovalBinding) -> TrackRelation | None:
    """How ``principal`` may see this approval's standing, or None when they may not:
    its requester (the binding's actor, in one of their tenants) or an approver the
    gate would let resolve it."""
    if binding.actor_id == principal.name and binding.tenant_id in principal.entry.tenants:
        return "requester"
    try:
        check_entitled(principal, binding)
    except ApprovalRuleError:
        return None
    return "approver"


def tracked(record: ApprovalRecord, relation: TrackRelation) -> TrackedApproval:
    """An approval's standing as ``smf.approval.track`` answers it: identities, state,
    a denial's codes and the connector's receipt; never content, matter or recipient."""
    b = record.binding
    return TrackedApproval(
        approval_id=b.approval_id,
        state=record.state,
        relation=relation,
        tenant_id=b.tenant_id,
        created_at_ms=b.created_at_ms,
        expires_at_ms=b.expires_at_ms,
        outcome_codes=record.outcome_codes,
        receipt=record.receipt,
        order_id=record.order_id,
    )


def rules_requiring_approval(
    decision: Decision, analysis: AnalysisProjection | None
) -> tuple[RuleShown, ...]:
    """Each rule that requires the approval (a conditional policy that applied rests on
    it), in the words of the release that made the decision. Only that
    release's text is used: given another release's projection, or none, or a release
    that does not describe the rule, the rule is shown by id alone, never with another
    release's text or ours."""
    texts = {}
    if analysis is not None and (analysis.release_id, analysis.release_sequence) == (
        decision.release_id,
        decision.release_sequence,
    ):
        texts = rule_texts(analysis)
    requiring = {p.rule_id for p in decision.applied_policies if p.effect == "conditional"}
    shown = []
    for rule_id in (r for r in decision.rule_ids if r in requiring):
        text = texts.get(rule_id)
        if text is None:
            shown.append(RuleShown(rule_id=rule_id))
        else:
            shown.append(
                RuleShown(
                    rule_id=rule_id,
                    title=text.title,
                    statement=text.statement,
                    citation=text.citation,
                )
            )
    return tuple(shown)


def _accepted(approval_id: str, state: str) -> ResolutionReply:
    return ResolutionReply(
        schema="smf.resolution-reply/1", approval_id=approval_id, accepted=True, state=state
    )
