"""Re-requesting an expired approval: a new proposal and binding, never a revival.

A real nats-server, the gate with its SQLite stores and ledger, the example
connectors, and the runtime side (``smf_assurance.adapters.rerequest``) holding what
it proposed. What these tests prove:

- The requester's signed re-request of her expired filing makes the runtime propose
  it anew: a new decision, a new binding and a new approval id, which the attorney
  approves and the connector files once. The old approval stays ``expired``: the
  attorney's allow-once for its binding is refused and its binding cannot be
  claimed; the ledger records the re-request against it.
- Only the requester may re-request, only an expired approval, only freshly, only
  signed by herself; anyone else's re-request is answered as for an id never held.
- A notice no gate key signed, or one replayed onto another approval's subject,
  makes the runtime propose nothing.

What they do not prove: the Hermes and OpenClaw adapters (they do not keep held
proposals; see docs/CONSOLE.md), the console's page (tests/browser/test_requester_browser.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import cast

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from smf_assurance.adapters.rerequest import HeldProposals
from smf_assurance.approver.client import ApproverError
from smf_assurance.ops.cli.commands.approvals import asked_again_words
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    AskAgain,
    ReRequest,
    ReRequestReply,
    TrackRequest,
    binding_digest,
    sign_ask_again,
)
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.messages import Verdict
from tests.support import approval_desk as desk
from tests.support.approval_desk import (
    ATTORNEY,
    CUSTOMER_TTL_MS,
    PARALEGAL,
    approve,
    approver,
    connectors_running,
    court_filing,
    ledger_rows,
    runtime,
    status,
)
from tests.support.bus_helpers import wait_for
from tests.support.cli_ops import arun, assert_one_line_failure
from tests.support.clocks import OffsetClock as Clock

# The approval desk's fixtures, shared rather than copied.
clock = desk.clock
gate = desk.gate


def rerequest_bytes(state: StateDir, signer: str, approval_id: str, *, age_ms: int = 0) -> bytes:
    request = ReRequest(
        schema="smf.approval-rerequest/1",
        approval_id=approval_id,
        requester_id=signer,
        requested_at_ms=time.time_ns() // 1_000_000 - age_ms,
    )
    return encode_envelope(sign_struct(names.PAYLOAD_REREQUEST, request, [state.key(signer)]))


async def rerequest(nc: Client, signed: bytes) -> ReRequestReply:
    reply = await nc.request(names.APPROVAL_REREQUEST, signed, timeout=5)
    return msgspec.json.decode(reply.data, type=ReRequestReply)


async def expire(gate: RunningGate, clock: Clock, approval_id: str) -> None:
    """Past the TTL on the gate's clock, swept, then the clock back to wall time (the
    approval stays expired: ``expired`` is terminal)."""
    clock.advance(CUSTOMER_TTL_MS + 1_000)
    await gate.desk.sweep()
    clock.offset_ms = 0
    record = await gate.approvals.get(approval_id)
    assert record is not None
    assert record.state == "expired"


@pytest.mark.claim(
    "approver-desk.rerequest-new-binding", "approver-desk.rerequest-says-what-happened"
)
async def test_an_expired_filing_asked_again_is_a_new_binding_and_the_old_stays_dead(
    gate: RunningGate,
    nc: Client,
    approvers_state: StateDir,
    clock: Clock,
    nats_server: EmbeddedNatsServer,
) -> None:
    again: asyncio.Queue[Verdict] = asyncio.Queue()

    async def told(verdict: Verdict) -> None:
        await again.put(verdict)

    client = runtime(nc, approvers_state)
    held = HeldProposals(client, on_verdict=told)
    sub = await held.serve()
    proposal = court_filing(client)
    first = await held.propose(proposal)
    old_id = first.approval_id
    assert first.outcome == "held"
    assert old_id is not None
    old = await gate.approvals.get(old_id)
    assert old is not None
    await expire(gate, clock, old_id)
    # In use an approval expires minutes after its proposal's deadline (seconds): the
    # runtime asks again with a deadline of its own, else the gate decides nothing.
    reply_by = proposal.reply_by_ms or 0
    await wait_for(lambda: wall_clock_ms() > reply_by, timeout=client.timeout + 5)

    reply = await rerequest(nc, rerequest_bytes(approvers_state, PARALEGAL, old_id))
    assert (reply.accepted, reply.reason_codes) == (True, ())
    new = await asyncio.wait_for(again.get(), 10)
    assert new.outcome == "held", new
    assert new.approval_id is not None
    assert new.approval_id != old_id
    # The requester is told what came of it: the new approval the runtime's proposal made.
    assert (reply.proposed_again, reply.new_approval_id) == ("held", new.approval_id)
    assert reply.waited_ms == gate.desk.rerequest_wait_ms
    assert new.decision_id != first.decision_id
    assert new.operation_hash == first.operation_hash, "the same action, asked again"
    fresh = await gate.approvals.get(new.approval_id)
    assert fresh is not None
    assert fresh.state == "pending"
    assert fresh.digest != old.digest
    assert fresh.binding.actor_id == PARALEGAL

    # The old binding is dead: an allow-once signed for it is refused, nothing is claimed.
    attorney = approver(nc, approvers_state, ATTORNEY)
    stale = await attorney.resolve(old_id, "allow-once", binding_digest(old.binding))
    assert (stale.accepted, stale.reason_codes) == (False, ("approval_not_pending",))
    with pytest.raises(ApproverError, match="approval_closed"):
        await attorney.show(old_id)
    # The request is on the old approval's record, and its one end stays its only one.
    rows = ledger_rows(approvers_state.ledger, old_id)
    assert (None, ("approval_rerequested",)) in rows
    assert [status for status, _ in rows].count("expired") == 1

    async with connectors_running(approvers_state, nats_server.url):
        allowed = await approve(nc, approvers_state, new.approval_id)
        assert allowed.accepted

        async def consumed() -> bool:
            return await status(nc, new.approval_id or "") == "consumed"

        await wait_for(consumed, timeout=10)
    filings = sorted((approvers_state.connector_dir("court-efiling") / "outbox").glob("*.json"))
    assert [p.stem for p in filings] == [allowed.order_id], "filed once, for the new approval"
    after = await gate.approvals.get(old_id)
    assert after is not None
    assert (after.state, after.order_id) == ("expired", None)
    await sub.unsubscribe()


@pytest.mark.claim("approver-desk.rerequest-says-what-happened")
async def test_asked_again_with_no_runtime_holding_it_says_nothing_was_proposed(
    gate: RunningGate, nc: Client, approvers_state: StateDir, clock: Clock
) -> None:
    """A runtime that no longer holds the action (the Hermes and OpenClaw adapters hold
    none) proposes nothing: the gate waits its time and answers that nothing was
    proposed anew, never that it was asked again; the CLI says so in words. A proposal of
    another action meanwhile is not taken for it."""
    gate.desk.rerequest_wait_ms = 400
    client = runtime(nc, approvers_state)
    held = await client.propose(court_filing(client, content="Held, then forgotten."))
    assert held.outcome == "held"
    assert held.approval_id is not None
    await expire(gate, clock, held.approval_id)
    open_before = {r.binding.approval_id for r in await gate.approvals.list_open()}

    asked = asyncio.ensure_future(
        rerequest(nc, rerequest_bytes(approvers_state, PARALEGAL, held.approval_id))
    )
    other = await client.propose(court_filing(client, content="Another filing altogether."))
    assert other.outcome == "held"
    assert other.operation_hash != held.operation_hash
    reply = await asked

    assert (reply.accepted, reply.reason_codes) == (True, ())
    assert (reply.proposed_again, reply.new_approval_id) == (None, None)
    assert reply.waited_ms == 400
    assert asked_again_words(reply).startswith("not proposed anew: no runtime proposed the")
    assert "within 0.4 s" in asked_again_words(reply)
    open_after = {r.binding.approval_id for r in await gate.approvals.list_open()}
    assert open_after - open_before == {other.approval_id}, "no new approval of the action"


@pytest.mark.claim("approver-desk.rerequest-new-binding")
async def test_only_the_requester_may_ask_again_and_only_an_expired_approval(
    gate: RunningGate,
    nc: Client,
    approvers_state: StateDir,
    clock: Clock,
    nats_server: EmbeddedNatsServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gate.desk.rerequest_wait_ms = 300
    client = runtime(nc, approvers_state)
    held = HeldProposals(client)
    pending = await held.propose(court_filing(client, content="Still waiting."))
    expired = await held.propose(court_filing(client, content="Nobody decided in time."))
    assert pending.approval_id is not None
    assert expired.approval_id is not None
    clock.advance(CUSTOMER_TTL_MS + 1_000)
    await gate.desk.sweep()
    clock.offset_ms = 0
    # A new pending one, held after the sweep.
    waiting = await held.propose(court_filing(client, content="Held after the sweep."))
    assert waiting.approval_id is not None
    seen = await nc.subscribe(f"{names.APPROVAL_AGAIN_PREFIX}.>")

    cases = {
        "the attorney, not the requester": (ATTORNEY, expired.approval_id, 0, "approval_not_found"),
        "not expired": (PARALEGAL, waiting.approval_id, 0, "approval_not_expired"),
        "stale": (PARALEGAL, expired.approval_id, 10 * 60_000, "stale_rerequest"),
    }
    for case, (signer, approval_id, age, reason) in cases.items():
        signed = rerequest_bytes(approvers_state, signer, approval_id, age_ms=age)
        reply = await rerequest(nc, signed)
        assert (reply.accepted, reply.reason_codes) == (False, (reason,)), case
    forged = encode_envelope(
        sign_struct(
            names.PAYLOAD_REREQUEST,
            ReRequest(
                schema="smf.approval-rerequest/1",
                approval_id=expired.approval_id,
                requester_id=PARALEGAL,
                requested_at_ms=time.time_ns() // 1_000_000,
            ),
            [generate_signing_key()],
        )
    )
    assert (await rerequest(nc, forged)).reason_codes == ("unknown_signer",)
    await nc.flush()
    assert seen.pending_msgs == 0, "no refused re-request told any runtime anything"
    assert await status(nc, expired.approval_id) == "expired"

    # The command line: the attorney is refused in one line (and in JSON); the
    # paralegal's re-request is accepted and tells the runtimes, once.
    where = ["--nats", nats_server.url, "--key"]
    code, out, err = await arun(
        [
            "approvals",
            "rerequest",
            expired.approval_id,
            *where,
            str(approvers_state.key_path(ATTORNEY)),
        ],
        capsys,
    )
    assert_one_line_failure(code, err, "not asked again: approval_not_found")
    code, out, _ = await arun(
        [
            *("approvals", "rerequest", expired.approval_id, *where),
            *(str(approvers_state.key_path(ATTORNEY)), "--json"),
        ],
        capsys,
    )
    assert code == 1
    assert json.loads(out) == {
        "approval_id": expired.approval_id,
        "accepted": False,
        "reason_codes": ["approval_not_found"],
        "proposed_again": None,
        "new_approval_id": None,
        "waited_ms": 0,
    }
    code, out, err = await arun(
        [
            "approvals",
            "rerequest",
            expired.approval_id,
            *where,
            str(approvers_state.key_path(PARALEGAL)),
        ],
        capsys,
    )
    assert (code, err) == (0, "")
    # This runtime holds the proposals but does not serve notices: nothing is proposed.
    assert "not proposed anew: no runtime proposed the action again within 0.3 s" in out
    await wait_for(lambda: _pending(seen), timeout=5)
    assert seen.pending_msgs == 1
    assert await status(nc, expired.approval_id) == "expired"
    await seen.unsubscribe()


async def _pending(sub: Subscription) -> bool:
    return sub.pending_msgs > 0


@dataclass
class FakeDelivery:
    """What the subscription hands the callback: a subject and the bytes."""

    subject: str
    data: bytes


async def test_a_notice_the_gate_did_not_sign_or_for_another_approval_proposes_nothing(
    gate: RunningGate, nc: Client, approvers_state: StateDir, clock: Clock
) -> None:
    proposed: list[Verdict] = []

    async def told(verdict: Verdict) -> None:
        proposed.append(verdict)

    client = runtime(nc, approvers_state)
    held = HeldProposals(client, on_verdict=told)
    one = await held.propose(court_filing(client, content="One."))
    two = await held.propose(court_filing(client, content="Two."))
    assert one.approval_id is not None
    assert two.approval_id is not None
    assert one.decision_id is not None
    assert one.operation_hash is not None
    notice = AskAgain(
        schema="smf.approval-ask-again/1",
        approval_id=one.approval_id,
        decision_id=one.decision_id,
        operation_hash=one.operation_hash,
        asked_at_ms=time.time_ns() // 1_000_000,
    )
    unsigned_by_gate = sign_ask_again(notice, approvers_state.key(ATTORNEY))
    genuine = sign_ask_again(notice, approvers_state.key("gate"))
    for subject_of, data in (
        (one.approval_id, unsigned_by_gate),
        (two.approval_id, genuine),  # replayed on another approval's subject
    ):
        delivery = FakeDelivery(names.approval_again_subject(subject_of), data)
        await held._on_notice(cast(Msg, delivery))
    assert proposed == []
    await held._on_notice(
        cast(Msg, FakeDelivery(names.approval_again_subject(one.approval_id), genuine))
    )
    assert [v.outcome for v in proposed] == ["held"], "the genuine notice proposes it again"
    await held._on_notice(
        cast(Msg, FakeDelivery(names.approval_again_subject(one.approval_id), genuine))
    )
    assert len(proposed) == 1, "once per held proposal"


async def test_no_evidence_no_key_or_a_malformed_request_tells_no_runtime(
    gate: RunningGate, nc: Client, approvers_state: StateDir, clock: Clock
) -> None:
    """Fail closed: a re-request that cannot be written to the ledger, or that the gate
    cannot sign a notice for, is refused and nothing reaches a runtime; a signed
    envelope whose payload is no ReRequest is ``malformed_request``."""
    client = runtime(nc, approvers_state)
    held = HeldProposals(client)
    verdict = await held.propose(court_filing(client, content="Expired, asked again in vain."))
    assert verdict.approval_id is not None
    clock.advance(CUSTOMER_TTL_MS + 1_000)
    await gate.desk.sweep()
    clock.offset_ms = 0
    seen = await nc.subscribe(f"{names.APPROVAL_AGAIN_PREFIX}.>")

    # A track request signed under the re-request's payload type: not a ReRequest.
    track = TrackRequest(
        schema="smf.approval-track/1",
        viewer_id=PARALEGAL,
        approval_ids=(verdict.approval_id,),
        requested_at_ms=time.time_ns() // 1_000_000,
    )
    odd = encode_envelope(
        sign_struct(names.PAYLOAD_REREQUEST, track, [approvers_state.key(PARALEGAL)])
    )
    assert (await rerequest(nc, odd)).reason_codes == ("malformed_request",)
    signer, gate.desk.signer = gate.desk.signer, None
    reply = await rerequest(nc, rerequest_bytes(approvers_state, PARALEGAL, verdict.approval_id))
    assert reply.reason_codes == ("gate_key_missing",)
    gate.desk.signer = signer
    await gate.ledger.close()
    reply = await rerequest(nc, rerequest_bytes(approvers_state, PARALEGAL, verdict.approval_id))
    assert (reply.accepted, reply.reason_codes) == (False, ("evidence_store_unavailable",))
    await nc.flush()
    assert seen.pending_msgs == 0
    await seen.unsubscribe()


async def test_a_notice_for_another_operation_or_a_forgotten_proposal_proposes_nothing(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """A gate-signed notice naming the held approval and its decision but another
    operation proposes nothing; beyond its capacity the runtime forgets the oldest
    held proposal, and a notice for it proposes nothing either."""
    proposed: list[Verdict] = []

    async def told(verdict: Verdict) -> None:
        proposed.append(verdict)

    client = runtime(nc, approvers_state)
    held = HeldProposals(client, capacity=1, on_verdict=told)
    first = await held.propose(court_filing(client, content="First."))
    second = await held.propose(court_filing(client, content="Second."))
    for verdict, operation in ((second, "sha256:" + "0" * 64), (first, first.operation_hash)):
        assert verdict.approval_id is not None
        assert verdict.decision_id is not None
        assert operation is not None
        notice = AskAgain(
            schema="smf.approval-ask-again/1",
            approval_id=verdict.approval_id,
            decision_id=verdict.decision_id,
            operation_hash=operation,
            asked_at_ms=time.time_ns() // 1_000_000,
        )
        delivery = FakeDelivery(
            names.approval_again_subject(verdict.approval_id),
            sign_ask_again(notice, approvers_state.key("gate")),
        )
        await held._on_notice(cast(Msg, delivery))
    assert proposed == []
