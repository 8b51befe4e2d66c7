"""Several gate processes on one approval store, and gates that crash mid-approval.

"Two gate processes racing to claim the same approval:
exactly one ExecuteOrder in the stream, on every one of at least 50 rounds";
"Crash the gate between claim and publish, and between publish and report:
recovery yields execution_unknown, never a second order". ARCHITECTURE.md,
"Exact-action approval". Real gate processes (``tests/support/approval_gate_child.py``)
on one real nats-server, sharing the state directory and its ``approvals.db``;
each gate process keeps its own evidence ledger, because the ledger allows one
writer per chain.

How the races are driven: each round holds a fresh court filing (through
``smf.propose``, whichever gate the queue group picks), then sends work to
both processes at once over the child's test-only subjects, so that each
process really gets one of the two requests (through the shared
``smf.approval.resolve`` queue group, both could land on one process):

- the same signed allow-once to both (``handle_resolve``): the store's
  ``pending -> approved`` step is where the processes meet;
- an approval already moved to ``approved`` in the store, claimed by both
  (``_claim_and_dispatch``): the store's ``approved -> executing`` claim
  itself is where they meet.

How the crashes are made, and why that is honest: the process is SIGKILLed
(no cleanup, no graceful close) at a point the test has observed, not guessed.
"Between publish and report": the order is published, no connector runs, so
no report can arrive. "Between claim and publish": the child replaces the
desk's injected dispatch client with one that announces it was called and
never returns: the claim has committed in the real store and nothing has
reached the stream. No product code is patched. The restart is a fresh
``start_gate`` on the same state directory, whose start-up recovery is the
code under test.

What these prove: one accepted reply and one published order per approval
on every round, whichever process wins (a core subscription on
``smf.execute.>`` counts publishes, so a re-publish that JetStream would
de-duplicate still counts); a refused claimant records the state the store
holds, not ``invalidated``; after a crash, executing work becomes
``execution_unknown`` and an approved approval no claim followed
``invalidated``, both with ``gate_restarted`` in the ledger, while a pending
one stays pending with its content; no order is published again, later
resolutions of what ended are refused, and an order already published is filed
once by the connector while the approval stays ``execution_unknown``.

What they do not prove: atomicity across machines (SQLite file locking on
one host; the cluster store has its own tests); that a side effect happens once in
the outside world (one order is one filing only through the connector's
idempotency record); crashes at other points (e.g. inside SQLite's commit,
or of the nats-server); several gate processes starting while others hold
open approvals: start-up recovery assumes it is the only gate on its store
(a restarting gate ends the approved and in-flight work of the others),
so the gates here start before any approval exists.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from nats.aio.client import Client

from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import start_gate
from smf_assurance.pipeline.stores.approvals_sqlite import SqliteApprovalStore
from smf_assurance.subjects import names
from smf_assurance.subjects.clock import wall_clock_ms
from tests.support.approval_desk import (
    ATTORNEY,
    CLOSE_TIMEOUT_S,
    approver,
    connectors_running,
    court_filing,
    hold,
    ledger_rows,
    order_count,
    runtime,
    send,
)
from tests.support.approval_race import (
    GateProcess,
    launch_gate_process,
    race_one_claim,
    race_one_resolution,
    store,
)
from tests.support.bus_helpers import ExecuteSpy, wait_for
from tests.support.clocks import OffsetClock as Clock

__all__ = ["store"]


Spawn = Callable[..., Awaitable[GateProcess]]


@pytest.fixture
async def spawn(
    approvers_state: StateDir, nats_server: EmbeddedNatsServer, tmp_path: Path
) -> AsyncIterator[Spawn]:
    """Start gate processes on the shared state; every one is stopped afterwards."""
    started: list[GateProcess] = []

    async def start(
        name: str, *, own_ledger: bool = True, park_dispatch: bool = False
    ) -> GateProcess:
        gate = await launch_gate_process(
            tmp_path,
            approvers_state,
            nats_server.url,
            name,
            own_ledger=own_ledger,
            park_dispatch=park_dispatch,
        )
        started.append(gate)
        return gate

    yield start
    for gate in started:
        await gate.stop()


# --- two processes, one approval, fifty times ----------------------------------------


async def test_one_resolution_sent_to_two_gate_processes_gives_one_order_every_round(
    spawn: Spawn, nc: Client, approvers_state: StateDir
) -> None:
    gates = [await spawn("gate-a"), await spawn("gate-b")]
    await race_one_resolution(gates, nc, approvers_state)


async def test_two_gate_processes_claiming_one_approved_approval_give_one_order_every_round(
    spawn: Spawn, nc: Client, approvers_state: StateDir, store: SqliteApprovalStore
) -> None:
    gates = [await spawn("gate-a"), await spawn("gate-b")]
    await race_one_claim(gates, nc, approvers_state, store)


# --- crashes -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def restarted_gate(state: StateDir, url: str) -> AsyncIterator[None]:
    """A fresh gate on the same state directory: its start-up recovery runs first."""
    running = await start_gate(
        gate_config(state=state, nats_url=url, clock=Clock(), sweep_seconds=3600.0)
    )
    try:
        yield
    finally:
        await asyncio.wait_for(running.close(), CLOSE_TIMEOUT_S)  # a hang fails, loudly


async def test_crash_between_claim_and_publish_is_execution_unknown_without_an_order(
    spawn: Spawn,
    nc: Client,
    approvers_state: StateDir,
    store: SqliteApprovalStore,
    nats_server: EmbeddedNatsServer,
) -> None:
    gate = await spawn("gate-a", own_ledger=False, park_dispatch=True)
    js = nc.jetstream()
    spy = await ExecuteSpy.attach(nc)
    client, attorney = runtime(nc, approvers_state), approver(nc, approvers_state, ATTORNEY)
    claimed = (await hold(client, court_filing(client))).approval_id
    pending = (await hold(client, court_filing(client))).approval_id
    approved = (await hold(client, court_filing(client))).approval_id
    assert claimed is not None
    assert pending is not None
    assert approved is not None
    record = await store.get(approved)
    assert record is not None
    await store.approve(approved, record.digest, ATTORNEY, wall_clock_ms())
    view = await attorney.show(claimed)
    signed = attorney.sign_resolution(claimed, "allow-once", view.binding_digest)
    dispatching = await nc.subscribe(f"{gate.subject}.dispatching")
    replies = await nc.subscribe(nc.new_inbox())
    await nc.flush()

    await nc.publish(names.APPROVAL_RESOLVE, signed, reply=replies.subject)
    await dispatching.next_msg(timeout=10)  # the claim has committed; nothing is published
    record = await store.get(claimed)
    assert record is not None
    assert record.state == "executing"
    await gate.kill()

    assert await order_count(js) == 0
    async with restarted_gate(approvers_state, nats_server.url):
        for approval_id, after in (
            (claimed, "execution_unknown"),
            (approved, "invalidated"),
        ):
            record = await store.get(approval_id)
            assert record is not None
            assert record.state == after, approval_id
            assert record.held_payload is None
            assert ledger_rows(approvers_state.ledger, approval_id)[-1] == (
                after,
                ("gate_restarted",),
            )
        # What the crash did not interrupt survives it, content and all.
        kept = await store.get(pending)
        assert kept is not None
        assert (kept.state, kept.held_payload is not None) == ("pending", True)
        replay = await send(nc, signed)
        assert (replay.accepted, replay.reason_codes) == (False, ("approval_not_pending",))
        assert await spy.approval_ids() == []
        assert await order_count(js) == 0
    assert replies.pending_msgs == 0  # the killed gate never answered


async def test_crash_between_publish_and_report_is_execution_unknown_and_files_once(
    spawn: Spawn,
    nc: Client,
    approvers_state: StateDir,
    store: SqliteApprovalStore,
    nats_server: EmbeddedNatsServer,
) -> None:
    gate = await spawn("gate-a", own_ledger=False)
    js = nc.jetstream()
    spy = await ExecuteSpy.attach(nc)
    client, attorney = runtime(nc, approvers_state), approver(nc, approvers_state, ATTORNEY)
    approval_id = (await hold(client, court_filing(client))).approval_id
    assert approval_id is not None
    view = await attorney.show(approval_id)
    signed = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
    reply = await send(nc, signed)  # no connector runs: no report can arrive
    assert reply.accepted
    assert reply.order_id
    assert await order_count(js) == 1
    await gate.kill()

    async with restarted_gate(approvers_state, nats_server.url):
        record = await store.get(approval_id)
        assert record is not None
        assert record.state == "execution_unknown"
        assert ledger_rows(approvers_state.ledger, approval_id)[-1] == (
            "execution_unknown",
            ("gate_restarted",),
        )
        replay = await send(nc, signed)
        assert (replay.accepted, replay.reason_codes) == (False, ("approval_not_pending",))
        async with connectors_running(approvers_state, nats_server.url):

            async def report_read() -> bool:
                info = await js.consumer_info(names.RESULT_STREAM, "smf-gate-results")
                return info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= 1

            await wait_for(report_read, timeout=10)
        record = await store.get(approval_id)
        assert record is not None
        assert record.state == "execution_unknown"
        assert await spy.approval_ids() == [approval_id]
    outbox = approvers_state.connector_dir("court-efiling") / "outbox"
    assert [p.name for p in outbox.iterdir()] == [f"{reply.order_id}.json"]
    assert await order_count(js) == 1
