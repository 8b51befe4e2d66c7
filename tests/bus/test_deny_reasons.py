"""A deny with a reason, through the whole gate: a deliberate decision.

Real nats-server, real SQLite files, the full gate from
``smf_assurance.pipeline.assembly.start_gate``; approvers are
``smf_assurance.approver.client.ApproverClient``
with keys from the provisioned registry, as in ``tests/bus/test_approval_desk.py``.

What these tests prove:

- An attorney's deny naming a closed reason and carrying a note reaches the
  runtime's outcome subject as a gate-signed Verdict (opened with
  ``open_outcome``, as a runtime opens it) whose reason codes hold
  ``approver_denied`` and the reason's own code and whose ``approver_note`` is
  the note as typed; the ledger holds the code and the approval store, the
  ledger file and every structlog event of the gate hold nothing of the note.
- The reason and the note are covered by the approver's signature: the same
  signed deny with its reason changed, its reason stripped or its note edited
  is refused ``bad_signature`` and changes nothing (the approval stays
  pending, nothing is recorded as denied, nothing is published on the outcome
  subject).
- What the contract does not allow is refused ``malformed_resolution`` before
  anything changes: a reason on an allow-once, a note without a reason, a
  reason outside the closed list, a note with a terminal escape or a bidi
  override, a note over 500 characters.
- A resolution signed before reasons existed (six fields) still verifies and
  still denies, with ``approver_denied`` alone and no note.
- The closed list is declared once (``smf_assurance.subjects.approvals.DENY_REASONS``): the
  console's form offers exactly it, with the same labels.

What they do not prove: what a runtime does with the note beyond receiving it
(the OpenClaw plugin's block message: ``tests/runtimes/test_openclaw_plugin.py`` and
``smf_assurance/adapters/openclaw/test/gate.test.ts``); the console's form in a browser
(``tests/test_console_decisions.py``).
"""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Final, get_args

import msgspec
import pytest
import structlog
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import DENY_REASONS, ApprovalResolution, DenyReason
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.messages import Verdict
from tests.support.approval_desk import (
    ATTORNEY,
    approver,
    clock,
    gate,
    held_filing,
    ledger_rows,
    next_outcome,
    order_count,
    send,
    state_of,
    with_payload,
)

ROOT: Final = Path(__file__).resolve().parents[2]
NOTE: Final = "Wrong court: this goes to the Eastern District.\nCall me — Ståhl matter."
"""A note with a newline and non-ASCII text, none of it a reason code."""
NOTE_MARK: Final = "Eastern District"

__all__ = ["clock", "gate"]  # the approval desk's gate, on the approvers' state


def signed_payload(state: StateDir, payload: dict[str, Any]) -> bytes:
    """The attorney's signature over any payload, valid or not as a resolution."""
    envelope = dsse.sign(names.PAYLOAD_RESOLUTION, canonical_bytes(payload), [state.key(ATTORNEY)])
    return dsse.encode_envelope(envelope)


def without(signed: bytes, field: str) -> bytes:
    """The same signatures over the payload with ``field`` removed."""
    envelope = dsse.decode_envelope(signed).envelope
    payload = json.loads(base64.b64decode(envelope.payload))
    del payload[field]
    forged = base64.b64encode(canonical_bytes(payload)).decode()
    return dsse.encode_envelope(msgspec.structs.replace(envelope, payload=forged))


async def held_and_watched(nc: Client, state: StateDir) -> tuple[Verdict, str, Subscription]:
    """A held filing, its approval id, and its outcome subject subscribed, as a
    runtime waits on it."""
    held = await held_filing(nc, state)
    assert held.approval_id is not None
    outcome = await nc.subscribe(names.approval_outcome_subject(held.approval_id))
    await nc.flush()
    return held, held.approval_id, outcome


async def nothing_on(nc: Client, sub: Subscription) -> bool:
    """No outcome was published: the gate answered the resolution after any
    publish, and a round trip through the server delivers what came before it."""
    await nc.flush()
    return sub.pending_msgs == 0


