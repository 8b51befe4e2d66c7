"""How a gate is deployed, chosen once: one machine or one replica of a cluster.

ARCHITECTURE.md, "Scale". The choice is made in one place, :func:`deployment_for`,
from ``GateConfig.cluster``; everything that differs between the two follows from the
object it returns, so no other part of the assembly or the chain asks which it is.

- :class:`OneMachine`: SQLite files. The claims, the order book and the decided tool
  calls and stops are tables in the ledger file, written in the transaction of the
  decision's evidence entry (``smf_assurance.pipeline.chain.deployment``); a separate
  claim file of the older layout is merged in first. The approvals have a file of their
  own. At start the state is checked against the ledger (``state_check``), open
  approvals are recovered, and an order whose outcome entry was lost is repaired
  from its report.
- :class:`Cluster`: replicated JetStream KV buckets (compare-and-set by revision), so
  every replica decides against one set of claims, orders, approvals and notes. The
  replicas tell each other what each one alone learns (attestations, confinement,
  decided tool-call ids, stops and clears: ``smf_assurance.pipeline.followers.
  replica_sync``); one replica answers each output close (the one whose claim on it
  lands first); the open approvals belong to every replica, so none recovers them as
  its own at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import structlog
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from smf_assurance.pipeline.assembly.config import ClusterSettings, GateConfig, ReleaseSource
from smf_assurance.pipeline.chain.approvals import ApprovalDesk
from smf_assurance.pipeline.chain.deployment import (
    AllowClaim,
    CallNote,
    Deployment,
    Recording,
    append_noted,
)
from smf_assurance.pipeline.desks.attestation import AttestationDesk
from smf_assurance.pipeline.desks.confinement import ConfinementDesk
from smf_assurance.pipeline.desks.runtime_stops import RuntimeStops
from smf_assurance.pipeline.desks.tool_calls import DecidedCalls
from smf_assurance.pipeline.followers.replica_sync import ReplicaSync
from smf_assurance.pipeline.service import StageAuth
from smf_assurance.pipeline.stores.approvals import ApprovalStore
from smf_assurance.pipeline.stores.approvals_kv import KvApprovalStore
from smf_assurance.pipeline.stores.approvals_sqlite import SqliteApprovalStore
from smf_assurance.pipeline.stores.claims import (
    CLAIM_STORE_UNAVAILABLE,
    DUPLICATE_PROPOSAL,
    ClaimAndOrder,
    ClaimState,
    ClaimStore,
    ProposalClaims,
    merge_claim_file,
)
from smf_assurance.pipeline.stores.claims_kv import KvClaimStore
from smf_assurance.pipeline.stores.evidence import EvidenceWriter, with_reason
from smf_assurance.pipeline.stores.ledger import Beside, EvidenceEntry, Ledger, Recorded
from smf_assurance.pipeline.stores.orders import OrderBook, OrderRecord, SqliteOrderBook
from smf_assurance.pipeline.stores.orders_kv import KvOrderBook
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.pipeline.stores.state_check import StateFiles
from smf_assurance.pipeline.stores.tool_calls import SqliteToolCallStore, Stop, ToolCallStore
from smf_assurance.pipeline.stores.tool_calls_kv import KvToolCallStore

log = structlog.get_logger(__name__)


class Placed(Deployment, Protocol):
    """A deployment with its stores open: what the chain writes through
    (:class:`~smf_assurance.pipeline.chain.deployment.Deployment`) and what the rest of
    the gate is built from."""

    @property
    def claims(self) -> ProposalClaims: ...

    @property
    def approvals(self) -> ApprovalStore: ...

    @property
    def orders(self) -> OrderBook: ...

    @property
    def clear_beside(self) -> Callable[[Stop], Beside] | None:
        """A stop's removal as a write in its clear's evidence transaction
        (``RuntimeStops.clear_beside``), where the stops are in the ledger file."""
        ...

    async def outcome_missing(self, decision_id: str) -> bool:
        """Whether a settled order's outcome entry is missing from this gate's ledger
        (``OutcomeDesk``: it is then written from the report that comes again)."""
        ...

    async def answers_close(self, stream_id: str) -> bool:
        """Whether this gate answers an output close (``OutputBuffer``)."""
        ...

    async def recover(self, desk: ApprovalDesk) -> None:
        """Start-up recovery of the approvals this gate holds."""
        ...

    def replica_sync(
        self,
        nc: Client,
        auth: StageAuth,
        name: str,
        calls: DecidedCalls,
        attestation: AttestationDesk,
        confinement: ConfinementDesk,
        stops: RuntimeStops,
    ) -> list[ReplicaSync]:
        """The sync with the other replicas, wired to what it tells (not started)."""
        ...


class Strategy(Protocol):
    """A deployment before its stores are open: what the start-up needs first."""

    @property
    def replicas(self) -> int:
        """How many copies of every stream and bucket the gate creates."""
        ...

    def state_files(self, config: GateConfig) -> StateFiles:
        """The files the start-up check holds against the ledger before any opens."""
        ...

    async def open(
        self,
        config: GateConfig,
        js: JetStreamContext,
        ledger: Ledger,
        undo: contextlib.AsyncExitStack,
    ) -> Placed:
        """The stores, each closed by ``undo`` when the start fails part way."""
        ...


def deployment_for(config: GateConfig) -> Strategy:
    """The one place the deployment is chosen."""
    if config.cluster is None:
        return OneMachine()
    return Cluster(config.cluster)


def _release_state(config: GateConfig) -> tuple[Any, ...]:
    return (config.policy.state,) if isinstance(config.policy, ReleaseSource) else ()


# -- one machine ---------------------------------------------------------------


@dataclass(frozen=True)
class OneMachine:
    """SQLite files, the claims, the order book and the notes in the ledger file."""

    @property
    def replicas(self) -> int:
        return 1

    def state_files(self, config: GateConfig) -> StateFiles:
        return StateFiles(
            ledger=config.stores.ledger,
            approvals=config.stores.approvals,
            claims_in_ledger=True,
            earlier_claims=config.stores.claims,
            others=_release_state(config),
        )

    async def open(
        self,
        config: GateConfig,
        js: JetStreamContext,
        ledger: Ledger,
        undo: contextlib.AsyncExitStack,
    ) -> Placed:
        claims = await ClaimStore.in_ledger(ledger.worker)
        undo.push_async_callback(claims.close)
        merged = await merge_claim_file(claims, config.stores.claims)
        if merged:
            log.info("claim_file_merged_into_ledger", rows=merged)
        approvals = await SqliteApprovalStore.open(config.stores.approvals)
        undo.push_async_callback(approvals.close)
        orders = SqliteOrderBook.beside(claims.worker)
        undo.push_async_callback(orders.close)
        calls = await SqliteToolCallStore.in_ledger(ledger.worker)
        undo.push_async_callback(calls.close)
        return _InLedger(ledger, claims, approvals, orders, calls, config.clock)


@dataclass
class _InLedger:
    """One machine's stores, open: every claim, order and note beside the evidence."""

    ledger: Ledger
    claims: ClaimStore
    approvals: ApprovalStore
    orders: OrderBook
    calls: SqliteToolCallStore
    clock: Callable[[], int]

    @property
    def clear_beside(self) -> Callable[[Stop], Beside] | None:
        return self.calls.clear_beside

    def note(self, runtime_id: str, call_id: str) -> CallNote:
        return _LedgerNote(self, runtime_id, call_id)

    async def share_call(self, runtime_id: str, call_id: str) -> None:
        return None  # one gate: nobody else to tell

    async def record(
        self,
        evidence: EvidenceWriter,
        entry: EvidenceEntry,
        note: Beside | None,
        claim: AllowClaim | None,
    ) -> Recording:
        """One durable commit per decision: the note rides in the entry's transaction
        for every disposition, and an allow's claim and its order too, so no crash can
        leave a claim or an order without the evidence of its decision, or the reverse.
        A claim store that is closed is a claim refused, recorded on the entry."""
        if claim is None:
            return await append_noted(evidence, entry, note)
        try:
            beside = self.claims.claim_and_record_beside(
                claim.proposal_id,
                claim.operation_hash,
                claim.decision_id,
                claim.at_ms,
                claim.order,
            )
        except StoreUnavailable as exc:
            receipt = await evidence.append(with_reason(entry, CLAIM_STORE_UNAVAILABLE))
            return Recording(receipt, noted=False, claim=exc, order_at_ms=None)
        receipt, written = await evidence.append_beside(
            entry, Recorded(_then(note, beside), _claim_recorded)
        )
        if isinstance(written, StoreUnavailable):
            return Recording(receipt, noted=False, claim=written, order_at_ms=None)
        order_at = None if claim.order is None else claim.at_ms
        return Recording(receipt, noted=note is not None, claim=written, order_at_ms=order_at)

    async def settle(self, proposal_id: str, state: ClaimState) -> None:
        """A write for the ledger's next group commit: it shares the fsync of the
        evidence queued with it."""
        written = await self.ledger.write_beside(self.claims.settle_beside(proposal_id, state))
        if isinstance(written, StoreUnavailable):
            raise written

    async def outcome_missing(self, decision_id: str) -> bool:
        """The book and the ledger share the file but not the commit: a gate killed
        between the two leaves an order settled with no outcome entry."""
        return not await self.ledger.has_outcome(decision_id)

    async def answers_close(self, stream_id: str) -> bool:
        return True  # the one buffer answers every close

    async def recover(self, desk: ApprovalDesk) -> None:
        await desk.recover()

    def replica_sync(
        self,
        nc: Client,
        auth: StageAuth,
        name: str,
        calls: DecidedCalls,
        attestation: AttestationDesk,
        confinement: ConfinementDesk,
        stops: RuntimeStops,
    ) -> list[ReplicaSync]:
        return []


