"""The gate: the orchestration behind ``smf.propose``.

ARCHITECTURE.md, "One proposal through the bus":

    verify signature -> freshness -> note the tool call -> admit ->
    a call its adapter refused itself ends here, a denial ->
    raise the facts by the call's recorded context ->
    normalize -> evaluate -> evidence ->
    deny  : reply Verdict(deny); nothing reaches smf.execute
    allow : claim once -> record the connector order (its outcome is
            followed) -> dispatch (one ExecuteOrder), or release a tool the
            runtime runs itself -> reply
            (on one machine the claim and its order are written in the
            evidence entry's own transaction)
    hold  : the hold stage persists the binding and announces it
    and   : the tool call's note is stored before the verdict is answered
            (on one machine in the evidence entry's transaction)
    then  : a decision is handed to the shadow release, if one runs,
            which judges it after the verdict and never holds it up

Fail closed everywhere: every refusal, timeout or exception between the
signature check and the reply becomes a ``deny`` with a reason code, and a
decision is never released before its evidence entry has committed (issue
7, "write-before-release"); a ledger outage is itself a denial
(``evidence_store_unavailable``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, TypeVar

import msgspec
import structlog
from nats.errors import Error as NatsError

from smf_assurance.core.approval_rules import HeldAction
from smf_assurance.core.decision import Decision
from smf_assurance.core.detectors import raise_facts
from smf_assurance.core.execution_rules import Executor
from smf_assurance.core.normalize import Normalized
from smf_assurance.pipeline.chain.approvals import ProposalsSeen
from smf_assurance.pipeline.chain.contracts import (
    DispatchReceipt,
    DispatchRequest,
    EvaluateRequest,
    order_request,
)
from smf_assurance.pipeline.chain.deployment import NO_NOTE, AllowClaim, CallNote, Deployment
from smf_assurance.pipeline.chain.dispatch import (
    CERTAIN_NOT_STORED,
    DEFAULT_ORDER_TTL_MS,
    DISPATCH_UNCONFIRMED,
    REQUESTER_DEADLINE_PASSED,
    OrderFence,
)
from smf_assurance.pipeline.chain.outcomes import OutcomeDesk
from smf_assurance.pipeline.chain.transport import StageClient
from smf_assurance.pipeline.desks.attestation import AttestationDesk
from smf_assurance.pipeline.desks.confinement import ConfinementDesk
from smf_assurance.pipeline.desks.signed import check_fresh, check_runtime_signer, open_request
from smf_assurance.pipeline.desks.tool_calls import DecidedCalls
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.pipeline.stores.call_context import CallContextInvalid, CallContextUnavailable
from smf_assurance.pipeline.stores.claims import (
    CLAIM_STORE_UNAVAILABLE as CLAIM_UNAVAILABLE,
)
from smf_assurance.pipeline.stores.claims import (
    DUPLICATE_PROPOSAL,
    ClaimAndOrder,
    ClaimState,
    ProposalClaims,
)
from smf_assurance.pipeline.stores.evidence import EvidenceWriter, unique, verdict
from smf_assurance.pipeline.stores.ledger import EvidenceError, Ledger
from smf_assurance.pipeline.stores.orders import OrderRecord
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.pipeline.stores.streams import DUPLICATE_WINDOW_SECONDS
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.call_context import CallContext, is_gateway_call_id
from smf_assurance.subjects.envelope import OperationEnvelope
from smf_assurance.subjects.keyed import PseudonymKey
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.messages import Proposal, Verdict, order_id_for
from smf_assurance.subjects.registry import KeyRegistry
from smf_assurance.subjects.verdicts import sign_verdict

log = structlog.get_logger(__name__)
T = TypeVar("T", bound=msgspec.Struct)

EVIDENCE_UNAVAILABLE: Final = "evidence_store_unavailable"
CONTEXT_RAISED: Final = "facts_raised_by_call_context"
CONTEXT_UNKNOWN: Final = "tool_call_context_unknown"
CONTEXT_UNAVAILABLE: Final = "tool_call_context_unavailable"
CONTEXT_INVALID: Final = "tool_call_context_invalid"
CONTEXT_MISMATCH: Final = "tool_call_context_mismatch"
ARGUMENTS_INVALID: Final = "tool_arguments_invalid"
"""The gateway recorded that the call's arguments certainly failed the schema its request
offered for the tool (``CallContext.arguments_invalid``)."""
TURN_INVALID: Final = "tool_call_turn_invalid"
"""The gateway recorded that another call of the call's turn had arguments that are not
JSON, in a turn its runtime refuses whole for that (``CallContext.turn_invalid``)."""
REFUSED_BY_ADAPTER: Final = "refused_by_adapter"
"""A call its adapter refused itself, reported so it is recorded and accounted."""
STAGE_MARGIN_MS: Final = 250
FENCE_WINDOW_MS: Final = int(DUPLICATE_WINDOW_SECONDS * 1000) - 10_000
"""How old an unconfirmed order may be for its void to still meet the stream's
duplicate window of the order's own publish (with ten seconds to spare)."""
RECORDED: Final = "recorded_verdict"
"""Reason on every answer to a proposal that reached the gate after its requester's
deadline: what the gate recorded for it, not a decision made now."""
NO_ORDER_RECORDED: Final = "no_order_recorded"
VERDICT_NOT_DELIVERED: Final = "verdict_not_delivered"
VERDICT_PENDING: Final = "verdict_pending"
ORDER_OUTCOME_UNKNOWN: Final = "order_outcome_unknown"
UNSETTLED: Final = frozenset({DISPATCH_UNCONFIRMED, VERDICT_PENDING, ORDER_OUTCOME_UNKNOWN})
"""Answers the gate never signs as a verdict: whether an order exists, or ran, is
not known (yet). The requester is told so in an error reply, never a deny."""


