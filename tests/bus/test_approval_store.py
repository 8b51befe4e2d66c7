"""Contract tests of the approval store (ARCHITECTURE.md,
"Exact-action approval").

Every test in the contract section runs against each backend
(``tests/support/store_backends.py``): the SQLite store and the JetStream KV
store, each a ``Backend`` that opens a new store instance on the same storage and can say
whether some bytes are still anywhere in that storage. The sections at the
end check what only one backend has: for SQLite the table's CHECK
constraints, secure deletion, one UPDATE per claim; for KV the
compare-and-set by revision under conflict, outages of a real server,
tampered values, the order index, and where content bytes go on disk.

Real SQLite files in ``tmp_path``, a real nats-server per test; the clock is
an argument (``now_ms``), so expiry is tested by passing a later time, never
by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final, cast

import msgspec
import nats
import pytest
import structlog
from nats.js.api import StorageType
from nats.js.errors import (
    APIError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.pipeline.stores import approvals_kv, approvals_sqlite
from smf_assurance.pipeline.stores.approvals import (
    ALL_STATES,
    TRANSITIONS,
    ApprovalError,
    ApprovalExists,
    ApprovalExpired,
    ApprovalNotFound,
    ApprovalRecord,
    ApprovalStore,
    ApprovalStoreUnavailable,
    BindingChanged,
    BindingInvalid,
    DigestMismatch,
    FinishOutcome,
    IllegalTransition,
    NotPending,
    TtlExceeded,
    check_transition,
)
from smf_assurance.pipeline.stores.approvals_kv import KvApprovalStore
from smf_assurance.pipeline.stores.approvals_sqlite import BINDING_FIELDS, SqliteApprovalStore
from smf_assurance.subjects.approvals import (
    MAX_TTL_MS,
    TERMINAL_STATES,
    ApprovalBinding,
    binding_digest,
)
from tests.support.approval_store import (
    ATTORNEY,
    PAYLOAD,
    T0,
    TTL,
    Backend,
    KvBackend,
    approved,
    backend,
    changed,
    held,
    make_binding,
    on_disk,
    raw,
    state_of,
    store,
)
from tests.support.builders import fake_identity
from tests.support.bus_helpers import wait_for
from tests.support.store_backends import only_kv, opened_on_kv

__all__ = ["backend", "store"]


async def executing(store: ApprovalStore, label: str = "filing", **kw: Any) -> ApprovalBinding:
    binding = await approved(store, label, **kw)
    await store.claim(binding.approval_id, binding, T0 + 2)
    return binding


# --- the transition table ---------------------------------------------------


def test_transition_table_is_the_documented_one() -> None:
    allowed = {(s, t) for s, targets in TRANSITIONS.items() for t in targets}
    assert allowed == {
        ("pending", "approved"),
        ("pending", "denied"),
        ("pending", "expired"),
        ("pending", "invalidated"),
        ("approved", "executing"),
        ("approved", "expired"),
        ("approved", "invalidated"),
        ("executing", "consumed"),
        ("executing", "failed"),
        ("executing", "execution_unknown"),
    }
    assert {s for s, targets in TRANSITIONS.items() if not targets} == TERMINAL_STATES


@pytest.mark.parametrize("source", ALL_STATES)
@pytest.mark.parametrize("target", ALL_STATES)
def test_check_transition_refuses_everything_outside_the_table(source: Any, target: Any) -> None:
    if target in TRANSITIONS[source]:
        check_transition("apr-x", source, target)
    else:
        with pytest.raises(IllegalTransition) as info:
            check_transition("apr-x", source, target)
        assert info.value.reason_code == "illegal_transition"


def test_reason_codes_are_distinct() -> None:
    errors = [
        ApprovalNotFound,
        ApprovalExists,
        NotPending,
        ApprovalExpired,
        DigestMismatch,
        BindingChanged,
        IllegalTransition,
        ApprovalStoreUnavailable,
        TtlExceeded,
        BindingInvalid,
    ]
    codes = [e.reason_code for e in errors]
    assert len(set(codes)) == len(codes)
    assert all(issubclass(e, ApprovalError) for e in errors)
    assert NotPending.reason_code == "approval_not_pending"
    assert DigestMismatch.reason_code == "binding_digest_mismatch"


def test_record_repr_does_not_show_the_content() -> None:
    binding = make_binding()
    record = ApprovalRecord(binding, binding_digest(binding), "pending", None, None, PAYLOAD, T0)
    assert PAYLOAD not in repr(record).encode()
    assert f"<{len(PAYLOAD)} bytes>" in repr(record)
    assert record.approval_id == binding.approval_id
    purged = msgspec.structs.replace(record, state="denied", held_payload=None)
    assert "held_payload=None" in repr(purged)


# --- create / get -----------------------------------------------------------


async def test_create_then_get(store: ApprovalStore) -> None:
    binding = make_binding()
    created = await store.create(binding, PAYLOAD, T0)
    assert created == ApprovalRecord(
        binding=binding,
        digest=binding_digest(binding),
        state="pending",
        resolver_id=None,
        order_id=None,
        held_payload=PAYLOAD,
        updated_at_ms=T0,
    )
    assert await store.get(binding.approval_id) == created


async def test_get_unknown_is_none(store: ApprovalStore) -> None:
    assert await store.get(make_binding("never").approval_id) is None


async def test_duplicate_create_is_refused_and_changes_nothing(store: ApprovalStore) -> None:
    binding = await held(store)
    with pytest.raises(ApprovalExists):
        await store.create(binding, b"other content", T0 + 5)
    record = await store.get(binding.approval_id)
    assert record is not None
    assert (record.held_payload, record.updated_at_ms) == (PAYLOAD, T0)


@pytest.mark.parametrize(
    ("created_at_ms", "expires_at_ms", "now_ms"),
    [
        pytest.param(T0, T0 + MAX_TTL_MS + 1, T0, id="ttl-above-cap"),
        pytest.param(T0, T0, T0 - 1, id="ttl-zero"),
        pytest.param(T0 + 60_000, T0 + 60_000 + MAX_TTL_MS, T0, id="future-created-at"),
    ],
)
async def test_create_refuses_a_binding_above_the_ttl_cap(
    store: ApprovalStore, created_at_ms: int, expires_at_ms: int, now_ms: int
) -> None:
    """Defence in depth: ApprovalBinding refuses these itself, so bypass it the way
    a careless caller could (force_setattr on a frozen Struct)."""
    binding = make_binding()
    msgspec.structs.force_setattr(binding, "created_at_ms", created_at_ms)
    msgspec.structs.force_setattr(binding, "expires_at_ms", expires_at_ms)
    with pytest.raises(TtlExceeded):
        await store.create(binding, PAYLOAD, now_ms)
    assert await store.get(binding.approval_id) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("decision_id", "not-an-identity"),
        ("approval_id", fake_identity("an approval id not derived from the decision")),
        ("required_roles", ()),
        ("tenant_id", ""),
    ],
)
async def test_create_refuses_an_invalid_binding(
    store: ApprovalStore, field: str, value: str
) -> None:
    binding = make_binding()
    msgspec.structs.force_setattr(binding, field, value)
    with pytest.raises(BindingInvalid):
        await store.create(binding, PAYLOAD, T0)
    assert await store.get(binding.approval_id) is None


async def test_create_refuses_an_already_expired_binding(store: ApprovalStore) -> None:
    binding = make_binding()
    with pytest.raises(ApprovalExpired):
        await store.create(binding, PAYLOAD, binding.expires_at_ms)
    assert await store.get(binding.approval_id) is None


# --- the happy path ---------------------------------------------------------


async def test_approve_claim_record_finish_consumed(store: ApprovalStore) -> None:
    binding = await held(store)
    digest = binding_digest(binding)

    approved_record = await store.approve(binding.approval_id, digest, ATTORNEY, T0 + 1)
    assert (approved_record.state, approved_record.resolver_id) == ("approved", ATTORNEY)
    assert approved_record.held_payload == PAYLOAD

    claimed = await store.claim(binding.approval_id, binding, T0 + 2)
    assert (claimed.state, claimed.updated_at_ms) == ("executing", T0 + 2)
    assert claimed.held_payload == PAYLOAD  # the gate builds the order from it
    assert claimed.binding == binding

    await store.record_order(binding.approval_id, "order-1", T0 + 3)
    assert await store.find_by_order("order-1") == binding.approval_id

    done = await store.finish(binding.approval_id, "consumed", T0 + 4)
    assert (done.state, done.held_payload, done.order_id) == ("consumed", None, "order-1")
    assert (done.resolver_id, done.updated_at_ms) == (ATTORNEY, T0 + 4)
    assert await store.get(binding.approval_id) == done
    assert await store.find_by_order("order-1") == binding.approval_id


@pytest.mark.parametrize("outcome", ["consumed", "failed", "execution_unknown"])
async def test_the_connectors_receipt_is_kept_with_consumed_only(
    store: ApprovalStore, outcome: Any
) -> None:
    """The connector's receipt (a court's filing number) is kept with the
    approval's outcome, in the same write that ends it, and read back by ``get``; a
    receipt offered with any other outcome is not kept (nothing was confirmed)."""
    binding = await executing(store)
    done = await store.finish(binding.approval_id, outcome, T0 + 4, "ECF-00004711")
    kept = "ECF-00004711" if outcome == "consumed" else None
    assert (done.state, done.receipt) == (outcome, kept)
    again = await store.get(binding.approval_id)
    assert again is not None
    assert (again.state, again.receipt, again.outcome_codes) == (outcome, kept, ())
    assert "ECF-00004711" not in repr(again), "the receipt stays out of logs and tracebacks"


async def test_a_denials_reason_codes_are_kept_with_it(store: ApprovalStore) -> None:
    """The requester sees why; the deny's codes are written with the deny,
    and an approve stores none."""
    binding = await held(store)
    codes = ("approver_denied", "approver_denied_wrong_document")
    denied = await store.deny(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1, codes)
    assert (denied.state, denied.outcome_codes) == ("denied", codes)
    again = await store.get(binding.approval_id)
    assert again is not None
    assert (again.outcome_codes, again.receipt) == (codes, None)
    other = await approved(store, "other")
    record = await store.get(other.approval_id)
    assert record is not None
    assert record.outcome_codes == ()


async def test_a_store_file_from_before_receipts_is_brought_up_to_date(tmp_path: Path) -> None:
    """An approvals file made before ``outcome_codes`` and ``receipt`` existed keeps its
    rows and gains both columns at open, and opening it twice adds nothing
    twice."""
    path = tmp_path / "old.db"
    old_schema = re.sub(
        r"\n    outcome_codes TEXT,\n    receipt TEXT,", "", approvals_sqlite.SCHEMA
    )
    assert "receipt" not in old_schema
    with contextlib.closing(sqlite3.connect(path)) as raw:
        raw.executescript(old_schema)
    first = await SqliteApprovalStore.open(path)
    binding = await held(first)
    await first.close()
    second = await SqliteApprovalStore.open(path)
    try:
        await second.approve(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
        await second.claim(binding.approval_id, binding, T0 + 2)
        done = await second.finish(binding.approval_id, "consumed", T0 + 3, "ECF-00000042")
        assert done.receipt == "ECF-00000042"
    finally:
        await second.close()
    with contextlib.closing(sqlite3.connect(path)) as raw:
        columns = [row[1] for row in raw.execute("PRAGMA table_info(approvals)")]
    assert columns.count("receipt") == 1
    assert columns.count("outcome_codes") == 1


async def test_claim_just_before_expiry_wins(store: ApprovalStore) -> None:
    binding = await approved(store)
    record = await store.claim(binding.approval_id, binding, binding.expires_at_ms - 1)
    assert record.state == "executing"


# --- the claim re-checks the whole binding ----------------------------------


@pytest.mark.parametrize("field", BINDING_FIELDS)
async def test_claim_with_a_changed_binding_field_is_refused(
    store: ApprovalStore, field: str
) -> None:
    binding = await approved(store)
    other = changed(binding, field)
    assert binding_digest(other) != binding_digest(binding)

    with pytest.raises(BindingChanged) as info:
        await store.claim(binding.approval_id, other, T0 + 2)
    assert field in str(info.value)

    record = await store.get(binding.approval_id)
    assert record is not None
    assert (record.state, record.held_payload, record.updated_at_ms) == (
        "approved",
        PAYLOAD,
        T0 + 1,
    )
    # Unchanged means still claimable with the exact binding.
    assert (await store.claim(binding.approval_id, binding, T0 + 3)).state == "executing"


async def test_claim_after_expiry_is_refused_and_expires(store: ApprovalStore) -> None:
    binding = await approved(store)
    with pytest.raises(ApprovalExpired):
        await store.claim(binding.approval_id, binding, binding.expires_at_ms)
    record = await store.get(binding.approval_id)
    assert record is not None
    assert (record.state, record.held_payload) == ("expired", None)
    assert record.updated_at_ms == binding.expires_at_ms
    with pytest.raises(NotPending):
        await store.claim(binding.approval_id, binding, T0 + 2)


# --- resolutions ------------------------------------------------------------


@pytest.mark.parametrize("resolve", ["approve", "deny"])
async def test_resolution_after_expiry_is_refused_and_expires(
    store: ApprovalStore, resolve: str
) -> None:
    binding = await held(store)
    with pytest.raises(ApprovalExpired):
        await getattr(store, resolve)(
            binding.approval_id, binding_digest(binding), ATTORNEY, binding.expires_at_ms + 1
        )
    record = await store.get(binding.approval_id)
    assert record is not None
    assert (record.state, record.held_payload, record.resolver_id) == ("expired", None, None)


@pytest.mark.parametrize("resolve", ["approve", "deny"])
async def test_resolution_with_another_digest_is_refused(
    store: ApprovalStore, resolve: str
) -> None:
    binding = await held(store)
    other_digest = binding_digest(changed(binding, "content_hash"))
    with pytest.raises(DigestMismatch):
        await getattr(store, resolve)(binding.approval_id, other_digest, ATTORNEY, T0 + 1)
    assert await state_of(store, binding.approval_id) == "pending"


async def test_deny_then_approve_is_refused(store: ApprovalStore) -> None:
    binding = await held(store)
    digest = binding_digest(binding)
    denied = await store.deny(binding.approval_id, digest, ATTORNEY, T0 + 1)
    assert (denied.state, denied.held_payload, denied.resolver_id) == ("denied", None, ATTORNEY)
    with pytest.raises(NotPending):
        await store.approve(binding.approval_id, digest, "attorney-bob", T0 + 2)
    record = await store.get(binding.approval_id)
    assert record is not None
    assert (record.state, record.resolver_id) == ("denied", ATTORNEY)


@pytest.mark.parametrize("second", ["approve", "deny"])
async def test_second_resolution_is_refused(store: ApprovalStore, second: str) -> None:
    binding = await approved(store)
    with pytest.raises(NotPending):
        await getattr(store, second)(
            binding.approval_id, binding_digest(binding), "attorney-bob", T0 + 2
        )
    record = await store.get(binding.approval_id)
    assert record is not None
    assert (record.state, record.resolver_id, record.updated_at_ms) == (
        "approved",
        ATTORNEY,
        T0 + 1,
    )


async def test_second_claim_is_refused(store: ApprovalStore) -> None:
    binding = await executing(store)
    with pytest.raises(NotPending):
        await store.claim(binding.approval_id, binding, T0 + 3)
    assert await state_of(store, binding.approval_id) == "executing"


# --- illegal transitions ----------------------------------------------------


async def test_steps_out_of_order_are_illegal(store: ApprovalStore) -> None:
    binding = await held(store)
    aid = binding.approval_id
    with pytest.raises(IllegalTransition):
        await store.finish(aid, "consumed", T0 + 1)
    with pytest.raises(IllegalTransition):
        await store.record_order(aid, "order-1", T0 + 1)
    with pytest.raises(IllegalTransition):
        await store.claim(aid, binding, T0 + 1)
    record = await store.get(aid)
    assert record is not None
    assert (record.state, record.held_payload, record.order_id) == ("pending", PAYLOAD, None)
    assert await store.find_by_order("order-1") is None


@pytest.mark.parametrize("outcome", ["consumed", "failed", "execution_unknown"])
async def test_a_finished_approval_never_moves_again(store: ApprovalStore, outcome: Any) -> None:
    binding = await executing(store)
    aid = binding.approval_id
    await store.finish(aid, outcome, T0 + 3)
    outcomes: tuple[FinishOutcome, ...] = ("consumed", "failed", "execution_unknown")
    for again in outcomes:
        with pytest.raises(IllegalTransition):
            await store.finish(aid, again, T0 + 4)
    with pytest.raises(IllegalTransition):
        await store.record_order(aid, "late-order", T0 + 4)
    with pytest.raises(NotPending):
        await store.claim(aid, binding, T0 + 4)
    assert await store.recover(T0 + 5) == ([], [])
    assert await store.expire_due(binding.expires_at_ms + 1) == []
    assert await state_of(store, aid) == outcome


@pytest.mark.parametrize("bogus", ["approved", "denied", "pending", "executing", "nonsense"])
async def test_finish_with_a_state_that_is_no_outcome_is_illegal(
    store: ApprovalStore, bogus: Any
) -> None:
    binding = await executing(store)
    with pytest.raises(IllegalTransition):
        await store.finish(binding.approval_id, bogus, T0 + 3)
    assert await state_of(store, binding.approval_id) == "executing"


async def test_sqlite_checks_the_transition_table_before_any_sql(
    sqlite_store: SqliteApprovalStore,
) -> None:
    """``executing -> approved`` is a state the column allows but the table does not:
    refused ``IllegalTransition`` by the check every state write makes first
    (``_Tx.move``), and the row stays ``executing``."""
    binding = await executing(sqlite_store)
    with pytest.raises(IllegalTransition):
        await sqlite_store.finish(binding.approval_id, cast(Any, "approved"), T0 + 3)
    assert await state_of(sqlite_store, binding.approval_id) == "executing"


async def test_unknown_approval_is_not_found(store: ApprovalStore) -> None:
    binding = make_binding("never-held")
    aid, digest = binding.approval_id, binding_digest(binding)
    steps: list[Callable[[], Awaitable[object]]] = [
        lambda: store.approve(aid, digest, ATTORNEY, T0),
        lambda: store.deny(aid, digest, ATTORNEY, T0),
        lambda: store.claim(aid, binding, T0),
        lambda: store.record_order(aid, "order-1", T0),
        lambda: store.finish(aid, "consumed", T0),
    ]
    for step in steps:
        with pytest.raises(ApprovalNotFound):
            await step()


# --- orders -----------------------------------------------------------------


@pytest.mark.claim("exact-action-approval.one-claimant")
async def test_one_claim_one_order(store: ApprovalStore) -> None:
    first = await executing(store, "first")
    second = await executing(store, "second")
    await store.record_order(first.approval_id, "order-1", T0 + 3)
    await store.record_order(first.approval_id, "order-1", T0 + 4)  # redelivered: same order
    with pytest.raises(IllegalTransition):
        await store.record_order(first.approval_id, "order-2", T0 + 4)
    with pytest.raises(IllegalTransition):
        await store.record_order(second.approval_id, "order-1", T0 + 4)
    assert await store.find_by_order("order-1") == first.approval_id
    assert await store.find_by_order("order-2") is None
    record = await store.get(second.approval_id)
    assert record is not None
    assert record.order_id is None


# --- content purge ----------------------------------------------------------


async def _deny(store: ApprovalStore, b: ApprovalBinding) -> None:
    await store.deny(b.approval_id, binding_digest(b), ATTORNEY, T0 + 1)


async def _expire_by_sweep(store: ApprovalStore, b: ApprovalBinding) -> None:
    assert await store.expire_due(b.expires_at_ms) == [b.approval_id]


async def _expire_at_claim(store: ApprovalStore, b: ApprovalBinding) -> None:
    await store.approve(b.approval_id, binding_digest(b), ATTORNEY, T0 + 1)
    with pytest.raises(ApprovalExpired):
        await store.claim(b.approval_id, b, b.expires_at_ms)


async def _expire_at_approve(store: ApprovalStore, b: ApprovalBinding) -> None:
    with pytest.raises(ApprovalExpired):
        await store.approve(b.approval_id, binding_digest(b), ATTORNEY, b.expires_at_ms)


async def _invalidate_pending(store: ApprovalStore, b: ApprovalBinding) -> None:
    assert await store.invalidate(b.approval_id, T0 + 1) == [b.approval_id]


async def _invalidate_approved(store: ApprovalStore, b: ApprovalBinding) -> None:
    await store.approve(b.approval_id, binding_digest(b), ATTORNEY, T0 + 1)
    assert await store.recover(T0 + 2) == ([b.approval_id], [])


def _finish_as(outcome: Any) -> Callable[[ApprovalStore, ApprovalBinding], Awaitable[None]]:
    async def path(store: ApprovalStore, b: ApprovalBinding) -> None:
        await store.approve(b.approval_id, binding_digest(b), ATTORNEY, T0 + 1)
        await store.claim(b.approval_id, b, T0 + 2)
        await store.finish(b.approval_id, outcome, T0 + 3)

    return path


async def _unknown_by_recovery(store: ApprovalStore, b: ApprovalBinding) -> None:
    await store.approve(b.approval_id, binding_digest(b), ATTORNEY, T0 + 1)
    await store.claim(b.approval_id, b, T0 + 2)
    assert await store.recover(T0 + 3) == ([], [b.approval_id])


TERMINAL_PATHS: Final = {
    "denied": ("denied", _deny),
    "expired-by-sweep": ("expired", _expire_by_sweep),
    "expired-at-claim": ("expired", _expire_at_claim),
    "expired-at-approve": ("expired", _expire_at_approve),
    "invalidated-pending": ("invalidated", _invalidate_pending),
    "invalidated-approved": ("invalidated", _invalidate_approved),
    "consumed": ("consumed", _finish_as("consumed")),
    "failed": ("failed", _finish_as("failed")),
    "execution-unknown-reported": ("execution_unknown", _finish_as("execution_unknown")),
    "execution-unknown-recovered": ("execution_unknown", _unknown_by_recovery),
}


def test_purge_paths_reach_every_terminal_state() -> None:
    assert {state for state, _ in TERMINAL_PATHS.values()} == TERMINAL_STATES


@pytest.mark.parametrize("size", [1, 40], ids=["small", "overflow-pages"])
@pytest.mark.parametrize("path", sorted(TERMINAL_PATHS))
async def test_content_is_purged_at_every_terminal_state(
    backend: Backend, store: ApprovalStore, path: str, size: int
) -> None:
    """ARCHITECTURE.md: "the content is purged at every terminal state". Checked
    through the API and in the backend's raw storage. The 40-copy content (about
    23 KB) is larger than a SQLite page, so it also checks overflow pages."""
    state, reach = TERMINAL_PATHS[path]
    marker = b"PRIVILEGED-" + os.urandom(16).hex().encode() + b"-END"
    content = (marker + b"\x00" * 512) * size
    binding = make_binding(path)
    await store.create(binding, content, T0)
    assert await backend.holds_bytes(marker), "the content must be stored while open"

    await reach(store, binding)

    record = await store.get(binding.approval_id)
    assert record is not None
    assert (record.state, record.held_payload) == (state, None)
    assert not await backend.holds_bytes(marker)


# --- expiry and recovery ----------------------------------------------------


async def test_expire_due_closes_only_open_approvals_past_expiry(store: ApprovalStore) -> None:
    due_pending = await held(store, "due-pending", ttl_ms=1_000)
    due_approved = await approved(store, "due-approved", ttl_ms=1_000)
    due_executing = await executing(store, "due-executing", ttl_ms=1_000)
    later = await held(store, "later", ttl_ms=1_001)
    now = T0 + 1_000  # == expires_at_ms of the "due" ones: expiry is exclusive

    expired = await store.expire_due(now)

    assert expired == sorted([due_pending.approval_id, due_approved.approval_id])
    assert await state_of(store, due_pending.approval_id) == "expired"
    assert await state_of(store, due_approved.approval_id) == "expired"
    assert await state_of(store, due_executing.approval_id) == "executing"
    assert await state_of(store, later.approval_id) == "pending"
    assert await store.expire_due(now) == []


async def test_invalidate_unclaimed_closes_only_approved_left_past_the_grace(
    store: ApprovalStore,
) -> None:
    """An allow-once no claim followed (its gate died in between) is closed by any
    gate's sweep once it is older than the grace; nothing else is touched, a second
    sweep moves nothing, and a late claim is refused."""
    pending = await held(store, "pending")
    left = await approved(store, "left")  # approved at T0 + 1
    running = await executing(store, "running")
    assert await store.invalidate_unclaimed(T0 + 1, T0 + 5) == []  # not older than the cut
    assert await store.invalidate_unclaimed(T0 + 2, T0 + 5) == [left.approval_id]
    record = await store.get(left.approval_id)
    assert record is not None
    assert (record.state, record.held_payload, record.updated_at_ms) == (
        "invalidated",
        None,
        T0 + 5,
    )
    assert await state_of(store, pending.approval_id) == "pending"
    assert await state_of(store, running.approval_id) == "executing"
    assert await store.invalidate_unclaimed(T0 + 10, T0 + 10) == []
    with pytest.raises(NotPending):
        await store.claim(left.approval_id, left, T0 + 11)


async def test_recover_keeps_pending_invalidates_approved_and_marks_executing_unknown(
    backend: Backend, store: ApprovalStore
) -> None:
    pending = await held(store, "pending")
    approved_ = await approved(store, "approved")
    running = await executing(store, "running")
    done = await executing(store, "done")
    await store.finish(done.approval_id, "consumed", T0 + 3)
    denied = await held(store, "denied")
    await store.deny(denied.approval_id, binding_digest(denied), ATTORNEY, T0 + 1)
    before = {b.approval_id: await store.get(b.approval_id) for b in (done, denied, pending)}
    await store.close()

    restarted = await backend.open()  # a restart: a new instance on the same storage
    try:
        invalidated, unknown = await restarted.recover(T0 + 10)
        assert invalidated == [approved_.approval_id]
        assert unknown == [running.approval_id]
        for aid, state in [
            (approved_.approval_id, "invalidated"),
            (running.approval_id, "execution_unknown"),
        ]:
            record = await restarted.get(aid)
            assert record is not None
            assert (record.state, record.held_payload, record.updated_at_ms) == (
                state,
                None,
                T0 + 10,
            )
        for aid, record in before.items():
            # terminal: untouched; pending: untouched, its content kept for the approver
            assert await restarted.get(aid) == record
        kept = await restarted.get(pending.approval_id)
        assert kept is not None
        assert (kept.state, kept.held_payload is not None) == ("pending", True)
        assert await restarted.recover(T0 + 11) == ([], [])
        approved_after = await restarted.approve(
            pending.approval_id, binding_digest(pending), ATTORNEY, T0 + 12
        )
        assert approved_after.state == "approved"
        with pytest.raises(NotPending):
            await restarted.claim(approved_.approval_id, approved_, T0 + 12)
        with pytest.raises(IllegalTransition):
            await restarted.finish(running.approval_id, "consumed", T0 + 12)
    finally:
        await restarted.close()


# --- queries ----------------------------------------------------------------


async def test_list_open_filtered_by_tenant(store: ApprovalStore) -> None:
    a_pending = await held(store, "a-pending", tenant_id="tenant-a")
    a_approved = await approved(store, "a-approved", tenant_id="tenant-a", created_at_ms=T0 - 1)
    await executing(store, "a-executing", tenant_id="tenant-a")
    a_denied = await held(store, "a-denied", tenant_id="tenant-a")
    await store.deny(a_denied.approval_id, binding_digest(a_denied), ATTORNEY, T0 + 1)
    b_pending = await held(store, "b-pending", tenant_id="tenant-b")

    everything = await store.list_open()
    assert [r.approval_id for r in everything] == [
        a_approved.approval_id,  # oldest first
        *sorted([a_pending.approval_id, b_pending.approval_id]),
    ]
    only_a = await store.list_open("tenant-a")
    assert {r.approval_id for r in only_a} == {a_pending.approval_id, a_approved.approval_id}
    assert all(r.held_payload == PAYLOAD for r in only_a)
    assert [r.approval_id for r in await store.list_open("tenant-b")] == [b_pending.approval_id]
    assert await store.list_open("tenant-c") == []


async def test_find_by_order_unknown_is_none(store: ApprovalStore) -> None:
    assert await store.find_by_order("order-unknown") is None


# --- concurrency ------------------------------------------------------------


@pytest.mark.claim("exact-action-approval.one-claimant")
async def test_racing_claimants_have_exactly_one_winner(
    backend: Backend, store: ApprovalStore
) -> None:
    """Exactly one claimant wins: 20 tasks on each of two store
    instances (two connections on one file), interleaved, over 50 rounds."""
    other = await backend.open()
    wins = {"first": 0, "second": 0}
    try:
        for round_no in range(50):
            binding = await approved(store, f"race-{round_no}")
            pairs = (("first", store), ("second", other))
            contenders = [pair for _ in range(20) for pair in pairs]
            results = await asyncio.gather(
                *(s.claim(binding.approval_id, binding, T0 + 2) for _, s in contenders),
                return_exceptions=True,
            )
            winners = [
                name
                for (name, _), result in zip(contenders, results, strict=True)
                if isinstance(result, ApprovalRecord)
            ]
            assert len(winners) == 1, f"round {round_no}: {len(winners)} winners"
            assert all(
                isinstance(r, NotPending) for r in results if not isinstance(r, ApprovalRecord)
            )
            wins[winners[0]] += 1
            assert await state_of(other, binding.approval_id) == "executing"
    finally:
        await other.close()
    assert sum(wins.values()) == 50


# --- outage -----------------------------------------------------------------


async def test_closed_store_is_unavailable(backend: Backend) -> None:
    closed = await backend.open()
    binding = await approved(closed)
    await closed.close()
    await closed.close()  # idempotent
    aid, digest = binding.approval_id, binding_digest(binding)
    steps: list[Callable[[], Awaitable[object]]] = [
        lambda: closed.create(make_binding("new"), PAYLOAD, T0),
        lambda: closed.get(aid),
        closed.list_open,
        lambda: closed.approve(aid, digest, ATTORNEY, T0),
        lambda: closed.deny(aid, digest, ATTORNEY, T0),
        lambda: closed.claim(aid, binding, T0 + 2),
        lambda: closed.record_order(aid, "order-1", T0),
        lambda: closed.finish(aid, "consumed", T0),
        lambda: closed.expire_due(T0),
        lambda: closed.recover(T0),
        lambda: closed.find_by_order("order-1"),
    ]
    for step in steps:
        with pytest.raises(ApprovalStoreUnavailable) as info:
            await step()
        assert info.value.reason_code == "approval_store_unavailable"


# --- logs -------------------------------------------------------------------


async def test_logs_carry_ids_and_states_never_content(store: ApprovalStore) -> None:
    with structlog.testing.capture_logs() as logs:
        binding = await executing(store)
        with pytest.raises(NotPending):
            await store.claim(binding.approval_id, binding, T0 + 3)
        await store.record_order(binding.approval_id, "order-1", T0 + 3)
        await store.finish(binding.approval_id, "consumed", T0 + 4)
        expiring = await held(store, "expiring")
        with pytest.raises(ApprovalExpired):
            await store.approve(
                expiring.approval_id, binding_digest(expiring), ATTORNEY, expiring.expires_at_ms
            )
        bad = make_binding("bad")
        msgspec.structs.force_setattr(bad, "expires_at_ms", T0 + MAX_TTL_MS + 1)
        with pytest.raises(TtlExceeded):
            await store.create(bad, PAYLOAD, T0)

    assert logs, "the store logs its transitions"
    assert PAYLOAD.decode() not in repr(logs)
    allowed = {
        "event",
        "log_level",
        "approval_id",
        "from_state",
        "to_state",
        "reason_code",
        "invalidated",
        "unknown",
        "during",
    }
    assert set().union(*logs) <= allowed
    transitions = [
        (e["from_state"], e["to_state"]) for e in logs if e["event"] == "approval_transition"
    ]
    assert transitions == [
        ("pending", "approved"),
        ("approved", "executing"),
        ("executing", "consumed"),
        ("pending", "expired"),
    ]
    refusals = [e["reason_code"] for e in logs if e["event"] == "approval_refused"]
    assert refusals == ["approval_not_pending", "approval_expired", "approval_ttl_exceeded"]


# --- SQLite only: what the schema and the file guarantee --------------------


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteApprovalStore]:
    opened = await SqliteApprovalStore.open(tmp_path / "approvals.db")
    yield opened
    await opened.close()


async def test_sqlite_table_has_a_column_per_binding_field(
    sqlite_store: SqliteApprovalStore, tmp_path: Path
) -> None:
    with raw(tmp_path) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(approvals)")}
    assert set(BINDING_FIELDS) <= columns
    # secure_delete is per connection: the store's own connection must have it.
    secure = await sqlite_store._worker.run(
        lambda conn: conn.execute("PRAGMA secure_delete").fetchone()[0]
    )
    assert secure == 1


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param("UPDATE approvals SET state = 'bogus'", id="state-vocabulary"),
        pytest.param(
            f"UPDATE approvals SET expires_at_ms = created_at_ms + {MAX_TTL_MS + 1}",
            id="ttl-cap",
        ),
        pytest.param("UPDATE approvals SET state = 'denied'", id="terminal-keeps-content"),
        pytest.param("UPDATE approvals SET held_payload = NULL", id="open-without-content"),
        pytest.param("UPDATE approvals SET required_approvals = 'one'", id="strict-types"),
    ],
)
async def test_sqlite_check_constraints_refuse_writes_around_the_store(
    sqlite_store: SqliteApprovalStore, tmp_path: Path, sql: str
) -> None:
    binding = await held(sqlite_store)
    with raw(tmp_path) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(sql)
    assert await state_of(sqlite_store, binding.approval_id) == "pending"


async def test_sqlite_row_written_around_the_store_makes_it_unavailable(
    sqlite_store: SqliteApprovalStore, tmp_path: Path
) -> None:
    binding = await held(sqlite_store)
    with raw(tmp_path) as conn:
        conn.execute("UPDATE approvals SET decision_id = 'forged'")
    with pytest.raises(ApprovalStoreUnavailable):
        await sqlite_store.get(binding.approval_id)
    with pytest.raises(ApprovalStoreUnavailable):
        await sqlite_store.list_open()


async def test_sqlite_stored_digest_that_disagrees_refuses_the_claim(
    sqlite_store: SqliteApprovalStore, tmp_path: Path
) -> None:
    """The claim requires binding_digest(expected) == stored digest, not only equal
    fields: a row whose digest was rewritten is refused, not claimed."""
    binding = await approved(sqlite_store)
    with raw(tmp_path) as conn:
        conn.execute("UPDATE approvals SET digest = ?", (fake_identity("forged"),))
    with pytest.raises(DigestMismatch):
        await sqlite_store.claim(binding.approval_id, binding, T0 + 2)
    assert await state_of(sqlite_store, binding.approval_id) == "approved"


@pytest.mark.parametrize("field", BINDING_FIELDS)
async def test_sqlite_claim_compares_every_field_even_when_the_digest_agrees(
    sqlite_store: SqliteApprovalStore, tmp_path: Path, field: str
) -> None:
    """The two checks of the claim stand on their own: with the stored digest
    rewritten to the changed binding's digest, the field comparison alone refuses."""
    binding = await approved(sqlite_store)
    other = changed(binding, field)
    with raw(tmp_path) as conn:
        conn.execute("UPDATE approvals SET digest = ?", (binding_digest(other),))
    with pytest.raises(BindingChanged):
        await sqlite_store.claim(binding.approval_id, other, T0 + 2)
    assert await state_of(sqlite_store, binding.approval_id) == "approved"