@dataclass(frozen=True)
class _LedgerNote:
    """A note in the ledger file: in the decision's evidence transaction, or (no entry
    was written: refused before evaluation, or the ledger failed) in the ledger's next
    group commit. Its time is read when it is written."""

    stores: _InLedger
    runtime_id: str
    call_id: str

    def beside(self) -> Beside | None:
        try:
            return self.stores.calls.note_beside(self.runtime_id, self.call_id, self.stores.clock())
        except StoreUnavailable:
            return None  # written after the chain, or logged there

    async def stored(self) -> None:
        note = self.stores.calls.note_beside(self.runtime_id, self.call_id, self.stores.clock())
        written = await self.stores.ledger.write_beside(note)
        if isinstance(written, StoreUnavailable):
            raise written


def _claim_recorded(entry: EvidenceEntry, written: object) -> EvidenceEntry:
    """An allow's entry says when its claim was NOT written (a replay's claim is
    refused, a failed write undone): the claims table must then hold a row for every
    other allow of the retention window, which the start-up check holds it to
    (``smf_assurance.pipeline.stores.state_check``)."""
    if isinstance(written, ClaimAndOrder):
        return entry if written.claimed else with_reason(entry, DUPLICATE_PROPOSAL)
    return with_reason(entry, CLAIM_STORE_UNAVAILABLE)


