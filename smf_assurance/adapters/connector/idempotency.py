"""The connector's local idempotency record: one SQLite file per connector.

A redelivered order never executes twice,
and an order seen as started but never finished is reported ``ambiguous`` and
NOT retried. JetStream de-duplicates ``Nats-Msg-Id`` only inside the stream's
duplicate window, and redelivers every unacked message (ARCHITECTURE.md, "One
proposal through the bus"), so this record, not the bus, is what prevents a
second execution.

Invariants this module keeps:

- Write-ahead of the side effect: :meth:`IdempotencyStore.begin` returns only
  after the ``started`` row has committed with ``synchronous=FULL`` (WAL), so
  a crash during execution always leaves evidence that execution may have
  happened.
- One way only: ``started -> confirmed | failed | ambiguous``, and a refusal
  goes straight to ``failed``. Finished rows are final; SQL triggers refuse to
  update or delete them, and a finished row always holds the exact signed
  report bytes, which are re-published byte for byte on every redelivery.
- One writer: :meth:`IdempotencyStore.open` takes an exclusive ``flock`` on a
  lock file beside the database and refuses a second runner on the same state
  directory (:class:`StoreLockedError`). Otherwise a second runner could take
  a ``started`` row that is still executing for a crash and report it
  ``ambiguous``. The kernel drops the lock when the process dies, so a crash
  never leaves it stale.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Self, cast

import aiosqlite

State = Literal["started", "confirmed", "failed", "ambiguous"]
FinalState = Literal["confirmed", "failed", "ambiguous"]

SCHEMA_VERSION: Final = 1
STATE_DIR_MODE: Final = 0o700

_DDL: Final = """
CREATE TABLE IF NOT EXISTS orders (
    order_id TEXT PRIMARY KEY NOT NULL CHECK (length(order_id) = 64),
    state TEXT NOT NULL CHECK (state IN ('started', 'confirmed', 'failed', 'ambiguous')),
    reason_code TEXT,
    external_ref TEXT,
    report BLOB,
    started_at_ms INTEGER NOT NULL,
    finished_at_ms INTEGER,
    CHECK ((state = 'started') = (report IS NULL))
) STRICT;
CREATE TRIGGER IF NOT EXISTS orders_final_no_update
BEFORE UPDATE ON orders WHEN OLD.state <> 'started'
BEGIN SELECT RAISE(ABORT, 'a finished order record is final'); END;
CREATE TRIGGER IF NOT EXISTS orders_no_delete
BEFORE DELETE ON orders
BEGIN SELECT RAISE(ABORT, 'order records are never deleted'); END;
"""
_SELECT: Final = (
    "SELECT order_id, state, reason_code, external_ref, report, started_at_ms, finished_at_ms "
    "FROM orders WHERE order_id = ?"
)


class IdempotencyError(Exception):
    """The idempotency record cannot be used; the runner must not execute."""


class StoreLockedError(IdempotencyError):
    """Another runner holds this connector's state directory."""


class RecordStateError(IdempotencyError):
    """A transition the state machine does not allow (e.g. finishing twice)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One order as the connector recorded it; ``report`` is set once finished."""

    order_id: str
    state: State
    reason_code: str | None
    external_ref: str | None
    report: bytes | None
    started_at_ms: int
    finished_at_ms: int | None

    @property
    def finished(self) -> bool:
        return self.state != "started"


def _record(row: sqlite3.Row | tuple[object, ...]) -> Record:
    order_id, state, reason, ref, report, started, finished = tuple(row)
    return Record(
        order_id=cast(str, order_id),
        state=cast(State, state),
        reason_code=cast("str | None", reason),
        external_ref=cast("str | None", ref),
        report=cast("bytes | None", report),
        started_at_ms=cast(int, started),
        finished_at_ms=cast("int | None", finished),
    )


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StoreLockedError(f"{path} is held by another connector runner") from exc
    return fd


class IdempotencyStore:
    """The record of one connector, in ``<state_dir>/<name>.sqlite3``.

    Every method is one autocommit statement, so each returns after its own
    durable commit. Open with :meth:`open` (or ``async with``); close it to
    release the lock.
    """

    def __init__(self, db: aiosqlite.Connection, lock_fd: int, path: Path) -> None:
        self._db = db
        self._lock_fd = lock_fd
        self.path: Final = path

    @classmethod
    async def open(cls, state_dir: Path, name: str) -> IdempotencyStore:
        """Create ``state_dir`` (0700) if needed, lock it for ``name``, open the database."""
        state_dir.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
        path = state_dir / f"{name}.sqlite3"
        lock_fd = _lock(state_dir / f"{name}.lock")
        try:
            db = await aiosqlite.connect(path, isolation_level=None)
            try:
                await db.execute("PRAGMA journal_mode=WAL")
                # The started row must survive power loss before the side effect runs.
                await db.execute("PRAGMA synchronous=FULL")
                await db.executescript(_DDL)
                await db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            except BaseException:
                await db.close()
                raise
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(db, lock_fd, path)

    async def close(self) -> None:
        try:
            await self._db.close()
        finally:
            os.close(self._lock_fd)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def get(self, order_id: str) -> Record | None:
        async with self._db.execute(_SELECT, (order_id,)) as cursor:
            row = await cursor.fetchone()
        return None if row is None else _record(row)

    async def begin(self, order_id: str, at_ms: int) -> Record:
        """Insert ``started`` and commit, BEFORE the side effect.

        Raises :class:`RecordStateError` if the order already has a record: the
        caller looked it up first, and under the store lock nobody else writes,
        so that would be a bug, and the order must not execute.
        """
        try:
            await self._db.execute(
                "INSERT INTO orders (order_id, state, started_at_ms) VALUES (?, 'started', ?)",
                (order_id, at_ms),
            )
        except sqlite3.IntegrityError as exc:
            raise RecordStateError(f"order {order_id} already has a record") from exc
        return Record(order_id, "started", None, None, None, at_ms, None)

    async def finish(
        self,
        order_id: str,
        state: FinalState,
        reason_code: str,
        external_ref: str | None,
        report: bytes,
        at_ms: int,
    ) -> Record:
        """Move a ``started`` order to its final state with its signed report.

        Only ``started`` rows move: finishing an unknown or finished order
        raises :class:`RecordStateError`, so an outcome is recorded at most once.
        """
        cursor = await self._db.execute(
            "UPDATE orders SET state = ?, reason_code = ?, external_ref = ?, report = ?, "
            "finished_at_ms = ? WHERE order_id = ? AND state = 'started'",
            (state, reason_code, external_ref, report, at_ms, order_id),
        )
        if cursor.rowcount != 1:
            raise RecordStateError(f"order {order_id} is not started")
        return await self._require(order_id)

    async def refuse(self, order_id: str, reason_code: str, report: bytes, at_ms: int) -> Record:
        """Record an order that was refused without executing, as ``failed``.

        The refusal is final: once the connector has signed "failed" for this
        order id, a later copy must not execute and contradict that report.
        If the order already has a record, that record stands and is returned.
        """
        await self._db.execute(
            "INSERT INTO orders (order_id, state, reason_code, report, started_at_ms, "
            "finished_at_ms) VALUES (?, 'failed', ?, ?, ?, ?) ON CONFLICT(order_id) DO NOTHING",
            (order_id, reason_code, report, at_ms, at_ms),
        )
        return await self._require(order_id)

    async def _require(self, order_id: str) -> Record:
        record = await self.get(order_id)
        if record is None:  # pragma: no cover - only if the file is changed under us
            raise RecordStateError(f"order {order_id} vanished from the record")
        return record
