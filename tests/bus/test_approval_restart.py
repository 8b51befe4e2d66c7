"""A pending approval survives a gate restart; only an approver or its TTL ends it.

ARCHITECTURE.md, "Exact-action approval": approvals are durable. A gate process
(``tests/support/approval_gate_child.py``) holds a court filing and is SIGKILLed (no
cleanup, as a crash); a new gate process starts on the same state directory, its
start-up recovery is the code under test. Real nats-server, real SQLite files, the
example connectors, the attorney signing with her key from the state directory.

What these prove: after the restart the attorney still sees exactly what would be
filed (the held content survived, and matches its hash), her allow-once is accepted,
the connector files the filing once, the runtime still waiting on the outcome subject
gets the gate-signed allow, and the approval ends ``consumed`` with one terminal
entry. A filing whose TTL ran out while the gate was down is ``expired`` as soon as
the gate is back (its runtime told ``deny``/``approval_expired``), and an allow-once
for it is refused with nothing published. What they do not prove: the cluster (its
replicas never run start-up recovery on the shared bucket: tests/bus/test_cluster.py),
or a crash inside SQLite's commit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from nats.aio.client import Client

from smf_assurance.approver.client import content_matches
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import MAX_TTL_MS, TERMINAL_STATES
from tests.support.approval_desk import (
    ATTORNEY,
    approver,
    connectors_running,
    court_filing,
    hold,
    ledger_rows,
    next_outcome,
    order_count,
    runtime,
    status,
)
from tests.support.approval_race import GateProcess, launch_gate_process
from tests.support.bus_helpers import ExecuteSpy, wait_for

Start = Callable[..., Awaitable[GateProcess]]


@pytest.fixture
async def start(
    approvers_state: StateDir, nats_server: EmbeddedNatsServer, tmp_path: Path
) -> AsyncIterator[Start]:
    """Gate processes on the shared state and its one ledger, each stopped afterwards."""
    started: list[GateProcess] = []

    async def launch(name: str, clock_offset_ms: int = 0) -> GateProcess:
        gate = await launch_gate_process(
            tmp_path,
            approvers_state,
            nats_server.url,
            name,
            own_ledger=False,
            clock_offset_ms=clock_offset_ms,
        )
        started.append(gate)
        return gate

    yield launch
    for gate in started:
        await gate.stop()


def terminal(state: StateDir, approval_id: str) -> list[str | None]:
    return [s for s, _ in ledger_rows(state.ledger, approval_id) if s in TERMINAL_STATES]


@pytest.mark.claim("approver-desk.pending-survives-restart")
async def test_a_pending_filing_is_approved_after_a_restart_and_filed_once(
    start: Start, nc: Client, approvers_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    first = await start("gate-one")
    client = runtime(nc, approvers_state)
    held = await hold(client, court_filing(client))
    approval_id = held.approval_id
    assert approval_id is not None
    outcome = await nc.subscribe(names.approval_outcome_subject(approval_id))
    await nc.flush()
    await first.kill()

    await start("gate-two")
    spy = await ExecuteSpy.attach(nc)
    assert await status(nc, approval_id) == "pending"
    attorney = approver(nc, approvers_state, ATTORNEY)
    async with connectors_running(approvers_state, nats_server.url):
        view, reply = await attorney.review_and_resolve(approval_id, "allow-once")
        assert content_matches(view)  # the exact action, kept across the restart
        assert (reply.accepted, reply.state) == (True, "executing")

        async def consumed() -> bool:
            return await status(nc, approval_id) == "consumed"

        await wait_for(consumed, timeout=10)
        again = await attorney.resolve(approval_id, "allow-once", view.binding_digest)

    assert (again.accepted, again.reason_codes) == (False, ("approval_not_pending",))
    told = await next_outcome(outcome, approvers_state, held)
    assert (told.outcome, told.order_id) == ("allow", reply.order_id)
    outbox = approvers_state.connector_dir("court-efiling") / "outbox"
    assert [p.name for p in outbox.iterdir()] == [f"{reply.order_id}.json"]
    assert await spy.approval_ids() == [approval_id]
    assert await order_count(nc.jetstream()) == 1
    assert terminal(approvers_state, approval_id) == ["consumed"]
    assert "gate_restarted" not in {
        c for _, codes in ledger_rows(approvers_state.ledger, approval_id) for c in codes
    }


@pytest.mark.claim("approver-desk.pending-survives-restart")
async def test_a_filing_whose_ttl_ran_out_while_the_gate_was_down_is_expired(
    start: Start, nc: Client, approvers_state: StateDir
) -> None:
    first = await start("gate-one")
    client = runtime(nc, approvers_state)
    held = await hold(client, court_filing(client))
    approval_id = held.approval_id
    assert approval_id is not None
    attorney = approver(nc, approvers_state, ATTORNEY)
    view = await attorney.show(approval_id)
    allow = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
    outcome = await nc.subscribe(names.approval_outcome_subject(approval_id))
    await nc.flush()
    await first.kill()

    # Back after longer than any approval may live: the gate's clock says so.
    await start("gate-two", clock_offset_ms=MAX_TTL_MS + 1_000)
    spy = await ExecuteSpy.attach(nc)

    assert await status(nc, approval_id) == "expired"
    told = await next_outcome(outcome, approvers_state, held)
    assert (told.outcome, told.reason_codes) == ("deny", ("approval_expired",))
    reply = await attorney.send(allow)
    assert (reply.accepted, reply.reason_codes) == (False, ("approval_not_pending",))
    assert await spy.approval_ids() == []
    assert await order_count(nc.jetstream()) == 0
    assert terminal(approvers_state, approval_id) == ["expired"]
