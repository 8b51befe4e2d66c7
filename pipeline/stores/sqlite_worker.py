"""One SQLite connection owned by one worker thread; each job is one transaction.

The same model the evidence ledger uses (see ``pipeline.stores.ledger``):
a whole transaction runs as one job on a single-thread executor, so a
cancelled await never leaves a transaction half-open on a shared connection
and the claim path costs one thread hop, not one per statement (issue 4:
"keep the whole claim in one thread hop").
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class StoreUnavailable(Exception):
    """The store could not run the job (closed, locked past the timeout, I/O error)."""


class SqliteWorker:
    def __init__(self, conn: sqlite3.Connection, executor: ThreadPoolExecutor) -> None:
        self._conn = conn
        self._executor = executor
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        schema: str,
        *,
        name: str,
        busy_timeout_ms: int = 5000,
    ) -> SqliteWorker:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"smf-{name}")

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(os.fspath(path), isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.executescript(schema)
            return conn

        try:
            conn = await asyncio.get_running_loop().run_in_executor(executor, connect)
        except (sqlite3.Error, OSError) as exc:
            executor.shutdown(wait=False)
            raise StoreUnavailable(f"{name} store could not be opened: {exc}") from exc
        return cls(conn, executor)

    async def run(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``job`` with the connection on the worker thread."""
        if self._closed:
            raise StoreUnavailable("store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, job, self._conn)
        except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._executor, self._conn.close)
        self._executor.shutdown(wait=True)


def immediate(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``body`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``; roll back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result
