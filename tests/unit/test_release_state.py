"""The persisted release state (smf_assurance/pipeline/stores/release_state.py) on real SQLite.

Proves: the last accepted release survives a restart with its exact bytes;
the sequence only goes up, both in the store's own check and in SQLite
triggers that refuse a direct rollback, deletion or history rewrite; a
writer that verified against a stale state is refused; the clock high-water
mark never decreases; a closed store fails closed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from smf_assurance.core.release_trust import LastAccepted
from smf_assurance.pipeline.stores.release_state import (
    ReleaseStateStore,
    StaleReleaseStateError,
    StoreUnavailable,
)
from smf_assurance.subjects.canonical import sha256_identity
from smf_assurance.subjects.release import ReleaseRollbackError


def state(sequence: int, **fields: object) -> LastAccepted:
    values: dict[str, object] = {
        "release_id": f"rel-{sequence}",
        "sequence": sequence,
        "manifest_hash": sha256_identity(f"release {sequence}".encode()),
        "issued_at_ms": 1_000 * sequence,
        "lease_expires_at_ms": 1_000_000 + sequence,
        "accepted_at_ms": 2_000 * sequence,
        "clock_high_water_ms": 2_000 * sequence,
    }
    values.update(fields)
    return LastAccepted(**values)  # type: ignore[arg-type]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ReleaseStateStore]:
    opened = await ReleaseStateStore.open(tmp_path / "release-state.db")
    yield opened
    await opened.close()


async def test_nothing_is_accepted_at_first(store: ReleaseStateStore) -> None:
    assert await store.load() is None
    assert await store.history() == []
    assert await store.observe_time(5) == 0


async def test_an_accepted_release_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "release-state.db"
    first = await ReleaseStateStore.open(path)
    one = state(1, revoked_key_ids=frozenset({"ed25519:" + "a" * 64}))
    await first.accept(one, b"bundle-1", replacing=None)
    await first.close()
    again = await ReleaseStateStore.open(path)
    try:
        stored = await again.load()
        assert stored is not None
        assert stored.state == one
        assert stored.bundle == b"bundle-1"
    finally:
        await again.close()


async def test_each_accepted_release_is_recorded_in_history(store: ReleaseStateStore) -> None:
    one, two = state(1), state(2, revoked_release_ids=frozenset({"rel-x", "rel-a"}))
    await store.accept(one, b"1", replacing=None)
    await store.accept(two, b"2", replacing=one.manifest_hash)
    stored = await store.load()
    assert stored is not None
    assert stored.state == two
    assert stored.bundle == b"2"
    assert [(h.sequence, h.release_id) for h in await store.history()] == [
        (1, "rel-1"),
        (2, "rel-2"),
    ]


@pytest.mark.parametrize("sequence", [1, 2])
async def test_the_store_refuses_a_rollback_itself(store: ReleaseStateStore, sequence: int) -> None:
    two = state(2)
    await store.accept(two, b"2", replacing=None)
    with pytest.raises(ReleaseRollbackError):
        await store.accept(
            state(sequence, manifest_hash=sha256_identity(b"other")),
            b"x",
            replacing=two.manifest_hash,
        )
    stored = await store.load()
    assert stored is not None
    assert stored.state == two


async def test_a_writer_that_verified_against_a_stale_state_is_refused(
    store: ReleaseStateStore,
) -> None:
    one = state(1)
    await store.accept(one, b"1", replacing=None)
    with pytest.raises(StaleReleaseStateError):
        await store.accept(state(3), b"3", replacing=None)
    with pytest.raises(StaleReleaseStateError):
        await store.accept(state(3), b"3", replacing=sha256_identity(b"not the current one"))


async def test_the_high_water_mark_only_rises(store: ReleaseStateStore) -> None:
    one = state(1, clock_high_water_ms=500)
    await store.accept(one, b"1", replacing=None)
    assert await store.observe_time(900) == 900
    assert await store.observe_time(100) == 900
    two = state(2, clock_high_water_ms=600)  # accepted with an older reading
    await store.accept(two, b"2", replacing=one.manifest_hash)
    stored = await store.load()
    assert stored is not None
    assert stored.state.clock_high_water_ms == 900


async def test_sqlite_itself_refuses_rollback_deletion_and_history_rewrites(
    tmp_path: Path,
) -> None:
    """The triggers hold even for a writer that bypasses the store's own checks."""
    path = tmp_path / "release-state.db"
    store = await ReleaseStateStore.open(path)
    one = state(1)
    await store.accept(one, b"1", replacing=None)
    await store.accept(state(2), b"2", replacing=one.manifest_hash)
    await store.close()
    conn = sqlite3.connect(path)
    try:
        for statement in (
            "UPDATE release_state SET sequence = 1",
            "UPDATE release_state SET manifest_hash = 'sha256:forged'",
            "UPDATE release_state SET clock_high_water_ms = 0",
            "DELETE FROM release_state",
            "UPDATE release_history SET release_id = 'rel-forged'",
            "DELETE FROM release_history",
        ):
            with pytest.raises(sqlite3.IntegrityError):
                conn.execute(statement)
        assert conn.execute("SELECT sequence FROM release_state").fetchone() == (2,)
        assert conn.execute("SELECT count(*) FROM release_history").fetchone() == (2,)
    finally:
        conn.close()


async def test_a_closed_store_fails_closed(tmp_path: Path) -> None:
    store = await ReleaseStateStore.open(tmp_path / "release-state.db")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreUnavailable):
        await store.load()
    with pytest.raises(StoreUnavailable):
        await store.accept(state(1), b"1", replacing=None)


async def test_an_unopenable_path_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable):
        await ReleaseStateStore.open(tmp_path / "missing" / "release-state.db")
