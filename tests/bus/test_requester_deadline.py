"""What the runtime was told is what happens: one deadline for an
order and its allow, and no order behind a requester that stopped waiting.

Real nats-server, real SQLite, the whole gate from ``start_gate`` (co-located), the
example DMS connector. A gate "slowed between decision and publish" is the real gate
whose dispatch client (an injected dependency, ``Gate.dispatch``) waits before or
after calling the real dispatch stage; nothing of the stage, the stores or the
connector is replaced.

What these tests prove:

- An allow names the deadline signed into its stored order (``expires_at_ms`` is the
  order's ``not_after_ms``), which is the order record's time plus the order budget.
- An order its connector reaches only after that deadline is refused
  ``order_expired`` and never runs; the ledger records it ``failed`` with that reason,
  and the runtime learns it: its recorded verdict is the allow with ``order_failed``.
- A gate slowed before its publish until its requester gave up publishes nothing
  (``requester_deadline_passed``, or ``order_deadline_invalid`` when the order's own
  deadline passed too), ever; the runtime's recorded verdict is a deny.
  The control: slowed less than the deadline, the same gate publishes and allows.
- A gate slowed after its PubAck until the requester gave up: the order exists, and
  the requester's recorded verdict is that allow with the same order (it waits for
  the decision still running rather than answer from half a record). A request for
  the record that is cancelled while it waits stops waiting and nothing else: the
  decision stores its one order and the next request gets that allow.
- A proposal that reaches the gate after its deadline is never decided: no ledger
  entry, no order; its recorded verdict is ``no_order_recorded``.
- A hold made after the requester's deadline is withdrawn (``invalidated``), so no
  approver can approve an action nobody waits for.
- An outcome the order book settled and the ledger lost (a gate killed between the
  two commits) is written when the unacknowledged report comes again, once.
- An unconfirmed order is settled by the gate's void: found stored (duplicate), or
  not, and then its id is taken by a void the connector refuses and records
  ``failed``, so the genuine order can never be stored or run.

What they do not prove: clocks of different hosts (the runtime and the gate share
this machine's clock; the guarantee assumes their difference stays inside the
client's grace), nor what the recorded verdict says after the gate's freshness
window (a proposal older than that is refused as stale, so it cannot be asked).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient, unsettled
from smf_assurance.adapters.connector.sdk import REASON_WRONG_PAYLOAD_TYPE
from smf_assurance.core.decision import Decision
from smf_assurance.core.normalize import Normalized
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.chain.contracts import DispatchReceipt, DispatchRequest
from smf_assurance.pipeline.chain.dispatch import OrderFence
from smf_assurance.pipeline.chain.transport import StageClient
from smf_assurance.subjects import names
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.messages import ExecutionReport, Proposal, ReportStatus, Verdict
from tests.support.approval_desk import (
    ATTORNEY,
    approver,
    connectors_running,
    court_filing,
    file_report,
    state_of,
)
from tests.support.bus_helpers import ReportInbox, make_signed_order, order_headers, wait_for
from tests.support.bus_properties import (
    deletion,
    execute_count,
    ledger_entries,
    open_order,
    runtime_client,
    stored_orders,
)

ORDER_TTL_MS: Final = 1_500
"""A short order budget, so a test outlives an order's deadline."""
TIMEOUT_S: Final = 1.0
"""The runtime's timeout: its proposals' deadline is their issue time plus this."""


@pytest.fixture
async def gate(
    seeded_state: StateDir, nats_server: EmbeddedNatsServer
) -> AsyncIterator[RunningGate]:
    config = gate_config(
        state=seeded_state, nats_url=nats_server.url, co_located=True, sweep_seconds=0.2
    )
    running = await start_gate(dataclasses.replace(config, order_ttl_ms=ORDER_TTL_MS))
    yield running
    await asyncio.wait_for(running.close(), 15)


def impatient(nc: Client, state: StateDir) -> ProposalClient:
    return runtime_client(nc, state, timeout=TIMEOUT_S)


def evidence_rows(ledger: Path, decision_id: str) -> list[tuple[str | None, tuple[str, ...]]]:
    """``(status, reason codes)`` of every ledger entry of one decision, in order."""
    uri = ledger.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        found = conn.execute(
            "SELECT status, reason_codes FROM evidence_entries WHERE decision_id = ? ORDER BY seq",
            (decision_id,),
        ).fetchall()
    return [(s, tuple(json.loads(r))) for s, r in found]


