"""The outcome desk: every direct-allow order followed to its outcome in the ledger.

ARCHITECTURE.md, "One proposal through the bus": the connector "reports on
smf.result.<connector>: confirmed -> consumed | failed -> failed |
ambiguous/no report -> execution_unknown". Approved orders are followed by the
approval desk; a direct allow's report must not be verified and then dropped
either. Here, for every order given without an approval:

- open: the gate's chain records each connector order in the order book
  (:mod:`smf_assurance.pipeline.stores.orders`) BEFORE it is published, with the executor
  that must sign its report. If it cannot be recorded nothing is published
  (the gate denies ``order_record_failed``; the claim is spent, so there is no
  second try). A tool a runtime runs itself on a direct allow is not recorded
  (see ``Gate._open_order``); the book and the rules take a runtime executor
  all the same, so recording those is a change to the chain only.
- reports: a report opened against connector and runtime keys
  (:func:`open_report`) settles the order it names only when
  :func:`smf_assurance.core.execution_rules.signed_by` holds for the order's
  executor; its outcome is :func:`~smf_assurance.core.execution_rules.settlement`.
  The book moves ``executing -> outcome`` once, and only the call that moved it
  writes the ledger entry, so a second or replayed report, a report by a wrong
  signer and a report for an order the gate never gave record nothing (each is
  logged with a reason and the order id, never a payload). A report is
  offered to the approval desk first (an approval's order is settled there,
  as before) and to this book when the desk does not know its order.
- deadline: an order still ``executing`` ``execution_deadline_ms`` after it
  was given (the approval desk's setting) ends ``execution_unknown``
  (``no_execution_report``), terminal; a late report changes nothing.
- restart: unsettled orders are never resumed or re-dispatched. Unlike an
  approval, whose claim and dispatch steps a crash can cut in two, a recorded
  order is already stored in SMF_EXECUTE and its report will be stored in
  SMF_RESULT, which the gate's durable consumer reads when it returns; so
  recovery ends only the orders already past their deadline and the others
  keep waiting for their report or their deadline. That is the same on a
  cluster: settling is conditional, so two replicas never both record one.

Fail closed: a store or ledger error is logged by type and never escapes a
report or a sweep; nothing here publishes an order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

import structlog

from smf_assurance.core.decision import Decision
from smf_assurance.core.execution_rules import Executor, Finish, settlement, signed_by
from smf_assurance.pipeline.desks.signed import open_request
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.pipeline.stores.ledger import EvidenceError, Ledger
from smf_assurance.pipeline.stores.orders import OrderBook, OrderRecord
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.subjects import names
from smf_assurance.subjects.keyed import PseudonymKey
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.messages import ExecutionReport, order_id_for
from smf_assurance.subjects.registry import KeyRegistry, Principal

log = structlog.get_logger(__name__)

DEFAULT_EXECUTION_DEADLINE_MS: Final = 120_000
"""How long an order may go without a report before it is ``execution_unknown``;
the approval desk's default too (``smf_assurance.pipeline.chain.approvals``)."""
NO_REPORT: Final = "no_execution_report"
NOT_STORED: Final = "dispatch_not_stored"

__all__ = [
    "DEFAULT_EXECUTION_DEADLINE_MS",
    "OutcomeDesk",
    "ReportRefused",
    "VerifiedReport",
    "open_report",
]


class ReportRefused(Exception):
    """A message on ``smf.result.*`` is no report signed by an executor's key."""


class VerifiedReport(NamedTuple):
    """A report whose signature verified, and the registry principals that signed it."""

    report: ExecutionReport
    signers: tuple[Principal, ...]


def reporter_keys(registry: KeyRegistry) -> dict[str, VerifyKey]:
    """Connector and runtime keys: the two roles that execute orders."""
    return registry.trusted("connector") | registry.trusted("runtime")


def open_report(data: bytes, registry: KeyRegistry) -> VerifiedReport:
    """Decode and verify an ExecutionReport against connector and runtime keys;
    raises :class:`ReportRefused`. Who may settle which order is the caller's rule."""
    try:
        report, signers = open_request(
            data,
            registry,
            ExecutionReport,
            names.PAYLOAD_REPORT,
            malformed="malformed_report",
            trusted=reporter_keys(registry),
        )
    except StageRefusal as refusal:
        raise ReportRefused(refusal.detail) from refusal
    return VerifiedReport(report, signers)


ApprovalReports = Callable[[VerifiedReport], Awaitable[bool]]
"""The approval desk's settle step: True when the report's order was an approval's."""


