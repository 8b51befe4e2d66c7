"""The persisted release state: the last accepted release, so a restart cannot roll back.

TUF specification, "Detailed client workflow" 5.4.5 and 5.5.7, "Persist ...
metadata": the rollback check is only as good as the memory of what was
trusted before. This store keeps, in one SQLite file on its own worker
thread (:class:`~smf_assurance.pipeline.stores.sqlite_worker.SqliteWorker`):

- ``release_state``: one row, the last accepted release: sequence, manifest
  hash, issue time, lease expiry, the clock's high-water mark, the cumulative
  revocations, and the exact bundle bytes that were verified, so a restarted
  gate re-verifies exactly what it accepted.
- ``release_history``: one row per accepted release, append-only.
- ``release_shadow`` (issue 25): at most one row, the shadow release the gate
  runs beside its accepted one (its exact bundle bytes, where it came from and
  the accepted release it was verified against), so a restarted gate verifies
  it again and keeps running it. A shadow decides nothing and sets no floor:
  its row is replaced when another shadow is loaded and deleted when it is
  withdrawn, promoted or can no longer chain; it never touches the state above.

How it keeps the state monotonic:

- :meth:`ReleaseStateStore.accept` is one ``BEGIN IMMEDIATE`` transaction that
  re-reads the row, requires it to still be the release the caller verified
  against (:class:`StaleReleaseStateError` otherwise: another writer got there
  first) and the new sequence to be strictly greater
  (:class:`~smf_assurance.subjects.release.ReleaseRollbackError`).
- Triggers back this up inside SQLite: the row's sequence never decreases and
  never changes hash at the same sequence, the clock high-water mark never
  decreases, the row is never deleted, and history rows are never updated or
  deleted. A bug above cannot write a rollback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from smf_assurance.core.release_trust import LastAccepted
from smf_assurance.pipeline.stores.sqlite_worker import (
    SqliteWorker,
    StoreUnavailable,
    immediate,
    open_read_only,
)
from smf_assurance.subjects.release import ReleaseRollbackError

__all__ = [
    "SCHEMA",
    "HistoryRow",
    "ReleaseStateStore",
    "StaleReleaseStateError",
    "StoreUnavailable",
    "StoredRelease",
    "StoredShadow",
    "read_shadow_state",
]

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS release_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    release_id TEXT NOT NULL,
    sequence INTEGER NOT NULL CHECK (sequence >= 1),
    manifest_hash TEXT NOT NULL,
    issued_at_ms INTEGER NOT NULL,
    lease_expires_at_ms INTEGER NOT NULL,
    accepted_at_ms INTEGER NOT NULL,
    clock_high_water_ms INTEGER NOT NULL,
    revoked_key_ids TEXT NOT NULL,
    revoked_release_ids TEXT NOT NULL,
    bundle BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS release_state_no_rollback
BEFORE UPDATE ON release_state
WHEN NEW.sequence < OLD.sequence
  OR (NEW.sequence = OLD.sequence AND NEW.manifest_hash IS NOT OLD.manifest_hash)
  OR NEW.clock_high_water_ms < OLD.clock_high_water_ms
BEGIN SELECT RAISE(ABORT, 'release state may only move forward'); END;
CREATE TRIGGER IF NOT EXISTS release_state_no_delete
BEFORE DELETE ON release_state
BEGIN SELECT RAISE(ABORT, 'release state cannot be deleted'); END;
CREATE TABLE IF NOT EXISTS release_history (
    sequence INTEGER PRIMARY KEY,
    release_id TEXT NOT NULL,
    manifest_hash TEXT NOT NULL UNIQUE,
    issued_at_ms INTEGER NOT NULL,
    lease_expires_at_ms INTEGER NOT NULL,
    accepted_at_ms INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS release_history_no_update
BEFORE UPDATE ON release_history
BEGIN SELECT RAISE(ABORT, 'release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS release_history_no_delete
BEFORE DELETE ON release_history
BEGIN SELECT RAISE(ABORT, 'release history is append-only'); END;
CREATE TABLE IF NOT EXISTS release_shadow (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    release_id TEXT NOT NULL,
    sequence INTEGER NOT NULL CHECK (sequence >= 1),
    manifest_hash TEXT NOT NULL,
    beside_manifest_hash TEXT NOT NULL,
    origin TEXT NOT NULL,
    loaded_at_ms INTEGER NOT NULL,
    bundle BLOB NOT NULL
);
"""

_COLUMNS: Final = (
    "release_id, sequence, manifest_hash, issued_at_ms, lease_expires_at_ms, "
    "accepted_at_ms, clock_high_water_ms, revoked_key_ids, revoked_release_ids, bundle"
)