async def recorded_when_known(client: ProposalClient, proposal: Proposal) -> Verdict:
    """The proposal's recorded verdict, asked after its deadline, once it is known."""
    signed = client.sign(proposal)
    answer: list[Verdict] = []

    async def known() -> bool:
        answer[:] = [await client.recorded(proposal.proposal_id, signed)]
        return not unsettled(answer[0])

    await wait_for(known, timeout=20, interval=0.1)
    return answer[0]


@dataclass
class Slowed:
    """The gate's dispatch client, slowed before or after the real stage call."""

    inner: StageClient[DispatchRequest, DispatchReceipt]
    before: float = 0.0
    after: float = 0.0
    calls: int = 0

    async def call(self, request: DispatchRequest, timeout: float) -> DispatchReceipt:
        self.calls += 1
        await asyncio.sleep(self.before)
        receipt = await self.inner.call(request, timeout)
        await asyncio.sleep(self.after)
        return receipt


# --- one deadline -------------------------------------------------------------------


@pytest.mark.claim("verdict-agrees.allow-names-order-deadline")
async def test_an_allow_promises_the_deadline_its_stored_order_carries(
    gate: RunningGate, nc: Client, seeded_state: StateDir
) -> None:
    client = runtime_client(nc, seeded_state)
    verdict = await client.propose(deletion(client, "doc-4711"))
    assert verdict.outcome == "allow", verdict
    assert verdict.order_id is not None
    (stored,) = await stored_orders(gate.js)
    order = open_order(stored.data or b"", seeded_state.key("gate"))
    assert order.order_id == verdict.order_id
    assert verdict.expires_at_ms == order.not_after_ms
    record = await gate.orders.get(order.order_id)
    assert record is not None
    assert order.not_after_ms == record.dispatched_at + ORDER_TTL_MS


