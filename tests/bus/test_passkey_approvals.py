"""An attorney approves with a passkey, through the whole gate, and nothing else signs as them.

Real nats-server, real SQLite files, the full gate from
``smf_assurance.pipeline.assembly.start_gate``, the example connectors. The attorney's and the
paralegal's passkeys are enrolled in the registry the gate reads from its signed release;
their devices are ``tests.support.authenticator.SoftAuthenticator`` (a real P-256 key and the
WebAuthn byte formats: the person's device is outside our system).

What these tests prove:

- An attorney holding no key file shows a held filing and allows it once with their
  passkey: the connector receives exactly one order for it, and the same signed
  allow-once sent again changes nothing (a replayed assertion).
- The assertion signs the exact request: moved onto another approval, another binding
  digest or another decision, it is refused ``bad_passkey_assertion`` and the approval
  stays pending with no order.
- Another person's credential cannot sign as the attorney (``resolver_identity_mismatch``),
  nor resolve as itself without the licensed role; an unenrolled credential is
  ``unknown_passkey``; an assertion whose authenticator did not verify the user is
  ``passkey_user_not_verified``; one made on another origin or for another relying party,
  or without the user's presence, is ``bad_passkey_assertion``. None of them changes the
  approval or its evidence (an unverified request names no approval the gate could trust);
  the paralegal's refusal for want of the licence is recorded against it.
- A deny with a reason and a note, signed with a passkey, reaches the runtime.
- A passkey counts only for a person's request: a proposal signed with one is refused.
- The session key one sign-in's assertion granted shows a filing, and its allow-once is
  refused: every decision is its own assertion.

What they do not prove: the console's page and a browser's authenticator (the browser tests,
once the console signs with passkeys); a cloned authenticator (no signature counter is kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.approver.client import content_matches
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir, refresh_demo_release
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import (
    ApprovalResolution,
    ApprovalView,
    ShowRequest,
    TrackReply,
    TrackRequest,
)
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.messages import Verdict
from smf_assurance.subjects.passkeys import PAYLOAD_SESSION_GRANT
from smf_assurance.subjects.registry import RegistryFile, encode_registry
from tests.support.approval_desk import (
    ATTORNEY,
    PARALEGAL,
    clock,
    connectors_running,
    court_filing,
    gate,
    held_filing,
    ledger_rows,
    next_outcome,
    order_count,
    orders,
    provision_with_extra_approvers,
    runtime,
    send,
    state_of,
)
from tests.support.authenticator import SoftAuthenticator, delegated_request, grant_payload

__all__ = ["clock", "gate"]

pytestmark = pytest.mark.claim("approver-desk.passkey-signed-resolution")


@dataclass
class Devices:
    attorney: SoftAuthenticator
    paralegal: SoftAuthenticator


@pytest.fixture
def devices() -> Devices:
    return Devices(SoftAuthenticator(), SoftAuthenticator())


@pytest.fixture
def approvers_state(tmp_path: Path, devices: Devices) -> StateDir:
    """The approvers' state with both people's passkeys enrolled, in a new signed release."""
    state = StateDir(tmp_path / "state")
    provision_with_extra_approvers(state)
    current = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
    enrolled = (devices.attorney.record(ATTORNEY), devices.paralegal.record(PARALEGAL))
    state.registry.write_bytes(encode_registry(current.entries, current.retired, enrolled))
    assert refresh_demo_release(state) is not None
    return state


def resolution(approval_id: str, digest: str, signer: str = ATTORNEY, **fields: Any) -> bytes:
    """A resolution's canonical payload bytes."""
    value = {
        "schema": "smf.approval-resolution/1",
        "approval_id": approval_id,
        "decision": "allow-once",
        "binding_digest": digest,
        "resolver_id": signer,
        "resolved_at_ms": wall_clock_ms(),
        **fields,
    }
    return canonical_bytes(msgspec.to_builtins(msgspec.convert(value, ApprovalResolution)))


def moved(signed: bytes, payload: bytes) -> bytes:
    """The same assertion carried over another payload."""
    wire = json.loads(signed)
    wire["payload"] = dsse.b64encode(payload)
    return json.dumps(wire).encode()


async def show(nc: Client, device: SoftAuthenticator, approval_id: str) -> ApprovalView:
    request = ShowRequest(
        schema="smf.approval-show/1",
        approval_id=approval_id,
        resolver_id=ATTORNEY,
        requested_at_ms=wall_clock_ms(),
    )
    payload = canonical_bytes(msgspec.to_builtins(request))
    signed = device.sign(names.PAYLOAD_SHOW_REQUEST, payload)
    reply = await nc.request(names.APPROVAL_SHOW, signed, timeout=5)
    assert not reply.headers, reply.headers
    return msgspec.json.decode(reply.data, type=ApprovalView)


async def held(nc: Client, state: StateDir) -> tuple[Verdict, str]:
    verdict = await held_filing(nc, state)
    assert verdict.approval_id is not None
    return verdict, verdict.approval_id


