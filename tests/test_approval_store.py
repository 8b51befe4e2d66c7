"""Contract tests of the approval store (issue 4, "The store"; ARCHITECTURE.md,
"Exact-action approval").

Every test in the contract section runs against each backend in
``BACKENDS``: the SQLite store today; the JetStream KV store (issue 11) joins
by adding one entry there (a ``Backend`` that opens a new store instance on
the same storage and can say whether some bytes are still anywhere in that
storage). The SQLite section at the end checks what only SQLite has: the
table's CHECK constraints, secure deletion, one UPDATE per claim.

Real SQLite files in ``tmp_path``; the clock is an argument (``now_ms``), so
expiry is tested by passing a later time, never by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import msgspec
import pytest
import structlog

from pipeline.stores.approvals import (
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
from pipeline.stores.approvals_sqlite import BINDING_FIELDS, SqliteApprovalStore
from subjects.approvals import (
    MAX_TTL_MS,
    TERMINAL_STATES,
    ApprovalBinding,
    approval_id_for,
    binding_digest,
)
from tests.builders import AT_MS, DEFAULT_TENANT, fake_identity

T0: Final = AT_MS
TTL: Final = 300_000
ATTORNEY: Final = "attorney-alice"
PAYLOAD: Final = b"To the Clerk of Court: PRIVILEGED filing body"


def make_binding(
    label: str = "filing",
    *,
    created_at_ms: int = T0,
    ttl_ms: int = TTL,
    tenant_id: str = DEFAULT_TENANT,
) -> ApprovalBinding:
    """A valid binding; ``label`` makes the decision (and so the approval) distinct."""
    decision_id = fake_identity(f"decision:{label}")
    return ApprovalBinding(
        approval_id=approval_id_for(decision_id),
        decision_id=decision_id,
        operation_hash=fake_identity(f"operation:{label}"),
        canonical_args_hash=fake_identity(f"args:{label}"),
        content_hash=fake_identity(f"content:{label}"),
        destination_identity_hash=fake_identity("court:sdny"),
        release_id="release-2026-11-29",
        projection_id=fake_identity("projection"),
        policy_fingerprint=fake_identity("policy"),
        tenant_id=tenant_id,
        organization_id="org-acme-llp",
        matter_id="matter-2026-0042",
        actor_id="paralegal-pat",
        required_roles=("licensed_attorney",),
        required_approvals=1,
        created_at_ms=created_at_ms,
        expires_at_ms=created_at_ms + ttl_ms,
    )


def changed(binding: ApprovalBinding, field: str) -> ApprovalBinding:
    """``binding`` with ``field`` changed to another valid value (TTL kept in range)."""
    value = getattr(binding, field)
    shrink = binding.expires_at_ms - binding.created_at_ms > 1  # else grow the TTL by 1
    new: Any
    if field == "created_at_ms":
        new = value + 1 if shrink else value - 1
    elif field == "expires_at_ms":
        new = value - 1 if shrink else value + 1
    elif isinstance(value, int):
        new = value + 1
    elif isinstance(value, tuple):
        new = (*value, "partner")
    elif value.startswith("sha256:"):
        new = fake_identity(f"changed {field}")
    else:
        new = value + "-changed"
    return msgspec.structs.replace(binding, **{field: new})


# --- backends ---------------------------------------------------------------


class Backend(Protocol):
    async def open(self) -> ApprovalStore:
        """A new store instance (its own connection) on this backend's storage."""
        ...

    def holds_bytes(self, needle: bytes) -> bool:
        """True when ``needle`` is still anywhere in the backend's durable storage.

        For a backend that keeps history (JetStream KV keeps revisions per key),
        "anywhere" includes the history: a purged value must be gone, not merely
        superseded by a newer revision."""
        ...


@dataclass
class SqliteBackend:
    path: Path

    async def open(self) -> ApprovalStore:
        return await SqliteApprovalStore.open(self.path)

    def holds_bytes(self, needle: bytes) -> bool:
        """Asks through a connection, then checkpoints the WAL into the main file
        (and truncates it) and reads the raw files: the bytes must be gone from the
        table, from the database pages and from the journal."""
        with contextlib.closing(sqlite3.connect(self.path)) as raw:
            (hits,) = raw.execute(
                "SELECT count(*) FROM approvals WHERE instr(held_payload, ?) > 0", (needle,)
            ).fetchone()
            busy, _, _ = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0, "checkpoint could not run"
        files = [self.path, self.path.with_name(self.path.name + "-wal")]
        return hits > 0 or any(f.exists() and needle in f.read_bytes() for f in files)


BACKENDS: Final[dict[str, Callable[[Path], Backend]]] = {
    "sqlite": lambda tmp: SqliteBackend(tmp / "approvals.db"),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return BACKENDS[request.param](tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[ApprovalStore]:
    opened = await backend.open()
    yield opened
    await opened.close()


async def held(store: ApprovalStore, label: str = "filing", **kw: Any) -> ApprovalBinding:
    binding = make_binding(label, **kw)
    await store.create(binding, PAYLOAD, binding.created_at_ms)
    return binding


async def approved(store: ApprovalStore, label: str = "filing", **kw: Any) -> ApprovalBinding:
    binding = await held(store, label, **kw)
    await store.approve(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
    return binding


async def executing(store: ApprovalStore, label: str = "filing", **kw: Any) -> ApprovalBinding:
    binding = await approved(store, label, **kw)
    await store.claim(binding.approval_id, binding, T0 + 2)
    return binding


async def state_of(store: ApprovalStore, approval_id: str) -> str:
    record = await store.get(approval_id)
    assert record is not None
    return record.state


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
    assert await store.recover(T0 + 1) == ([b.approval_id], [])


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
    assert backend.holds_bytes(marker), "the content must be stored while open"

    await reach(store, binding)

    record = await store.get(binding.approval_id)
    assert record is not None
    assert (record.state, record.held_payload) == (state, None)
    assert not backend.holds_bytes(marker)


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


async def test_recover_invalidates_open_work_and_marks_executing_unknown(
    backend: Backend, store: ApprovalStore
) -> None:
    pending = await held(store, "pending")
    approved_ = await approved(store, "approved")
    running = await executing(store, "running")
    done = await executing(store, "done")
    await store.finish(done.approval_id, "consumed", T0 + 3)
    denied = await held(store, "denied")
    await store.deny(denied.approval_id, binding_digest(denied), ATTORNEY, T0 + 1)
    before = {b.approval_id: await store.get(b.approval_id) for b in (done, denied)}
    await store.close()

    restarted = await backend.open()  # a restart: a new instance on the same storage
    try:
        invalidated, unknown = await restarted.recover(T0 + 10)
        assert invalidated == sorted([pending.approval_id, approved_.approval_id])
        assert unknown == [running.approval_id]
        for aid, state in [
            (pending.approval_id, "invalidated"),
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
            assert await restarted.get(aid) == record  # terminal: untouched
        assert await restarted.recover(T0 + 11) == ([], [])
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


async def test_racing_claimants_have_exactly_one_winner(
    backend: Backend, store: ApprovalStore
) -> None:
    """Issue 4: "exactly one claimant wins". 20 tasks on each of two store
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


def raw(tmp_path: Path) -> contextlib.closing[sqlite3.Connection]:
    conn = sqlite3.connect(tmp_path / "approvals.db", isolation_level=None, timeout=5)
    return contextlib.closing(conn)


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
    """Issue 4: "one conditional UPDATE inside BEGIN IMMEDIATE, requiring exactly
    one affected row"; "keep the whole claim in one thread hop"."""
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
