"""Each approval ends once in the evidence ledger, however often it is answered.

ARCHITECTURE.md, "Exact-action approval": an approval moves to one terminal state
(``consumed``, ``failed``, ``execution_unknown``, ``denied``, ``expired``,
``invalidated``), and the step that moved it writes that transition to the ledger.
A refused resolution is recorded too, but it changes no state, so after the end it
names no status: it can never read as a second end. Real nats-server, the gate with
its SQLite stores and ledger (the approval desk's fixtures,
``tests/support/approval_desk.py``), the example connectors, approvers signing
with their keys from the state directory.

What these prove: the same signed allow-once sent eight times at once, with two
denies racing it, gives one accepted reply, one order, one filing and exactly one
terminal entry; duplicates sent after the filing was consumed add refusal entries
with no status; resolutions racing the expiry and the sweep give one ``expired``
entry; a refused claim (the release changed under the binding) gives one
``invalidated`` entry. What they do not prove: the cluster's KV store (its steps
are the same compare-and-set contract, tests/bus/test_approval_store.py), or ledgers of
several gate processes (each writes only what its own steps did).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from nats.aio.client import Client

from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.subjects.approvals import TERMINAL_STATES
from tests.support import approval_desk as desk
from tests.support.approval_desk import (
    ATTORNEY,
    approver,
    connectors_running,
    held_filing,
    ledger_rows,
    order_count,
    send,
    state_of,
    status,
)
from tests.support.bus_helpers import ExecuteSpy, wait_for
from tests.support.clocks import OffsetClock as Clock

clock = desk.clock
gate = desk.gate


def terminal_entries(state: StateDir, approval_id: str) -> list[str | None]:
    return [s for s, _ in ledger_rows(state.ledger, approval_id) if s in TERMINAL_STATES]


@pytest.mark.claim("approver-desk.one-terminal-entry")
async def test_duplicate_resolutions_at_once_and_later_leave_one_terminal_entry(
    gate: RunningGate, nc: Client, approvers_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    held = await held_filing(nc, approvers_state)
    approval_id = held.approval_id
    assert approval_id is not None
    spy = await ExecuteSpy.attach(nc)
    attorney = approver(nc, approvers_state, ATTORNEY)
    view = await attorney.show(approval_id)
    allow = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
    deny = attorney.sign_resolution(approval_id, "deny", view.binding_digest)

    async with connectors_running(approvers_state, nats_server.url):
        replies = await asyncio.gather(*(send(nc, signed) for signed in [allow] * 8 + [deny] * 2))

        accepted = [r for r in replies if r.accepted]
        assert len(accepted) == 1, replies
        assert Counter(r.reason_codes for r in replies if not r.accepted) == {
            ("approval_not_pending",): 9
        }

        async def consumed() -> bool:
            return await status(nc, approval_id) == "consumed"

        await wait_for(consumed, timeout=10)
        later = [await send(nc, allow), await send(nc, deny)]

    assert [(r.accepted, r.state, r.reason_codes) for r in later] == [
        (False, "consumed", ("approval_not_pending",))
    ] * 2
    outbox = approvers_state.connector_dir("court-efiling") / "outbox"
    assert len(list(outbox.iterdir())) == 1
    assert await spy.approval_ids() == [approval_id]
    assert await order_count(gate.js) == 1
    assert terminal_entries(approvers_state, approval_id) == ["consumed"]
    rows = ledger_rows(approvers_state.ledger, approval_id)
    end = [status for status, _ in rows].index("consumed")
    # Both duplicates after the end are on the record, naming no state.
    assert rows[end + 1 :] == [(None, ("approval_not_pending",))] * 2


@pytest.mark.claim("approver-desk.one-terminal-entry")
async def test_resolutions_racing_the_expiry_leave_one_expired_entry(
    gate: RunningGate, nc: Client, approvers_state: StateDir, clock: Clock
) -> None:
    held = await held_filing(nc, approvers_state)
    approval_id, expires_at = held.approval_id, held.expires_at_ms
    assert approval_id is not None
    assert expires_at is not None
    attorney = approver(nc, approvers_state, ATTORNEY)
    view = await attorney.show(approval_id)
    allow = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
    clock.advance(expires_at - clock() + 1)

    replies, _ = await asyncio.gather(
        asyncio.gather(*(send(nc, allow) for _ in range(6))), gate.desk.sweep()
    )
    again = await send(nc, allow)

    assert not any(r.accepted for r in (*replies, again))
    assert {r.reason_codes for r in (*replies, again)} <= {
        ("approval_expired",),
        ("approval_not_pending",),
    }
    assert await state_of(gate, approval_id) == "expired"
    assert await order_count(gate.js) == 0
    assert terminal_entries(approvers_state, approval_id) == ["expired"]
    assert ledger_rows(approvers_state.ledger, approval_id)[-1] == (None, ("approval_not_pending",))