def _then(first: Beside | None, beside: Beside) -> Beside:
    """``first`` and then ``beside``, as one write beside an entry (``beside``'s result)."""
    if first is None:
        return beside

    def both(conn: sqlite3.Connection) -> Any:
        first(conn)
        return beside(conn)

    return both


# -- a cluster -------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """One replica of several: replicated KV buckets, the replicas in sync."""

    settings: ClusterSettings

    @property
    def replicas(self) -> int:
        return self.settings.replicas

    def state_files(self, config: GateConfig) -> StateFiles:
        """Only the ledger is this replica's own; the claims and approvals are shared."""
        return StateFiles(
            ledger=config.stores.ledger,
            approvals=None,
            claims_in_ledger=False,
            earlier_claims=None,
            others=_release_state(config),
        )

    async def open(
        self,
        config: GateConfig,
        js: JetStreamContext,
        ledger: Ledger,
        undo: contextlib.AsyncExitStack,
    ) -> Placed:
        claims = await KvClaimStore.open_bucket(js, replicas=self.replicas)
        undo.push_async_callback(claims.close)
        approvals = await KvApprovalStore.open(js, replicas=self.replicas)
        undo.push_async_callback(approvals.close)
        orders = await KvOrderBook.open_bucket(js, replicas=self.replicas)
        undo.push_async_callback(orders.close)
        calls = await KvToolCallStore.open_bucket(js, replicas=self.replicas)
        undo.push_async_callback(calls.close)
        return _Replicated(config.name, claims, approvals, orders, calls, config.clock)


