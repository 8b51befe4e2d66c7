"""Where a request stands, for its requester, and the connector's receipt.

A real nats-server, the gate with its SQLite stores and ledger, and the example
connectors on their own credentials. What these tests prove:

- The court's filing number the connector returns with a confirmed execution is
  kept with the approval's outcome, and ``smf.approval.track`` shows it to the
  requester and to an entitled approver; it is in neither the evidence ledger
  nor the gate's log lines.
- A denial's closed reason reaches its requester as reason codes (never the
  approver's note).
- Only the requester (the binding's actor, in one of their tenants) and those
  who may resolve the approval get an answer for its id; anyone else's answer
  leaves it out, exactly like an id the gate never held. A stale, forged or
  misnamed track request is refused.

What they do not prove: the console's page (tests/browser/test_requester_browser.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import structlog
from nats.aio.client import Client

from smf_assurance.adapters.connectors.court_efiling import filing_number
from smf_assurance.approver.client import ApproverClient, ApproverError
from smf_assurance.ops.local.bus import NATS_URL_FILE
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import TrackRequest
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.keys import generate_signing_key
from tests.support import approval_desk as desk
from tests.support.approval_desk import (
    ATTORNEY,
    OTHER_TENANT_ATTORNEY,
    PARALEGAL,
    SELF_APPROVER,
    approve,
    approver,
    connectors_running,
    held_filing,
    ledger_rows,
    status,
)
from tests.support.bus_helpers import random_identity, wait_for
from tests.support.cli_ops import arun, assert_one_line_failure

# The approval desk's fixtures, shared rather than copied.
clock = desk.clock
gate = desk.gate


def ledger_bytes(ledger: Path) -> bytes:
    return b"".join(
        Path(f"{ledger}{suffix}").read_bytes()
        for suffix in ("", "-wal")
        if Path(f"{ledger}{suffix}").exists()
    )


@pytest.mark.claim("approver-desk.requester-sees-own-only")
async def test_the_filing_number_is_kept_with_the_outcome_for_requester_and_approver(
    gate: RunningGate,
    nc: Client,
    approvers_state: StateDir,
    nats_server: EmbeddedNatsServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    with structlog.testing.capture_logs() as logs:
        async with connectors_running(approvers_state, nats_server.url):
            reply = await approve(nc, approvers_state, approval_id)
            assert reply.order_id is not None

            async def consumed() -> bool:
                return await status(nc, approval_id) == "consumed"

            await wait_for(consumed, timeout=10)
    number = filing_number(reply.order_id)
    court = (
        approvers_state.connector_dir("court-efiling") / "outbox" / f"{reply.order_id}.json"
    ).read_text()
    assert number in court, "the receipt is the number the court holds for the filing"

    mine = await approver(nc, approvers_state, PARALEGAL).track([approval_id])
    assert [(t.relation, t.state, t.receipt, t.order_id) for t in mine.approvals] == [
        ("requester", "consumed", number, reply.order_id)
    ]
    theirs = await approver(nc, approvers_state, ATTORNEY).track([approval_id])
    assert [(t.relation, t.receipt) for t in theirs.approvals] == [("approver", number)]

    # ``approvals show`` of the filed approval names its state and the filing number.
    (approvers_state.root / NATS_URL_FILE).write_text(nats_server.url)
    code, _, err = await arun(
        [
            "approvals",
            "show",
            approval_id,
            "--state-dir",
            str(approvers_state.root),
            "--key",
            str(approvers_state.key_path(ATTORNEY)),
        ],
        capsys,
    )
    assert_one_line_failure(code, err, "(state consumed)", f"the connector's receipt {number}")

    assert ledger_rows(approvers_state.ledger, approval_id)[-1][0] == "consumed"
    assert number.encode() not in ledger_bytes(approvers_state.ledger), (
        "the receipt reached the ledger"
    )
    assert logs, "the gate logged the flow"
    assert all(number not in repr(entry) for entry in logs), "the receipt reached a log line"


async def test_a_denials_reason_reaches_its_requester_and_the_note_does_not(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    note = "Attach exhibit B and send it again."
    _, reply = await approver(nc, approvers_state, ATTORNEY).review_and_resolve(
        approval_id, "deny", deny_reason="wrong_document", note=note
    )
    assert reply.accepted
    mine = await approver(nc, approvers_state, PARALEGAL).track([approval_id])
    (shown,) = mine.approvals
    assert (shown.state, shown.outcome_codes, shown.receipt) == (
        "denied",
        ("approver_denied", "approver_denied_wrong_document"),
        None,
    )
    assert note not in repr(mine)


@pytest.mark.claim("approver-desk.requester-sees-own-only")
async def test_nobody_else_learns_of_a_request(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """The paralegal's answer holds her own request and leaves out another person's
    exactly like an id the gate never held; another tenant's attorney gets nothing; an
    attorney of the tenant sees the paralegal's as its approver and their own as its
    requester."""
    paralegals = await held_filing(nc, approvers_state)
    others = await held_filing(nc, approvers_state, actor_id=SELF_APPROVER)
    assert paralegals.approval_id is not None
    assert others.approval_id is not None
    never_held = random_identity()
    ids = [paralegals.approval_id, others.approval_id, never_held]

    mine = await approver(nc, approvers_state, PARALEGAL).track(ids)
    assert [(t.approval_id, t.relation, t.state) for t in mine.approvals] == [
        (paralegals.approval_id, "requester", "pending")
    ], "the paralegal sees her own request only"
    stranger = await approver(nc, approvers_state, OTHER_TENANT_ATTORNEY).track(ids)
    assert stranger.approvals == ()
    sam = await approver(nc, approvers_state, SELF_APPROVER).track(ids)
    assert {t.approval_id: t.relation for t in sam.approvals} == {
        paralegals.approval_id: "approver",
        others.approval_id: "requester",
    }


async def test_a_stale_forged_or_misnamed_track_request_is_refused(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    now = time.time_ns() // 1_000_000

    async def ask(key_name: str | None, viewer: str, at_ms: int) -> str:
        request = TrackRequest(
            schema="smf.approval-track/1",
            viewer_id=viewer,
            approval_ids=(approval_id,),
            requested_at_ms=at_ms,
        )
        key = generate_signing_key() if key_name is None else approvers_state.key(key_name)
        signed = encode_envelope(sign_struct(names.PAYLOAD_TRACK_REQUEST, request, [key]))
        reply = await nc.request(names.APPROVAL_TRACK, signed, timeout=5)
        assert reply.headers is not None, reply.data
        assert b"pending" not in reply.data
        return reply.headers["Nats-Service-Error"]

    assert await ask(PARALEGAL, PARALEGAL, now - 10 * 60_000) == "stale_track_request"
    assert await ask(None, PARALEGAL, now) == "unknown_signer"
    assert await ask(ATTORNEY, PARALEGAL, now) == "resolver_identity_mismatch"
    assert await ask("runtime", PARALEGAL, now) == "signer_role_mismatch"
    garbage = await nc.request(names.APPROVAL_TRACK, b"not an envelope", timeout=5)
    assert (garbage.headers or {}).get("Nats-Service-Error") == "malformed_request"
    with pytest.raises(ApproverError, match="unknown_signer"):
        await ApproverClient(nc, generate_signing_key(), PARALEGAL).track([approval_id])
