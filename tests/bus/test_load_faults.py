"""A bounded load with faults: what every runtime was told agrees with what happened
(the bounded load-and-fault test).

Everything is real and on loopback: one nats-server (SIGKILLed and started again on
its store), the gate in its own process (``tests/support/gate_child.py``, SIGKILLed and
started again on the same state), the example connectors in theirs
(``tests/support/connector_child.py``, SIGKILLed and started again), real SQLite. A mixed
load of proposals runs through all three faults, each made when a share of the
load has been answered (never after a fixed sleep); the run stops by itself.

Afterwards, for every proposal, the runtime's verdict is the one it was told, or,
where it was told nothing it could act on (``unsettled``: no reply by its deadline,
an order the gate could not confirm), the verdict it learns from the gate's record
(``ProposalClient.recorded``). Then:

- an allow was carried out exactly once (one tombstone naming its order; its
  document gone) and never contradicted;
- a deny was never carried out (its document is still there, no tombstone for it);
- a hold stayed pending through the gate's restart (no approval lost), and once
  resolved ends as resolved (an allow-once filed once, a deny filed never);
- every approval has exactly one terminal entry in the ledger;
- at most one order per document is in the stream, and the ledger verifies.

``SMF_LOAD_PROPOSALS`` raises the number of proposals (default 90, which runs in
well under two minutes here); the faults scale with it.

What it does not prove: clocks of different hosts, a partition between hosts, or a
disk that loses what it acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

import msgspec
import nats
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient, unsettled
from smf_assurance.approver.client import ApproverClient
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.ledger_audit import verify_ledger
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import TERMINAL_STATES
from smf_assurance.subjects.messages import Proposal, Verdict
from tests.support.approval_desk import ATTORNEY, court_filing, ledger_statuses
from tests.support.bus_faults import seed_documents, tombstones
from tests.support.bus_helpers import wait_for
from tests.support.bus_properties import (
    deletion,
    open_order,
    runtime_client,
    stored_orders,
)
from tests.support.load_faults import CONNECTOR_CHILD, GATE_CHILD, Process, learned, outcome_of

PROPOSALS: Final = int(os.environ.get("SMF_LOAD_PROPOSALS", "90"))
CONCURRENCY: Final = 6
TIMEOUT_S: Final = 2.0
KINDS: Final = ("allow", "deny", "hold")


def build(runtime: ProposalClient, index: int) -> tuple[str, Proposal]:
    kind = KINDS[index % len(KINDS)]
    if kind == "hold":
        return kind, court_filing(runtime)
    return kind, deletion(runtime, f"doc-load-{index:04d}", hold=kind == "deny")


class Sender:
    """Builds and signs each proposal just before it is sent, so its deadline
    (issue time plus the runtime's timeout) is not spent waiting in the queue."""

    def __init__(self, runtime: ProposalClient) -> None:
        self.runtime = runtime

    async def send(self, index: int) -> tuple[str, Proposal, bytes, Verdict]:
        kind, proposal = build(self.runtime, index)
        signed = self.runtime.sign(proposal)
        return kind, proposal, signed, await self.runtime.send(proposal.proposal_id, signed)


def approval_ids_in(ledger: Path) -> set[str]:
    uri = ledger.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        rows = conn.execute(
            "SELECT DISTINCT approval_id FROM evidence_entries WHERE approval_id IS NOT NULL"
        ).fetchall()
    return {row[0] for row in rows}


async def state_of(nc: Client, approval_id: str) -> str:
    reply = await nc.request(names.APPROVAL_STATUS, approval_id.encode(), timeout=5)
    state: str = msgspec.json.decode(reply.data)["state"]
    return state


@pytest.mark.claim("verdict-agrees.load-and-faults")
async def test_under_load_and_faults_every_verdict_agrees_with_what_ran(
    state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    documents = [f"doc-load-{i:04d}" for i in range(PROPOSALS)]
    store = seed_documents(state, documents)
    config: dict[str, object] = {"url": nats_server.url, "state_dir": str(state.root)}
    nc = await nats.connect(
        nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1, connect_timeout=2
    )
    runtime = runtime_client(nc, state, timeout=TIMEOUT_S)
    sender = Sender(runtime)
    results: dict[int, tuple[str, Proposal, bytes, Verdict]] = {}
    gate = Process(GATE_CHILD, {**config, "co_located": True})
    connectors = Process(CONNECTOR_CHILD, config)
    try:
        await gate.start()
        await connectors.start()

        queue: asyncio.Queue[int] = asyncio.Queue()
        for index in range(PROPOSALS):
            queue.put_nowait(index)

        async def worker() -> None:
            while not queue.empty():
                index = queue.get_nowait()
                results[index] = await sender.send(index)

        def answered(share: float) -> Callable[[], bool]:
            return lambda: len(results) >= share * PROPOSALS

        async def faults() -> None:
            await wait_for(answered(0.2), timeout=120, interval=0.01)
            await gate.kill()
            await gate.start()
            await wait_for(answered(0.45), timeout=120, interval=0.01)
            await connectors.kill()
            await connectors.start()
            await wait_for(answered(0.7), timeout=120, interval=0.01)
            nats_server.kill()
            nats_server.start()

        await asyncio.gather(faults(), *(worker() for _ in range(CONCURRENCY)))
        assert len(results) == PROPOSALS

        # What each runtime ends up knowing: what it was told, or what it learns.
        final: dict[int, Verdict] = {}
        for index, (_, proposal, signed, told) in sorted(results.items()):
            final[index] = await learned(runtime, proposal, signed) if unsettled(told) else told
        assert {v.outcome for v in final.values()} <= {"allow", "deny", "held"}

        # No approval lost to the restarts: every hold the runtime knows is pending.
        held = {i: v for i, v in final.items() if v.outcome == "held"}
        assert held, "no proposal was held"
        for verdict in held.values():
            assert verdict.approval_id is not None
            assert await state_of(nc, verdict.approval_id) == "pending", verdict
        attorney = ApproverClient(nc, state.key(ATTORNEY), ATTORNEY, timeout=20.0)
        approved: set[str] = set()
        for n, verdict in enumerate(held.values()):
            assert verdict.approval_id is not None
            view = await attorney.show(verdict.approval_id)
            decision: Literal["allow-once", "deny"] = "allow-once" if n % 2 == 0 else "deny"
            reply = await attorney.resolve(verdict.approval_id, decision, view.binding_digest)
            assert reply.accepted, reply
            if decision == "allow-once":
                approved.add(verdict.approval_id)

        async def approvals_done() -> bool:
            for verdict in held.values():
                want = "consumed" if verdict.approval_id in approved else "denied"
                if await state_of(nc, str(verdict.approval_id)) != want:
                    return False
            return True

        await wait_for(approvals_done, timeout=60, interval=0.25)

        # The direct orders: the ledger's outcome of each allow agrees with the connector.
        allowed = {i: v for i, v in final.items() if v.outcome == "allow"}

        def outcomes_recorded() -> bool:
            return all(outcome_of(state.ledger, str(v.decision_id)) for v in allowed.values())

        await wait_for(outcomes_recorded, timeout=90, interval=0.25)
        done = Counter(t.order_id for t in tombstones(store))
        assert set(done) <= {v.order_id for v in allowed.values()}, "a deletion nobody was allowed"
        for index, verdict in allowed.items():
            outcome = outcome_of(state.ledger, str(verdict.decision_id))
            document = store / f"doc-load-{index:04d}"
            if outcome == "consumed":  # carried out exactly once
                assert (done[str(verdict.order_id)], document.exists()) == (1, False), verdict
            elif outcome == "failed":  # refused (expired, voided, not found): never ran
                assert (done[str(verdict.order_id)], document.exists()) == (0, True), verdict
            else:  # the connector was killed inside it: ambiguous, never run again
                assert outcome == "execution_unknown", (verdict, outcome)
                assert done[str(verdict.order_id)] <= 1, verdict
        for index, verdict in final.items():
            kind = results[index][0]
            if kind != "hold" and verdict.outcome != "allow":
                assert verdict.outcome == "deny", (kind, verdict)
                assert (store / f"doc-load-{index:04d}").exists(), verdict
            if kind == "deny":
                assert verdict.outcome == "deny", verdict
        outbox = state.connector_dir("court-efiling") / "outbox"
        filed = sorted(p.stem for p in outbox.iterdir()) if outbox.exists() else []
        assert len(filed) == len(approved) == len(set(filed))

        # One order per document in the stream; one terminal entry per approval.
        js = nc.jetstream()
        orders = [open_order(m.data or b"", state.key("gate")) for m in await stored_orders(js)]
        per_document = Counter(
            o.arguments["document_id"] for o in orders if "document_id" in o.arguments
        )
        assert set(per_document.values()) <= {1}, per_document
        for approval_id in approval_ids_in(state.ledger):
            ends = [s for s in ledger_statuses(state.ledger, approval_id) if s in TERMINAL_STATES]
            assert len(ends) == 1, (approval_id, ends)
        gate_key = state.key("gate")
        report = verify_ledger(state.ledger, [], {gate_key.key_id: gate_key.verify_key})
        assert report.ok, report
    finally:
        await nc.close()
        await gate.kill()
        await connectors.kill()
