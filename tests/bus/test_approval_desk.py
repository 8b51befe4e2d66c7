"""The approval desk through the whole gate: hold, show, resolve, claim once, report.

ARCHITECTURE.md,
"Exact-action approval". Real nats-server (JetStream streams as the gate
creates them), real SQLite files in a provisioned state directory, the full
gate from ``smf_assurance.pipeline.assembly.start_gate`` with its stages on the bus. Approvers are
synthetic: :class:`smf_assurance.approver.client.ApproverClient` with keys from the state
directory's registry (plus a few extra principals written into it here). The
gate's clock is a :class:`Clock` the test advances; the background sweep is
switched off and ``desk.sweep()`` is called where a test needs it.

What these tests prove:

- A paralegal's court filing is held (``held``, approval id, expiry, the
  ``licensed_attorney`` role), announced on ``SMF_APPROVALS`` with identities
  and rule ids but neither the content nor the recipient, shown with its
  content to the attorney, and after one allow-once produces exactly one
  ExecuteOrder (``Smf-Approval-Id`` set), one filing in the connector's outbox,
  a gate-signed allow Verdict on the runtime's outcome subject (every outcome
  read here is opened with ``open_outcome``), and ``consumed``; the content is
  gone from the store and never reached the ledger file.
- The outcome is signed by the gate: the same Verdict unsigned, or signed by a
  runtime's, an approver's or a connector's key, does not open, nor does the
  gate's own outcome checked against another approval, decision or operation.
- A runtime-executed held action (OpenClaw's ``message``, no connector): the
  claim records the order ``order_id_for(operation_hash, decision_id)`` and
  dispatches nothing; the proposing runtime's signed report settles it
  (confirmed -> ``consumed``, failed -> ``failed``, ``executed_params_mismatch``
  -> ``execution_unknown`` with ``binding_broken`` in the ledger), once. The
  same order reported by another runtime, a runtime naming the proposer, the
  proposer naming another runtime, an approver, a connector, the gate or an
  unknown key changes nothing (``executing``), and the proposer's report still
  settles it afterwards. A runtime key never settles a connector order, not
  even the runtime that proposed it; the connector's own report does.
- Every refusal of an approval answers its own reason code, publishes
  nothing, and leaves the approval as it was (the attorney's allow-once still
  works afterwards): wrong digest, self-approval, wrong role, wrong tenant,
  unknown, forged, tampered or wrongly-roled signer, duplicate and replayed
  resolutions, an old digest against a new approval, expiry, deny-then-allow.
  ``show`` (the privileged content) is refused to anyone but an approver who
  holds the approval's required role for its tenant.
- A re-proposal with any one changed field (argument, content, destination,
  actor, matter, tenant) is a new decision and a new approval; approving the
  old one sends the old action. A release/projection change between hold and
  claim refuses the claim (``binding_changed``) and closes the approval.
- The held TTL is the customer overlay's 300 s for tenant-acme and the 600 s
  cap elsewhere; no report by the connector deadline -> ``execution_unknown``,
  which a late report does not change.

What they do not prove: that the connector's side effect happened once in the
outside world (the outbox is our own example connector; one store winner is
one order, and one order is one side effect only through the connector's
idempotency record); anything about more than one gate process (see
``tests/bus/test_approval_race.py``); timing under load; the NATS account
permissions of a deployment (defence in depth, not tested here); the approver
command line (not part of these files); the exact expiry millisecond and every
store transition (the store's contract and state-machine tests do that).
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.approver.client import ApproverClient, ApproverError, content_matches
from smf_assurance.core.projection import PolicySet
from smf_assurance.governance.compiler import compile_corpus, write_release
from smf_assurance.governance.projections import SCENARIO_CORPUS, load_policy_set, package_path
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import (
    DEMO_TENANT,
    RUNTIME_ID,
    StateDir,
)
from smf_assurance.ops.runtimes.provision import (
    OPENCLAW_PRINCIPAL,
    OPENCLAW_RUNTIME_ID,
)
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import (
    MAX_TTL_MS,
    TERMINAL_STATES,
    ApprovalResolution,
    OutcomeMismatchError,
    PendingAnnouncement,
    ShowRequest,
    open_outcome,
)
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.envelope import content_hash_of, destination_identity_of
from smf_assurance.subjects.keys import SigningKey, generate_signing_key
from smf_assurance.subjects.messages import (
    DataFacts,
    ExecutionReport,
    ProposedDestination,
    Verdict,
    order_id_for,
)
from smf_assurance.subjects.registry import load_registry
from tests.support.approval_desk import (
    ATTORNEY,
    COURT_FILING,
    CUSTOMER_TTL_MS,
    OTHER_TENANT,
    OTHER_TENANT_ATTORNEY,
    PARALEGAL,
    SELF_APPROVER,
    approve,
    approver,
    clock,
    connectors_running,
    file_report,
    gate,
    held_filing,
    hold,
    ledger_rows,
    ledger_statuses,
    next_outcome,
    order_count,
    orders,
    send,
    state_of,
    status,
    with_payload,
)
from tests.support.builders import Decided
from tests.support.bus_helpers import ExecuteSpy, random_identity, wait_for
from tests.support.clocks import OffsetClock as Clock

__all__ = ["clock", "gate"]


# --- the runtime, the approvers, what reached the stream and the ledger -------


def stop_entries(ledger: Path) -> list[tuple[str, ...]]:
    """The reason codes of every refusal entry that names no approval and says
    ``binding_broken``: the stops of runtimes whose reports broke a binding."""
    uri = ledger.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        rows = conn.execute(
            "SELECT reason_codes FROM evidence_entries "
            "WHERE (approval_id IS NULL OR approval_id = '') AND reason_codes LIKE ?",
            ("%binding_broken%",),
        ).fetchall()
    return [tuple(json.loads(reasons)) for (reasons,) in rows]


def resolution_bytes(
    key: SigningKey,
    *,
    approval_id: str,
    digest: str,
    resolver_id: str,
    decision: str = "allow-once",
) -> bytes:
    """A resolution signed by ``key``, naming whatever resolver the test wants."""
    resolution = ApprovalResolution(
        schema="smf.approval-resolution/1",
        approval_id=approval_id,
        decision=decision,  # type: ignore[arg-type]
        binding_digest=digest,
        resolver_id=resolver_id,
        resolved_at_ms=time.time_ns() // 1_000_000,
    )
    return dsse.encode_envelope(dsse.sign_struct(names.PAYLOAD_RESOLUTION, resolution, [key]))


# --- the held flow, end to end --------------------------------------------------


async def test_pending_announcement_confirms_no_guess_and_names_no_person_or_matter(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """From the announcement alone a guessed recipient, argument or content
    cannot be confirmed: it carries none of them, no hash of any of them (the
    identities a guess would be checked against are computed here and searched
    for), no binding digest, and no matter, organization or actor id. The
    binding and digest are the gate's, shown to an entitled approver only."""
    verdict = await held_filing(nc, approvers_state)
    assert verdict.approval_id is not None
    raw = await gate.js.get_last_msg(
        names.APPROVAL_STREAM, names.approval_pending_subject(DEMO_TENANT)
    )
    assert raw.data is not None
    announcement = msgspec.json.decode(raw.data, type=PendingAnnouncement)
    assert announcement.approval_id == verdict.approval_id
    assert dict(raw.headers or {})[names.HEADER_MSG_ID] == verdict.approval_id
    assert announcement.required_roles == ("licensed_attorney",)
    assert announcement.tenant_id == DEMO_TENANT
    assert "urn:smf:rule:scenario:attorney-approval-transmission" in announcement.rule_ids
    assert COURT_FILING.expected_reason in announcement.reason_codes
    record = await gate.approvals.get(verdict.approval_id)
    assert record is not None
    binding = record.binding
    text = raw.data.decode()
    address = COURT_FILING.destination.address
    guesses = {
        "content": COURT_FILING.content,
        "content hash": content_hash_of(COURT_FILING.content),
        "arguments hash": identity_of(COURT_FILING.arguments),
        "destination identity": destination_identity_of(announcement.channel, address),
        "recipient": address,
        "binding digest": record.digest,
        "matter": binding.matter_id,
        "organization": binding.organization_id,
        "actor": binding.actor_id,
        "operation hash": binding.operation_hash,
        "decision id": binding.decision_id,
    }
    guesses |= {f"argument {k}": str(v) for k, v in COURT_FILING.arguments.items()}
    found = {name: value for name, value in guesses.items() if value and value in text}
    assert found == {}, f"the announcement would confirm: {sorted(found)}"
    # What it does carry is exactly the routing and the reasons, field by field.
    assert set(msgspec.structs.asdict(announcement)) == {
        "schema",
        "approval_id",
        "tenant_id",
        "required_roles",
        "required_approvals",
        "created_at_ms",
        "expires_at_ms",
        "capability",
        "channel",
        "locality",
        "native_tool",
        "rule_ids",
        "reason_codes",
    }