class StaleReleaseStateError(Exception):
    """The persisted state is no longer the one the caller verified against
    (another writer accepted a release first); reload and verify again."""


@dataclass(frozen=True, slots=True)
class StoredRelease:
    state: LastAccepted
    bundle: bytes


@dataclass(frozen=True, slots=True)
class StoredShadow:
    """The persisted shadow release (issue 25): unverified bytes until a gate
    verifies them again against its accepted release."""

    release_id: str
    sequence: int
    manifest_hash: str
    beside_manifest_hash: str
    """The accepted release it was verified against (its prior)."""
    origin: str
    """Where the gate found it (``kv:shadow@<revision>``)."""
    loaded_at_ms: int
    bundle: bytes


_SHADOW_COLUMNS: Final = (
    "release_id, sequence, manifest_hash, beside_manifest_hash, origin, loaded_at_ms, bundle"
)


def _read_shadow(conn: sqlite3.Connection) -> StoredShadow | None:
    row = conn.execute(f"SELECT {_SHADOW_COLUMNS} FROM release_shadow WHERE id = 1").fetchone()  # noqa: S608 - constant columns
    if row is None:
        return None
    return StoredShadow(
        release_id=row[0],
        sequence=row[1],
        manifest_hash=row[2],
        beside_manifest_hash=row[3],
        origin=row[4],
        loaded_at_ms=row[5],
        bundle=bytes(row[6]),
    )


def read_shadow_state(path: str | os.PathLike[str]) -> StoredShadow | None:
    """The persisted shadow release, read without opening the file for writing (as
    :func:`read_release_state`); None when there is none, or the file predates
    shadows. Raises :class:`StoreUnavailable` naming the file when it cannot be read."""
    try:
        with contextlib.closing(open_read_only(path)) as conn:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'release_shadow'"
            ).fetchone()
            return None if exists is None else _read_shadow(conn)
    except sqlite3.Error as exc:
        raise StoreUnavailable(
            f"release-state store {os.fspath(path)} could not be read: {exc}"
        ) from exc


@dataclass(frozen=True, slots=True)
class HistoryRow:
    sequence: int
    release_id: str
    manifest_hash: str
    issued_at_ms: int
    lease_expires_at_ms: int
    accepted_at_ms: int


def _ids(text: str) -> frozenset[str]:
    value = json.loads(text)
    return frozenset(str(item) for item in value)


def _row_to_stored(row: tuple[Any, ...]) -> StoredRelease:
    return StoredRelease(
        state=LastAccepted(
            release_id=row[0],
            sequence=row[1],
            manifest_hash=row[2],
            issued_at_ms=row[3],
            lease_expires_at_ms=row[4],
            accepted_at_ms=row[5],
            clock_high_water_ms=row[6],
            revoked_key_ids=_ids(row[7]),
            revoked_release_ids=_ids(row[8]),
        ),
        bundle=bytes(row[9]),
    )


def _read(conn: sqlite3.Connection) -> StoredRelease | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM release_state WHERE id = 1").fetchone()  # noqa: S608 - constant columns
    return None if row is None else _row_to_stored(row)


def read_release_state(path: str | os.PathLike[str]) -> StoredRelease | None:
    """The last accepted release, read without opening the file for writing
    (issue 22: ``release status`` on a read-only state dir, or beside a running
    gate, must not need to write). Blocking; raises :class:`StoreUnavailable`
    naming the file when it cannot be read."""
    try:
        with contextlib.closing(open_read_only(path)) as conn:
            return _read(conn)
    except sqlite3.Error as exc:
        raise StoreUnavailable(
            f"release-state store {os.fspath(path)} could not be read: {exc}"
        ) from exc