async def test_a_reasoned_deny_reaches_the_runtime_and_only_its_code_reaches_evidence(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    held, approval_id, outcome = await held_and_watched(nc, approvers_state)

    configure_logging(json=True, level="debug")  # every level, whatever ran before
    with structlog.testing.capture_logs() as logged:
        _, reply = await approver(nc, approvers_state, ATTORNEY).review_and_resolve(
            approval_id, "deny", deny_reason="wrong_recipient", note=NOTE
        )

    codes = ("approver_denied", "approver_denied_wrong_recipient")
    assert (reply.accepted, reply.state, reply.reason_codes) == (True, "denied", codes)
    final = await next_outcome(outcome, approvers_state, held)
    assert (final.outcome, final.reason_codes, final.approver_note) == ("deny", codes, NOTE)
    assert ledger_rows(approvers_state.ledger, approval_id)[-1] == ("denied", codes)
    assert await state_of(gate, approval_id) == "denied"
    assert await order_count(gate.js) == 0
    stored_files = list(approvers_state.root.glob("*.db*"))
    assert approvers_state.ledger in stored_files
    for stored in stored_files:
        assert NOTE_MARK.encode() not in stored.read_bytes(), stored
    assert logged, "the capture sees the gate's events (the deny's approval_transition)"
    assert NOTE_MARK not in repr(logged)


def _reason_changed(signed: bytes) -> bytes:
    return with_payload(signed, deny_reason="needs_changes")


def _reason_stripped(signed: bytes) -> bytes:
    return without(without(signed, "note"), "deny_reason")


def _note_changed(signed: bytes) -> bytes:
    return with_payload(signed, note="Approved after all, go ahead.")


@pytest.mark.parametrize("forge", [_reason_changed, _reason_stripped, _note_changed])
async def test_a_reason_or_note_changed_after_signing_is_refused(
    forge: Any, gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    held, approval_id, outcome = await held_and_watched(nc, approvers_state)
    attorney = approver(nc, approvers_state, ATTORNEY)
    view = await attorney.show(approval_id)
    genuine = attorney.sign_resolution(
        approval_id, "deny", view.binding_digest, deny_reason="wrong_recipient", note=NOTE
    )

    reply = await send(nc, forge(genuine))

    assert (reply.accepted, reply.reason_codes) == (False, ("bad_signature",))
    assert await state_of(gate, approval_id) == "pending"
    assert "denied" not in [
        status for status, _ in ledger_rows(approvers_state.ledger, approval_id)
    ]
    assert await nothing_on(nc, outcome)
    # The genuine one, unchanged, is still the approver's to send.
    assert (await send(nc, genuine)).state == "denied"
    final = await next_outcome(outcome, approvers_state, held)
    assert final.reason_codes == ("approver_denied", "approver_denied_wrong_recipient")


MALFORMED: Final[dict[str, dict[str, Any]]] = {
    "reason-on-allow": {"decision": "allow-once", "deny_reason": "other"},
    "note-on-allow": {"decision": "allow-once", "note": "fine"},
    "note-without-reason": {"decision": "deny", "note": "no reason given"},
    "reason-off-the-list": {"decision": "deny", "deny_reason": "because"},
    "terminal-escape": {"decision": "deny", "deny_reason": "other", "note": "\x1b[2Jok"},
    "bidi-override": {"decision": "deny", "deny_reason": "other", "note": "abc\u202edef"},
    "too-long": {"decision": "deny", "deny_reason": "other", "note": "x" * 501},
    "null-reason": {"decision": "deny", "deny_reason": None},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_what_the_contract_does_not_allow_is_malformed(
    case: str, gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    held = await held_filing(nc, approvers_state)
    approval_id = held.approval_id
    assert approval_id is not None
    record = await gate.approvals.get(approval_id)
    assert record is not None
    payload = {
        "schema": "smf.approval-resolution/1",
        "approval_id": approval_id,
        "binding_digest": record.digest,
        "resolver_id": ATTORNEY,
        "resolved_at_ms": 1_700_000_000_000,
        **MALFORMED[case],
    }

    reply = await send(nc, signed_payload(approvers_state, payload))

    assert (reply.accepted, reply.reason_codes) == (False, ("malformed_resolution",))
    assert await state_of(gate, approval_id) == "pending"
    assert await order_count(gate.js) == 0


async def test_a_resolution_signed_before_reasons_existed_still_denies(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    held, approval_id, outcome = await held_and_watched(nc, approvers_state)
    record = await gate.approvals.get(approval_id)
    assert record is not None
    old = {
        "schema": "smf.approval-resolution/1",
        "approval_id": approval_id,
        "decision": "deny",
        "binding_digest": record.digest,
        "resolver_id": ATTORNEY,
        "resolved_at_ms": 1_700_000_000_000,
    }
    decoded = msgspec.json.decode(canonical_bytes(old), type=ApprovalResolution)
    assert canonical_bytes(msgspec.to_builtins(decoded)) == canonical_bytes(old)

    reply = await send(nc, signed_payload(approvers_state, old))

    assert (reply.accepted, reply.reason_codes) == (True, ("approver_denied",))
    final = await next_outcome(outcome, approvers_state, held)
    assert final.reason_codes == ("approver_denied",)
    assert final.approver_note is msgspec.UNSET
    assert "approver_note" not in msgspec.to_builtins(final)


class _Radios(HTMLParser):
    """The deny form's radio buttons: value and label text, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []
        self._value: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "input" and named.get("name") == "deny-reason":
            self._value = named.get("value") or ""

    def handle_data(self, data: str) -> None:
        if self._value is not None and data.strip():
            self.found.append((self._value, data.strip()))
            self._value = None


def test_the_closed_list_is_declared_once_and_the_console_offers_exactly_it() -> None:
    assert tuple(DENY_REASONS) == get_args(DenyReason)
    page = _Radios()
    page.feed(
        (ROOT / "smf_assurance" / "approver" / "console" / "static" / "index.html").read_text()
    )
    assert page.found == list(DENY_REASONS.items())