async def test_sqlite_claim_is_one_job_and_one_update_in_begin_immediate(
    sqlite_store: SqliteApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One conditional UPDATE inside BEGIN IMMEDIATE, requiring exactly one
    affected row; the whole claim in one thread hop."""
    binding = await approved(sqlite_store)
    worker = sqlite_store._worker
    statements: list[str] = []
    await worker.run(lambda conn: conn.set_trace_callback(statements.append))
    jobs = 0
    real_run = worker.run

    async def counting_run(job: Any) -> Any:
        nonlocal jobs
        jobs += 1
        return await real_run(job)

    monkeypatch.setattr(worker, "run", counting_run)
    await sqlite_store.claim(binding.approval_id, binding, T0 + 2)
    monkeypatch.undo()
    await worker.run(lambda conn: conn.set_trace_callback(None))

    assert jobs == 1
    verbs = [s.split()[0].upper() for s in statements]
    assert verbs == ["BEGIN", "UPDATE", "COMMIT"]
    assert statements[0].strip().upper() == "BEGIN IMMEDIATE"


async def test_sqlite_lock_held_past_the_timeout_is_unavailable(tmp_path: Path) -> None:
    store_ = await SqliteApprovalStore.open(tmp_path / "approvals.db", busy_timeout_ms=50)
    try:
        binding = await held(store_)
        with raw(tmp_path) as conn:
            conn.execute("BEGIN IMMEDIATE")
            with pytest.raises(ApprovalStoreUnavailable):
                await store_.approve(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
            conn.execute("ROLLBACK")
        # Nothing was half-written; the store works again once the lock is gone.
        assert await state_of(store_, binding.approval_id) == "pending"
        record = await store_.approve(
            binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1
        )
        assert record.state == "approved"
    finally:
        await store_.close()


async def test_sqlite_unopenable_path_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ApprovalStoreUnavailable):
        await SqliteApprovalStore.open(tmp_path / "missing-dir" / "approvals.db")


# --- JetStream KV only: CAS by revision, outages, tampering, bytes on disk ----


kv_backend = only_kv(KvBackend)
kv_store = opened_on_kv()


async def raw_bucket(kv_backend: KvBackend) -> KeyValue:
    """The approval bucket through a connection of its own, around the store."""
    client = await kv_backend.connect()
    return await client.jetstream(timeout=2).key_value(approvals_kv.BUCKET)


def record_key(approval_id: str) -> str:
    return approvals_kv.APPROVAL_KEY + approval_id.removeprefix("sha256:")


@pytest.mark.parametrize("text", ["", ".", "a.b", "order-1", "x" * 300, "é/ü:*>", "\ud800"])
def test_kv_token_is_a_valid_key_and_injective(text: str) -> None:
    """KV keys allow only [-/_=.a-zA-Z0-9]; ids are encoded, never passed raw, and two
    different ids can never share a key."""
    key = approvals_kv.ORDER_KEY + approvals_kv.token(text)
    assert re.fullmatch(r"[-/_=.a-zA-Z0-9]+", key)
    assert not key.endswith(".")
    assert approvals_kv.token(text) != approvals_kv.token(text + "x")


async def test_kv_non_identity_ids_are_never_held(kv_store: KvApprovalStore) -> None:
    """Only ``sha256:<hex>`` ids can be held (admit_binding), so any other string is
    not found without touching a key built from it."""
    assert await kv_store.get("apr-x") is None
    assert await kv_store.get("sha256:" + "A" * 64) is None
    with pytest.raises(ApprovalNotFound):
        await kv_store.approve("../approval.x", "d", ATTORNEY, T0)
    assert await kv_store.invalidate("apr-x", T0) == []


async def test_kv_superseded_revision_stays_on_disk(
    kv_backend: KvBackend, nats_server: EmbeddedNatsServer
) -> None:
    """Characterisation of nats-server, and the reason the content is not kept in
    the bucket: with history=1 an update, a delete and a purge all leave the old
    value's bytes in the stream's block file (they are dropped by a limit, not
    erased), and a KV stream refuses the erasing message delete."""
    client = await kv_backend.connect()
    js = client.jetstream(timeout=2)
    kv = await js.create_key_value(bucket="probe", history=1, storage=StorageType.FILE)
    await kv.put("bystander", b"keeps the block in use")
    markers = {op: f"OLD-{op}-{os.urandom(8).hex()}".encode() for op in ("update", "del", "purge")}
    revisions = {op: await kv.put(op, marker) for op, marker in markers.items()}
    await wait_for(lambda: all(on_disk(nats_server.store_dir, m) for m in markers.values()))

    await kv.update("update", b"new value", last=revisions["update"])
    await kv.delete("del")
    await kv.purge("purge")

    assert (await kv.get("update")).value == b"new value"
    for marker in markers.values():
        assert on_disk(nats_server.store_dir, marker), "the server erased a superseded value"
    with pytest.raises(APIError):
        await js.delete_msg("KV_probe", revisions["update"])


NON_RECOVERY_PATHS: Final = sorted(p for p in TERMINAL_PATHS if "invalidated" not in p)
"""Terminal paths that leave another open approval open (recovery closes all)."""


@pytest.mark.parametrize(
    "path", [p for p in NON_RECOVERY_PATHS if p != "execution-unknown-recovered"]
)
async def test_kv_erased_content_is_in_no_file_of_a_block_still_in_use(
    kv_backend: KvBackend, kv_store: KvApprovalStore, nats_server: EmbeddedNatsServer, path: str
) -> None:
    """The file-level half of the purge contract, made meaningful: the content is
    seen on disk first, and another approval's content keeps the same block file
    alive (nats-server deletes a block file once every message in it is gone,
    which would hide a delete that did not erase)."""
    state, reach = TERMINAL_PATHS[path]
    other = b"BYSTANDER-" + os.urandom(8).hex().encode()
    bystander = make_binding("bystander", ttl_ms=MAX_TTL_MS)
    await kv_store.create(bystander, other, T0)
    marker = b"PRIVILEGED-" + os.urandom(16).hex().encode()
    binding = make_binding(path)
    await kv_store.create(binding, marker, T0)
    await wait_for(lambda: on_disk(nats_server.store_dir, marker))

    await reach(kv_store, binding)

    assert await state_of(kv_store, binding.approval_id) == state
    assert not on_disk(nats_server.store_dir, marker)
    assert on_disk(nats_server.store_dir, other), "the block must still be in use"
    assert not await kv_backend.holds_bytes(marker)
    record = await kv_store.get(bystander.approval_id)
    assert record is not None
    assert record.held_payload == other


async def test_kv_a_delete_without_erase_would_be_caught(
    kv_backend: KvBackend, kv_store: KvApprovalStore, nats_server: EmbeddedNatsServer
) -> None:
    """Control for the test above: removing the content message with ``no_erase``
    (what a limit, a KV update or a purge does) leaves its bytes in the block file,
    and the file scan sees them. So the scan can tell an erase from a delete."""
    await kv_store.create(make_binding("bystander"), b"BYSTANDER", T0)
    marker = b"PRIVILEGED-" + os.urandom(16).hex().encode()
    created = await kv_store.create(make_binding("control"), marker, T0)
    await wait_for(lambda: on_disk(nats_server.store_dir, marker))
    client = await kv_backend.connect()
    seq = (await client.jetstream().get_msg(approvals_kv.CONTENT_STREAM, subject=">")).seq
    request = json.dumps({"seq": seq, "no_erase": True}).encode()
    reply = await client.request(
        f"$JS.API.STREAM.MSG.DELETE.{approvals_kv.CONTENT_STREAM}", request, timeout=2
    )
    assert json.loads(reply.data)["success"] is True
    assert created.held_payload == marker
    assert on_disk(nats_server.store_dir, marker)


async def test_kv_duplicate_create_erases_the_content_it_wrote(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two creators of one approval: the record's ``kv.create`` admits one; the
    other erases the content it had already written and gets ApprovalExists."""
    binding = make_binding()
    rival = await kv_backend.open()
    loser_content = b"LOSER-" + os.urandom(8).hex().encode()
    real_publish = kv_store._js.publish

    async def publish_then_lose(*args: Any, **kwargs: Any) -> Any:
        ack = await real_publish(*args, **kwargs)
        await rival.create(binding, PAYLOAD, T0)  # lands between our two writes
        return ack

    monkeypatch.setattr(kv_store._js, "publish", publish_then_lose)
    with pytest.raises(ApprovalExists):
        await kv_store.create(binding, loser_content, T0)
    assert not await kv_backend.holds_bytes(loser_content)
    record = await kv_store.get(binding.approval_id)
    assert record is not None
    assert record.held_payload == PAYLOAD


async def test_kv_erase_that_fails_is_swept_later(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erase follows the terminal write; if it fails the move stands (the record
    no longer offers the content) and the next expire_due sweep erases the bytes."""
    marker = b"PRIVILEGED-" + os.urandom(16).hex().encode()
    binding = make_binding()
    await kv_store.create(binding, marker, T0)

    async def failing_delete(*_: Any, **__: Any) -> bool:
        raise nats.errors.TimeoutError

    monkeypatch.setattr(kv_store._js, "delete_msg", failing_delete)
    with structlog.testing.capture_logs() as logs:
        denied = await kv_store.deny(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
    assert (denied.state, denied.held_payload) == ("denied", None)
    assert "approval_content_erase_deferred" in [e["event"] for e in logs]
    assert await kv_backend.holds_bytes(marker)
    monkeypatch.undo()

    assert await kv_store.expire_due(T0 + 2) == []
    assert not await kv_backend.holds_bytes(marker)


async def test_kv_content_left_by_a_failed_create_is_swept_after_the_grace(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create whose record write fails after its content was written (a timeout:
    the outcome is unknown) leaves the content; the sweep keeps it while a create
    could still be in flight, then erases it. Open approvals keep theirs."""
    keeper = await held(kv_store, "keeper", ttl_ms=MAX_TTL_MS)
    marker = b"PRIVILEGED-" + os.urandom(16).hex().encode()
    binding = make_binding("lost")

    async def timed_out(*_: Any, **__: Any) -> int:
        raise nats.errors.TimeoutError

    monkeypatch.setattr(kv_store._kv, "update", timed_out)
    with pytest.raises(ApprovalStoreUnavailable):
        await kv_store.create(binding, marker, T0)
    monkeypatch.undo()
    assert await kv_store.get(binding.approval_id) is None

    assert await kv_store.expire_due(T0 + approvals_kv.ORPHAN_GRACE_MS - 1) == []
    assert await kv_backend.holds_bytes(marker), "swept before the grace ran out"
    assert await kv_store.expire_due(T0 + approvals_kv.ORPHAN_GRACE_MS) == [keeper.approval_id]
    assert not await kv_backend.holds_bytes(marker)


async def test_kv_claim_and_invalidate_race_across_connections(
    kv_backend: KvBackend, kv_store: KvApprovalStore
) -> None:
    """A claim on one connection against an invalidation on another, 50 rounds:
    both read ``approved``, exactly one CAS lands. Never both (an invalidated
    approval that was also claimed) and never neither."""
    other = await kv_backend.open()
    outcomes = {"claim": 0, "invalidate": 0}
    for round_no in range(50):
        binding = await approved(kv_store, f"race-{round_no}")
        claimed, invalidated = await asyncio.gather(
            kv_store.claim(binding.approval_id, binding, T0 + 2),
            other.invalidate(binding.approval_id, T0 + 2),
            return_exceptions=True,
        )
        claim_won = isinstance(claimed, ApprovalRecord)
        invalidate_won = invalidated == [binding.approval_id]
        assert claim_won != invalidate_won, f"round {round_no}: {claimed!r} / {invalidated!r}"
        if claim_won:
            assert invalidated == []
        else:
            assert isinstance(claimed, NotPending)
        outcomes["claim" if claim_won else "invalidate"] += 1
        expected = "executing" if claim_won else "invalidated"
        assert await state_of(other, binding.approval_id) == expected
    assert sum(outcomes.values()) == 50


async def test_kv_outage_is_unavailable_never_success(
    nats_server: EmbeddedNatsServer,
) -> None:
    """Server stopped: every step raises ApprovalStoreUnavailable within the request
    timeout (fail closed), nothing changed; after a restart the same instance works
    again on the persisted records. The timeout is the suite's own, since the steps
    before and after the outage must succeed; the steps in it run at once, so the
    test waits it out once."""
    kv_backend = KvBackend(nats_server)
    try:
        store_ = await kv_backend.open()
        pending = await held(store_, "pending")
        binding = await approved(store_, "approved")
        running = await executing(store_, "running")
        aid = binding.approval_id
        nats_server.stop()

        steps: list[Callable[[], Awaitable[object]]] = [
            lambda: store_.create(make_binding("new"), PAYLOAD, T0),
            lambda: store_.get(aid),
            store_.list_open,
            lambda: store_.approve(pending.approval_id, binding_digest(pending), ATTORNEY, T0 + 1),
            lambda: store_.deny(pending.approval_id, binding_digest(pending), ATTORNEY, T0 + 1),
            lambda: store_.claim(aid, binding, T0 + 2),
            lambda: store_.record_order(running.approval_id, "order-1", T0 + 3),
            lambda: store_.finish(running.approval_id, "consumed", T0 + 3),
            lambda: store_.expire_due(T0 + TTL),
            lambda: store_.recover(T0 + 5),
            lambda: store_.invalidate(aid, T0 + 5),
            lambda: store_.list_executing(T0 + 10),
            lambda: store_.find_by_order("order-1"),
        ]
        failures = await asyncio.wait_for(
            asyncio.gather(*(step() for step in steps), return_exceptions=True), timeout=30
        )
        for step, failure in zip(steps, failures, strict=True):
            assert isinstance(failure, ApprovalStoreUnavailable), (step, failure)
            assert failure.reason_code == "approval_store_unavailable"

        nats_server.start()
        await wait_for(lambda: all(c.is_connected for c in kv_backend.connections), timeout=10)
        assert await state_of(store_, pending.approval_id) == "pending"
        assert await state_of(store_, aid) == "approved"
        assert await state_of(store_, running.approval_id) == "executing"
        assert await store_.find_by_order("order-1") is None
        assert (await store_.claim(aid, binding, T0 + 2)).state == "executing"
    finally:
        await kv_backend.aclose()


def _reencoded(value: bytes, **changes: Any) -> bytes:
    raw = json.loads(value)
    raw.update(changes)
    return json.dumps(raw).encode()


TAMPERED: Final[dict[str, Callable[[bytes], bytes]]] = {
    "not-json": lambda _: b"\x00\xffnot json",
    "empty": lambda _: b"",
    "unknown-state": lambda v: _reencoded(v, state="granted"),
    "unknown-field": lambda v: _reencoded(v, extra=1),
    "open-without-content": lambda v: _reencoded(v, content_seq=None),
    "terminal-with-content": lambda v: _reencoded(v, state="denied"),
    "bad-binding": lambda v: _reencoded(v, binding={"approval_id": "x"}),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERED))
async def test_kv_tampered_record_is_unavailable_not_accepted(
    kv_backend: KvBackend, kv_store: KvApprovalStore, tamper: str
) -> None:
    """A value no write of the store produces, put into the bucket around it: every
    read and step refuses with ApprovalStoreUnavailable; nothing is claimed."""
    binding = await approved(kv_store)
    kv = await raw_bucket(kv_backend)
    key = record_key(binding.approval_id)
    await kv.put(key, TAMPERED[tamper]((await kv.get(key)).value or b""))

    steps: list[Callable[[], Awaitable[object]]] = [
        lambda: kv_store.get(binding.approval_id),
        kv_store.list_open,
        lambda: kv_store.claim(binding.approval_id, binding, T0 + 2),
        lambda: kv_store.approve(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 2),
        lambda: kv_store.expire_due(T0 + 2),
        lambda: kv_store.recover(T0 + 2),
    ]
    for step in steps:
        with pytest.raises(ApprovalStoreUnavailable):
            await step()


async def test_kv_record_filed_under_another_key_is_unavailable(
    kv_backend: KvBackend, kv_store: KvApprovalStore
) -> None:
    """A valid record copied under another approval's key is not that approval."""
    binding = await approved(kv_store, "original")
    kv = await raw_bucket(kv_backend)
    value = (await kv.get(record_key(binding.approval_id))).value or b""
    other = make_binding("other")
    await kv.put(record_key(other.approval_id), value)
    with pytest.raises(ApprovalStoreUnavailable):
        await kv_store.get(other.approval_id)
    with pytest.raises(ApprovalStoreUnavailable):
        await kv_store.claim(other.approval_id, binding, T0 + 2)


async def test_kv_open_approval_whose_content_is_gone_cannot_be_claimed(
    kv_backend: KvBackend, kv_store: KvApprovalStore
) -> None:
    """Content erased behind the store's back (or replaced by a message on another
    approval's subject): the claim reads the content before its CAS, so it refuses
    and the approval stays ``approved`` rather than ``executing`` with nothing to send."""
    binding = await approved(kv_store)
    client = await kv_backend.connect()
    js = client.jetstream(timeout=2)
    content = await js.get_msg(approvals_kv.CONTENT_STREAM, subject=">")
    assert content.seq is not None
    await js.delete_msg(approvals_kv.CONTENT_STREAM, content.seq)
    with pytest.raises(ApprovalStoreUnavailable):
        await kv_store.claim(binding.approval_id, binding, T0 + 2)
    with pytest.raises(ApprovalStoreUnavailable):
        await kv_store.get(binding.approval_id)
    kv = await raw_bucket(kv_backend)
    value = (await kv.get(record_key(binding.approval_id))).value or b""
    assert json.loads(value)["state"] == "approved"

    foreign = await js.publish(
        f"{approvals_kv.CONTENT_SUBJECT_ROOT}.{approvals_kv.CONTENT_STREAM}.{'0' * 64}", b"x"
    )
    await kv.put(record_key(binding.approval_id), _reencoded(value, content_seq=foreign.seq))
    with pytest.raises(ApprovalStoreUnavailable):
        await kv_store.claim(binding.approval_id, binding, T0 + 2)


Interfere = Callable[[KvApprovalStore, ApprovalBinding], Awaitable[object]]


def interfere_once(
    monkeypatch: pytest.MonkeyPatch,
    store_: KvApprovalStore,
    rival: KvApprovalStore,
    binding: ApprovalBinding,
    action: Interfere,
) -> list[int]:
    """Make the rival's ``action`` land between ``store_``'s read and its CAS, once:
    ``store_``'s first ``kv.update`` then meets a newer revision. Returns a list that
    counts ``store_``'s update attempts."""
    real_update = store_._kv.update
    attempts: list[int] = []

    async def update(key: str, value: bytes, last: int | None = None, **kw: Any) -> int:
        attempts.append(last or 0)
        if len(attempts) == 1:
            await action(rival, binding)
        return await real_update(key, value, last=last, **kw)

    monkeypatch.setattr(store_._kv, "update", update)
    return attempts


async def _rival_deny(rival: KvApprovalStore, b: ApprovalBinding) -> object:
    return await rival.deny(b.approval_id, binding_digest(b), "attorney-bob", T0 + 1)


async def _rival_approve(rival: KvApprovalStore, b: ApprovalBinding) -> object:
    return await rival.approve(b.approval_id, binding_digest(b), "attorney-bob", T0 + 1)


async def _rival_finish_failed(rival: KvApprovalStore, b: ApprovalBinding) -> object:
    return await rival.finish(b.approval_id, "failed", T0 + 3)


async def _rival_record_order(rival: KvApprovalStore, b: ApprovalBinding) -> None:
    await rival.record_order(b.approval_id, "order-1", T0 + 3)


async def _rival_claim(rival: KvApprovalStore, b: ApprovalBinding) -> object:
    return await rival.claim(b.approval_id, b, T0 + 2)


async def test_kv_approve_meeting_a_concurrent_deny_rechecks_and_refuses(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    binding = await held(kv_store)
    rival = await kv_backend.open()
    attempts = interfere_once(monkeypatch, kv_store, rival, binding, _rival_deny)
    with pytest.raises(NotPending):
        await kv_store.approve(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
    assert len(attempts) == 1  # the conflict was re-read, not retried blindly
    record = await rival.get(binding.approval_id)
    assert record is not None
    assert (record.state, record.resolver_id, record.held_payload) == (
        "denied",
        "attorney-bob",
        None,
    )


async def test_kv_deny_meeting_a_concurrent_approve_rechecks_and_refuses(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    binding = await held(kv_store)
    rival = await kv_backend.open()
    interfere_once(monkeypatch, kv_store, rival, binding, _rival_approve)
    with pytest.raises(NotPending):
        await kv_store.deny(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
    record = await rival.get(binding.approval_id)
    assert record is not None
    assert (record.state, record.resolver_id, record.held_payload) == (
        "approved",
        "attorney-bob",
        PAYLOAD,
    )


async def test_kv_claim_meeting_a_concurrent_claim_is_not_pending(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    binding = await approved(kv_store)
    rival = await kv_backend.open()
    interfere_once(monkeypatch, kv_store, rival, binding, _rival_claim)
    with pytest.raises(NotPending):
        await kv_store.claim(binding.approval_id, binding, T0 + 2)
    assert await state_of(rival, binding.approval_id) == "executing"


async def test_kv_finish_meeting_a_concurrent_finish_is_illegal(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    binding = await executing(kv_store)
    rival = await kv_backend.open()
    interfere_once(monkeypatch, kv_store, rival, binding, _rival_finish_failed)
    with pytest.raises(IllegalTransition):
        await kv_store.finish(binding.approval_id, "consumed", T0 + 3)
    assert await state_of(rival, binding.approval_id) == "failed"


async def test_kv_finish_meeting_a_concurrent_order_retries_and_lands(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conflict that did not change the state (the order was recorded meanwhile):
    the re-check still allows the finish, and the second CAS keeps the order."""
    binding = await executing(kv_store)
    rival = await kv_backend.open()
    attempts = interfere_once(monkeypatch, kv_store, rival, binding, _rival_record_order)
    done = await kv_store.finish(binding.approval_id, "consumed", T0 + 4)
    assert (done.state, done.order_id, done.held_payload) == ("consumed", "order-1", None)
    assert len(attempts) == 2
    assert attempts[0] < attempts[1]
    assert await rival.find_by_order("order-1") == binding.approval_id


async def test_kv_endless_conflicts_are_unavailable(
    kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More conflicts than a record can have transitions is a fault, not contention:
    the step refuses (fail closed) instead of spinning."""
    binding = await held(kv_store)

    async def always_conflicts(*_: Any, **__: Any) -> int:
        raise KeyWrongLastSequenceError

    monkeypatch.setattr(kv_store._kv, "update", always_conflicts)
    with pytest.raises(ApprovalStoreUnavailable):
        await kv_store.approve(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
    monkeypatch.undo()
    assert await state_of(kv_store, binding.approval_id) == "pending"


async def test_kv_order_index_left_by_a_crash_lets_no_second_order_through(
    kv_backend: KvBackend, kv_store: KvApprovalStore
) -> None:
    """A crash between the index write and the record's CAS leaves ``order-1 ->
    approval`` with a record that has no order. The index alone names nothing;
    the record's CAS admits exactly one order; the orphaned order id stays bound
    to its approval and can never be recorded for another."""
    first = await executing(kv_store, "first")
    second = await executing(kv_store, "second")
    kv = await raw_bucket(kv_backend)
    await kv.create(
        approvals_kv.ORDER_KEY + approvals_kv.token("order-1"), first.approval_id.encode()
    )

    assert await kv_store.find_by_order("order-1") is None
    await kv_store.record_order(first.approval_id, "order-2", T0 + 3)
    assert await kv_store.find_by_order("order-2") == first.approval_id
    assert await kv_store.find_by_order("order-1") is None
    with pytest.raises(IllegalTransition):
        await kv_store.record_order(first.approval_id, "order-1", T0 + 4)
    with pytest.raises(IllegalTransition):
        await kv_store.record_order(second.approval_id, "order-1", T0 + 4)
    record = await kv_store.get(second.approval_id)
    assert record is not None
    assert record.order_id is None


async def test_kv_order_recorded_again_after_a_crash_completes(
    kv_backend: KvBackend, kv_store: KvApprovalStore
) -> None:
    """The same step retried after a crash between its two writes completes it."""
    binding = await executing(kv_store)
    kv = await raw_bucket(kv_backend)
    await kv.create(
        approvals_kv.ORDER_KEY + approvals_kv.token("order-1"), binding.approval_id.encode()
    )
    await kv_store.record_order(binding.approval_id, "order-1", T0 + 3)
    assert await kv_store.find_by_order("order-1") == binding.approval_id


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({"history": 5}, id="history"),
        pytest.param({"storage": StorageType.MEMORY}, id="memory-storage"),
        pytest.param({"direct": True}, id="direct-gets"),
    ],
)
async def test_kv_open_refuses_a_bucket_with_other_settings(
    kv_backend: KvBackend, settings: dict[str, Any]
) -> None:
    """History would keep superseded records readable, memory storage would lose
    approvals on restart, direct gets may read a lagging replica: refused."""
    client = await kv_backend.connect()
    js = client.jetstream(timeout=2)
    config: dict[str, Any] = {"history": 1, "storage": StorageType.FILE} | settings
    await js.create_key_value(bucket=approvals_kv.BUCKET, **config)
    with pytest.raises(ApprovalStoreUnavailable):
        await KvApprovalStore.open(js)


async def test_kv_open_refuses_fewer_replicas_than_asked(kv_backend: KvBackend) -> None:
    """An operator who asked for R3 does not silently get R1."""
    client = await kv_backend.connect()
    js = client.jetstream(timeout=2)
    await KvApprovalStore.open(js)
    with pytest.raises(ApprovalStoreUnavailable):
        await KvApprovalStore.open(js, replicas=3)


async def test_kv_open_refuses_a_content_stream_that_forbids_the_erase(
    kv_backend: KvBackend,
) -> None:
    client = await kv_backend.connect()
    js = client.jetstream(timeout=2)
    subject = f"{approvals_kv.CONTENT_SUBJECT_ROOT}.{approvals_kv.CONTENT_STREAM}.>"
    await js.add_stream(
        name=approvals_kv.CONTENT_STREAM,
        subjects=[subject],
        storage=StorageType.FILE,
        deny_delete=True,
    )
    with pytest.raises(ApprovalStoreUnavailable):
        await KvApprovalStore.open(js)


def interfere_before_content(
    monkeypatch: pytest.MonkeyPatch,
    store_: KvApprovalStore,
    rival: KvApprovalStore,
    binding: ApprovalBinding,
    action: Interfere,
) -> None:
    """Make the rival's ``action`` land after ``store_`` read the record and before
    it reads the content, once (the window the 50-round race hit)."""
    real_get_msg = store_._js.get_msg
    done: list[bool] = []

    async def get_msg(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            await action(rival, binding)
        return await real_get_msg(*args, **kwargs)

    monkeypatch.setattr(store_._js, "get_msg", get_msg)


async def _rival_invalidate(rival: KvApprovalStore, b: ApprovalBinding) -> object:
    return await rival.invalidate(b.approval_id, T0 + 2)


async def test_kv_claim_whose_content_was_erased_meanwhile_rereads_and_is_not_pending(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim read ``approved``; before it read the content an invalidation
    landed and erased it. Missing content on a record that moved on is a lost
    race, not an outage: the claim re-reads and refuses as NotPending."""
    binding = await approved(kv_store)
    rival = await kv_backend.open()
    interfere_before_content(monkeypatch, kv_store, rival, binding, _rival_invalidate)
    with pytest.raises(NotPending):
        await kv_store.claim(binding.approval_id, binding, T0 + 2)
    assert await state_of(rival, binding.approval_id) == "invalidated"


@pytest.mark.parametrize("read", ["get", "list_open"])
async def test_kv_read_whose_content_was_erased_meanwhile_shows_the_new_state(
    kv_backend: KvBackend,
    kv_store: KvApprovalStore,
    monkeypatch: pytest.MonkeyPatch,
    read: str,
) -> None:
    binding = await held(kv_store)
    rival = await kv_backend.open()
    interfere_before_content(monkeypatch, kv_store, rival, binding, _rival_deny)
    if read == "get":
        record = await kv_store.get(binding.approval_id)
        assert record is not None
        assert (record.state, record.held_payload) == ("denied", None)
    else:
        assert await kv_store.list_open() == []


async def test_kv_content_missing_from_a_record_that_did_not_move_is_unavailable(
    kv_backend: KvBackend, kv_store: KvApprovalStore
) -> None:
    binding = await held(kv_store)
    client = await kv_backend.connect()
    js = client.jetstream(timeout=2)
    content = await js.get_msg(approvals_kv.CONTENT_STREAM, subject=">")
    assert content.seq is not None
    await js.delete_msg(approvals_kv.CONTENT_STREAM, content.seq)
    for read in (kv_store.list_open, lambda: kv_store.get(binding.approval_id)):
        with pytest.raises(ApprovalStoreUnavailable):
            await read()
    with pytest.raises(ApprovalStoreUnavailable):
        await kv_store.approve(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
    assert await kv_store.expire_due(binding.expires_at_ms) == [binding.approval_id]


async def test_kv_stale_read_after_a_lost_cas_waits_for_the_winner(
    kv_backend: KvBackend, kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster the leader can refuse a CAS before it applies the write that
    won, so the re-read still shows the losing revision. The step must wait and
    read again, not decide again on that state (a CAS bound to lose; a burst of
    them ends in ApprovalStoreUnavailable): here the first re-read is forced
    stale, no second CAS is made, and the approve ends NotPending."""
    binding = await held(kv_store)
    rival = await kv_backend.open()
    attempts = interfere_once(monkeypatch, kv_store, rival, binding, _rival_deny)
    real_get = kv_store._kv.get
    reads: list[int | None] = []
    first: list[KeyValue.Entry] = []

    async def get(key: str, *args: Any, **kwargs: Any) -> KeyValue.Entry:
        entry = await real_get(key, *args, **kwargs)
        reads.append(entry.revision)
        if len(reads) == 1:
            first.append(entry)
        return first[0] if len(reads) == 2 else entry

    monkeypatch.setattr(kv_store._kv, "get", get)
    with pytest.raises(NotPending):
        await kv_store.approve(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
    assert len(reads) == 3  # read, stale re-read (waited), fresh re-read
    assert len(attempts) == 1, "no second CAS against the revision that already lost"
    assert await state_of(rival, binding.approval_id) == "denied"


async def test_kv_order_index_not_yet_readable_is_waited_for_then_refused(
    kv_store: KvApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index create lost to a write the server has not applied yet: the owner
    is read again until it shows, and an order owned by another approval is still
    refused; an owner that never shows is unavailable, never an accepted order."""
    first = await executing(kv_store, "first")
    second = await executing(kv_store, "second")
    await kv_store.record_order(first.approval_id, "order-1", T0 + 3)
    index = approvals_kv.ORDER_KEY + approvals_kv.token("order-1")
    real_get = kv_store._kv.get
    misses = {"left": 2}

    async def get(key: str, *args: Any, **kwargs: Any) -> KeyValue.Entry:
        if key == index and misses["left"]:
            misses["left"] -= 1
            raise KeyNotFoundError
        return await real_get(key, *args, **kwargs)

    monkeypatch.setattr(kv_store._kv, "get", get)
    with pytest.raises(IllegalTransition):
        await kv_store.record_order(second.approval_id, "order-1", T0 + 4)
    assert misses["left"] == 0

    misses["left"] = approvals_kv.MAX_ATTEMPTS
    with pytest.raises(ApprovalStoreUnavailable):
        await kv_store.record_order(second.approval_id, "order-1", T0 + 4)
    record = await kv_store.get(second.approval_id)
    assert record is not None
    assert record.order_id is None


async def test_kv_r3_cluster_two_nodes_race_claims_with_one_winner(
    nats_cluster: LocalNatsCluster,
) -> None:
    """ARCHITECTURE.md "Scale": a NATS cluster with R3 and gate instances on
    different nodes. Two stores with ``replicas=3``, connected to two different
    nodes, race to claim each approval (20 rounds, 10 claimants per node): exactly
    one winner, every other claimant NotPending, never unavailable."""
    operator = nats_cluster.operator.connect_options()
    clients = [
        await nats.connect(url, connect_timeout=5, **operator) for url in nats_cluster.urls[:2]
    ]
    try:
        stores = [await KvApprovalStore.open(c.jetstream(timeout=5), replicas=3) for c in clients]
        info = await clients[0].jetstream().stream_info(f"KV_{approvals_kv.BUCKET}")
        assert info.config.num_replicas == 3
        for round_no in range(20):
            binding = await approved(stores[round_no % 2], f"r3-{round_no}")
            contenders = [s for _ in range(10) for s in stores]
            results = await asyncio.gather(
                *(s.claim(binding.approval_id, binding, T0 + 2) for s in contenders),
                return_exceptions=True,
            )
            winners = [r for r in results if isinstance(r, ApprovalRecord)]
            assert len(winners) == 1, f"round {round_no}: {results!r}"
            assert all(isinstance(r, (ApprovalRecord, NotPending)) for r in results)
    finally:
        for client in clients:
            await client.close()