@dataclass
class _Replicated:
    """A replica's stores, open: claims, orders and notes written beside the chain."""

    name: str
    claims: ProposalClaims
    approvals: ApprovalStore
    orders: OrderBook
    calls: ToolCallStore
    clock: Callable[[], int]
    _syncs: list[ReplicaSync] = field(default_factory=list)
    """The sync :meth:`replica_sync` made: what the chain tells the others through."""

    @property
    def clear_beside(self) -> Callable[[Stop], Beside] | None:
        return None  # the stops are in a bucket: the entry, then the removal

    def note(self, runtime_id: str, call_id: str) -> CallNote:
        """The note's write, started now, so it runs beside the chain."""
        write = asyncio.ensure_future(self.calls.note(runtime_id, call_id, self.clock()))
        return _StartedNote(write)

    async def share_call(self, runtime_id: str, call_id: str) -> None:
        for sync in self._syncs:
            await sync.noted(runtime_id, call_id)

    async def record(
        self,
        evidence: EvidenceWriter,
        entry: EvidenceEntry,
        note: Beside | None,
        claim: AllowClaim | None,
    ) -> Recording:
        """The entry; once it has committed, the claim (a compare-and-set every replica
        meets) and, for the first claim, its order, each read on the clock when written.
        An order that cannot be recorded is reported as not recorded: the claim is
        spent, so the allow is refused, never tried again."""
        recording = await append_noted(evidence, entry, note)
        if claim is None:
            return recording
        try:
            claimed = await self.claims.claim(
                claim.proposal_id, claim.operation_hash, claim.decision_id, self.clock()
            )
        except StoreUnavailable as exc:
            return dataclasses.replace(recording, claim=exc)
        if not claimed or claim.order is None:
            return dataclasses.replace(recording, claim=ClaimAndOrder(claimed, False))
        order = msgspec.structs.replace(claim.order, dispatched_at=self.clock())
        return dataclasses.replace(
            recording,
            claim=ClaimAndOrder(True, await self._open(order)),
            order_at_ms=order.dispatched_at,
        )

    async def _open(self, order: OrderRecord) -> bool:
        try:
            opened = await self.orders.open(order)
        except StoreUnavailable as exc:
            log.error("order_record_failed", order_id=order.order_id, error=type(exc).__name__)
            return False
        if not opened:
            # The claim makes each decision's order once; a second is a fault.
            log.error("order_already_recorded", order_id=order.order_id)
        return opened

    async def settle(self, proposal_id: str, state: ClaimState) -> None:
        await self.claims.settle(proposal_id, state)

    async def outcome_missing(self, decision_id: str) -> bool:
        """Never repaired: each replica keeps its own ledger, so an outcome this one
        lacks may well be in the ledger of the replica that settled the order."""
        return False

    async def answers_close(self, stream_id: str) -> bool:
        """Every replica buffers every stream; the one whose claim on the close lands
        first answers it. The claim lives in the proposal-claim store under its own
        prefix, so it is as durable and as atomic across replicas as a proposal's."""
        return await self.claims.claim(
            f"output-close:{stream_id}", "output-close", stream_id, self.clock()
        )

    async def recover(self, desk: ApprovalDesk) -> None:
        """The open approvals belong to every replica, not to this one: a replica that
        (re)starts must not invalidate what another holds. Executing work a crashed
        replica left behind ends ``execution_unknown`` by the execution deadline sweep
        (``ApprovalDesk.sweep``), never claimed again."""
        log.info("gate_recovery_left_to_the_cluster", gate=self.name)

    def replica_sync(
        self,
        nc: Client,
        auth: StageAuth,
        name: str,
        calls: DecidedCalls,
        attestation: AttestationDesk,
        confinement: ConfinementDesk,
        stops: RuntimeStops,
    ) -> list[ReplicaSync]:
        """Replicas share attestations, confinement, decided tool-call ids, stops and
        clears; each still verifies attestations itself."""
        sync = ReplicaSync(nc, auth, name, attestation, calls, stops, confinement)
        attestation.share = sync.attested
        confinement.share = sync.confined
        stops.share_stop = sync.stopped
        stops.share_clear = sync.cleared
        self._syncs.append(sync)
        return [sync]


@dataclass(frozen=True)
class _StartedNote:
    """A note whose write runs beside the chain: nothing rides with the evidence; the
    verdict waits for the write."""

    write: asyncio.Future[None]

    def beside(self) -> Beside | None:
        return None

    async def stored(self) -> None:
        await self.write
