"""The persisted release state: the last accepted release, so a restart cannot roll back.

TUF specification, "Detailed client workflow" 5.4.5 and 5.5.7, "Persist ...
metadata": the rollback check is only as good as the memory of what was
trusted before. This store keeps, in one SQLite file on its own worker
thread (:class:`~pipeline.stores.sqlite_worker.SqliteWorker`):

- ``release_state``: one row, the last accepted release: sequence, manifest
  hash, issue time, lease expiry, the clock's high-water mark, the cumulative
  revocations, and the exact bundle bytes that were verified, so a restarted
  gate re-verifies exactly what it accepted.
- ``release_history``: one row per accepted release, append-only.

How it keeps the state monotonic:

- :meth:`ReleaseStateStore.accept` is one ``BEGIN IMMEDIATE`` transaction that
  re-reads the row, requires it to still be the release the caller verified
  against (:class:`StaleReleaseStateError` otherwise: another writer got there
  first) and the new sequence to be strictly greater
  (:class:`~subjects.release.ReleaseRollbackError`).
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

from pipeline.core.release_trust import LastAccepted
from pipeline.stores.sqlite_worker import (
    SqliteWorker,
    StoreUnavailable,
    immediate,
    open_read_only,
)
from subjects.release import ReleaseRollbackError

__all__ = [
    "SCHEMA",
    "HistoryRow",
    "ReleaseStateStore",
    "StaleReleaseStateError",
    "StoreUnavailable",
    "StoredRelease",
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

    async def history(self) -> list[HistoryRow]:
        """Every accepted release, oldest first."""

        def body(conn: sqlite3.Connection) -> list[HistoryRow]:
            rows = conn.execute(
                "SELECT sequence, release_id, manifest_hash, issued_at_ms, "
                "lease_expires_at_ms, accepted_at_ms FROM release_history ORDER BY sequence"
            ).fetchall()
            return [HistoryRow(*row) for row in rows]

        return await self._worker.run(body)