async def test_an_attorney_allows_once_with_a_passkey_and_one_order_goes_out(
    gate: RunningGate,
    nc: Client,
    approvers_state: StateDir,
    devices: Devices,
    nats_server: EmbeddedNatsServer,
) -> None:
    async with connectors_running(approvers_state, nats_server.url):
        _, approval_id = await held(nc, approvers_state)
        view = await show(nc, devices.attorney, approval_id)
        assert content_matches(view)
        signed = devices.attorney.sign(
            names.PAYLOAD_RESOLUTION, resolution(approval_id, view.binding_digest)
        )

        reply = await send(nc, signed)
        assert reply.accepted, reply.reason_codes
        replayed = await send(nc, signed)

    assert not replayed.accepted
    found = await orders(gate.js, approvers_state)
    assert [order.approval_id for order, _ in found] == [approval_id]
    statuses = [status for status, _ in ledger_rows(approvers_state.ledger, approval_id)]
    assert "approved" in statuses
    assert statuses.count("approved") == 1


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"binding_digest": "sha256:" + "0" * 64}, id="another-binding"),
        pytest.param({"decision": "deny", "deny_reason": "other"}, id="another-decision"),
        pytest.param({"resolved_at_ms": 1}, id="another-time"),
    ],
)
async def test_an_assertion_moved_onto_another_request_is_refused(
    gate: RunningGate,
    nc: Client,
    approvers_state: StateDir,
    devices: Devices,
    change: dict[str, Any],
) -> None:
    _, approval_id = await held(nc, approvers_state)
    view = await show(nc, devices.attorney, approval_id)
    signed = devices.attorney.sign(
        names.PAYLOAD_RESOLUTION, resolution(approval_id, view.binding_digest)
    )
    fields = {"binding_digest": view.binding_digest, **change}
    payload = resolution(approval_id, fields.pop("binding_digest"), **fields)
    before = ledger_rows(approvers_state.ledger, approval_id)

    reply = await send(nc, moved(signed, payload))

    assert (reply.accepted, reply.reason_codes) == (False, ("bad_passkey_assertion",))
    assert await state_of(gate, approval_id) == "pending"
    assert await order_count(gate.js) == 0
    assert ledger_rows(approvers_state.ledger, approval_id) == before


async def test_an_assertion_moved_onto_another_approval_is_refused(
    gate: RunningGate, nc: Client, approvers_state: StateDir, devices: Devices
) -> None:
    _, first = await held(nc, approvers_state)
    _, second = await held_other(nc, approvers_state)
    view = await show(nc, devices.attorney, first)
    signed = devices.attorney.sign(names.PAYLOAD_RESOLUTION, resolution(first, view.binding_digest))
    other_view = await show(nc, devices.attorney, second)

    reply = await send(nc, moved(signed, resolution(second, other_view.binding_digest)))

    assert (reply.accepted, reply.reason_codes) == (False, ("bad_passkey_assertion",))
    assert {await state_of(gate, first), await state_of(gate, second)} == {"pending"}
    assert await order_count(gate.js) == 0


async def held_other(nc: Client, state: StateDir) -> tuple[Verdict, str]:
    """A second held filing, of other content: another action, another approval."""
    verdict = await held_filing(nc, state, content="Another motion, for another hearing.")
    assert verdict.approval_id is not None
    return verdict, verdict.approval_id


@pytest.mark.parametrize(
    ("who", "options", "code"),
    [
        pytest.param("paralegal", {}, "resolver_identity_mismatch", id="another-persons-passkey"),
        pytest.param("stranger", {}, "unknown_passkey", id="unenrolled"),
        pytest.param("attorney", {"user_verified": False}, "passkey_user_not_verified", id="no-uv"),
        pytest.param(
            "attorney", {"user_present": False}, "bad_passkey_assertion", id="no-presence"
        ),
        pytest.param(
            "attorney",
            {"origin": "http://localhost:9999"},
            "bad_passkey_assertion",
            id="another-origin",
        ),
        pytest.param(
            "attorney", {"rp_id": "evil.example"}, "bad_passkey_assertion", id="another-rp"
        ),
    ],
)
async def test_no_other_credential_or_weaker_assertion_signs_as_the_attorney(
    gate: RunningGate,
    nc: Client,
    approvers_state: StateDir,
    devices: Devices,
    who: str,
    options: dict[str, Any],
    code: str,
) -> None:
    _, approval_id = await held(nc, approvers_state)
    view = await show(nc, devices.attorney, approval_id)
    device = {
        "attorney": devices.attorney,
        "paralegal": devices.paralegal,
        "stranger": SoftAuthenticator(),
    }[who]
    signed = device.sign(
        names.PAYLOAD_RESOLUTION, resolution(approval_id, view.binding_digest), **options
    )
    before = ledger_rows(approvers_state.ledger, approval_id)

    reply = await send(nc, signed)

    assert (reply.accepted, reply.reason_codes) == (False, (code,))
    assert await state_of(gate, approval_id) == "pending"
    assert await order_count(gate.js) == 0
    assert ledger_rows(approvers_state.ledger, approval_id) == before


