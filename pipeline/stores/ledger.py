"""The evidence ledger: an append-only, hash-chained, checkpoint-signed SQLite file.

ARCHITECTURE.md, "Evidence", and issue 7. Invariants this module keeps:

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
  chains to :data:`ledger_schema.GENESIS_HASH`.
- Signed checkpoints: every ``checkpoint_every`` entries or
  ``checkpoint_seconds`` of the caller's clock, ``{ledger_id, seq, entry_hash,
  at}`` is signed as a DSSE envelope with the gate key, stored in the file's
  own append-only table and handed to ``on_checkpoint`` for publishing outside
  the file. The triggers (``ledger_schema.DDL``) stop SQL that would rewrite
  the file; the chain and the checkpoints held outside it detect an attacker
  who has the file and drops the triggers first: :func:`verify_ledger`.

What this cannot detect: entries written after the last checkpoint that
reached the outside, by someone with write access to the file, are only as
trustworthy as that access control. The ``checkpoint_seconds`` cadence bounds
that window; :meth:`Ledger.checkpoint` closes it on demand (e.g. at shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self, TextIO, TypeVar

import msgspec
import structlog

from pipeline.stores.ledger_schema import (
    CHECKPOINT_PAYLOAD_TYPE,
    DDL,
    GENESIS_HASH,
    INSERT_ENTRY,
    SCHEMA_VERSION,
    SELECT_ENTRIES_AFTER,
    CheckpointClaim,
    EvidenceEntry,
    EvidenceEntryRejected,
    EvidenceError,
    MalformedEntry,
    checkpoint_payload,
    entry_hash_of,
    entry_row,
    export_document,
    parse_checkpoint_payload,
    stored_entry,
    validate_entry,
)
from pipeline.stores.sqlite_worker import SqliteWorker, StoreUnavailable, immediate
from subjects import dsse
from subjects.canonical import SAFE_INTEGER_MAX, canonical_bytes, sha256_identity
from subjects.keys import SigningKey, VerifyKey

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
    "export_jsonl",
    "verify_ledger",
]

logger = structlog.get_logger(__name__)

T = TypeVar("T")

CheckpointSink = Callable[[bytes], Awaitable[None]]
"""Receives each encoded checkpoint envelope, e.g. to publish it to a JetStream
stream with DenyDelete/DenyPurge. It must tolerate duplicates: the last stored
checkpoint is offered again at every open, in case a crash lost it."""

EVIDENCE_STORE_UNAVAILABLE: Final = "evidence_store_unavailable"

# Reason codes of verify_ledger, one per way the file can disagree with itself
# or with the signed checkpoints (issue 7).
ENTRY_HASH_MISMATCH: Final = "entry_hash_mismatch"
"""An entry's stored hash is not the hash of its content: edited in place."""
CHAIN_BROKEN: Final = "chain_broken"
"""An entry's prev_hash is not the previous entry's hash: edited and rehashed,
or spliced."""
SEQ_GAP: Final = "seq_gap"
"""seq is not contiguous from 1: an entry was removed."""
ENTRY_MALFORMED: Final = "entry_malformed"
"""A row holds a value no valid append could write: written around the store."""
TRUNCATED_AFTER_CHECKPOINT: Final = "truncated_after_checkpoint"
"""A signed checkpoint names a seq the file no longer has: the tail was cut."""
CHECKPOINT_MISMATCH: Final = "checkpoint_mismatch"
"""A signed checkpoint names another ledger or another hash at its seq: the
history was rewritten, or the whole file replaced."""
CHECKPOINT_BAD_SIGNATURE: Final = "checkpoint_bad_signature"
"""A checkpoint does not decode or is not signed by a trusted key: forged."""
CHECKPOINT_MALFORMED: Final = "checkpoint_malformed"
"""A checkpoint is validly signed but its payload is not a checkpoint."""
LEDGER_UNREADABLE: Final = "ledger_unreadable"
"""The file is missing, not SQLite, or has no ledger identity."""
TAIL_MISMATCH: Final = "tail_mismatch"
"""(Store only) the file's last entry is not the one this writer last wrote."""


class EvidenceStoreUnavailable(EvidenceError):
    """The ledger cannot durably record evidence right now.

    One type for every cause (unwritable path, disk full, lock held past the
    busy timeout, closed store, a tampered tail), chained as ``__cause__``, so
    the caller has one thing to catch and one denial to give:
    ``evidence_store_unavailable``.
    """

    reason_code: Final = EVIDENCE_STORE_UNAVAILABLE


