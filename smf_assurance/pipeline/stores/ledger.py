"""The evidence ledger's writer: append, chain, checkpoints, on one SQLite file.

ARCHITECTURE.md, "Evidence". Invariants this module keeps:

- Write before release: :meth:`Ledger.append` returns only after the entry's
  transaction has committed with ``synchronous=FULL``, so a caller that holds a
  :class:`Receipt` holds durable evidence. Any failure to write raises
  :class:`EvidenceStoreUnavailable`, which callers turn into the denial
  reason ``evidence_store_unavailable``: a ledger outage is a denial.
- One writer per chain: appends are serialised in the process, and every
  append first checks that the file's last entry is the one this writer last
  wrote, so it never extends (and later signs) a chain someone else wrote to.
- Hash chain: ``entry_hash`` is the identity of the canonical JSON of seq,
  prev_hash and every field (:func:`ledger_schema.entry_hash_of`); entry 1
  chains to :data:`ledger_schema.GENESIS_HASH`. The tail is re-checked at
  open with the audit's own walker (:class:`ledger_chain.ChainWalk`).
- Signed checkpoints: every ``checkpoint_every`` entries or
  ``checkpoint_seconds`` of the caller's clock, ``{ledger_id, seq, entry_hash,
  at}`` is signed as a DSSE envelope with the gate key, stored in the file's
  own append-only table and handed to ``on_checkpoint`` for publishing outside
  the file. The triggers (``ledger_schema.DDL``) stop SQL that would rewrite
  the file; the chain and the checkpoints held outside it detect an attacker
  who has the file and drops the triggers first: the offline audit,
  :func:`ledger_audit.verify_ledger`.

What this cannot detect: entries written after the last checkpoint that
reached the outside, by someone with write access to the file, are only as
trustworthy as that access control. The ``checkpoint_seconds`` cadence bounds
that window; :meth:`Ledger.checkpoint` closes it on demand (e.g. at shutdown).

The ledger's other names (the audit's :func:`verify_ledger`,
:func:`export_jsonl`, :class:`LedgerReport`; the reason codes and errors of
:mod:`smf_assurance.pipeline.stores.ledger_chain`) are importable from here too, so
``smf_assurance.pipeline.stores.ledger`` stays the one import for the whole ledger.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import msgspec
import structlog

from smf_assurance.pipeline.stores.ledger_audit import (
    LedgerReport,
    decision_entries,
    export_jsonl,
    shadow_entries,
    verify_ledger,
)
from smf_assurance.pipeline.stores.ledger_chain import (
    CHAIN_BROKEN,
    CHECKPOINT_BAD_SIGNATURE,
    CHECKPOINT_MALFORMED,
    CHECKPOINT_MISMATCH,
    ENTRY_HASH_MISMATCH,
    ENTRY_MALFORMED,
    EVIDENCE_STORE_UNAVAILABLE,
    LEDGER_UNREADABLE,
    SEQ_GAP,
    TAIL_MISMATCH,
    TRUNCATED_AFTER_CHECKPOINT,
    ChainWalk,
    EvidenceStoreUnavailable,
    LedgerIntegrityError,
)
from smf_assurance.pipeline.stores.ledger_schema import (
    CHECKPOINT_PAYLOAD_TYPE,
    DDL,
    GENESIS_HASH,
    INSERT_ENTRY,
    SCHEMA_VERSION,
    SELECT_ENTRIES_AFTER,
    EvidenceEntry,
    EvidenceEntryRejected,
    EvidenceError,
    checkpoint_payload,
    entry_hash_of,
    entry_row,
    migrate_v1,
    validate_entry,
)
from smf_assurance.pipeline.stores.sqlite_worker import (
    GroupCommitter,
    SqliteWorker,
    StoreUnavailable,
    immediate,
)
from smf_assurance.subjects import dsse
from smf_assurance.subjects.canonical import SAFE_INTEGER_MAX, sha256_identity
from smf_assurance.subjects.keys import SigningKey

__all__ = [
    "CHAIN_BROKEN",
    "CHECKPOINT_BAD_SIGNATURE",
    "CHECKPOINT_MALFORMED",
    "CHECKPOINT_MISMATCH",
    "ENTRY_HASH_MISMATCH",
    "ENTRY_MALFORMED",
    "EVIDENCE_STORE_UNAVAILABLE",
    "LEDGER_UNREADABLE",
    "SEQ_GAP",
    "TAIL_MISMATCH",
    "TRUNCATED_AFTER_CHECKPOINT",
    "CheckpointSink",
    "EvidenceEntry",
    "EvidenceEntryRejected",
    "EvidenceError",
    "EvidenceStoreUnavailable",
    "Ledger",
    "LedgerIntegrityError",
    "LedgerReport",
    "Receipt",
    "Recorded",
    "decision_entries",
    "export_jsonl",
    "shadow_entries",
    "verify_ledger",
]

logger = structlog.get_logger(__name__)

T = TypeVar("T")

CheckpointSink = Callable[[bytes], Awaitable[None]]
"""Receives each encoded checkpoint envelope, e.g. to publish it to a JetStream
stream with DenyDelete/DenyPurge. It must tolerate duplicates: the last stored
checkpoint is offered again at every open, in case a crash lost it."""
Beside = Callable[[sqlite3.Connection], Any]
"""A write that must commit in the same transaction as one evidence entry (a
proposal's claim and its order, :meth:`Ledger.append_beside`)."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """A write beside an entry whose outcome the entry itself must record.

    ``write`` runs first, in the entry's savepoint (as any :data:`Beside`); then
    ``amend(entry, what write returned)`` is the entry that is hashed and chained.
    Why: a proposal's claim is a row anyone with the file can delete, so the
    hash-chained entry says whether the claim was written, and the start-up check
    (:mod:`smf_assurance.pipeline.stores.state_check`) can hold the claims table
    against the evidence. ``amend`` must return a valid entry (one other than the entry
    given, which is frozen and was validated when submitted, is validated again);
    one that is not fails the group, as any bad entry does.
    """

    write: Beside
    amend: Callable[[EvidenceEntry, Any], EvidenceEntry]

    def __call__(self, conn: sqlite3.Connection) -> Any:
        return self.write(conn)


class Receipt(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Proof that an entry is durable: where it sits and what it hashes to."""

    seq: int
    entry_hash: str


class _Writer:
    """The synchronous half of the store: the chain and checkpoint state. Every
    method runs on the ledger's :class:`SqliteWorker` thread, with the
    connection that thread owns."""

    def __init__(self, ledger_id: str, signer: SigningKey, every: int, window_ms: int) -> None:
        self.ledger_id = ledger_id
        self._signer = signer
        self._every = every
        self._window_ms = window_ms
        self.tail_seq = 0
        self.tail_hash = GENESIS_HASH
        self._cp_seq = 0
        self._cp_at: int | None = None
        self.outbox: deque[bytes] = deque()
        """Checkpoints not yet handed to the sink; filled here, drained by the
        event loop (deque append/popleft are thread-safe)."""

    @classmethod
    def open(
        cls, conn: sqlite3.Connection, signer: SigningKey, every: int, window_ms: int
    ) -> _Writer:
        """Require WAL, install the schema, load and re-check the chain's tail.

        The worker asked for WAL; a file that cannot have it (``:memory:``, a
        file system without shared memory) is refused rather than run with a
        journal the receipts were not promised on.
        """
        (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        if mode != "wal":
            raise sqlite3.OperationalError(f"journal_mode is {mode}, WAL is required")
        writer = cls(immediate(conn, _install_schema), signer, every, window_ms)
        writer._load_state(conn)
        return writer

    def _load_state(self, conn: sqlite3.Connection) -> None:
        """Find the last checkpoint and re-check every entry after it.

        Entries after the last checkpoint are what the next checkpoint will
        sign; the gate must not vouch for a tail that does not verify.
        """
        last = conn.execute(
            "SELECT seq, entry_hash, at, envelope FROM ledger_checkpoints ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        cp_hash = GENESIS_HASH
        if last is not None:
            self._cp_seq, cp_hash, self._cp_at = last[0], last[1], last[2]
            self.outbox.append(bytes(last[3]))
            row = conn.execute(
                "SELECT entry_hash FROM evidence_entries WHERE seq = ?", (self._cp_seq,)
            ).fetchone()
            if row is None or row[0] != cp_hash:
                raise LedgerIntegrityError(CHECKPOINT_MISMATCH, self._cp_seq)
        walk = ChainWalk(self._cp_seq, cp_hash)
        walk.run(conn.execute(SELECT_ENTRIES_AFTER, (self._cp_seq,)))
        if walk.failure is not None:
            raise LedgerIntegrityError(*walk.failure)
        self.tail_seq, self.tail_hash = walk.last_seq, walk.last_hash
        if self._cp_at is None and self.tail_seq >= 1:
            first = conn.execute("SELECT at FROM evidence_entries WHERE seq = 1").fetchone()
            self._cp_at = first[0]

    def _check_tail(self, conn: sqlite3.Connection) -> None:
        row = conn.execute(
            "SELECT seq, entry_hash FROM evidence_entries ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        found = (row[0], row[1]) if row is not None else (0, GENESIS_HASH)
        if found != (self.tail_seq, self.tail_hash):
            raise LedgerIntegrityError(TAIL_MISMATCH, self.tail_seq + 1)

    def _checkpoint_due(self, seq: int, at: int, cp_seq: int, cp_at: int | None) -> bool:
        if seq - cp_seq >= self._every:
            return True
        window_start = cp_at if cp_at is not None else at
        return at - window_start >= self._window_ms

    def _insert_checkpoint(
        self, conn: sqlite3.Connection, seq: int, entry_hash: str, at: int
    ) -> bytes:
        payload = checkpoint_payload(self.ledger_id, seq, entry_hash, at)
        envelope = dsse.encode_envelope(dsse.sign(CHECKPOINT_PAYLOAD_TYPE, payload, [self._signer]))
        conn.execute(
            "INSERT INTO ledger_checkpoints (seq, entry_hash, at, envelope) VALUES (?, ?, ?, ?)",
            (seq, entry_hash, at, envelope),
        )
        return envelope

    @property
    def checkpoint_seq(self) -> int:
        """The seq the newest checkpoint signed (0: none yet)."""
        return self._cp_seq

    @property
    def window_start(self) -> int | None:
        """The start of the current checkpoint window: the newest checkpoint's time, or
        the first entry's when none was signed (None: an empty ledger)."""
        return self._cp_at

    def _checkpointed(self, seq: int, at: int, envelope: bytes) -> None:
        self._cp_seq, self._cp_at = seq, at
        self.outbox.append(envelope)
        logger.info("ledger.checkpoint_written", ledger_id=self.ledger_id, seq=seq)

    def append(
        self,
        conn: sqlite3.Connection,
        entries: Sequence[tuple[EvidenceEntry | None, Beside | None]],
    ) -> list[tuple[Receipt | None, Any]]:
        """Insert ``entries`` in order, each followed by a checkpoint when one is due, in
        one IMMEDIATE transaction (one fsync); state changes only after COMMIT returns.

        Group commit: the chain order is the order of ``entries``, and the
        cadence is judged entry by entry exactly as if each had its own transaction.
        An entry's ``beside`` write (:meth:`Ledger.append_beside`) runs just before
        it, in a savepoint of the same transaction: its failure undoes its own
        writes only and is that caller's result; the entry is written either way.
        """

        def body(
            conn: sqlite3.Connection,
        ) -> tuple[list[tuple[Receipt | None, Any]], list[tuple[int, int, bytes]]]:
            self._check_tail(conn)
            seq, prev_hash = self.tail_seq, self.tail_hash
            cp_seq, cp_at = self._cp_seq, self._cp_at
            receipts: list[tuple[Receipt | None, Any]] = []
            checkpoints: list[tuple[int, int, bytes]] = []
            for given, beside in entries:
                written = None if beside is None else _run_beside(conn, beside)
                if given is None:  # a write alone (Ledger.write_beside): no entry, no seq
                    receipts.append((None, written))
                    continue
                entry = given
                if isinstance(beside, Recorded):
                    entry = beside.amend(given, written)
                    if entry is not given:  # ``given`` was validated when it was submitted
                        validate_entry(entry)
                seq += 1
                entry_hash = entry_hash_of(seq, prev_hash, entry)
                conn.execute(INSERT_ENTRY, entry_row(seq, prev_hash, entry_hash, entry))
                if self._checkpoint_due(seq, entry.at, cp_seq, cp_at):
                    envelope = self._insert_checkpoint(conn, seq, entry_hash, entry.at)
                    checkpoints.append((seq, entry.at, envelope))
                    cp_seq, cp_at = seq, entry.at
                elif cp_at is None:
                    cp_at = entry.at
                receipts.append((Receipt(seq=seq, entry_hash=entry_hash), written))
                prev_hash = entry_hash
            return receipts, checkpoints

        receipts, checkpoints = immediate(conn, body)
        written_entries = [r for r, _ in receipts if r is not None]
        if written_entries:
            self.tail_seq, self.tail_hash = written_entries[-1].seq, written_entries[-1].entry_hash
        for seq, at, envelope in checkpoints:
            self._checkpointed(seq, at, envelope)
        first = next((e.at for e, _ in entries if e is not None), None)
        if self._cp_at is None and first is not None:
            self._cp_at = first
        return receipts

    def checkpoint(self, conn: sqlite3.Connection, at: int) -> bytes | None:
        """Sign the current tail now, unless it is already signed."""
        if self.tail_seq == self._cp_seq:
            return None

        def body(conn: sqlite3.Connection) -> bytes:
            self._check_tail(conn)
            return self._insert_checkpoint(conn, self.tail_seq, self.tail_hash, at)

        envelope = immediate(conn, body)
        self._checkpointed(self.tail_seq, at, envelope)
        return envelope


def _run_beside(conn: sqlite3.Connection, beside: Beside) -> Any:
    """One caller's write beside its entry, in its own savepoint; a failure is that
    caller's :class:`StoreUnavailable` (its cause kept), never the group's."""
    conn.execute("SAVEPOINT smf_beside")
    try:
        value = beside(conn)
    except Exception as exc:  # noqa: BLE001 - one caller's store refusal, for it alone
        conn.execute("ROLLBACK TO smf_beside")
        conn.execute("RELEASE smf_beside")
        failure = StoreUnavailable(f"write beside the evidence failed: {type(exc).__name__}")
        failure.__cause__ = exc
        return failure
    conn.execute("RELEASE smf_beside")
    return value


def _install_schema(conn: sqlite3.Connection) -> str:
    """Create the schema if absent, migrate a schema-1 file, and return the ledger's
    identity.

    The ledger id is random, fixed at creation and named by every checkpoint,
    so a checkpoint of one ledger never vouches for another file. A file of
    schema 1 (without the ``shadow`` kind) is rebuilt as schema 2 in this
    same transaction (:func:`ledger_schema.migrate_v1`), before the schema's
    triggers are created again; any other version is refused.
    """
    if _schema_version(conn) == 1:
        migrate_v1(conn)
        logger.warning("ledger.migrated", from_version=1, to_version=SCHEMA_VERSION)
    for statement in DDL:
        conn.execute(statement)
    row = conn.execute(
        "SELECT ledger_id, schema_version FROM ledger_meta WHERE singleton = 1"
    ).fetchone()
    if row is None:
        ledger_id = sha256_identity(os.urandom(32))
        conn.execute(
            "INSERT INTO ledger_meta (singleton, ledger_id, schema_version) VALUES (1, ?, ?)",
            (ledger_id, SCHEMA_VERSION),
        )
    elif row[1] != SCHEMA_VERSION:
        raise sqlite3.DatabaseError(f"ledger schema version {row[1]} is not supported")
    else:
        ledger_id = row[0]
    return str(ledger_id)


def _schema_version(conn: sqlite3.Connection) -> int | None:
    """The file's schema version, or None for a file with no ledger yet."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_meta'"
    ).fetchone()
    if exists is None:
        return None
    row = conn.execute("SELECT schema_version FROM ledger_meta WHERE singleton = 1").fetchone()
    return None if row is None else int(row[0])


def _unavailable(operation: str, cause: BaseException | None, message: str) -> Exception:
    """Log a ledger outage and name it :class:`EvidenceStoreUnavailable`.

    The caller chains ``cause``: the SQLite, OS or integrity error itself, not
    the worker's :class:`StoreUnavailable` wrapper around it, so an operator
    reads what stopped the write.
    """
    logger.error("ledger.unavailable", operation=operation, error=type(cause).__name__)
    return EvidenceStoreUnavailable(message)


_NOT_OPENED: Final = "evidence ledger could not be opened"


def _stopped() -> Exception:
    logger.error("ledger.unavailable", operation="append", error="committer_stopped")
    return EvidenceStoreUnavailable("evidence ledger stopped")


async def _close(worker: SqliteWorker | None) -> None:
    if worker is not None:
        await worker.close()


class Ledger:
    """The evidence ledger store. Create with :meth:`open`.

    The file is the stores' one SQLite idiom (:class:`SqliteWorker`): a
    transaction runs as one job on the worker thread, so a cancelled await
    never splits it and two transactions never interleave on the connection.

    Group commit (:class:`GroupCommitter`): appends that arrive while a
    commit is in flight go into the next transaction together, one fsync for all
    of them; each caller is released only when the transaction holding its own
    entry has committed (write before release, per entry), or gets the failure
    that stopped it; an entry whose caller gave up before its group was taken is
    never written. A group is all or nothing, so the chain held in memory is only
    ever the committed one. The asyncio.Lock orders commits, explicit checkpoints
    and the checkpoint hand-off.
    """

    def __init__(
        self,
        writer: _Writer,
        worker: SqliteWorker,
        on_checkpoint: CheckpointSink | None,
    ) -> None:
        self._writer = writer
        self._worker = worker
        self._on_checkpoint = on_checkpoint
        self._lock = asyncio.Lock()
        self._closed = False
        self._grouped: GroupCommitter[
            tuple[EvidenceEntry | None, Beside | None], tuple[Receipt | None, Any]
        ]
        self._grouped = GroupCommitter(self._commit, stopped=_stopped)

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        signer: SigningKey,
        checkpoint_every: int = 1000,
        checkpoint_seconds: float = 60.0,
        on_checkpoint: CheckpointSink | None = None,
        busy_timeout_ms: int = 5000,
    ) -> Ledger:
        """Open (creating if needed) the ledger file at ``path``.

        ``signer`` is the gate key that signs checkpoints. Tenants arrive
        already keyed (``tenant_ref``), so the store holds no pseudonym key.
        The file runs in WAL mode with ``synchronous=FULL``: in WAL mode
        NORMAL can lose the last commits on power loss, and a receipt must
        mean the evidence survives one.
        Raises :class:`EvidenceStoreUnavailable` if the file cannot be opened
        for writing or its unsigned tail does not verify.
        """
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every must be at least 1")
        if not checkpoint_seconds > 0:
            raise ValueError("checkpoint_seconds must be positive")
        if busy_timeout_ms < 0:
            raise ValueError("busy_timeout_ms must not be negative")
        worker: SqliteWorker | None = None
        try:
            worker = await SqliteWorker.open(path, name="ledger", busy_timeout_ms=busy_timeout_ms)
            writer = await worker.run(
                partial(
                    _Writer.open,
                    signer=signer,
                    every=checkpoint_every,
                    window_ms=int(checkpoint_seconds * 1000),
                )
            )
        except StoreUnavailable as exc:
            await _close(worker)
            raise _unavailable("open", exc.__cause__, _NOT_OPENED) from exc.__cause__
        except Exception as exc:
            await _close(worker)
            raise _unavailable("open", exc, _NOT_OPENED) from exc
        ledger = cls(writer, worker, on_checkpoint)
        logger.info("ledger.opened", ledger_id=writer.ledger_id, last_seq=writer.tail_seq)
        async with ledger._lock:
            await ledger._publish_pending()
        return ledger

    @property
    def ledger_id(self) -> str:
        """The identity every checkpoint of this ledger names."""
        return self._writer.ledger_id

    @property
    def pending_checkpoints(self) -> int:
        """Checkpoints the sink has not yet accepted (for health checks)."""
        return len(self._writer.outbox)

    @property
    def tail_seq(self) -> int:
        """The seq of the last committed entry (0: empty), for health checks
        (``smf.gate.status``): set on the worker thread, read here as it stands."""
        return self._writer.tail_seq

    @property
    def checkpoint_seq(self) -> int:
        """The seq the newest signed checkpoint covers (0: none yet), for health checks."""
        return self._writer.checkpoint_seq

    @property
    def checkpoint_window_start(self) -> int | None:
        """Since when the entries after the newest checkpoint wait for the next one
        (its ``at``, or the first entry's when none was signed; None: empty)."""
        return self._writer.window_start

    async def _run(self, operation: str, job: Callable[[sqlite3.Connection], T]) -> T:
        """One job on the worker; any failure is EvidenceStoreUnavailable (a denial)."""
        if self._worker.closed:
            logger.error("ledger.unavailable", operation=operation, error="closed")
            raise EvidenceStoreUnavailable("evidence ledger is closed")
        try:
            return await self._worker.run(job)
        except StoreUnavailable as exc:
            message = f"evidence ledger unavailable for {operation}"
            raise _unavailable(operation, exc.__cause__, message) from exc.__cause__
        except Exception as exc:
            message = f"evidence ledger unavailable for {operation}"
            raise _unavailable(operation, exc, message) from exc

    async def _publish_pending(self) -> None:
        """Hand queued checkpoints to the sink in order; keep what it refuses.

        A sink failure does not fail the append: the entry is already durable,
        which is what write-before-release needs. The checkpoint stays queued
        and is offered again on the next append.
        """
        outbox = self._writer.outbox
        if self._on_checkpoint is None:
            outbox.clear()
            return
        while outbox:
            try:
                await self._on_checkpoint(outbox[0])
            except Exception as exc:
                # Logged at error level with the traceback: while the sink
                # fails, truncation of the newest entries is not detectable.
                logger.exception(
                    "ledger.checkpoint_publish_failed",
                    error=type(exc).__name__,
                    pending=len(outbox),
                )
                return
            outbox.popleft()

    @property
    def worker(self) -> SqliteWorker:
        """The ledger file's worker, for stores whose writes must commit with an entry
        (the claim store and order book on one machine). They may run
        their own jobs on it; they never close it."""
        return self._worker

    async def append(self, entry: EvidenceEntry) -> Receipt:
        """Durably append ``entry``; return only after it has committed.

        Raises :class:`EvidenceEntryRejected` (before any I/O) for a value that
        is not an identity, vocabulary word, reason code or time, and
        :class:`EvidenceStoreUnavailable` for anything that stops the write.
        """
        receipt, _ = await self._submit(entry, None)
        return receipt

    async def has_outcome(self, decision_id: str) -> bool:
        """Whether a transition to an order's outcome (``consumed``, ``failed``,
        ``execution_unknown``) is recorded for this decision."""

        def job(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT 1 FROM evidence_entries WHERE decision_id = ? AND kind = 'transition'"
                " AND status IN ('consumed', 'failed', 'execution_unknown') LIMIT 1",
                (decision_id,),
            ).fetchone()
            return row is not None

        return await self._run("has_outcome", job)

    async def append_beside(self, entry: EvidenceEntry, beside: Beside) -> tuple[Receipt, Any]:
        """Append ``entry`` and run ``beside`` in the SAME transaction: both commit, or
        neither (one durable commit per decision). Returns the receipt and
        what ``beside`` returned, or the :class:`StoreUnavailable` it failed with
        (then its writes were undone and the entry was written all the same). A
        :class:`Recorded` write has the entry amended by its outcome first; the
        receipt is the amended entry's."""
        return await self._submit(entry, beside)

    async def write_beside(self, beside: Beside) -> Any:
        """Run ``beside`` in the next group commit, with no entry of its own (a
        claim's settle rides in the transaction of the evidence queued with it,
        one fsync for all). Returns what it returned, or the
        :class:`StoreUnavailable` it failed with; raises
        :class:`EvidenceStoreUnavailable` when the ledger cannot commit."""
        if self._closed:
            logger.error("ledger.unavailable", operation="write_beside", error="closed")
            raise EvidenceStoreUnavailable("evidence ledger is closed")
        _, written = await self._grouped.submit((None, beside))
        return written

    async def _submit(self, entry: EvidenceEntry, beside: Beside | None) -> tuple[Receipt, Any]:
        try:
            validate_entry(entry)
        except EvidenceEntryRejected as exc:
            logger.warning("ledger.entry_rejected", field=exc.field)
            raise
        if self._closed:
            logger.error("ledger.unavailable", operation="append", error="closed")
            raise EvidenceStoreUnavailable("evidence ledger is closed")
        receipt, written = await self._grouped.submit((entry, beside))
        assert receipt is not None  # an entry always has its receipt
        logger.debug("ledger.appended", seq=receipt.seq, kind=entry.kind)
        return receipt, written

    async def _commit(
        self, entries: list[tuple[EvidenceEntry | None, Beside | None]]
    ) -> list[tuple[bool, Any]]:
        """One group: all of ``entries`` in one transaction, or none of them."""
        async with self._lock:
            try:
                receipts = await self._run("append", partial(self._writer.append, entries=entries))
            finally:
                await self._publish_pending()
        return [(True, receipt) for receipt in receipts]

    async def checkpoint(self, at: int) -> bytes | None:
        """Sign the current tail now, with ``at`` from the caller's clock.

        Returns the envelope, or None when the tail is already signed. Call it
        at shutdown, or from a timer on a quiet ledger, so no entry waits for
        the next append to be anchored outside the file.
        """
        if type(at) is not int or not 0 <= at <= SAFE_INTEGER_MAX:
            raise ValueError("at must be unix milliseconds")
        if self._closed:
            logger.error("ledger.unavailable", operation="checkpoint", error="closed")
            raise EvidenceStoreUnavailable("evidence ledger is closed")
        async with self._lock:
            envelope = await self._run("checkpoint", partial(self._writer.checkpoint, at=at))
            await self._publish_pending()
        return envelope

    async def close(self) -> None:
        """Wait for the append in flight, offer queued checkpoints once more,
        then close the file. Idempotent; appends afterwards are refused."""
        self._closed = True
        await self._grouped.drained()
        async with self._lock:
            if self._worker.closed:
                return
            await self._publish_pending()
            await self._worker.close()
        logger.info("ledger.closed", ledger_id=self.ledger_id)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
