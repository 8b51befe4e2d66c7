"""Stateful property test of the approval store ("no sequence of
operations produces two executions or leaves execution_unknown").

Hypothesis drives random sequences of create, approve, deny, claim (with the
exact binding or one field changed), record_order, finish, expire_due and
recover (after a restart: a new store instance on the same file) against a
real SQLite file, with a clock that only moves forward. A small model
predicts every outcome, so a refusal the model did not expect fails as
surely as a success it did not expect. The invariants are checked against
what the store itself reports, not against the model:

- at most one successful claim per approval, ever (never two executions);
- a terminal state never changes, so ``execution_unknown`` is never left;
- the held content is ``None`` in every terminal state, and intact otherwise.

The store is async; the machine runs it on a private event loop.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from smf_assurance.pipeline.stores.approvals import (
    ApprovalError,
    ApprovalExpired,
    ApprovalRecord,
    BindingChanged,
    DigestMismatch,
    FinishOutcome,
    IllegalTransition,
    NotPending,
)
from smf_assurance.pipeline.stores.approvals_sqlite import BINDING_FIELDS, SqliteApprovalStore
from smf_assurance.subjects.approvals import (
    MAX_TTL_MS,
    TERMINAL_STATES,
    ApprovalBinding,
    binding_digest,
)
from tests.support.approval_store import ATTORNEY, T0, changed, make_binding

R = TypeVar("R")

TTLS = st.integers(min_value=1, max_value=MAX_TTL_MS)
OUTCOMES = st.sampled_from(["consumed", "failed", "execution_unknown"])


@dataclass
class Model:
    binding: ApprovalBinding
    payload: bytes
    state: str = "pending"
    order_id: str | None = None


class ApprovalMachine(RuleBasedStateMachine):
    approvals = Bundle("approvals")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="smf-approval-machine-"))
        self.loop = asyncio.new_event_loop()
        self.store = self.run(SqliteApprovalStore.open(self.dir / "approvals.db"))
        self.now = T0
        self.created = 0
        self.model: dict[str, Model] = {}
        self.claims: Counter[str] = Counter()
        self.first_terminal: dict[str, str] = {}

    def run(self, step: Awaitable[R]) -> R:
        return self.loop.run_until_complete(step)

    def call(self, name: str, step: Awaitable[R], expected: type[ApprovalError] | None) -> R | None:
        """Run one store call; it must succeed (``expected`` None) or raise exactly
        ``expected``. An unexpected refusal propagates and fails the example."""
        event(f"{name}: {expected.reason_code if expected else 'ok'}")
        if expected is None:
            return self.run(step)
        with pytest.raises(expected) as info:
            self.run(step)
        assert type(info.value) is expected
        return None

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- rules ----------------------------------------------------------------

    @rule(ms=st.integers(min_value=0, max_value=MAX_TTL_MS // 2))
    def advance_clock(self, ms: int) -> None:
        self.now += ms

    @initialize(target=approvals, ttl_ms=TTLS)
    def create_first(self, ttl_ms: int) -> str:
        return self._create(ttl_ms)

    @rule(target=approvals, ttl_ms=TTLS)
    def create(self, ttl_ms: int) -> str:
        return self._create(ttl_ms)

    def _create(self, ttl_ms: int) -> str:
        self.created += 1
        binding = make_binding(f"machine-{self.created}", created_at_ms=self.now, ttl_ms=ttl_ms)
        payload = f"content of approval {self.created}".encode()
        record = self.run(self.store.create(binding, payload, self.now))
        assert record.state == "pending"
        self.model[binding.approval_id] = Model(binding, payload)
        return binding.approval_id

    def _resolve(self, aid: str, digest_ok: bool, target: str) -> None:
        m = self.model[aid]
        expected: type[ApprovalError] | None = None
        if m.state != "pending":
            expected = NotPending
        elif self.now >= m.binding.expires_at_ms:
            expected, m.state = ApprovalExpired, "expired"
        elif not digest_ok:
            expected = DigestMismatch
        else:
            m.state = target
        digest = binding_digest(m.binding if digest_ok else changed(m.binding, "content_hash"))
        method = self.store.approve if target == "approved" else self.store.deny
        self.call(method.__name__, method(aid, digest, ATTORNEY, self.now), expected)

    @rule(aid=approvals, digest_ok=st.booleans())
    def approve(self, aid: str, digest_ok: bool) -> None:
        self._resolve(aid, digest_ok, "approved")

    @rule(aid=approvals, digest_ok=st.booleans())
    def deny(self, aid: str, digest_ok: bool) -> None:
        self._resolve(aid, digest_ok, "denied")

    @rule(aid=approvals, field=st.none() | st.sampled_from(BINDING_FIELDS))
    def claim(self, aid: str, field: str | None) -> None:
        m = self.model[aid]
        expected: type[ApprovalError] | None = None
        if m.state == "pending":
            expected = IllegalTransition
        elif m.state != "approved":
            expected = NotPending
        elif self.now >= m.binding.expires_at_ms:
            expected, m.state = ApprovalExpired, "expired"
        elif field is not None:
            expected = BindingChanged
        else:
            m.state = "executing"
        presented = m.binding if field is None else changed(m.binding, field)
        record = self.call("claim", self.store.claim(aid, presented, self.now), expected)
        if isinstance(record, ApprovalRecord):
            self.claims[aid] += 1
            assert record.held_payload == m.payload

    @rule(
        aid=approvals,
        steps=st.integers(min_value=1, max_value=4),
        outcome=OUTCOMES,
        order_first=st.booleans(),
    )
    def progress(self, aid: str, steps: int, outcome: FinishOutcome, order_first: bool) -> None:
        """Up to ``steps`` of the gate's own next legal step for this approval (a
        late claim once it is terminal), so random sequences reach deep states."""
        for _ in range(steps):
            m = self.model[aid]
            if m.state == "pending":
                self.approve(aid, digest_ok=True)
            elif m.state == "approved":
                self.claim(aid, field=None)
            elif m.state == "executing" and m.order_id is None and order_first:
                self.record_order(aid, another=False)
            elif m.state == "executing":
                self.finish(aid, outcome)
            else:
                self.claim(aid, field=None)
                return

    @rule(aid=approvals, another=st.booleans())
    def record_order(self, aid: str, another: bool) -> None:
        m = self.model[aid]
        order_id = f"order-{aid}-{self.created}" if another else f"order-{aid}"
        expected: type[ApprovalError] | None = None
        if m.state != "executing" or m.order_id not in (None, order_id):
            expected = IllegalTransition
        else:
            m.order_id = order_id
        self.call("record_order", self.store.record_order(aid, order_id, self.now), expected)
        if m.order_id is not None:
            assert self.run(self.store.find_by_order(m.order_id)) == aid

    @rule(aid=approvals, outcome=OUTCOMES)
    def finish(self, aid: str, outcome: FinishOutcome) -> None:
        m = self.model[aid]
        expected: type[ApprovalError] | None = None
        if m.state != "executing":
            expected = IllegalTransition
        else:
            m.state = outcome
        self.call("finish", self.store.finish(aid, outcome, self.now), expected)

    @rule()
    def expire_due(self) -> None:
        due = sorted(
            aid
            for aid, m in self.model.items()
            if m.state in ("pending", "approved") and m.binding.expires_at_ms <= self.now
        )
        for aid in due:
            self.model[aid].state = "expired"
        assert self.run(self.store.expire_due(self.now)) == due

    @rule(restart=st.booleans())
    def recover(self, restart: bool) -> None:
        if restart:
            self.run(self.store.close())
            self.store = self.run(SqliteApprovalStore.open(self.dir / "approvals.db"))
        invalidated = sorted(a for a, m in self.model.items() if m.state == "approved")
        unknown = sorted(a for a, m in self.model.items() if m.state == "executing")
        for aid in invalidated:
            self.model[aid].state = "invalidated"
        for aid in unknown:
            self.model[aid].state = "execution_unknown"
        assert self.run(self.store.recover(self.now)) == (invalidated, unknown)

    # --- invariants -----------------------------------------------------------

    @invariant()
    def never_two_executions(self) -> None:
        assert all(count <= 1 for count in self.claims.values())

    @invariant()
    def store_agrees_with_model_and_terminal_states_hold(self) -> None:
        for aid, m in self.model.items():
            record = self.run(self.store.get(aid))
            assert record is not None
            assert record.state == m.state
            assert record.order_id == m.order_id
            if record.state in TERMINAL_STATES:
                # Once terminal, always that terminal state: execution_unknown is never left.
                assert self.first_terminal.setdefault(aid, record.state) == record.state
                assert record.held_payload is None
            else:
                assert aid not in self.first_terminal
                assert record.held_payload == m.payload
            assert record.binding == m.binding


ApprovalMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
TestApprovalStateMachine = ApprovalMachine.TestCase