class ReleaseStateStore:
    """The last accepted release of one consumer, in one SQLite file."""

    def __init__(self, worker: SqliteWorker) -> None:
        self._worker = worker

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> ReleaseStateStore:
        return cls(await SqliteWorker.open(path, SCHEMA, name="release-state"))

    async def close(self) -> None:
        await self._worker.close()

    async def load(self) -> StoredRelease | None:
        """The last accepted release and its bytes, or ``None`` before the first."""
        return await self._worker.run(_read)

    async def accept(self, state: LastAccepted, bundle: bytes, *, replacing: str | None) -> None:
        """Persist ``state`` as the last accepted release, atomically.

        ``replacing`` is the manifest hash of the release the caller verified
        against (``None`` if there was none); the write happens only if that is
        still the persisted one and the sequence goes strictly up.
        """
        revoked_keys = json.dumps(sorted(state.revoked_key_ids))
        revoked_releases = json.dumps(sorted(state.revoked_release_ids))

        def body(conn: sqlite3.Connection) -> None:
            current = _read(conn)
            current_hash = None if current is None else current.state.manifest_hash
            if current_hash != replacing:
                raise StaleReleaseStateError(
                    f"persisted release is {current_hash}, expected {replacing}"
                )
            if current is not None and state.sequence <= current.state.sequence:
                raise ReleaseRollbackError(
                    f"sequence {state.sequence} is not above the persisted {current.state.sequence}"
                )
            high_water = state.clock_high_water_ms
            if current is not None:
                high_water = max(high_water, current.state.clock_high_water_ms)
            values = (
                state.release_id,
                state.sequence,
                state.manifest_hash,
                state.issued_at_ms,
                state.lease_expires_at_ms,
                state.accepted_at_ms,
                high_water,
                revoked_keys,
                revoked_releases,
                bundle,
            )
            conn.execute(
                "INSERT INTO release_history (sequence, release_id, manifest_hash, "
                "issued_at_ms, lease_expires_at_ms, accepted_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    state.sequence,
                    state.release_id,
                    state.manifest_hash,
                    state.issued_at_ms,
                    state.lease_expires_at_ms,
                    state.accepted_at_ms,
                ),
            )
            if current is None:
                conn.execute(
                    f"INSERT INTO release_state (id, {_COLUMNS}) "  # noqa: S608 - constant columns
                    "VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    values,
                )
            else:
                conn.execute(
                    "UPDATE release_state SET release_id = ?, sequence = ?, manifest_hash = ?, "
                    "issued_at_ms = ?, lease_expires_at_ms = ?, accepted_at_ms = ?, "
                    "clock_high_water_ms = ?, revoked_key_ids = ?, revoked_release_ids = ?, "
                    "bundle = ? WHERE id = 1",
                    values,
                )

        await self._worker.run(lambda conn: immediate(conn, body))

    async def observe_time(self, now_ms: int) -> int:
        """Raise the clock high-water mark to ``now_ms`` (never lowers it).

        Returns the persisted mark; 0 before the first accepted release.
        """

        def body(conn: sqlite3.Connection) -> int:
            conn.execute(
                "UPDATE release_state SET clock_high_water_ms = ? "
                "WHERE id = 1 AND clock_high_water_ms < ?",
                (now_ms, now_ms),
            )
            row = conn.execute(
                "SELECT clock_high_water_ms FROM release_state WHERE id = 1"
            ).fetchone()
            return 0 if row is None else int(row[0])

        return await self._worker.run(lambda conn: immediate(conn, body))

    async def load_shadow(self) -> StoredShadow | None:
        """The persisted shadow release, or None."""
        return await self._worker.run(_read_shadow)

    async def save_shadow(self, shadow: StoredShadow) -> None:
        """Persist ``shadow`` as the one shadow release, replacing any before it."""

        def body(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT OR REPLACE INTO release_shadow (id, {_SHADOW_COLUMNS}) "  # noqa: S608 - constant columns
                "VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
                (
                    shadow.release_id,
                    shadow.sequence,
                    shadow.manifest_hash,
                    shadow.beside_manifest_hash,
                    shadow.origin,
                    shadow.loaded_at_ms,
                    shadow.bundle,
                ),
            )

        await self._worker.run(lambda conn: immediate(conn, body))

    async def clear_shadow(self, manifest_hash: str | None = None) -> bool:
        """Forget the persisted shadow (withdrawn, promoted, or no longer chaining);
        with ``manifest_hash``, only if it is that one. Returns whether one was."""

        def body(conn: sqlite3.Connection) -> bool:
            if manifest_hash is None:
                cursor = conn.execute("DELETE FROM release_shadow")
            else:
                cursor = conn.execute(
                    "DELETE FROM release_shadow WHERE manifest_hash = ?", (manifest_hash,)
                )
            return cursor.rowcount > 0

        return await self._worker.run(lambda conn: immediate(conn, body))

    async def history(self) -> list[HistoryRow]:
        """Every accepted release, oldest first."""

        def body(conn: sqlite3.Connection) -> list[HistoryRow]:
            rows = conn.execute(
                "SELECT sequence, release_id, manifest_hash, issued_at_ms, "
                "lease_expires_at_ms, accepted_at_ms FROM release_history ORDER BY sequence"
            ).fetchall()
            return [HistoryRow(*row) for row in rows]

        return await self._worker.run(body)