class LedgerIntegrityError(EvidenceError):
    """The file disagrees with its own chain: raised (as a cause) when the
    store refuses to extend a chain it cannot vouch for, and by
    :func:`export_jsonl` for a row it cannot decode."""

    def __init__(self, reason: str, seq: int | None) -> None:
        super().__init__(f"evidence ledger integrity: {reason} at seq {seq}")
        self.reason = reason
        self.seq = seq


class Receipt(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Proof that an entry is durable: where it sits and what it hashes to."""

    seq: int
    entry_hash: str


class LedgerReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The outcome of :func:`verify_ledger`.

    ``reason`` is one of the reason codes above and ``seq`` the first bad
    entry (for a truncation, the first missing one; None when the fault names
    no trustworthy seq: a checkpoint's signature or payload, an unreadable
    file). ``checkpoints`` counts distinct verified checkpoints, from the file
    and from outside it, and ``checkpoint_seq`` is the highest. ``last_seq`` and
    ``last_entry_hash`` are the end of the longest verified prefix.
    """

    ok: bool
    reason: str | None
    seq: int | None
    ledger_id: str | None
    entries: int
    last_seq: int
    last_entry_hash: str
    checkpoints: int
    checkpoint_seq: int


class _ChainWalk:
    """Checks entries in seq order: contiguous seq, hash recomputes, prev chains.

    Shared by the store (re-checking the unsigned tail at open) and the
    verifier, so they cannot disagree about what a valid chain is.
    """

    def __init__(self, after_seq: int, after_hash: str, watch: Iterable[int] = ()) -> None:
        self.last_seq = after_seq
        self.last_hash = after_hash
        self.count = 0
        self.failure: tuple[str, int] | None = None
        self._watch = frozenset(watch)
        self.seen: dict[int, str] = {}

    def run(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Feed rows until the first failure, which is kept in ``failure``."""
        for row in rows:
            self.failure = self._check(row)
            if self.failure is not None:
                return

    def _check(self, row: tuple[Any, ...]) -> tuple[str, int] | None:
        expected = self.last_seq + 1
        if row[0] != expected:
            return SEQ_GAP, expected
        try:
            stored = stored_entry(row)
        except MalformedEntry:
            return ENTRY_MALFORMED, expected
        if entry_hash_of(stored.seq, stored.prev_hash, stored.entry) != stored.entry_hash:
            return ENTRY_HASH_MISMATCH, expected
        if stored.prev_hash != self.last_hash:
            return CHAIN_BROKEN, expected
        self.last_seq, self.last_hash = stored.seq, stored.entry_hash
        self.count += 1
        if stored.seq in self._watch:
            self.seen[stored.seq] = stored.entry_hash
        return None


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
        walk = _ChainWalk(self._cp_seq, cp_hash)
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

    def _checkpoint_due(self, seq: int, at: int) -> bool:
        if seq - self._cp_seq >= self._every:
            return True
        window_start = self._cp_at if self._cp_at is not None else at
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

    def _checkpointed(self, seq: int, at: int, envelope: bytes) -> None:
        self._cp_seq, self._cp_at = seq, at
        self.outbox.append(envelope)
        logger.info("ledger.checkpoint_written", ledger_id=self.ledger_id, seq=seq)

    def append(self, conn: sqlite3.Connection, entry: EvidenceEntry) -> Receipt:
        """Insert one entry, and a checkpoint when due, in one IMMEDIATE
        transaction; state changes only after COMMIT returns."""

        def body(conn: sqlite3.Connection) -> tuple[int, str, bytes | None]:
            self._check_tail(conn)
            seq, prev_hash = self.tail_seq + 1, self.tail_hash
            entry_hash = entry_hash_of(seq, prev_hash, entry)
            conn.execute(INSERT_ENTRY, entry_row(seq, prev_hash, entry_hash, entry))
            envelope = None
            if self._checkpoint_due(seq, entry.at):
                envelope = self._insert_checkpoint(conn, seq, entry_hash, entry.at)
            return seq, entry_hash, envelope

        seq, entry_hash, envelope = immediate(conn, body)
        self.tail_seq, self.tail_hash = seq, entry_hash
        if envelope is not None:
            self._checkpointed(seq, entry.at, envelope)
        elif self._cp_at is None:
            self._cp_at = entry.at
        return Receipt(seq=seq, entry_hash=entry_hash)

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


def _install_schema(conn: sqlite3.Connection) -> str:
    """Create the schema if absent and return the ledger's identity.

    The ledger id is random, fixed at creation and named by every checkpoint,
    so a checkpoint of one ledger never vouches for another file.
    """
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


def _unavailable(operation: str, cause: BaseException | None, message: str) -> Exception:
    """Log a ledger outage and name it :class:`EvidenceStoreUnavailable`.

    The caller chains ``cause``: the SQLite, OS or integrity error itself, not
    the worker's :class:`StoreUnavailable` wrapper around it, so an operator
    reads what stopped the write.
    """
    logger.error("ledger.unavailable", operation=operation, error=type(cause).__name__)
    return EvidenceStoreUnavailable(message)


_NOT_OPENED: Final = "evidence ledger could not be opened"


async def _close(worker: SqliteWorker | None) -> None:
    if worker is not None:
        await worker.close()


class Ledger:
    """The evidence ledger store (issue 7). Create with :meth:`open`.

    The file is the stores' one SQLite idiom (:class:`SqliteWorker`): an
    append is a whole transaction and runs as one job on the worker thread,
    so a cancelled await never splits it and two appends never interleave on
    the connection. The asyncio.Lock orders appends with their checkpoint
    hand-off.
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

    async def _run(self, operation: str, job: Callable[[sqlite3.Connection], T]) -> T:
        """One job on the worker; any failure is EvidenceStoreUnavailable (a denial)."""
        if self._closed:
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

    async def append(self, entry: EvidenceEntry) -> Receipt:
        """Durably append ``entry``; return only after it has committed.

        Raises :class:`EvidenceEntryRejected` (before any I/O) for a value that
        is not an identity, vocabulary word, reason code or time, and
        :class:`EvidenceStoreUnavailable` for anything that stops the write.
        """
        try:
            validate_entry(entry)
        except EvidenceEntryRejected as exc:
            logger.warning("ledger.entry_rejected", field=exc.field)
            raise
        async with self._lock:
            receipt = await self._run("append", partial(self._writer.append, entry=entry))
            await self._publish_pending()
        logger.debug("ledger.appended", seq=receipt.seq, kind=entry.kind)
        return receipt

    async def checkpoint(self, at: int) -> bytes | None:
        """Sign the current tail now, with ``at`` from the caller's clock.

        Returns the envelope, or None when the tail is already signed. Call it
        at shutdown, or from a timer on a quiet ledger, so no entry waits for
        the next append to be anchored outside the file.
        """
        if type(at) is not int or not 0 <= at <= SAFE_INTEGER_MAX:
            raise ValueError("at must be unix milliseconds")
        async with self._lock:
            envelope = await self._run("checkpoint", partial(self._writer.checkpoint, at=at))
            await self._publish_pending()
        return envelope

    async def close(self) -> None:
        """Wait for the append in flight, offer queued checkpoints once more,
        then close the file. Idempotent; appends afterwards are refused."""
        async with self._lock:
            if self._closed:
                return
            await self._publish_pending()
            self._closed = True
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


# --- offline: verification and export for auditors --------------------------


def _open_read_only(db_path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Read-only, so verifying or exporting can never modify the evidence."""
    uri = Path(db_path).resolve().as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True)


def _read_checkpoint(data: object, trusted: Mapping[str, VerifyKey]) -> CheckpointClaim | str:
    """A verified claim, or the reason code that refuses it."""
    if not isinstance(data, bytes):
        return CHECKPOINT_BAD_SIGNATURE
    try:
        envelope = dsse.decode_envelope(data)
        verified = dsse.verify(envelope, trusted, expected_payload_type=CHECKPOINT_PAYLOAD_TYPE)
    except dsse.SignatureError:
        return CHECKPOINT_BAD_SIGNATURE
    try:
        return parse_checkpoint_payload(verified.payload)
    except ValueError:
        return CHECKPOINT_MALFORMED


def _report(
    walk: _ChainWalk,
    ledger_id: str | None,
    claims: Sequence[CheckpointClaim],
    reason: str | None = None,
    seq: int | None = None,
) -> LedgerReport:
    return LedgerReport(
        ok=reason is None,
        reason=reason,
        seq=seq,
        ledger_id=ledger_id,
        entries=walk.count,
        last_seq=walk.last_seq,
        last_entry_hash=walk.last_hash,
        checkpoints=len(claims),
        checkpoint_seq=max((claim.seq for claim in claims), default=0),
    )


def _judge(walk: _ChainWalk, ledger_id: str, claims: Sequence[CheckpointClaim]) -> LedgerReport:
    """Name the first bad entry that the chain or a signed checkpoint proves.

    Entries below ``verified_end`` chain correctly; a checkpoint inside that
    prefix must name the same hash, one beyond the file's end proves a
    truncation, and one of another ledger proves a replaced file.
    """
    problems: list[tuple[int, str]] = []
    if walk.failure is not None:
        problems.append((walk.failure[1], walk.failure[0]))
    verified_end = walk.last_seq + 1
    for claim in claims:
        if claim.ledger_id != ledger_id:
            problems.append((claim.seq, CHECKPOINT_MISMATCH))  # a replaced file
        elif claim.seq < verified_end:
            if walk.seen[claim.seq] != claim.entry_hash:
                problems.append((claim.seq, CHECKPOINT_MISMATCH))  # history rewritten
        elif walk.failure is None:
            problems.append((verified_end, TRUNCATED_AFTER_CHECKPOINT))  # tail cut off
    if not problems:
        return _report(walk, ledger_id, claims)
    seq, reason = min(problems)
    return _report(walk, ledger_id, claims, reason, seq)


def verify_ledger(
    db_path: str | os.PathLike[str],
    checkpoints: Sequence[bytes],
    trusted_keys: Mapping[str, VerifyKey],
) -> LedgerReport:
    """Check a ledger file against itself and against signed checkpoints.

    ``checkpoints`` are encoded envelopes kept outside the file (the JetStream
    stream); the file's own checkpoints are checked too. Checks (issue 7):
    every entry's hash recomputes, prev_hash chains, seq is contiguous from 1,
    every checkpoint's signature verifies against ``trusted_keys`` and its
    (ledger_id, seq, entry_hash) matches the file, and the file reaches the
    highest checkpoint. A forged checkpoint is reported before anything else,
    since it means the anchors themselves are under attack; otherwise the
    lowest bad seq is reported.

    Pass the checkpoints of the ledger this file is supposed to be (fetched
    by its expected ledger_id, not the id the file claims): a checkpoint of
    any other ledger is a mismatch, which is how a replaced file shows. A
    report with ``checkpoints == 0`` proves only that the file is consistent
    with itself. Blocking file I/O: an offline and ops tool; from async code
    run it in a thread.
    """
    report = _verify(db_path, checkpoints, trusted_keys)
    logger.info("ledger.verified", ok=report.ok, reason=report.reason, seq=report.seq)
    return report


def _verify(
    db_path: str | os.PathLike[str],
    checkpoints: Sequence[bytes],
    trusted_keys: Mapping[str, VerifyKey],
) -> LedgerReport:
    walk = _ChainWalk(0, GENESIS_HASH)
    try:
        conn = _open_read_only(db_path)
    except sqlite3.Error:
        return _report(walk, None, (), LEDGER_UNREADABLE)
    with contextlib.closing(conn):
        try:
            row = conn.execute("SELECT ledger_id FROM ledger_meta WHERE singleton = 1").fetchone()
            if row is None or not isinstance(row[0], str):
                return _report(walk, None, (), LEDGER_UNREADABLE)
            ledger_id: str = row[0]
            stored = [r[0] for r in conn.execute("SELECT envelope FROM ledger_checkpoints")]
            found: set[CheckpointClaim] = set()
            refusals: list[str] = []
            for data in (*checkpoints, *stored):
                outcome = _read_checkpoint(data, trusted_keys)
                if isinstance(outcome, str):
                    refusals.append(outcome)
                else:
                    found.add(outcome)
            # The same checkpoint inside the file and on the stream counts once.
            claims = sorted(found, key=lambda claim: claim.seq)
            walk = _ChainWalk(0, GENESIS_HASH, watch=(claim.seq for claim in claims))
            walk.run(conn.execute(SELECT_ENTRIES_AFTER, (0,)))
        except sqlite3.Error:
            return _report(walk, None, (), LEDGER_UNREADABLE)
    if CHECKPOINT_BAD_SIGNATURE in refusals:
        return _report(walk, ledger_id, claims, CHECKPOINT_BAD_SIGNATURE)
    if refusals:
        return _report(walk, ledger_id, claims, CHECKPOINT_MALFORMED)
    return _judge(walk, ledger_id, claims)


def export_jsonl(db_path: str | os.PathLike[str], out: TextIO) -> int:
    """Write every entry, in seq order, as one canonical JSON line for auditors.

    Each line is :func:`ledger_schema.entry_document` plus ``entry_hash``, so
    an auditor recomputes every hash from the lines alone
    (:func:`ledger_schema.parse_export_line`). Returns the number of lines.
    """
    count = 0
    try:
        conn = _open_read_only(db_path)
        with contextlib.closing(conn):
            for row in conn.execute(SELECT_ENTRIES_AFTER, (0,)):
                try:
                    stored = stored_entry(row)
                except MalformedEntry as exc:
                    raise LedgerIntegrityError(ENTRY_MALFORMED, row[0]) from exc
                out.write(canonical_bytes(export_document(stored)).decode("utf-8") + "\n")
                count += 1
    except sqlite3.Error as exc:
        raise EvidenceStoreUnavailable("evidence ledger could not be read") from exc
    return count
