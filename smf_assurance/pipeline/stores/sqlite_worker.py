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
per statement: the whole claim is kept in one thread hop.

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
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")

MAX_GROUP: Final = 256
"""Transactions merged into one commit at most (:meth:`SqliteWorker.transact`)."""

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


class GroupCommitter(Generic[ItemT, ResultT]):
    """Group commit: items that arrive while a commit is in flight go into
    the next one, in arrival order, at most ``limit`` at a time.

    ``commit`` receives a group and returns one ``(True, result)`` or ``(False,
    exception)`` per item, or raises, which fails every item of the group (each caller
    gets its own copy of the exception, its cause kept). Each caller is released only
    when its group's commit has returned. The commits run in one task of the
    committer's own, so a caller's cancellation cannot strand the others mid-group; an
    item whose caller gave up before its group was taken is never committed. If that
    task is stopped from outside (cancelled, even before its first step), every caller
    it holds is failed with ``stopped()`` rather than left waiting: fail closed, never
    hang.
    """

    def __init__(
        self,
        commit: Callable[[list[ItemT]], Awaitable[list[tuple[bool, Any]]]],
        *,
        stopped: Callable[[], BaseException],
        limit: int = MAX_GROUP,
    ) -> None:
        self._commit = commit
        self._stopped = stopped
        self._limit = limit
        self._queued: deque[tuple[ItemT, asyncio.Future[ResultT]]] = deque()
        self.task: asyncio.Task[None] | None = None

    async def submit(self, item: ItemT) -> ResultT:
        future: asyncio.Future[ResultT] = asyncio.get_running_loop().create_future()
        self._queued.append((item, future))
        if self.task is None or self.task.done():
            taken: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
            self.task = asyncio.create_task(self._run(taken), name="group-commit")
            self.task.add_done_callback(partial(self._ended, taken))
        return await future

    async def drained(self) -> None:
        """Wait until what is queued has been committed (or failed)."""
        if self.task is not None:
            await asyncio.wait([self.task])

    async def _run(self, taken: list[tuple[ItemT, asyncio.Future[ResultT]]]) -> None:
        while self._queued:
            taken.clear()
            while self._queued and len(taken) < self._limit:
                queued = self._queued.popleft()
                if not queued[1].done():  # a caller that gave up is not committed
                    taken.append(queued)
            if not taken:
                continue
            try:
                outcomes = await self._commit([item for item, _ in taken])
            except Exception as exc:  # noqa: BLE001 - the group's failure, for each caller
                for _, future in taken:
                    if not future.done():
                        failure = type(exc)(*exc.args)
                        failure.__cause__ = exc.__cause__
                        future.set_exception(failure)
                continue
            for (_, future), (ok, value) in zip(taken, outcomes, strict=True):
                if not future.done():
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        taken.clear()

    def _ended(
        self, taken: list[tuple[ItemT, asyncio.Future[ResultT]]], task: asyncio.Task[None]
    ) -> None:
        if not task.cancelled() and task.exception() is None:
            return
        stranded = list(taken)
        if self.task is task:
            stranded += self._queued
            self._queued.clear()
        for _, future in stranded:
            if not future.done():
                future.set_exception(self._stopped())


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
        self._closing = False
        self._lender: SqliteWorker | None = None
        self._grouped: GroupCommitter[Callable[[sqlite3.Connection], Any], Any] = GroupCommitter(
            self._commit_group, stopped=lambda: StoreUnavailable("store stopped")
        )

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
            create_private(path)
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

    async def lend(self, schema: str = "", *, name: str) -> SqliteWorker:
        """A worker on this one's connection and thread, for a store whose writes must
        commit in this one's transactions (the claim store and the order
        book in the ledger file, :meth:`smf_assurance.pipeline.stores.ledger.Ledger.append_beside`).

        ``schema`` is installed first. The loan has its own group commit, and its
        own ``close``, which ends the loan only: the connection is the lender's, and
        once the lender is closed the loan is unavailable too."""
        if schema:
            try:
                await self.run(lambda conn: conn.executescript(schema))
            except StoreUnavailable as exc:
                raise StoreUnavailable(f"{name} store could not be installed: {exc}") from exc
        loan = SqliteWorker(self._conn, self._executor)
        loan._lender = self
        return loan

    @property
    def closed(self) -> bool:
        return self._closed or (self._lender is not None and self._lender.closed)

    async def run(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``job`` with the connection on the worker thread, as one hop.

        A SQLite or OS failure becomes :class:`StoreUnavailable`; anything else
        the job raises (a store's own refusal) reaches the caller as it is.
        """
        if self.closed:
            raise StoreUnavailable("store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, job, self._conn)
        except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def transact(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` as one transaction, committed together with those queued beside it.

        Group commit: the bodies that queue while a commit is in flight run
        in the next ``BEGIN IMMEDIATE`` ... ``COMMIT``, each inside its own SAVEPOINT, in
        the order they were queued, so each sees the ones before it exactly as if they
        had committed first. One fsync serves them all; each caller is released only
        after the COMMIT that holds its body (or with the failure that stopped it). A
        body's own exception rolls back its savepoint only and reaches its caller (a
        SQLite or OS error as :class:`StoreUnavailable`); a failed BEGIN or COMMIT fails
        every caller of the group (:class:`GroupCommitter`).
        """
        if self._closing:
            raise StoreUnavailable("store is closed")
        result: T = await self._grouped.submit(body)
        return result

    async def _commit_group(
        self, bodies: list[Callable[[sqlite3.Connection], Any]]
    ) -> list[tuple[bool, Any]]:
        return await self.run(partial(_group, bodies=bodies))

    async def close(self) -> None:
        """Commit what is queued, close the connection on its thread and stop the
        thread; idempotent."""
        if self._closed:
            return
        self._closing = True
        await self._grouped.drained()
        if self._closed:
            return
        self._closed = True
        if self._lender is not None:
            return  # a loan ends; the lender's connection stays open
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


def _group(
    conn: sqlite3.Connection, bodies: list[Callable[[sqlite3.Connection], Any]]
) -> list[tuple[bool, Any]]:
    """The worker-thread half of :meth:`SqliteWorker.transact`: one transaction, one
    savepoint per body; ``(True, result)`` or ``(False, exception)`` per body."""

    def run_all(conn: sqlite3.Connection) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any]] = []
        for body in bodies:
            conn.execute("SAVEPOINT smf_item")
            try:
                value = body(conn)
            except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as exc:
                conn.execute("ROLLBACK TO smf_item")
                conn.execute("RELEASE smf_item")
                failure = StoreUnavailable(str(exc))
                failure.__cause__ = exc
                outcomes.append((False, failure))
            except Exception as exc:  # noqa: BLE001 - a store's own refusal, for its caller alone
                conn.execute("ROLLBACK TO smf_item")
                conn.execute("RELEASE smf_item")
                outcomes.append((False, exc))
            else:
                conn.execute("RELEASE smf_item")
                outcomes.append((True, value))
        return outcomes

    return immediate(conn, run_all)


def create_private(path: str | os.PathLike[str]) -> None:
    """Create ``path`` empty and 0600 when it does not exist, before SQLite opens it.

    A store file holds what its owner alone may read (approvals hold content, the
    ledger the claims): SQLite would create it with the process umask (0644 by
    default), and its ``-wal`` and ``-shm`` take the main file's mode, so the mode
    set here is theirs too. An existing file is left as it is: the gate's start-up
    check (``state_check``) refuses one that is too open. ``:memory:``, URIs and a
    path that cannot be created are SQLite's business (it names its own error)."""
    name = os.fspath(path)
    if name == ":memory:" or name.startswith("file:"):
        return
    with contextlib.suppress(OSError):
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def open_read_only(db_path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A connection that can only read: an audit or a status never modifies a store.

    An auditor's copy may sit in a folder they may not write, where
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
