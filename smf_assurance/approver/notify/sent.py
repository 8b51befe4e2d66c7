"""The record of what was sent: (approval, approver, channel, kind), in a SQLite file.

A restart of the notifier neither loses nor repeats
a notification it already sent. The notifier reads every announcement the
``SMF_APPROVALS`` stream still holds each time it starts (nothing is lost
while it was down, within the stream's retention), and sends a notice only
when this record does not hold its key yet; a notice is recorded as soon as
its server accepted it. What that does not cover: a crash in the instant
between a server's acceptance and the record's commit sends that one notice
again after the restart (at least once, never zero times). Two notifiers on one
record would each send: :meth:`SentRecord.open` locks it for one process
(:class:`RecordInUseError`).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Final, Literal

import aiosqlite

Channel = Literal["email", "webhook"]
SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS sent (
    approval_id TEXT NOT NULL,
    approver_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    kind TEXT NOT NULL,
    sent_at_ms INTEGER NOT NULL,
    PRIMARY KEY (approval_id, approver_id, channel, kind)
) WITHOUT ROWID
"""

SentKey = tuple[str, str, Channel, str]
"""(approval id, approver id, channel, notice kind)."""


class RecordInUseError(OSError):
    """Another notifier holds this record: two would send every notice twice."""


class SentRecord:
    """One connection to the record file; keys are written once and never changed."""

    def __init__(self, db: aiosqlite.Connection, lock_fd: int) -> None:
        self._db = db
        self._lock_fd = lock_fd

    @classmethod
    async def open(cls, path: Path) -> SentRecord:
        lock_fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise RecordInUseError(f"{path} is held by another notifier") from exc
            db = await aiosqlite.connect(path)
            try:
                await db.execute("PRAGMA journal_mode=WAL")
                await db.execute(SCHEMA)
                await db.commit()
            except BaseException:
                await db.close()
                raise
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(db, lock_fd)

    async def sent(self, key: SentKey) -> bool:
        async with self._db.execute(
            "SELECT 1 FROM sent WHERE approval_id=? AND approver_id=? AND channel=? AND kind=?",
            key,
        ) as cursor:
            return await cursor.fetchone() is not None

    async def mark(self, key: SentKey, at_ms: int) -> None:
        await self._db.execute("INSERT OR IGNORE INTO sent VALUES (?, ?, ?, ?, ?)", (*key, at_ms))
        await self._db.commit()

    async def close(self) -> None:
        try:
            await self._db.close()
        finally:
            os.close(self._lock_fd)