class CallContexts(Protocol):
    """Where the gate reads the context the model gateway recorded for a tool call
    (``smf_assurance.pipeline.stores.call_context.CallContextMirror``)."""

    async def get(self, runtime_id: str, tool_call_id: str) -> CallContext | None: ...


class ShadowObserver(Protocol):
    """Where a decision goes after its verdict
    (``smf_assurance.pipeline.followers.shadow.ShadowDesk``)."""

    def observe(
        self, envelope: OperationEnvelope, decision: Decision, tenant_id: str, confined: bool
    ) -> None: ...


class HoldHandler(Protocol):
    """What the gate needs from the approval hold stage."""

    async def hold(
        self, proposal: Proposal, normalized: Normalized, decision: Decision
    ) -> Verdict: ...

    async def held_for(self, proposal: Proposal) -> Verdict | None:
        """The ``held`` verdict of an approval still open for this proposal, if any."""
        ...

    async def withdraw(self, approval_id: str, reason: str) -> bool:
        """Close an open approval whose requester stopped waiting; True when closed."""
        ...


@dataclass(frozen=True, slots=True)
class GateSettings:
    tenant_key: PseudonymKey
    """Key for pseudonymous tenant identities in evidence (``smf_assurance.subjects.keyed``)."""
    freshness_ms: int = 120_000
    """A proposal issued further than this from the gate's clock is refused as stale."""
    stage_timeout: float = 2.0
    max_proposal_bytes: int = dsse.MAX_ENVELOPE_BYTES
    max_clock_skew_ms: int = 60_000
    """How far apart the clocks of two gates sharing one claim store may be."""
    order_ttl_ms: int = DEFAULT_ORDER_TTL_MS
    """The order budget: an order given at ``t`` is executable until ``t`` plus this,
    the deadline its allow promises (the dispatch stage holds the same budget)."""
    restored_at_ms: int | None = None
    """When the state was restored from a backup (``GateConfig.restored_at_ms`` says
    what follows from it): see :attr:`record_only_until_ms`."""

    def __post_init__(self) -> None:
        if self.freshness_ms <= 0 or self.max_clock_skew_ms < 0:
            raise ValueError("freshness_ms must be positive and max_clock_skew_ms not negative")
        if self.order_ttl_ms <= 0:
            raise ValueError("order_ttl_ms must be positive")

    @property
    def publish_window_ms(self) -> int:
        """How long after the dispatch link starts the stage may still try to store
        the order: inside the link's own stage deadline, so no publish outlives the
        call that waits for it (a publish the gate no longer waits for could store an
        order behind a reply already sent)."""
        stage_ms = int(self.stage_timeout * 1000)
        return stage_ms - min(STAGE_MARGIN_MS, stage_ms // 4)

    @property
    def record_only_until_ms(self) -> int | None:
        """On a restored state, the issue times the gate answers from its record only,
        never deciding again: up to the restore plus the freshness window and the clock
        skew. The gate the backup came from, until it stopped (before the restore),
        accepted proposals issued up to that far ahead of its own clock, so any of them
        may have been decided there after the backup began. None: not restored."""
        if self.restored_at_ms is None:
            return None
        return self.restored_at_ms + self.freshness_ms + self.max_clock_skew_ms

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


@dataclass(frozen=True, slots=True)
class Work:
    """One proposal on its way down the chain; each link returns a fuller copy.

    Immutable (STYLE.md, structlog: ``bind()`` returns a new carrier). A field a
    link needs but an earlier link did not fill is a programming error, which
    ``Gate.decide`` turns into a ``gate_internal_error`` denial.
    """

    proposal: Proposal
    """The verified proposal; from the ``raise call context`` link on, with its facts
    raised by the context the model gateway recorded for its tool call."""
    notes: tuple[str, ...] = ()
    normalized: Normalized | None = None
    decision: Decision | None = None
    tenant_ref: str = ""
    evidence: tuple[str, ...] = ()
    order_id: str | None = None
    order_at_ms: int | None = None
    """When the connector order was given (recorded): its deadline counts from here."""
    claim: ClaimAndOrder | None = None
    """An allow's claim (and its order), written when its decision was recorded."""
    note: CallNote = NO_NOTE
    """The note of the proposal's tool call, begun when the proposal was verified."""
    note_stored: bool = False
    """The tool call's note committed beside the evidence."""
    confined: bool = False
    """The runtime ran confined when the proposal was evaluated (``confinement``)."""
    instance_id: str | None = None
    """The runtime process an output close names (``OutputClose.instance_id``): admitted
    on that process's own attestation too (``AttestationDesk.admit``)."""

    @property
    def reasons(self) -> tuple[str, ...]:
        decision_reasons = self.decision.reason_codes if self.decision is not None else ()
        own = self.normalized.notes if self.normalized is not None else ()
        return (*decision_reasons, *own, *self.notes)

    def need_normalized(self) -> Normalized:
        if self.normalized is None:
            raise RuntimeError("link ran before normalize")
        return self.normalized

    def need_decision(self) -> Decision:
        if self.decision is None:
            raise RuntimeError("link ran before evaluate")
        return self.decision

    def need_claim(self) -> ClaimAndOrder:
        if self.claim is None:
            raise RuntimeError("link ran before an allow's record")
        return self.claim


Link = Callable[[Work], Awaitable["Work | Verdict"]]
"""One step of the chain: the work to pass on, or the Verdict that ends it."""


@dataclass
class Gate:
    settings: GateSettings
    registry: KeyRegistry
    normalize: StageClient[Proposal, Normalized]
    evaluate: StageClient[EvaluateRequest, Decision]
    dispatch: StageClient[DispatchRequest, DispatchReceipt]
    ledger: Ledger
    claims: ProposalClaims
    clock: Callable[[], int]
    signer: SigningKey
    """The gate key: signs every verdict this gate answers with."""
    outcomes: OutcomeDesk
    """Follows every direct-allow order to its outcome in the ledger."""
    deployment: Deployment
    """Where the claims, the order book and the tool-call notes live, and so how the
    chain writes them (``smf_assurance.pipeline.chain.deployment``): on one machine in
    the transaction of the decision's evidence entry, on a cluster in replicated
    stores beside the chain, each noted tool-call id told to the other replicas."""
    decided_calls: DecidedCalls = field(default_factory=DecidedCalls)
    """Tool-call accounting: the tool-call ids of every verified proposal, kept
    across a restart in :attr:`Deployment.calls`."""
    hold: HoldHandler | None = None
    attestation: AttestationDesk | None = None
    """Admission by runtime attestation; ``None`` admits every runtime."""
    confinement: ConfinementDesk | None = None
    """Which runtimes run confined, as their launchers attest; ``None``: none does, so
    a release's confinement policies apply to every runtime (fail closed)."""
    call_contexts: CallContexts | None = None
    """Session taint outside the runtime: the contexts the model
    gateway recorded for the tool-call ids it issued. ``None``: none can be read, so
    a proposal carrying such an id is denied (``tool_call_context_unavailable``)."""
    shadow: ShadowObserver | None = None
    """The shadow release's desk: each decision, after its verdict is
    settled; ``None`` when the gate runs no shadow. It never changes a verdict."""
    fence: OrderFence | None = None
    """Settles an unconfirmed order (stored, or voided so it never runs):
    :meth:`resolve_unconfirmed`. ``None``: unconfirmed orders wait for their report
    or the outcome sweep."""
    proposals_seen: ProposalsSeen = field(default_factory=ProposalsSeen)
    """Told each verdict the chain decides, after it is settled: the approval desk's own,
    so a re-request learns whether the action was proposed again."""
    _unconfirmed: set[str] = field(init=False, default_factory=set, repr=False)
    """Orders given here whose publish was not confirmed, for the next sweep."""
    _settling: set[asyncio.Future[None]] = field(init=False, default_factory=set, repr=False)
    _deciding: dict[str, list[asyncio.Future[Verdict]]] = field(
        init=False, default_factory=dict, repr=False
    )
    """The proposals this process is deciding now, each with the answers
    :meth:`recorded` waits for (made only when one waits: a decision nobody asks
    about makes no future)."""
    _all_keys: dict[str, VerifyKey] = field(init=False)
    _evidence: EvidenceWriter = field(init=False, repr=False)
    chain: tuple[Link, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.adopt_registry(self.registry)
        self._evidence = EvidenceWriter(self.ledger, self.settings.tenant_key, self._now)
        # ARCHITECTURE.md, "One proposal through the bus", in order. A link that
        # returns a Verdict ends the proposal's way; nothing after it runs.
        self.chain = (
            self._note_tool_call,
            self._admit,
            self._refused_locally,
            self._raise_call_context,
            self._normalize,
            self._evaluate,
            self._record,
            self._refuse_denied,
            self._hold_conditional,
            self._claim_once,
            self._open_order,
            self._dispatch,
        )

    def _now(self) -> int:
        return self.clock()

    def adopt_registry(self, registry: KeyRegistry) -> None:
        """A new release's registry replaces the running one, between two messages."""
        self.registry = registry
        self._all_keys = {k: p.verify_key for k, p in registry.principals.items()}

    # -- the edge -----------------------------------------------------------

    def verify_runtime_message(
        self, data: bytes, type_: type[T], payload_type: str, *, gateway_may_sign: bool = False
    ) -> T:
        """Decode once, verify against the registry, check the signer is that runtime.

        Used for proposals and for the signed close of an output stream; the
        message's ``runtime_id`` must be the signer's registered runtime and
        its ``issued_at_ms`` within the freshness window of the gate's clock.
        ``gateway_may_sign`` (output closes only): a registered model gateway
        may sign for any runtime, as it streams the model output of
        the runtimes it authenticated; the decision still admits the close only
        under that runtime's attestation (``Gate._admit``).
        """
        message, signers = open_request(
            data,
            self.registry,
            type_,
            payload_type,
            malformed="malformed_proposal",
            too_large="proposal_too_large",
            max_size=self.settings.max_proposal_bytes,
            trusted=self._all_keys,
        )
        if not (gateway_may_sign and any(p.entry.role == "gateway" for p in signers)):
            check_runtime_signer(signers, getattr(message, "runtime_id", None))
        issued_at = getattr(message, "issued_at_ms", None)
        if not isinstance(issued_at, int):
            raise StageRefusal("stale_proposal")
        check_fresh(issued_at, self.clock(), self.settings.freshness_ms, "stale_proposal")
        return message

    async def prune_claims(self) -> int:
        """Forget the claims older than :attr:`GateSettings.claim_retention_ms`, and
        the direct orders settled before it, so both stay bounded; returns how
        many. A failure raises and forgets nothing, which only keeps replays
        refused longer. An order still waiting for its outcome is never pruned.
        The stored tool-call notes are kept within the bounds of
        :attr:`decided_calls` too (the oldest forgotten first)."""
        before = self.clock() - self.settings.claim_retention_ms
        pruned = await self.claims.prune(before) + await self.outcomes.prune(before)
        calls = self.decided_calls
        return pruned + await self.deployment.calls.prune_notes(
            calls.per_runtime, calls.max_runtimes
        )

    def verify_proposal(self, data: bytes) -> Proposal:
        return self.verify_runtime_message(data, Proposal, names.PAYLOAD_PROPOSAL)

    async def handle_propose(self, data: bytes) -> bytes:
        """The ``smf.propose`` handler: a Verdict for a verified proposal.

        Input that is not a verified proposal is refused (error reply, nothing
        changes). Everything after verification yields a Verdict, signed with the
        gate key (``smf_assurance.subjects.verdicts``): a runtime acts only on a verdict it can
        verify, so no other client answering ``smf.propose`` can release a call.

        A proposal that arrives after its requester's deadline (``reply_by_ms``) is
        not decided: it asks for its recorded verdict (:meth:`recorded`). An answer
        the gate cannot stand behind as allow or deny (:data:`UNSETTLED`: an order
        that may exist, whose outcome is not known yet) is an error reply with that
        reason code, never a signed deny.
        """
        proposal = self.verify_proposal(data)
        if proposal.reply_by_ms is not None and self.clock() > proposal.reply_by_ms:
            answer = await self.recorded(proposal)
        else:
            answer = await self.decide(proposal)
        unsettled = UNSETTLED.intersection(answer.reason_codes)
        if unsettled:
            # Not a deny: an order may exist. The requester learns it later (recorded).
            raise StageRefusal(min(unsettled))
        return sign_verdict(answer, self.signer)

    async def decide(
        self, proposal: Proposal, notes: tuple[str, ...] = (), instance_id: str | None = None
    ) -> Verdict:
        """Run the chain for a verified proposal; never raises (an internal error,
        of any link, is a denial; it is logged by type, never with its values).
        The proposal's tool-call note is stored before the verdict is returned.
        ``instance_id``: the process an output close names (``Work.instance_id``)."""
        record_only = self.settings.record_only_until_ms
        if record_only is not None and proposal.issued_at_ms <= record_only:
            # The gate the backup came from may have decided it after the backup began,
            # and this one holds no record of that: answered from the record, so it
            # never gets a second order.
            return await self.recorded(proposal)
        proposal_id = proposal.proposal_id
        waiting: list[asyncio.Future[Verdict]] = []
        first = self._deciding.setdefault(proposal_id, waiting) is waiting
        try:
            answer = await self._decide(proposal, notes, instance_id)
        except BaseException:
            for waiter in waiting:
                waiter.cancel()
            raise
        finally:
            if first:
                del self._deciding[proposal_id]
        for waiter in waiting:
            if not waiter.done():  # its asker was cancelled meanwhile
                waiter.set_result(answer)
        return answer

    async def _decide(
        self, proposal: Proposal, notes: tuple[str, ...], instance_id: str | None
    ) -> Verdict:
        call_id = proposal.tool_call_id
        note = NO_NOTE if call_id is None else self.deployment.note(proposal.runtime_id, call_id)
        work, answer = await self._run(Work(proposal, notes, note=note, instance_id=instance_id))
        if answer.outcome == "deny" and not answer.evidence:
            answer = await self._recorded(work, answer)
        await self._store_note(work)
        self._to_shadow(work)
        self.proposals_seen.seen(answer)
        return answer

    async def recorded(self, proposal: Proposal) -> Verdict:
        """What the gate recorded for a proposal whose requester's deadline has passed
        (a gate timeout never leaves an order behind that the requester cannot
        learn of). Nothing is decided, written or published; each
        answer carries ``recorded_verdict``. A runtime the attestation desk would not
        admit now is refused as it would be on a decision (its reason, no record read).


        - the proposal is being decided in this process: that decision's answer
          (with ``recorded_verdict`` too, like every answer here);
        - never claimed: ``held`` with the approval if one is still open for it,
          otherwise ``deny`` (``no_order_recorded``). An allow's claim is committed
          before its order is published and no publish starts after the requester's
          deadline, so a proposal with no claim by then has no order and gets none;
        - claimed for a tool its runtime runs itself: ``deny``
          (``verdict_not_delivered``): the runtime never had the allow, so nothing ran,
          and it must not run now;
        - the dispatch was refused before anything was stored: ``deny``
          (``dispatch_failed``);
        - the order is stored (the claim says ``published``) or its connector reported
          on it: ``allow``, its order id and deadline, and ``order_<state>`` saying
          where it stands (``order_executing``, ``order_consumed``, ``order_failed``:
          a connector that refused it late reports ``order_expired``, which the
          ledger keeps);
        - otherwise (an unconfirmed dispatch, or a gate that stopped between its
          commit and its PubAck): :data:`VERDICT_PENDING` until a report or the
          order's resolution settles it, :data:`ORDER_OUTCOME_UNKNOWN` once the
          order ended ``execution_unknown``. Neither is signed as a verdict.

        A store that cannot answer is :data:`VERDICT_PENDING` too (ask again).
        """
        proposal_id = proposal.proposal_id
        if self.attestation is not None:
            # A runtime that may not propose now may not read its records either.
            refusal = self.attestation.admit(proposal)
            if refusal is not None:
                return self._recorded_answer(proposal_id, "deny", (refusal,))
        deciding = self._deciding.get(proposal_id)
        if deciding is not None:
            pending: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
            deciding.append(pending)
            try:
                answer = await pending
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                # that decision was cancelled (its gate is stopping): nothing known yet
                return self._recorded_answer(proposal_id, "deny", (VERDICT_PENDING,))
            return msgspec.structs.replace(
                answer, reason_codes=unique((RECORDED, *answer.reason_codes))
            )
        try:
            claim = await self.claims.get(proposal_id)
            if claim is None:
                held = None if self.hold is None else await self.hold.held_for(proposal)
                if held is not None:
                    return msgspec.structs.replace(
                        held, reason_codes=unique((RECORDED, *held.reason_codes))
                    )
                return self._recorded_answer(proposal_id, "deny", (NO_ORDER_RECORDED,))
            order_id = order_id_for(claim)
            order = await self.outcomes.orders.get(order_id)
        except StoreUnavailable:
            log.error("recorded_verdict_unavailable", proposal_id=proposal_id)
            return self._recorded_answer(proposal_id, "deny", (VERDICT_PENDING,))
        ids = {"decision_id": claim.decision_id, "operation_hash": claim.operation_hash}
        if claim.state == "failed":
            return self._recorded_answer(proposal_id, "deny", ("dispatch_failed",), **ids)
        if order is None or order.executor_role != "connector":
            return self._recorded_answer(proposal_id, "deny", (VERDICT_NOT_DELIVERED,), **ids)
        if order.state == "execution_unknown":
            return self._recorded_answer(proposal_id, "deny", (ORDER_OUTCOME_UNKNOWN,), **ids)
        if claim.state != "published" and order.state == "executing":
            return self._recorded_answer(proposal_id, "deny", (VERDICT_PENDING,), **ids)
        return msgspec.structs.replace(
            self._recorded_answer(proposal_id, "allow", (f"order_{order.state}",), **ids),
            release_id=order.release_id,
            order_id=order.order_id,
            connector_id=order.executor_id,
            expires_at_ms=order.dispatched_at + self.settings.order_ttl_ms,
        )

    @staticmethod
    def _recorded_answer(
        proposal_id: str,
        outcome: Literal["allow", "deny"],
        reasons: tuple[str, ...],
        decision_id: str | None = None,
        operation_hash: str | None = None,
    ) -> Verdict:
        return Verdict(
            schema="smf.verdict/1",
            proposal_id=proposal_id,
            outcome=outcome,
            reason_codes=(RECORDED, *reasons),
            decision_id=decision_id,
            operation_hash=operation_hash,
        )

    def _to_shadow(self, work: Work) -> None:
        """The decision, once its verdict is settled, to the shadow release (if
        one runs), for the same normalized envelope. Synchronous and bounded: the
        verdict is returned right after, and nothing the shadow does reaches it."""
        shadow, normalized, decision = self.shadow, work.normalized, work.decision
        if shadow is None or normalized is None or decision is None:
            return
        try:
            shadow.observe(
                normalized.envelope, decision, work.proposal.actor.tenant_id, work.confined
            )
        except Exception as exc:  # noqa: BLE001 - a shadow's failure never reaches a verdict
            log.error("shadow_observe_failed", error=type(exc).__name__)

    async def _recorded(self, work: Work, denial: Verdict) -> Verdict:
        """A verified proposal refused before its decision's evidence was written (at
        admission, by its call context, at normalization, a stage timeout, an internal
        error, or a ledger that failed) is still evidence (ARCHITECTURE.md,
        "Evidence"): one refusal entry with its ids and reasons, never anything raw,
        so an auditor sees every attempt the gate turned away, not only the ones a
        policy decided. A ledger that cannot take it adds
        ``evidence_store_unavailable``; the answer is a denial either way.

        Every denial a runtime shows can be explained: the verdict names the
        refusal entry's decision id (the field every verdict carries), so
        ``explain`` finds what the ledger kept of it."""
        proposal = work.proposal
        subject = {
            "proposal": proposal.proposal_id,
            "runtime_id": proposal.runtime_id,
            "tool_call_id": proposal.tool_call_id or "",
        }
        entry = self._evidence.for_refusal(
            subject,
            self._evidence.tenant_ref(proposal.actor.tenant_id),
            None,
            denial.reason_codes,
        )
        reasons, recorded = await self._evidence.record_refusal(entry)
        added = tuple(r for r in reasons if r not in denial.reason_codes)
        named = denial.decision_id
        if named is None and recorded:
            named = entry.decision_id  # every recorded denial names an id to explain
        return msgspec.structs.replace(
            denial,
            reason_codes=(*denial.reason_codes, *added),
            evidence=recorded,
            decision_id=named,
        )

    async def _run(self, work: Work) -> tuple[Work, Verdict]:
        """The chain; the verdict, and the work as the link that answered received it."""
        try:
            for link in self.chain:
                step = await link(work)
                if isinstance(step, Verdict):
                    return work, step
                work = step
        except StageRefusal as refusal:
            return work, self._deny(work, (refusal.reason_code,))
        except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
            log.error(
                "gate_internal_error",
                proposal_id=work.proposal.proposal_id,
                error=type(exc).__name__,
            )
            return work, self._deny(work, ("gate_internal_error",))
        raise AssertionError("the chain ends with dispatch, which always answers")

    # -- the chain, one link each ----------------------------------------------

    async def _note_tool_call(self, work: Work) -> Work | Verdict:
        """Tool-call accounting first: a verified proposal's tool call was
        decided, whatever the outcome, so its result is not an ungated one."""
        call_id = work.proposal.tool_call_id
        if call_id is not None:
            self.decided_calls.add(work.proposal.runtime_id, call_id)
            await self.deployment.share_call(work.proposal.runtime_id, call_id)
        return work

    async def _admit(self, work: Work) -> Work | Verdict:
        """Runtime attestation first: no attestation, no decision."""
        if self.attestation is not None:
            refusal = self.attestation.admit(work.proposal, work.instance_id)
            if refusal is not None:
                return self._deny(work, (refusal,))
        return work

    async def _refused_locally(self, work: Work) -> Work | Verdict:
        """A call its adapter already refused (``Proposal.refused_locally``) is reported,
        not proposed: a denial with the adapter's reason, recorded like any refusal
        (:meth:`decide`, ids only), its tool call noted as decided above. Fail closed:
        nothing after this link runs for it, so no policy can turn it into an allow."""
        reason = work.proposal.refused_locally
        if reason is None:
            return work
        return self._deny(work, (REFUSED_BY_ADAPTER, reason))

    async def _raise_call_context(self, work: Work) -> Work | Verdict:
        """Session taint outside the runtime: a proposal for a tool
        call the model gateway issued is decided under the context the gateway
        recorded for it, not only under what its adapter declares.

        - Only an id of the gateway's form (``smfc`` + 24 hex) has a record; any
          other id, or none, leaves the proposal as declared.
        - Raise only, never lower (``smf_assurance.core.detectors.raise_facts``, the
          output buffer's way): the proposal that goes on is the signed one with
          its classification and taint raised to the record's, and the notes say
          so (``facts_raised_by_call_context`` and what raised it). Everything
          after this link (envelope, operation hash, decision, evidence, an
          approval's binding, the verdict's operation hash) is of that proposal,
          so an approval binds to exactly what was decided. A proposal the record
          does not raise goes on unchanged: its operation hash is the one its
          adapter computed.
        - Fail closed: no record (``tool_call_context_unknown``: an id the
          gateway never issued, or whose record expired), a bucket that does not
          answer (``tool_call_context_unavailable``), a record no gateway key
          signed for that very call (``tool_call_context_invalid``) or one of a
          call to another tool (``tool_call_context_mismatch``: the id of a call
          made in a clean context, lent to a call made later in a tainted one)
          is a denial, recorded in the ledger with ids only.
        - A record that says the call's arguments certainly failed the schema its
          request offered (``tool_arguments_invalid``) is a denial too: a runtime that
          checks arguments refuses such a call before any hook, and its result is
          recorded as a refusal, so the id is never allowed, before or after that.
        - So is a record that says the call was issued in a turn its runtime refuses
          whole because another call's arguments are not JSON
          (``tool_call_turn_invalid``): Hermes runs no call of such a turn.
        """
        proposal = work.proposal
        call_id = proposal.tool_call_id
        if not is_gateway_call_id(call_id):
            return work
        try:
            if self.call_contexts is None:
                raise CallContextUnavailable("no call-context reader")
            record = await self.call_contexts.get(proposal.runtime_id, call_id)
        except CallContextUnavailable:
            return await self._refuse_context(work, CONTEXT_UNAVAILABLE)
        except CallContextInvalid:
            return await self._refuse_context(work, CONTEXT_INVALID)
        if record is None:
            return await self._refuse_context(work, CONTEXT_UNKNOWN)
        if record.tool_name != proposal.native_tool:
            # a clean call's id lent to another tool's call (made in another context)
            return await self._refuse_context(work, CONTEXT_MISMATCH)
        if record.arguments_invalid:
            return await self._refuse_context(work, ARGUMENTS_INVALID)
        if record.turn_invalid:
            return await self._refuse_context(work, TURN_INVALID)
        facts = raise_facts(proposal.facts, record.classification, record.injection_taint)
        if facts == proposal.facts:
            return work
        return dataclasses.replace(
            work,
            proposal=msgspec.structs.replace(proposal, facts=facts),
            notes=tuple(dict.fromkeys((*work.notes, CONTEXT_RAISED, *record.found))),
        )

    async def _refuse_context(self, work: Work, reason: str) -> Verdict:
        """A denial before any policy ran (recorded by :meth:`decide`, ids only)."""
        log.warning("call_context_refused", proposal_id=work.proposal.proposal_id, reason=reason)
        return self._deny(work, (reason,))

    async def _normalize(self, work: Work) -> Work | Verdict:
        normalized = await self.normalize.call(work.proposal, self.settings.stage_timeout)
        return dataclasses.replace(work, normalized=normalized)

    async def _evaluate(self, work: Work) -> Work | Verdict:
        """Evaluate under the release in force, telling it whether the runtime runs
        confined now: a release's confinement policies deny an opaque operation of a
        runtime that does not (``runtime_not_confined``, recorded like any denial)."""
        normalized = work.need_normalized()
        confined = self.confinement is not None and self.confinement.confined(
            work.proposal.runtime_id
        )
        request = EvaluateRequest(
            envelope=normalized.envelope,
            operation_hash=normalized.operation_hash,
            operation_id=work.proposal.proposal_id,
            runtime_confined=confined,
        )
        decision = await self.evaluate.call(request, self.settings.stage_timeout)
        return dataclasses.replace(work, decision=decision, confined=confined)

    async def _record(self, work: Work) -> Work | Verdict:
        """Write-before-release: the decision's evidence commits first;
        a ledger outage is a denial.

        An allow's claim, and its order for a connector, are written with it: where is
        the deployment's to say (``smf_assurance.pipeline.chain.deployment``). On one
        machine they and the note of the proposal's tool call ride in the entry's
        transaction (one durable commit per decision); on a cluster they follow the
        commit. A claim store that cannot take the claim is a denial."""
        decision = work.need_decision()
        tenant_ref = self._evidence.tenant_ref(work.proposal.actor.tenant_id)
        entry = self._evidence.for_decision(decision, tenant_ref, reasons=work.reasons)
        claim = (
            self._allow_claim(work, decision, tenant_ref)
            if decision.disposition == "allow"
            else None
        )
        try:
            recording = await self.deployment.record(
                self._evidence, entry, work.note.beside(), claim
            )
        except EvidenceError:
            log.error("evidence_unavailable", proposal_id=work.proposal.proposal_id)
            return self._deny(work, (EVIDENCE_UNAVAILABLE,))
        # One copy of the work for all this link learnt: each copy is a measurable part
        # of an allow's CPU (docs/PERFORMANCE.md, where the co-located allow's time went).
        written = recording.claim
        work = dataclasses.replace(
            work,
            tenant_ref=tenant_ref,
            evidence=(recording.receipt.entry_hash,),
            note_stored=recording.noted,
            order_at_ms=recording.order_at_ms,
            claim=written if isinstance(written, ClaimAndOrder) else None,
        )
        if isinstance(written, StoreUnavailable):
            return self._deny(work, (CLAIM_UNAVAILABLE,))
        return work

    def _allow_claim(self, work: Work, decision: Decision, tenant_ref: str) -> AllowClaim:
        """The claim of this proposal and, for a connector, the order it gives now."""
        at_ms = self.clock()
        connector = work.need_normalized().connector_id
        order = (
            None
            if connector is None
            else self.outcomes.order_for(
                work.proposal.proposal_id,
                decision,
                Executor("connector", connector),
                tenant_ref,
                at_ms,
            )
        )
        return AllowClaim(
            work.proposal.proposal_id, decision.operation_hash, decision.decision_id, at_ms, order
        )

    async def _refuse_denied(self, work: Work) -> Work | Verdict:
        if work.need_decision().disposition == "deny":
            return self._deny(work, work.reasons)
        return work

    async def _hold_conditional(self, work: Work) -> Work | Verdict:
        decision = work.need_decision()
        if decision.disposition != "conditional":
            return work
        if self.hold is None:
            return self._deny(work, ("approval_hold_unavailable",))
        reply_by = work.proposal.reply_by_ms
        if reply_by is not None and self.clock() >= reply_by:
            # The requester stopped waiting: an approval it never hears of could
            # still be approved and run behind its timeout.
            return self._deny(work, (REQUESTER_DEADLINE_PASSED,))
        held = await self.hold.hold(work.proposal, work.need_normalized(), decision)
        if (
            held.outcome == "held"
            and held.approval_id is not None
            and reply_by is not None
            and self.clock() > reply_by
        ):
            # Held too late to be answered: withdrawn, so it can never be approved.
            await self.hold.withdraw(held.approval_id, REQUESTER_DEADLINE_PASSED)
            return self._deny(work, (REQUESTER_DEADLINE_PASSED,))
        return msgspec.structs.replace(
            held, reason_codes=tuple(dict.fromkeys((*held.reason_codes, *work.reasons)))
        )

    async def _claim_once(self, work: Work) -> Work | Verdict:
        """Claim the proposal once: a replay never produces a second order. The claim
        was taken when the decision was recorded (:meth:`_record`)."""
        if work.need_claim().claimed:
            return work
        return self._deny(work, (DUPLICATE_PROPOSAL,))

    async def _open_order(self, work: Work) -> Work | Verdict:
        """The connector order, recorded with the claim before it is published, with the
        connector that must sign its report. Not recorded, not published: the claim is
        spent, so this is a denial, never a second try.

        A tool the runtime runs itself gets no record: a Hermes runtime does
        not report its executions, so such a record could only ever end
        ``execution_unknown``. (A released output is an order to the
        ``deliver.<channel>`` connector and is recorded like any other.) (An approved
        runtime-executed action is followed by the approval desk.)
        """
        if work.need_normalized().connector_id is None:
            return work
        proposal, decision = work.proposal, work.need_decision()
        if not work.need_claim().order_recorded:
            await self._settle(proposal.proposal_id, "failed")
            await self._record_failure(decision, work.tenant_ref, "order_record_failed")
            return self._deny(work, ("order_record_failed",))
        order_id = order_id_for(decision)
        return dataclasses.replace(work, order_id=order_id)

    async def _dispatch(self, work: Work) -> Work | Verdict:
        """Exactly one ExecuteOrder, stored in JetStream, before the allow; a tool
        the runtime runs itself is released to it with no connector order.

        One deadline: the order is executable until it was given
        (:attr:`Work.order_at_ms`, the one clock read its record holds) plus the order
        budget; the allow names that deadline (``expires_at_ms``) and is answered only
        after the PubAck. The publish is tried only until the requester's deadline
        (``reply_by_ms``) and inside this link's stage deadline, so no order is stored
        after the requester stopped waiting, nor behind a reply already sent.

        A refusal after which no order is stored (:data:`CERTAIN_NOT_STORED`) is a
        deny. Any other (no PubAck in time: the order may be stored) leaves the claim
        ``claimed`` and the order ``executing`` in the book: its report settles it, or
        the outcome sweep ends it; the answer is ``dispatch_unconfirmed``, never a deny.
        """
        proposal, normalized, decision = work.proposal, work.need_normalized(), work.need_decision()
        connector = normalized.connector_id
        if connector is None:
            self._settle_soon(proposal.proposal_id, "published")
            return self._answer(work, "allow", work.reasons)
        now = self.clock()
        until = now + self.settings.publish_window_ms
        if proposal.reply_by_ms is not None:
            until = min(until, proposal.reply_by_ms)
        given = now if work.order_at_ms is None else work.order_at_ms
        request = order_request(
            HeldAction.of(proposal, normalized, decision),
            connector,
            not_after_ms=given + self.settings.order_ttl_ms,
            publish_until_ms=until,
        )
        try:
            receipt = await self.dispatch.call(request, self.settings.stage_timeout)
        except StageRefusal as refusal:
            if refusal.reason_code not in CERTAIN_NOT_STORED:
                if work.order_id is not None:
                    self._unconfirmed.add(work.order_id)
                log.error(
                    "dispatch_unconfirmed",
                    proposal_id=proposal.proposal_id,
                    order_id=work.order_id,
                    reason=refusal.reason_code,
                )
                return self._deny(work, (DISPATCH_UNCONFIRMED, refusal.reason_code))
            await self._settle(proposal.proposal_id, "failed")
            if work.order_id is not None:
                await self.outcomes.close_undelivered(work.order_id)
            await self._record_failure(decision, work.tenant_ref, refusal.reason_code)
            return self._deny(work, ("dispatch_failed", refusal.reason_code))
        self._settle_soon(proposal.proposal_id, "published")
        return msgspec.structs.replace(
            self._answer(work, "allow", work.reasons),
            order_id=receipt.order_id,
            connector_id=connector,
            expires_at_ms=receipt.not_after_ms,
        )

    # -- unconfirmed orders ------------------------------------------------------

    async def resolve_unconfirmed(self, orders: list[OrderRecord] | None = None) -> int:
        """Settle connector orders whose publish nobody confirmed: a dispatch that got
        no PubAck in time (``dispatch_unconfirmed``), or a gate that stopped between
        the commit of its claim and order and the PubAck. Returns how many it settled.

        ``orders``: the order book's open orders (at start), or None for the ones this
        process saw unconfirmed. An order is judged only when its claim is still
        ``claimed`` and it was given longer ago than any dispatch may still be trying
        (:attr:`GateSettings.publish_window_ms`; a younger one waits for the next
        sweep) and recently enough that its void falls inside the stream's duplicate
        window (:data:`FENCE_WINDOW_MS`; an older one waits for its report or the
        outcome sweep). Then :class:`OrderFence` says: stored (the claim becomes
        ``published``; its connector reports on it) or not (now voided, so it never
        runs: the order ends ``failed`` with ``dispatch_not_stored``, and the claim
        ``failed``). A requester asking for its recorded verdict is answered from that.
        """
        fence = self.fence
        if fence is None:
            return 0
        if orders is None:
            orders = []
            for order_id in sorted(self._unconfirmed):
                found = await self.outcomes.orders.get(order_id)
                if found is None or found.state != "executing":
                    self._unconfirmed.discard(order_id)
                else:
                    orders.append(found)
        now = self.clock()
        settled = 0
        for order in orders:
            if order.executor_role != "connector" or order.dispatched_at < now - FENCE_WINDOW_MS:
                self._unconfirmed.discard(order.order_id)
                continue
            if order.dispatched_at > now - self.settings.publish_window_ms - STAGE_MARGIN_MS:
                self._unconfirmed.add(order.order_id)  # a dispatch may still be trying
                continue
            try:
                claim = await self.claims.get(order.proposal_id)
            except StoreUnavailable:
                self._unconfirmed.add(order.order_id)
                continue
            if claim is None or claim.state != "claimed":
                self._unconfirmed.discard(order.order_id)
                continue
            try:
                stored = await fence(order.executor_id, order.order_id)
            except (NatsError, TimeoutError) as exc:
                log.warning("order_fence_failed", order_id=order.order_id, error=type(exc).__name__)
                self._unconfirmed.add(order.order_id)
                continue
            self._unconfirmed.discard(order.order_id)
            if stored:
                await self._settle(order.proposal_id, "published")
            else:
                await self._settle(order.proposal_id, "failed")
                await self.outcomes.close_unstored(order.order_id)
            log.info("unconfirmed_order_settled", order_id=order.order_id, stored=stored)
            settled += 1
        return settled

    # -- the tool call's note ---------------------------------

    async def _store_note(self, work: Work) -> None:
        """The note is durable before the verdict is answered, so a tool result that
        comes back after a restart is still covered. A note that cannot be stored
        changes no verdict: its id is then covered until a restart only, after which
        its result is reported uncovered (fails closed)."""
        if work.note_stored:
            return
        try:
            await work.note.stored()
        except (StoreUnavailable, EvidenceError) as exc:
            log.error(
                "tool_call_note_not_stored",
                runtime_id=work.proposal.runtime_id,
                error=type(exc).__name__,
            )

    # -- helpers ----------------------------------------------------------------

    async def _settle(self, proposal_id: str, state: ClaimState) -> None:
        """Record how a claim ended, best effort: the claim itself already stops any
        replay, and the order (if any) is already in the stream. A store outage here
        must not turn an order that exists into a reply that says "deny"."""
        try:
            await self.deployment.settle(proposal_id, state)
        except (StoreUnavailable, EvidenceError):
            log.error("claim_settle_failed", proposal_id=proposal_id, state=state)

    def _settle_soon(self, proposal_id: str, state: ClaimState) -> None:
        """The ``published`` settle of an allow is written after the answer,
        not before it. It is a record of how the claim ended, never a control: the
        claim already stops every replay and the order is already in the stream
        (a crash before it lands leaves the claim ``claimed``, as a crash after the
        publish always could). :meth:`settled` waits for these writes."""
        task = asyncio.ensure_future(self._settle(proposal_id, state))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def settled(self) -> None:
        """Wait for the settles :meth:`_settle_soon` started (before the stores close)."""
        while self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)

    async def _record_failure(self, decision: Decision, tenant_ref: str, reason: str) -> None:
        try:
            await self._evidence.append(
                self._evidence.for_decision(
                    decision, tenant_ref, "transition", status="failed", reasons=(reason,)
                )
            )
        except EvidenceError:
            log.error("evidence_unavailable_for_failure", decision_id=decision.decision_id)

    def _answer(
        self, work: Work, outcome: Literal["allow", "deny"], reasons: tuple[str, ...]
    ) -> Verdict:
        return verdict(work.proposal.proposal_id, outcome, reasons, work.decision, work.evidence)

    def _deny(self, work: Work, reasons: tuple[str, ...]) -> Verdict:
        return self._answer(work, "deny", reasons)
