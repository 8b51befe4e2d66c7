"""The pipeline's one SQLite idiom: one connection, owned by one worker thread;
each job is one transaction.

Every SQLite store of the gate (approvals, proposal claims, release state, the
evidence ledger) opens its file through :class:`SqliteWorker`, so they share
one set of pragmas and one way to run a transaction.

Why stdlib ``sqlite3`` on a dedicated worker thread, not aiosqlite: a store's
step is a whole transaction (``BEGIN IMMEDIATE``, read, decide, write,
``COMMIT``; for the ledger: check the tail, insert, maybe sign and insert a
checkpoint). aiosqlite runs each statement as its own hop to its thread and
offers no public way to run one function there, so a cancelled caller could
stop between ``BEGIN`` and ``COMMIT`` and leave the transaction open on the
shared connection. Here the whole transaction is one job on a single-thread
executor: the same one-thread-owns-the-connection model, but a cancelled await
never splits a transaction (the job runs to its end on the thread), two jobs
never interleave on the connection, and a step costs one thread hop, not one
per statement (issue 4: "keep the whole claim in one thread hop").

The pragmas are those ARCHITECTURE.md's durability promises need: WAL, so
readers do not block the writer, and ``synchronous = FULL``, because in WAL
mode NORMAL may lose the last commits on power loss, and a committed claim,
approval step or evidence receipt must survive one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class StoreUnavailable(Exception):
    """The store could not run the job (closed, locked past the timeout, I/O error).

    The SQLite or OS error is chained as ``__cause__``.
    """


class SqliteWorker:
    """A SQLite connection and the one thread that may use it.

    The connection is made on the worker thread with ``check_same_thread`` on,
    so sqlite3 itself refuses any use from another thread.
    """

    def __init__(self, conn: sqlite3.Connection, executor: ThreadPoolExecutor) -> None:
        self._conn = conn
        self._executor = executor
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        schema: str = "",
        *,
        name: str,
        busy_timeout_ms: int = 5000,
    ) -> SqliteWorker:
        """Connect on a new worker thread, set the pragmas, run ``schema``.

        ``busy_timeout_ms`` bounds how long a step waits for another
        connection's write lock before it fails as :class:`StoreUnavailable`.
        Raises :class:`StoreUnavailable` when the file cannot be opened.
        """
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"smf-{name}")

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(
                os.fspath(path),
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=True,
            )
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
                conn.executescript(schema)
            except BaseException:
                conn.close()
                raise
            return conn

        try:
            conn = await asyncio.get_running_loop().run_in_executor(executor, connect)
        except (sqlite3.Error, OSError) as exc:
            executor.shutdown(wait=False)
            raise StoreUnavailable(
                f"{name} store {os.fspath(path)} could not be opened: {exc}"
            ) from exc
        return cls(conn, executor)

    async def run(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``job`` with the connection on the worker thread, as one hop.

        A SQLite or OS failure becomes :class:`StoreUnavailable`; anything else
        the job raises (a store's own refusal) reaches the caller as it is.
        """
        if self._closed:
            raise StoreUnavailable("store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, job, self._conn)
        except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def close(self) -> None:
        """Close the connection on its thread and stop the thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._conn.close)
        finally:
            self._executor.shutdown(wait=True)


def immediate(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``body`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``; roll back on any error.

    ``IMMEDIATE`` takes the write lock before the first read, so a step's check
    and its write cannot interleave with another connection's (one claimant
    wins). A failed ``ROLLBACK`` (or none needed: SQLite already rolled back
    after, e.g., a full disk at ``COMMIT``) does not hide the error that got here.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body(conn)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    return result


def open_read_only(db_path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A connection that can only read: an audit or a status never modifies a store.

    Issue 22: an auditor's copy sits in a folder they may not write, where
    SQLite cannot create the ``-shm`` a WAL file needs even to read
    (``mode=ro`` alone fails). Then the file is opened ``immutable=1``, which
    reads the main file only, and so only when no write-ahead log beside it
    holds entries that reading the main file alone would miss (fail closed:
    the audit is refused, not run on part of the evidence).
    """
    path = Path(db_path).resolve()
    conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        conn.close()
    else:
        return conn
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise sqlite3.OperationalError(f"{wal} cannot be read in a read-only folder")
    return sqlite3.connect(path.as_uri() + "?immutable=1", uri=True)