async def test_held_court_filing_is_approved_once_and_filed_once(
    gate: RunningGate, nc: Client, approvers_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    assert verdict.reason_codes
    assert COURT_FILING.expected_reason in verdict.reason_codes
    assert verdict.required_roles == ("licensed_attorney",)
    assert verdict.expires_at_ms is not None
    assert verdict.order_id is None
    assert await order_count(gate.js) == 0
    spy = await ExecuteSpy.attach(nc)
    outcome = await nc.subscribe(names.approval_outcome_subject(approval_id))
    await nc.flush()

    async with connectors_running(approvers_state, nats_server.url):
        attorney = approver(nc, approvers_state, ATTORNEY)
        view = await attorney.show(approval_id)
        assert view.content == COURT_FILING.content
        assert json.loads(view.arguments_json) == COURT_FILING.arguments
        assert view.state == "pending"
        assert content_matches(view)
        reply = await attorney.resolve(approval_id, "allow-once", view.binding_digest)
        assert (reply.accepted, reply.state) == (True, "executing"), reply
        assert reply.order_id

        sent = await orders(gate.js, approvers_state)
        assert len(sent) == 1
        order, headers = sent[0]
        assert headers[names.HEADER_APPROVAL_ID] == approval_id
        assert headers[names.HEADER_MSG_ID] == order.order_id == reply.order_id
        # the one derivation, from the held decision, as on a direct allow
        assert order.order_id == order_id_for(Decided.of(verdict))
        assert order.approval_id == approval_id
        assert order.content == COURT_FILING.content
        assert order.arguments == COURT_FILING.arguments

        final = await next_outcome(outcome, approvers_state, verdict)
        assert (final.outcome, final.order_id, final.approval_id) == (
            "allow",
            reply.order_id,
            approval_id,
        )
        assert final.connector_id == COURT_FILING.connector

        async def consumed() -> bool:
            return await status(nc, approval_id) == "consumed"

        await wait_for(consumed, timeout=10)

    outbox = approvers_state.connector_dir("court-efiling") / "outbox"
    assert [p.name for p in outbox.iterdir()] == [f"{reply.order_id}.json"]
    assert await order_count(gate.js) == 1
    assert await spy.approval_ids() == [approval_id]
    record = await gate.approvals.get(approval_id)
    assert record is not None
    assert record.held_payload is None
    with pytest.raises(ApproverError, match="approval_closed"):
        await attorney.show(approval_id)
    assert ledger_statuses(approvers_state.ledger, approval_id) == [
        "held",
        "approved",
        "executing",
        "consumed",
    ]
    evidence = b"".join(
        Path(f"{approvers_state.ledger}{suffix}").read_bytes()
        for suffix in ("", "-wal")
        if Path(f"{approvers_state.ledger}{suffix}").exists()
    )
    document = COURT_FILING.arguments["document_file"]  # the filing's PDF
    texts = [v for v in COURT_FILING.arguments.values() if isinstance(v, str)]
    for secret in (COURT_FILING.content, *texts, document["data_b64"][:64], "matter-2026-0042"):
        assert secret.encode() not in evidence, f"{secret!r} reached the ledger file"
    assert base64.b64decode(document["data_b64"])[:200] not in evidence


# --- refusals: each its own reason, each changing nothing -----------------------

Forge = Callable[[StateDir, str, str], bytes]
"""(state, approval_id, true digest) -> resolution bytes the gate must refuse."""


def _signed_by(principal: str, resolver: str, *, digest: str | None = None) -> Forge:
    def forge(state: StateDir, approval_id: str, true_digest: str) -> bytes:
        return resolution_bytes(
            state.key(principal),
            approval_id=approval_id,
            digest=digest or true_digest,
            resolver_id=resolver,
        )

    return forge


def _wrong_digest(state: StateDir, approval_id: str, _: str) -> bytes:
    return resolution_bytes(
        state.key(ATTORNEY), approval_id=approval_id, digest=random_identity(), resolver_id=ATTORNEY
    )


def _unknown_key(state: StateDir, approval_id: str, digest: str) -> bytes:
    return resolution_bytes(
        generate_signing_key(), approval_id=approval_id, digest=digest, resolver_id=ATTORNEY
    )


def _tampered(state: StateDir, approval_id: str, digest: str) -> bytes:
    """The attorney's genuine deny, edited into an allow-once after signing."""
    signed = resolution_bytes(
        state.key(ATTORNEY),
        approval_id=approval_id,
        digest=digest,
        resolver_id=ATTORNEY,
        decision="deny",
    )
    return with_payload(signed, decision="allow-once")


def _unsigned(state: StateDir, approval_id: str, digest: str) -> bytes:
    return json.dumps({"approval_id": approval_id, "decision": "allow-once"}).encode()


REFUSALS: Final[dict[str, tuple[Forge, str]]] = {
    "wrong-digest": (_wrong_digest, "binding_digest_mismatch"),
    "wrong-role": (_signed_by(PARALEGAL, PARALEGAL), "resolver_lacks_required_role"),
    "other-tenant": (
        _signed_by(OTHER_TENANT_ATTORNEY, OTHER_TENANT_ATTORNEY),
        "resolver_not_entitled_for_tenant",
    ),
    "unknown-signer": (_unknown_key, "unknown_signer"),
    "forged-signer": (_signed_by(PARALEGAL, ATTORNEY), "resolver_identity_mismatch"),
    "runtime-signer": (_signed_by("runtime", "runtime"), "signer_role_mismatch"),
    "connector-signer": (_signed_by("court-efiling", ATTORNEY), "signer_role_mismatch"),
    "gate-signer": (_signed_by("gate", ATTORNEY), "signer_role_mismatch"),
    "tampered-after-signing": (_tampered, "bad_signature"),
    "not-an-envelope": (_unsigned, "malformed_resolution"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
async def test_refused_resolution_has_its_reason_and_changes_nothing(
    case: str, gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    forge, reason = REFUSALS[case]
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    record = await gate.approvals.get(approval_id)
    assert record is not None
    before = ledger_statuses(approvers_state.ledger, approval_id)

    reply = await send(nc, forge(approvers_state, approval_id, record.digest))

    assert not reply.accepted
    assert reply.reason_codes == (reason,)
    assert reply.order_id is None
    assert await order_count(gate.js) == 0
    assert await state_of(gate, approval_id) == "pending"
    statuses = ledger_statuses(approvers_state.ledger, approval_id)
    if reply.approval_id:  # the approval is known: the refusal is on its record
        assert reply.approval_id == approval_id
        assert reply.state == "pending"
        assert ledger_rows(approvers_state.ledger, approval_id)[-1] == ("pending", (reason,))
    else:  # nothing verified, nothing recorded against the approval
        assert statuses == before
    assert "approved" not in statuses
    # Nothing was spent: the entitled attorney's allow-once still goes through, once.
    assert (await approve(nc, approvers_state, approval_id)).accepted
    assert await order_count(gate.js) == 1


@pytest.mark.claim("approver-desk.refusals-change-nothing")
async def test_self_approval_is_refused(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """The roster makes sam-self a licensed attorney; sam-self asked for this filing."""
    verdict = await held_filing(nc, approvers_state, actor_id=SELF_APPROVER)
    assert verdict.approval_id is not None
    sam = approver(nc, approvers_state, SELF_APPROVER)
    view = await sam.show(verdict.approval_id)
    assert view.binding.actor_id == SELF_APPROVER
    reply = await sam.resolve(verdict.approval_id, "allow-once", view.binding_digest)
    assert (reply.accepted, reply.reason_codes) == (False, ("self_approval",))
    assert await state_of(gate, verdict.approval_id) == "pending"
    assert await order_count(gate.js) == 0


@pytest.mark.claim("approver-desk.refusals-change-nothing")
async def test_duplicate_allow_once_is_refused_and_one_order_stands(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    spy = await ExecuteSpy.attach(nc)
    attorney = approver(nc, approvers_state, ATTORNEY)
    view = await attorney.show(approval_id)
    signed = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
    first = await attorney.send(signed)
    assert first.accepted
    assert first.order_id

    again = await attorney.resolve(approval_id, "allow-once", view.binding_digest)
    replayed = await attorney.send(signed)  # the very same signed bytes
    deny_after = await attorney.resolve(approval_id, "deny", view.binding_digest)

    for reply in (again, replayed, deny_after):
        assert (reply.accepted, reply.reason_codes) == (False, ("approval_not_pending",))
        assert reply.state == "executing"
        assert reply.order_id is None
    sent = await orders(gate.js, approvers_state)
    assert [order.order_id for order, _ in sent] == [first.order_id]
    assert await spy.approval_ids() == [approval_id]  # not even a de-duplicated second publish
    assert await state_of(gate, approval_id) == "executing"


async def test_old_resolution_and_old_digest_do_not_cover_a_new_approval(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """The same filing proposed again is a new decision, so a new approval: nothing
    signed for the first one can be spent on it."""
    attorney = approver(nc, approvers_state, ATTORNEY)
    first = await held_filing(nc, approvers_state)
    assert first.approval_id is not None
    old_view = await attorney.show(first.approval_id)
    old_signed = attorney.sign_resolution(first.approval_id, "allow-once", old_view.binding_digest)
    assert (await attorney.send(old_signed)).accepted

    second = await held_filing(nc, approvers_state)
    new_id = second.approval_id
    assert new_id is not None
    assert new_id != first.approval_id
    new_view = await attorney.show(new_id)
    assert new_view.binding_digest != old_view.binding_digest

    replay = await attorney.send(old_signed)
    assert (replay.approval_id, replay.reason_codes) == (
        first.approval_id,
        ("approval_not_pending",),
    )
    old_digest = await attorney.resolve(new_id, "allow-once", old_view.binding_digest)
    assert (old_digest.accepted, old_digest.reason_codes) == (False, ("binding_digest_mismatch",))
    redirected = await attorney.send(with_payload(old_signed, approval_id=new_id))
    assert (redirected.accepted, redirected.reason_codes) == (False, ("bad_signature",))

    assert await state_of(gate, new_id) == "pending"
    assert await order_count(gate.js) == 1


@pytest.mark.claim("approver-desk.refusals-change-nothing")
async def test_resolution_after_expiry_is_refused(
    gate: RunningGate, nc: Client, approvers_state: StateDir, clock: Clock
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id, expires_at = verdict.approval_id, verdict.expires_at_ms
    assert approval_id is not None
    assert expires_at is not None
    attorney = approver(nc, approvers_state, ATTORNEY)
    view = await attorney.show(approval_id)
    clock.advance(expires_at - clock() + 1)

    reply = await attorney.resolve(approval_id, "allow-once", view.binding_digest)

    assert (reply.accepted, reply.reason_codes) == (False, ("approval_expired",))
    assert await state_of(gate, approval_id) == "expired"
    assert await order_count(gate.js) == 0
    assert "expired" in ledger_statuses(approvers_state.ledger, approval_id)
    again = await attorney.resolve(approval_id, "allow-once", view.binding_digest)
    assert again.reason_codes == ("approval_not_pending",)


async def test_sweep_expires_an_unanswered_approval_and_tells_the_runtime(
    gate: RunningGate, nc: Client, approvers_state: StateDir, clock: Clock
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id, expires_at = verdict.approval_id, verdict.expires_at_ms
    assert approval_id is not None
    assert expires_at is not None
    outcome = await nc.subscribe(names.approval_outcome_subject(approval_id))
    await nc.flush()
    await gate.desk.sweep()
    assert await state_of(gate, approval_id) == "pending"  # not yet due

    clock.advance(expires_at - clock())
    await gate.desk.sweep()

    assert await state_of(gate, approval_id) == "expired"
    final = await next_outcome(outcome, approvers_state, verdict)
    assert (final.outcome, final.reason_codes) == ("deny", ("approval_expired",))
    assert ledger_rows(approvers_state.ledger, approval_id)[-1] == (
        "expired",
        ("approval_expired",),
    )
    assert await order_count(gate.js) == 0


@pytest.mark.claim("approver-desk.refusals-change-nothing")
async def test_deny_then_allow_is_refused(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    outcome = await nc.subscribe(names.approval_outcome_subject(approval_id))
    await nc.flush()
    attorney = approver(nc, approvers_state, ATTORNEY)
    view = await attorney.show(approval_id)

    denied = await attorney.resolve(approval_id, "deny", view.binding_digest)
    allowed = await attorney.resolve(approval_id, "allow-once", view.binding_digest)

    assert (denied.accepted, denied.state) == (True, "denied")
    assert (allowed.accepted, allowed.reason_codes) == (False, ("approval_not_pending",))
    final = await next_outcome(outcome, approvers_state, verdict)
    assert (final.outcome, final.reason_codes) == ("deny", ("approver_denied",))
    assert await state_of(gate, approval_id) == "denied"
    assert await order_count(gate.js) == 0
    record = await gate.approvals.get(approval_id)
    assert record is not None
    assert record.held_payload is None


@pytest.mark.parametrize(
    ("who", "reason"),
    [
        (OTHER_TENANT_ATTORNEY, "resolver_not_entitled_for_tenant"),
        (PARALEGAL, "resolver_lacks_required_role"),
        ("runtime", "signer_role_mismatch"),
        ("stranger", "unknown_signer"),
    ],
)
async def test_show_is_refused_to_anyone_not_entitled_to_resolve(
    who: str, reason: str, gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """The content is privileged: only an approver with the required role for the
    tenant sees it (the approval's own actor may look, but never resolve)."""
    verdict = await held_filing(nc, approvers_state)
    assert verdict.approval_id is not None
    key = generate_signing_key() if who == "stranger" else approvers_state.key(who)
    with pytest.raises(ApproverError) as refused:
        await ApproverClient(nc, key, who).show(verdict.approval_id)
    assert refused.value.reason_code == reason


async def test_a_replayed_old_show_request_is_refused(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """A show request captured in transit cannot reopen the content later."""
    verdict = await held_filing(nc, approvers_state)
    assert verdict.approval_id is not None
    request = ShowRequest(
        schema="smf.approval-show/1",
        approval_id=verdict.approval_id,
        resolver_id=ATTORNEY,
        requested_at_ms=time.time_ns() // 1_000_000 - 10 * 60_000,
    )
    signed = encode_envelope(
        sign_struct(names.PAYLOAD_SHOW_REQUEST, request, [approvers_state.key(ATTORNEY)])
    )
    reply = await nc.request(names.APPROVAL_SHOW, signed, timeout=5)
    assert reply.headers is not None
    assert reply.headers["Nats-Service-Error"] == "stale_show_request"
    # What a show reveals is the held content and arguments: none of it is in the
    # refusal, in plain text or base64 (a fresh show, the control, does reveal it).
    revealed = (COURT_FILING.content, *map(str, COURT_FILING.arguments.values()))
    for secret in revealed:
        for form in (secret.encode(), base64.b64encode(secret.encode())):
            assert form not in reply.data, f"{secret!r} in the refusal"
    view = await approver(nc, approvers_state, ATTORNEY).show(verdict.approval_id)
    assert view.content == COURT_FILING.content
    assert json.loads(view.arguments_json) == COURT_FILING.arguments


async def test_show_of_an_unknown_approval_is_refused(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    with pytest.raises(ApproverError, match="approval_not_found"):
        await approver(nc, approvers_state, ATTORNEY).show(random_identity())


# --- a changed binding is a new approval ------------------------------------------

CHANGES: Final[dict[str, tuple[dict[str, Any], str]]] = {
    "argument": (
        {"arguments": {"court": "sdny", "document": "motion-to-compel-v2.pdf"}},
        "canonical_args_hash",
    ),
    "content": ({"content": COURT_FILING.content + " Exhibit A attached."}, "content_hash"),
    "destination": (
        {"arguments": {"court": "edny", "document": "motion-to-compel.pdf"}},
        "destination_identity_hash",
    ),
    "actor": ({"actor_id": "paralegal-quinn"}, "actor_id"),
    "matter": ({"matter_id": "matter-2026-0043"}, "matter_id"),
    "tenant": ({"tenant_id": OTHER_TENANT}, "tenant_id"),
}


@pytest.mark.claim("exact-action-approval.binding-changed")
@pytest.mark.parametrize("field", sorted(CHANGES))
async def test_changed_field_is_a_new_approval_and_the_old_one_sends_the_old_action(
    field: str, gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    changes, binding_field = CHANGES[field]
    old = await held_filing(nc, approvers_state)
    new = await held_filing(nc, approvers_state, **changes)
    assert old.approval_id is not None
    assert new.approval_id is not None
    assert new.approval_id != old.approval_id
    assert new.decision_id != old.decision_id
    old_record = await gate.approvals.get(old.approval_id)
    new_record = await gate.approvals.get(new.approval_id)
    assert old_record is not None
    assert new_record is not None
    assert getattr(old_record.binding, binding_field) != getattr(new_record.binding, binding_field)
    assert old_record.digest != new_record.digest

    attorney = approver(nc, approvers_state, ATTORNEY)
    crossed = await attorney.resolve(old.approval_id, "allow-once", new_record.digest)
    assert crossed.reason_codes == ("binding_digest_mismatch",)
    reply = await approve(nc, approvers_state, old.approval_id)
    assert reply.accepted

    sent = await orders(gate.js, approvers_state)
    assert len(sent) == 1
    order, headers = sent[0]
    assert headers[names.HEADER_APPROVAL_ID] == old.approval_id
    assert (order.arguments, order.content) == (COURT_FILING.arguments, COURT_FILING.content)
    assert order.decision_id == old.decision_id
    assert await state_of(gate, new.approval_id) == "pending"


@pytest.fixture
def next_release(tmp_path: Path) -> PolicySet:
    """The scenario corpus compiled as release sequence 2: another projection."""
    corpus = tmp_path / "corpus"
    shutil.copytree(package_path(SCENARIO_CORPUS), corpus)
    release = json.loads((corpus / "release.json").read_text())
    release["release_sequence"] += 1
    (corpus / "release.json").write_text(json.dumps(release))
    out = tmp_path / "release-2"
    write_release(compile_corpus(corpus), out)
    return load_policy_set(out)


@pytest.mark.claim("approver-desk.one-terminal-entry")
async def test_projection_change_between_hold_and_claim_refuses_the_claim(
    gate: RunningGate, nc: Client, approvers_state: StateDir, next_release: PolicySet
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    held = await gate.approvals.get(approval_id)
    assert held is not None
    assert next_release.projection_id != held.binding.projection_id
    gate.desk.policy_set = lambda: next_release

    reply = await approve(nc, approvers_state, approval_id)

    assert (reply.accepted, reply.reason_codes) == (False, ("binding_changed",))
    assert await order_count(gate.js) == 0
    # The approval is closed, and the evidence says what the store holds.
    assert await state_of(gate, approval_id) == "invalidated"
    rows = ledger_rows(approvers_state.ledger, approval_id)
    assert rows[-1] == ("invalidated", ("binding_changed",))
    assert [status for status, _ in rows].count("invalidated") == 1  # it ended once
    assert held.held_payload is not None
    record = await gate.approvals.get(approval_id)
    assert record is not None
    assert record.held_payload is None
    again = await approver(nc, approvers_state, ATTORNEY).resolve(
        approval_id, "allow-once", held.digest
    )
    assert again.reason_codes == ("approval_not_pending",)
    assert await order_count(gate.js) == 0
    # The refused claim and the resolution after it: one terminal entry, no second.
    ends = [s for s, _ in ledger_rows(approvers_state.ledger, approval_id) if s in TERMINAL_STATES]
    assert ends == ["invalidated"]


# --- TTL and the connector deadline ------------------------------------------------


async def test_held_ttl_is_the_customer_window_and_never_above_the_cap(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    acme = await held_filing(nc, approvers_state)
    beta = await held_filing(nc, approvers_state, tenant_id=OTHER_TENANT)
    for verdict, ttl in ((acme, CUSTOMER_TTL_MS), (beta, MAX_TTL_MS)):
        assert verdict.approval_id is not None
        record = await gate.approvals.get(verdict.approval_id)
        assert record is not None
        binding = record.binding
        assert binding.expires_at_ms - binding.created_at_ms == ttl <= MAX_TTL_MS
        assert verdict.expires_at_ms == binding.expires_at_ms


async def test_no_report_by_the_deadline_is_execution_unknown_for_good(
    gate: RunningGate,
    nc: Client,
    approvers_state: StateDir,
    clock: Clock,
    nats_server: EmbeddedNatsServer,
) -> None:
    gate.desk.execution_deadline_ms = 5_000
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    reply = await approve(nc, approvers_state, approval_id)  # no connector is running
    assert reply.accepted
    assert reply.order_id
    await gate.desk.sweep()
    assert await state_of(gate, approval_id) == "executing"

    clock.advance(5_001)
    await gate.desk.sweep()

    assert await state_of(gate, approval_id) == "execution_unknown"
    assert ledger_rows(approvers_state.ledger, approval_id)[-1] == (
        "execution_unknown",
        ("no_execution_report",),
    )
    # The one order is still in the stream; a connector that runs late files it
    # once, and its report does not reopen or settle the unknown outcome.
    async with connectors_running(approvers_state, nats_server.url):

        async def report_read() -> bool:
            info = await gate.js.consumer_info(names.RESULT_STREAM, "smf-gate-results")
            return info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= 1

        await wait_for(report_read, timeout=10)
    outbox = approvers_state.connector_dir("court-efiling") / "outbox"
    assert [p.name for p in outbox.iterdir()] == [f"{reply.order_id}.json"]
    assert await state_of(gate, approval_id) == "execution_unknown"
    assert await order_count(gate.js) == 1


# --- runtime-executed approvals: the proposing runtime's report settles them -------

OPENCLAW_ADAPTER: Final = "smf-openclaw-adapter"
CLIENT_MESSAGE: Final = {
    "action": "send",
    "channel": "slack",
    "target": "#client-acme",
    "message": "Draft motion to compel, for filing Friday.",
}
"""OpenClaw's ``message`` tool: no connector in its mapper table, so the runtime
runs it itself once allowed; confidential text to an unknown destination is
held for a licensed attorney by the safety floor."""


def openclaw_runtime(nc: Client, state: StateDir) -> ProposalClient:
    return ProposalClient(
        nc,
        state.key(OPENCLAW_PRINCIPAL),
        OPENCLAW_RUNTIME_ID,
        "2026.9.6",
        OPENCLAW_ADAPTER,
        gate_keys=state.gate_keys(),
    )


async def held_runtime_message(nc: Client, state: StateDir) -> Verdict:
    """The proposal the OpenClaw plugin makes for ``message`` (mapping.ts), held."""
    client = openclaw_runtime(nc, state)
    proposal = client.build(
        native_tool="message",
        arguments=dict(CLIENT_MESSAGE),
        actor=COURT_FILING.actor,
        facts=DataFacts(
            classification="confidential", injection_taint="clear", redaction_status="none"
        ),
        content=CLIENT_MESSAGE["message"],
        destination=ProposedDestination(address="slack:#client-acme", locality="unknown"),
    )
    return await hold(client, proposal)


async def approved_runtime_message(gate: RunningGate, nc: Client, state: StateDir) -> Verdict:
    """Held, approved once, claimed: ``executing``, the runtime's order recorded and
    a gate-signed allow (no connector, nothing dispatched) on the outcome subject."""
    held = await held_runtime_message(nc, state)
    assert held.approval_id is not None
    assert held.decision_id is not None
    assert held.operation_hash is not None
    outcome = await nc.subscribe(names.approval_outcome_subject(held.approval_id))
    await nc.flush()
    reply = await approve(nc, state, held.approval_id)
    assert (reply.accepted, reply.state) == (True, "executing"), reply
    allowed = await next_outcome(outcome, state, held)
    assert (allowed.outcome, allowed.connector_id) == ("allow", None)
    record = await gate.approvals.get(held.approval_id)
    assert record is not None
    assert record.order_id == order_id_for(Decided.of(held))
    assert await order_count(gate.js) == 0  # nothing for a connector
    return held


def report_bytes(
    key: SigningKey,
    *,
    order_id: str,
    reporter: str,
    status: str = "confirmed",
    reason: str = "executed_as_approved",
) -> bytes:
    """An ExecutionReport signed by ``key``, naming ``reporter`` as its executor."""
    report = ExecutionReport(
        schema="smf.execution-report/1",
        order_id=order_id,
        connector_id=reporter,
        status=status,  # type: ignore[arg-type]
        reason_code=reason,
        at_ms=time.time_ns() // 1_000_000,
        external_ref="call-1",
    )
    return encode_envelope(sign_struct(names.PAYLOAD_REPORT, report, [key]))


def runtime_order(held: Verdict) -> str:
    return order_id_for(Decided.of(held))


@pytest.mark.parametrize(
    ("status", "reason", "final", "evidence"),
    [
        ("confirmed", "executed_as_approved", "consumed", ("executed_as_approved",)),
        ("failed", "tool_error", "failed", ("tool_error",)),
        (
            "ambiguous",
            "executed_params_mismatch",
            "execution_unknown",
            ("binding_broken", "executed_params_mismatch"),
        ),
    ],
)
async def test_the_proposing_runtimes_report_settles_its_approval(
    status: str,
    reason: str,
    final: str,
    evidence: tuple[str, ...],
    gate: RunningGate,
    nc: Client,
    approvers_state: StateDir,
) -> None:
    """confirmed -> consumed, failed -> failed; executed params that were not the
    approved ones are a broken binding: execution_unknown, never consumed."""
    held = await approved_runtime_message(gate, nc, approvers_state)
    assert held.approval_id is not None
    signed = report_bytes(
        approvers_state.key(OPENCLAW_PRINCIPAL),
        order_id=runtime_order(held),
        reporter=OPENCLAW_RUNTIME_ID,
        status=status,
        reason=reason,
    )

    await file_report(nc, OPENCLAW_RUNTIME_ID, signed)

    assert await state_of(gate, held.approval_id) == final
    assert ledger_rows(approvers_state.ledger, held.approval_id)[-1] == (final, evidence)
    assert ledger_statuses(approvers_state.ledger, held.approval_id) == [
        "held",
        "approved",
        "executing",
        final,
    ]
    record = await gate.approvals.get(held.approval_id)
    assert record is not None
    assert record.held_payload is None
    # A broken binding stops the runtime, and the stop is its own ledger entry: whatever
    # swapped the call is still loaded in it. The other outcomes stop nothing.
    refused, _ = gate.attestation.standing(OPENCLAW_RUNTIME_ID)
    stops = stop_entries(approvers_state.ledger)
    if reason == "executed_params_mismatch":
        assert refused == "runtime_stopped_binding_broken"
        assert stops == [("binding_broken",)]
    else:
        assert refused != "runtime_stopped_binding_broken"
        assert stops == []
    # The same report again (a redelivery) finds nothing open to settle.
    await file_report(nc, OPENCLAW_RUNTIME_ID, signed)
    assert ledger_statuses(approvers_state.ledger, held.approval_id)[-1] == final
    assert len(ledger_statuses(approvers_state.ledger, held.approval_id)) == 4


IMPOSTORS: Final[dict[str, tuple[str | None, str]]] = {
    # case: (signing principal, None for a key in no registry; reporter id it names)
    "another-runtime": ("runtime", RUNTIME_ID),
    "another-runtime-naming-the-proposer": ("runtime", OPENCLAW_RUNTIME_ID),
    "the-approver": (ATTORNEY, OPENCLAW_RUNTIME_ID),
    "a-connector": ("court-efiling", "court-efiling"),
    "the-gate": ("gate", OPENCLAW_RUNTIME_ID),
    "unknown-key": (None, OPENCLAW_RUNTIME_ID),
    "the-proposer-naming-another-runtime": (OPENCLAW_PRINCIPAL, RUNTIME_ID),
}


@pytest.mark.parametrize("case", sorted(IMPOSTORS))
async def test_a_runtime_order_is_settled_by_no_one_but_its_proposer(
    case: str, gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """A report for exactly the runtime's order, signed by anyone else (another
    runtime, an approver, a connector, the gate, a stranger) or naming another
    executor, is ignored: the approval stays ``executing`` and the proposer's own
    report still settles it afterwards."""
    principal, reporter = IMPOSTORS[case]
    held = await approved_runtime_message(gate, nc, approvers_state)
    assert held.approval_id is not None
    key = generate_signing_key() if principal is None else approvers_state.key(principal)
    forged = report_bytes(key, order_id=runtime_order(held), reporter=reporter)

    await file_report(nc, reporter, forged)

    assert await state_of(gate, held.approval_id) == "executing"
    assert ledger_statuses(approvers_state.ledger, held.approval_id)[-1] == "executing"
    genuine = report_bytes(
        approvers_state.key(OPENCLAW_PRINCIPAL),
        order_id=runtime_order(held),
        reporter=OPENCLAW_RUNTIME_ID,
    )
    await file_report(nc, OPENCLAW_RUNTIME_ID, genuine)
    assert await state_of(gate, held.approval_id) == "consumed"


async def test_a_runtime_key_never_settles_a_connector_order(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """The court filing's order belongs to the court-efiling connector: not even
    the runtime that proposed it can settle it, whatever executor it names."""
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    reply = await approve(nc, approvers_state, approval_id)  # no connector is running
    assert reply.accepted
    assert reply.order_id == runtime_order(verdict)  # the same derivation, a connector's order

    for reporter in (RUNTIME_ID, "court-efiling"):
        signed = report_bytes(
            approvers_state.key("runtime"), order_id=reply.order_id, reporter=reporter
        )
        await file_report(nc, reporter, signed)

    assert await state_of(gate, approval_id) == "executing"
    assert ledger_statuses(approvers_state.ledger, approval_id)[-1] == "executing"
    connector = report_bytes(
        approvers_state.key("court-efiling"), order_id=reply.order_id, reporter="court-efiling"
    )
    await file_report(nc, "court-efiling", connector)
    assert await state_of(gate, approval_id) == "consumed"


async def test_the_outcome_is_gate_signed_and_nothing_else_passes_for_it(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """What runtimes act on: the gate's signed allow verifies; the same Verdict
    unsigned, signed by another registry key, or the gate's outcome checked
    against another approval, decision or operation does not."""
    held = await held_runtime_message(nc, approvers_state)
    approval_id, decision_id, operation_hash = (
        held.approval_id,
        held.decision_id,
        held.operation_hash,
    )
    assert approval_id is not None
    assert decision_id is not None
    assert operation_hash is not None
    outcome = await nc.subscribe(names.approval_outcome_subject(approval_id))
    await nc.flush()
    assert (await approve(nc, approvers_state, approval_id)).accepted
    raw = (await outcome.next_msg(timeout=5)).data
    gate_keys = load_registry(approvers_state.registry).trusted("gate")
    expected = {
        "approval_id": approval_id,
        "decision_id": decision_id,
        "operation_hash": operation_hash,
    }
    allowed = open_outcome(raw, gate_keys, **expected)
    assert (allowed.outcome, allowed.reason_codes) == ("allow", ("approved_once",))

    plain = msgspec.json.encode(allowed)
    with pytest.raises(dsse.MalformedEnvelopeError):
        open_outcome(plain, gate_keys, **expected)
    for principal in ("runtime", OPENCLAW_PRINCIPAL, ATTORNEY, "court-efiling"):
        forged = encode_envelope(
            sign_struct(names.PAYLOAD_APPROVAL_OUTCOME, allowed, [approvers_state.key(principal)])
        )
        with pytest.raises(dsse.UnknownSignerError):
            open_outcome(forged, gate_keys, **expected)
    for field in expected:
        with pytest.raises(OutcomeMismatchError):
            open_outcome(raw, gate_keys, **{**expected, field: random_identity()})