async def test_the_paralegals_own_passkey_lacks_the_attorneys_licence(
    gate: RunningGate, nc: Client, approvers_state: StateDir, devices: Devices
) -> None:
    _, approval_id = await held(nc, approvers_state)
    view = await show(nc, devices.attorney, approval_id)
    signed = devices.paralegal.sign(
        names.PAYLOAD_RESOLUTION, resolution(approval_id, view.binding_digest, signer=PARALEGAL)
    )

    reply = await send(nc, signed)

    assert (reply.accepted, reply.reason_codes) == (False, ("resolver_lacks_required_role",))
    assert await state_of(gate, approval_id) == "pending"
    assert await order_count(gate.js) == 0
    assert ledger_rows(approvers_state.ledger, approval_id)[-1] == (
        "pending",
        ("resolver_lacks_required_role",),
    )


async def test_a_passkey_signed_deny_with_its_note_reaches_the_runtime(
    gate: RunningGate, nc: Client, approvers_state: StateDir, devices: Devices
) -> None:
    verdict, approval_id = await held(nc, approvers_state)
    outcome = await nc.subscribe(names.approval_outcome_subject(approval_id))
    await nc.flush()
    view = await show(nc, devices.attorney, approval_id)
    payload = resolution(
        approval_id,
        view.binding_digest,
        decision="deny",
        deny_reason="wrong_recipient",
        note="Not this court.",
    )

    reply = await send(nc, devices.attorney.sign(names.PAYLOAD_RESOLUTION, payload))

    codes = ("approver_denied", "approver_denied_wrong_recipient")
    assert (reply.accepted, reply.state, reply.reason_codes) == (True, "denied", codes)
    final = await next_outcome(outcome, approvers_state, verdict)
    assert (final.outcome, final.reason_codes, final.approver_note) == (
        "deny",
        codes,
        "Not this court.",
    )
    assert await order_count(gate.js) == 0


async def test_a_passkey_signed_track_request_answers_for_the_attorney(
    gate: RunningGate, nc: Client, approvers_state: StateDir, devices: Devices
) -> None:
    _, approval_id = await held(nc, approvers_state)
    request = TrackRequest(
        schema="smf.approval-track/1",
        viewer_id=ATTORNEY,
        approval_ids=(approval_id,),
        requested_at_ms=wall_clock_ms(),
    )
    payload = canonical_bytes(msgspec.to_builtins(request))

    reply = await nc.request(
        names.APPROVAL_TRACK, devices.attorney.sign(names.PAYLOAD_TRACK_REQUEST, payload), timeout=5
    )

    tracked = msgspec.json.decode(reply.data, type=TrackReply).approvals
    assert [(t.approval_id, t.state, t.relation) for t in tracked] == [
        (approval_id, "pending", "approver")
    ]


async def test_a_passkey_does_not_sign_a_proposal(
    gate: RunningGate, nc: Client, approvers_state: StateDir, devices: Devices
) -> None:
    """A person's passkey signs a person's requests only: a real proposal's bytes signed
    with the attorney's passkey are not a signed proposal at all."""
    client = runtime(nc, approvers_state)
    proposal = court_filing(client)
    signed = devices.attorney.sign(
        names.PAYLOAD_PROPOSAL, canonical_bytes(msgspec.to_builtins(proposal))
    )

    reply = await nc.request(names.PROPOSE, signed, timeout=5)

    assert (reply.headers or {}).get(names.HEADER_SERVICE_ERROR) == "malformed_proposal"
    assert await order_count(gate.js) == 0
    assert ledger_rows(approvers_state.ledger, "") == []


async def test_a_sign_ins_session_key_reads_but_never_decides(
    gate: RunningGate, nc: Client, approvers_state: StateDir, devices: Devices
) -> None:
    """One touch at sign-in grants the page's session key the person's reads (show,
    track); an allow-once signed by that key is refused, so every decision is a touch."""
    _, approval_id = await held(nc, approvers_state)
    session_key = generate_signing_key()
    now = wall_clock_ms()
    grant = devices.attorney.sign(
        PAYLOAD_SESSION_GRANT,
        grant_payload(ATTORNEY, session_key, issued_at_ms=now, expires_at_ms=now + 3_600_000),
    )
    show_request = ShowRequest(
        schema="smf.approval-show/1",
        approval_id=approval_id,
        resolver_id=ATTORNEY,
        requested_at_ms=now,
    )
    signed_show = delegated_request(
        grant,
        session_key,
        names.PAYLOAD_SHOW_REQUEST,
        canonical_bytes(msgspec.to_builtins(show_request)),
    )

    reply = await nc.request(names.APPROVAL_SHOW, signed_show, timeout=5)
    view = msgspec.json.decode(reply.data, type=ApprovalView)
    assert view.binding.approval_id == approval_id
    assert content_matches(view)

    decision = delegated_request(
        grant,
        session_key,
        names.PAYLOAD_RESOLUTION,
        resolution(approval_id, view.binding_digest),
    )
    refused = await send(nc, decision)

    assert (refused.accepted, refused.reason_codes) == (False, ("malformed_resolution",))
    assert await state_of(gate, approval_id) == "pending"
    assert await order_count(gate.js) == 0
    assert devices.attorney.sign_count == 1