@pytest.mark.claim("verdict-agrees.expired-order-learned")
async def test_an_order_reached_after_its_deadline_never_runs_and_the_runtime_learns_it(
    gate: RunningGate, nc: Client, seeded_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    client = impatient(nc, seeded_state)
    proposal = deletion(client, "doc-4711")
    verdict = await client.propose(proposal)
    assert verdict.outcome == "allow", verdict
    assert verdict.expires_at_ms is not None
    assert verdict.decision_id is not None
    deadline = verdict.expires_at_ms
    await wait_for(lambda: wall_clock_ms() > deadline, timeout=10, interval=0.05)
    document = seeded_state.connector_dir("dms") / "store" / "doc-4711"
    async with connectors_running(seeded_state, nats_server.url):

        def failed() -> bool:
            return ("failed", ("order_expired",)) in evidence_rows(
                seeded_state.ledger, str(verdict.decision_id)
            )

        await wait_for(failed, timeout=20)
    assert document.exists(), "an expired order ran"
    learned = await recorded_when_known(client, proposal)
    assert (learned.outcome, learned.order_id) == ("allow", verdict.order_id)
    assert "order_failed" in learned.reason_codes
    assert learned.expires_at_ms == deadline


# --- no order behind a requester that stopped waiting ------------------------------


@pytest.mark.claim("verdict-agrees.no-order-after-requester-deadline")
async def test_a_gate_slowed_before_its_publish_publishes_nothing_after_the_deadline(
    gate: RunningGate, nc: Client, seeded_state: StateDir
) -> None:
    client = impatient(nc, seeded_state)
    slowed = Slowed(gate.gate.dispatch, before=client.timeout + client.grace + 0.5)
    gate.gate.dispatch = slowed
    proposal = deletion(client, "doc-4711")
    told = await client.propose(proposal)
    assert told.reason_codes == ("gate_timeout",), told
    assert unsettled(told)

    async def refused() -> bool:
        claim = await gate.claims.get(proposal.proposal_id)
        return claim is not None and claim.state == "failed"

    await wait_for(refused, timeout=10)
    assert await execute_count(gate.js) == 0
    learned = await recorded_when_known(client, proposal)
    # From the record, or from the decision still finishing (then with the stage's
    # refusal too: past the requester's deadline, or past the order's own).
    assert learned.outcome == "deny", learned
    assert learned.reason_codes[:2] == ("recorded_verdict", "dispatch_failed"), learned
    assert set(learned.reason_codes[2:]) <= {
        "requester_deadline_passed",
        "order_deadline_invalid",
    }, learned
    assert await execute_count(gate.js) == 0

    slowed.before = 0.1  # the control: slowed inside the deadline, it publishes
    allowed = await client.propose(deletion(client, "doc-4712"))
    assert allowed.outcome == "allow", allowed
    assert await execute_count(gate.js) == 1


@pytest.mark.claim("verdict-agrees.gate-timeout-learned")
async def test_a_gate_slowed_after_its_publish_is_learned_from_the_record(
    gate: RunningGate, nc: Client, seeded_state: StateDir
) -> None:
    client = impatient(nc, seeded_state)
    gate.gate.dispatch = Slowed(gate.gate.dispatch, after=client.timeout + client.grace + 1.0)
    proposal = deletion(client, "doc-4711")
    told = await client.propose(proposal)
    assert unsettled(told), told
    assert await execute_count(gate.js) == 1  # stored before the reply was due
    learned = await client.recorded(proposal.proposal_id, client.sign(proposal))
    (stored,) = await stored_orders(gate.js)
    order = open_order(stored.data or b"", seeded_state.key("gate"))
    assert (learned.outcome, learned.order_id) == ("allow", order.order_id)
    assert learned.expires_at_ms == order.not_after_ms
    assert await execute_count(gate.js) == 1


@pytest.mark.claim("verdict-agrees.gate-timeout-learned")
async def test_a_recorded_request_that_gives_up_leaves_the_decision_it_waited_on(
    gate: RunningGate, nc: Client, seeded_state: StateDir
) -> None:
    """A request for the recorded verdict that is cancelled while the proposal is still
    being decided stops waiting and nothing else: the decision goes on, stores its one
    order, and the next request for the record gets that allow."""
    client = impatient(nc, seeded_state)
    slowed = Slowed(gate.gate.dispatch, after=0.5)
    gate.gate.dispatch = slowed
    proposal = deletion(client, "doc-4711")
    deciding = asyncio.ensure_future(gate.gate.decide(proposal))
    await wait_for(lambda: slowed.calls == 1, timeout=10)
    asker = asyncio.ensure_future(gate.gate.recorded(proposal))
    await wait_for(lambda: len(gate.gate._deciding.get(proposal.proposal_id, ())) == 1)
    asker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asker
    assert not deciding.done()
    learned = await gate.gate.recorded(proposal)  # waits for the same decision
    answer = await deciding
    assert answer.outcome == "allow", answer
    assert learned.reason_codes == ("recorded_verdict", *answer.reason_codes), learned
    assert msgspec.structs.replace(learned, reason_codes=answer.reason_codes) == answer
    (stored,) = await stored_orders(gate.js)
    assert open_order(stored.data or b"", seeded_state.key("gate")).order_id == answer.order_id
    assert await execute_count(gate.js) == 1


@pytest.mark.claim("verdict-agrees.late-proposal-not-decided")
async def test_a_proposal_that_arrives_after_its_deadline_is_never_decided(
    gate: RunningGate, nc: Client, seeded_state: StateDir
) -> None:
    client = runtime_client(nc, seeded_state)
    entries = ledger_entries(seeded_state)
    late = msgspec.structs.replace(deletion(client, "doc-4711"), reply_by_ms=wall_clock_ms() - 1)
    answer = await client.recorded(late.proposal_id, client.sign(late))
    assert (answer.outcome, answer.reason_codes) == (
        "deny",
        ("recorded_verdict", "no_order_recorded"),
    )
    assert ledger_entries(seeded_state) == entries
    assert await execute_count(gate.js) == 0
    # the control: the same action with its deadline ahead is decided and allowed
    assert (await client.propose(deletion(client, "doc-4711"))).outcome == "allow"


@dataclass
class SlowHold:
    """The gate's hold handler (the real approval desk), answering after a delay."""

    inner: object
    delay: float
    made: list[Verdict] = dataclasses.field(default_factory=list)

    async def hold(self, proposal: Proposal, normalized: Normalized, decision: Decision) -> Verdict:
        held: Verdict = await self.inner.hold(proposal, normalized, decision)  # type: ignore[attr-defined]
        self.made.append(held)
        await asyncio.sleep(self.delay)
        return held

    async def held_for(self, proposal: Proposal) -> Verdict | None:
        found: Verdict | None = await self.inner.held_for(proposal)  # type: ignore[attr-defined]
        return found

    async def withdraw(self, approval_id: str, reason: str) -> bool:
        done: bool = await self.inner.withdraw(approval_id, reason)  # type: ignore[attr-defined]
        return done


@pytest.mark.claim("verdict-agrees.late-hold-withdrawn")
async def test_a_hold_made_after_the_deadline_is_withdrawn(
    gate: RunningGate, nc: Client, seeded_state: StateDir
) -> None:
    client = impatient(nc, seeded_state)
    slow = SlowHold(gate.desk, delay=client.timeout + 0.2)
    gate.gate.hold = slow
    proposal = court_filing(client)
    told = await client.propose(proposal)
    assert told.outcome == "deny", told
    (made,) = slow.made
    approval_id = made.approval_id
    assert made.outcome == "held"
    assert approval_id is not None

    async def withdrawn() -> bool:
        return await state_of(gate, approval_id) == "invalidated"

    await wait_for(withdrawn, timeout=10)
    assert await gate.approvals.list_open() == []  # nothing to approve
    record = await gate.approvals.get(approval_id)
    assert record is not None
    late = await approver(nc, seeded_state, ATTORNEY).resolve(
        approval_id, "allow-once", record.digest
    )
    assert (late.accepted, late.reason_codes) == (False, ("approval_not_pending",))
    assert await execute_count(gate.js) == 0
    learned = await recorded_when_known(client, proposal)
    assert (learned.outcome, learned.reason_codes) == (
        "deny",
        ("recorded_verdict", "no_order_recorded"),
    )


# --- an unconfirmed order is settled by a void ---------------------------------------


@pytest.mark.claim("verdict-agrees.unconfirmed-order-voided")
async def test_a_void_finds_a_stored_order_or_takes_its_place_for_good(
    gate: RunningGate, nc: Client, seeded_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    fence = OrderFence(gate.js, seeded_state.key("gate"), wall_clock_ms)
    order, signed = make_signed_order(seeded_state.key("gate"), "dms", native_tool="dms_delete")
    await gate.js.publish(names.execute_subject("dms"), signed, headers=order_headers(order))
    assert await fence("dms", order.order_id) is True  # stored: nothing added
    assert await execute_count(gate.js) == 1

    lost, lost_signed = make_signed_order(seeded_state.key("gate"), "dms", native_tool="dms_delete")
    assert await fence("dms", lost.order_id) is False  # not stored: the void is, now
    assert await execute_count(gate.js) == 2
    ack = await gate.js.publish(
        names.execute_subject("dms"), lost_signed, headers=order_headers(lost)
    )
    assert ack.duplicate, "the genuine order got in after its void"
    inbox = await ReportInbox.open(nc, "dms", seeded_state.key("dms").verify_key)
    reports = {}
    async with connectors_running(seeded_state, nats_server.url):
        while lost.order_id not in reports:
            report = await inbox.next(timeout=20)
            reports[report.order_id] = report
    assert (reports[lost.order_id].status, reports[lost.order_id].reason_code) == (
        "failed",
        REASON_WRONG_PAYLOAD_TYPE,
    )


# --- an outcome the book settled and the ledger lost ---------------------------------


def connector_report(key: SigningKey, order_id: str, status: ReportStatus) -> bytes:
    report = ExecutionReport(
        schema="smf.execution-report/1",
        order_id=order_id,
        connector_id="dms",
        status=status,
        reason_code="executed" if status == "confirmed" else "connector_error",
        at_ms=wall_clock_ms(),
    )
    return encode_envelope(sign_struct(names.PAYLOAD_REPORT, report, [key]))


@pytest.mark.claim("verdict-agrees.outcome-entry-repaired")
async def test_an_outcome_the_book_settled_and_the_ledger_lost_is_written_once(
    gate: RunningGate, nc: Client, seeded_state: StateDir
) -> None:
    """The book's settle and the ledger's entry are two commits; a gate killed between
    them (the load test's kill found it) leaves the order settled with no outcome. The
    report it never acknowledged comes again, and the outcome is written then, once."""
    client = runtime_client(nc, seeded_state)
    verdict = await client.propose(deletion(client, "doc-4711"))
    assert verdict.order_id is not None
    decision = str(verdict.decision_id)
    # the first of the two commits, as the killed gate left it
    assert await gate.orders.settle(verdict.order_id, "consumed", wall_clock_ms()) is not None
    assert evidence_rows(seeded_state.ledger, decision)[1:] == []
    # a report that settled something else (failed) is not taken for this one
    await file_report(
        nc, "dms", connector_report(seeded_state.key("dms"), verdict.order_id, "failed")
    )
    assert evidence_rows(seeded_state.ledger, decision)[1:] == []
    for _ in range(2):  # the unacknowledged report, redelivered; then again
        await file_report(
            nc, "dms", connector_report(seeded_state.key("dms"), verdict.order_id, "confirmed")
        )
        assert evidence_rows(seeded_state.ledger, decision)[1:] == [("consumed", ("executed",))]