@dataclass
class OutcomeDesk:
    orders: OrderBook
    registry: KeyRegistry
    ledger: Ledger
    clock: Callable[[], int]
    tenant_key: PseudonymKey
    outcome_missing: Callable[[str], Awaitable[bool]]
    """Whether this gate's ledger lacks the outcome entry of an order's decision, so it
    is written from the report that comes again (``smf_assurance.pipeline.chain.
    deployment``: on one machine the book and the ledger share a file; on a cluster
    each replica keeps its own ledger, so none is ever missing here)."""
    execution_deadline_ms: int = DEFAULT_EXECUTION_DEADLINE_MS
    approvals: ApprovalReports | None = None
    """The approval desk's settle step, offered every report first."""
    _evidence: EvidenceWriter = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._evidence = EvidenceWriter(self.ledger, self.tenant_key, self._now)

    def _now(self) -> int:
        return self.clock()

    # -- open ------------------------------------------------------------------

    def order_for(
        self,
        proposal_id: str,
        decision: Decision,
        executor: Executor,
        tenant_ref: str,
        at_ms: int | None = None,
    ) -> OrderRecord:
        """The record of the order a direct allow gives (identities and times only);
        ``at_ms`` is when it is given, from which its deadline counts (the gate's one
        clock read for the order: ``Gate.order_deadline``)."""
        return OrderRecord(
            order_id=order_id_for(decision),
            proposal_id=proposal_id,
            operation_hash=decision.operation_hash,
            decision_id=decision.decision_id,
            release_id=decision.release_id,
            projection_id=decision.projection_id,
            tenant_ref=tenant_ref,
            executor_role=executor.role,
            executor_id=executor.executor_id,
            dispatched_at=self.clock() if at_ms is None else at_ms,
        )

    async def close_undelivered(self, order_id: str) -> None:
        """The order was recorded but its dispatch was refused: close it ``failed``
        in the book, with no ledger entry of its own (the gate records the failed
        dispatch), so no later report or sweep writes a second outcome."""
        try:
            await self.orders.settle(order_id, "failed", self.clock())
        except StoreUnavailable as exc:
            log.error("order_close_failed", order_id=order_id, error=type(exc).__name__)

    async def close_unstored(self, order_id: str) -> int:
        """The order was never stored (its void holds its place: ``OrderFence``):
        ``failed`` with ``dispatch_not_stored``, its one outcome entry."""
        return await self._finish(order_id, "failed", (NOT_STORED,))

    # -- reports ---------------------------------------------------------------

    async def handle_report(self, data: bytes) -> None:
        """The ``smf.result.*`` handler: settle a direct order, or pass the report on
        to the approval desk; never raises for a refused or unknown report."""
        try:
            verified = open_report(data, self.registry)
        except ReportRefused as exc:
            log.warning("execution_report_refused", error=str(exc))
            return
        # The approval desk first: an approval's report takes the road it always
        # took; an order id belongs to one decision, so at most one of the two knows it.
        if self.approvals is not None and await self.approvals(verified):
            return
        if await self.settle_report(verified):
            return
        log.warning("execution_report_unknown_order", order_id=verified.report.order_id)

    async def settle_report(self, verified: VerifiedReport) -> bool:
        """True when the report's order is in this book (settled now or not)."""
        report = verified.report
        try:
            order = await self.orders.get(report.order_id)
        except StoreUnavailable as exc:
            # Nothing recorded: the deadline sweep ends the order if it stays open.
            log.error("order_read_failed", order_id=report.order_id, error=type(exc).__name__)
            return True
        if order is None:
            return False
        if not signed_by(order.executor, order.order_id, report, verified.signers):
            log.warning("execution_report_wrong_signer", order_id=order.order_id)
            return True
        if order.state != "executing":
            log.info("execution_report_after_outcome", order_id=order.order_id, state=order.state)
            await self._repair(order, report)
            return True
        outcome, reasons = settlement(report)
        await self._finish(order.order_id, outcome, reasons)
        return True

    async def _repair(self, order: OrderRecord, report: ExecutionReport) -> None:
        """The book's settle and the ledger's entry are two commits: a gate killed
        between them leaves an order settled with no outcome in the ledger. Its report
        was not acknowledged then, so it comes again; the outcome is written now, once
        (only when the ledger has none), and only when this report is the one that
        settled it (the same outcome)."""
        if order.state == "executing":
            return
        outcome, reasons = settlement(report)
        if outcome != order.state:
            return
        try:
            if not await self.outcome_missing(order.decision_id):
                return
            await self._evidence.append(self._evidence.for_order(order, outcome, reasons))
        except (EvidenceError, StoreUnavailable) as exc:
            log.error(
                "order_outcome_repair_failed", order_id=order.order_id, error=type(exc).__name__
            )
            return
        log.warning("order_outcome_repaired", order_id=order.order_id, outcome=outcome)

    # -- deadlines and restart -------------------------------------------------

    async def sweep(self) -> int:
        """End every order past its deadline ``execution_unknown``; how many."""
        try:
            due = await self.orders.overdue(self.clock() - self.execution_deadline_ms)
        except StoreUnavailable as exc:
            log.error("order_sweep_failed", error=type(exc).__name__)
            return 0
        ended = 0
        for order in due:
            ended += await self._finish(order.order_id, "execution_unknown", (NO_REPORT,))
        return ended

    async def recover(self) -> int:
        """Start-up: never resume an order; end those past their deadline (see the
        module docstring for why the others keep waiting)."""
        return await self.sweep()

    async def prune(self, before_ms: int) -> int:
        """Forget orders settled before ``before_ms``; raises like the store."""
        return await self.orders.prune(before_ms)

    async def _finish(self, order_id: str, outcome: Finish, reasons: tuple[str, ...]) -> int:
        """Move the order once; only the move that happened writes its evidence."""
        try:
            settled = await self.orders.settle(order_id, outcome, self.clock())
        except StoreUnavailable as exc:
            log.error("order_settle_failed", order_id=order_id, error=type(exc).__name__)
            return 0
        if settled is None:
            log.info("order_already_settled", order_id=order_id)
            return 0
        entry = self._evidence.for_order(settled, outcome, reasons)
        try:
            await self._evidence.append(entry)
        except EvidenceError as exc:
            log.error(
                "evidence_unavailable_for_outcome", order_id=order_id, error=type(exc).__name__
            )
        log.info("order_settled", order_id=order_id, outcome=outcome)
        return 1
