"""The offline audit of an evidence ledger file: verify it, export it.

ARCHITECTURE.md, "Evidence", and issue 7: the triggers of
:data:`~smf_assurance.pipeline.stores.ledger_schema.DDL` stop SQL that would rewrite the
file, but an attacker who has the file can drop them first. What detects
that is here: :func:`verify_ledger` re-walks the hash chain
(:class:`~smf_assurance.pipeline.stores.ledger_chain.ChainWalk`, the same walker the writer
uses) and holds the file against the signed checkpoints kept outside it,
naming the first bad entry with one reason code per threat
(:mod:`smf_assurance.pipeline.stores.ledger_chain`). :func:`export_jsonl` gives auditors
every entry as canonical JSON they can re-hash on their own;
:func:`decision_entries` the entries of one decision, for ``explain`` (issue 25).

Both open the file read-only and never through the writer, so an audit can
never modify the evidence; they are blocking, for ``smf-assurance ledger``
(``smf_assurance/ops/cli/commands/ledger.py``) and other offline tools.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Final, TextIO

import msgspec
import structlog

from smf_assurance.pipeline.stores.ledger_chain import (
    CHECKPOINT_BAD_SIGNATURE,
    CHECKPOINT_MALFORMED,
    CHECKPOINT_MISMATCH,
    ENTRY_MALFORMED,
    LEDGER_UNREADABLE,
    TRUNCATED_AFTER_CHECKPOINT,
    ChainWalk,
    EvidenceStoreUnavailable,
    LedgerIntegrityError,
)
from smf_assurance.pipeline.stores.ledger_schema import (
    CHECKPOINT_PAYLOAD_TYPE,
    GENESIS_HASH,
    CheckpointClaim,
    MalformedEntry,
    StoredEntry,
    entry_columns_sql,
    export_document,
    parse_checkpoint_payload,
    select_entries_after,
    stored_entry,
)
from smf_assurance.pipeline.stores.sqlite_worker import open_read_only
from smf_assurance.subjects import dsse
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.keys import VerifyKey

__all__ = [
    "LedgerReport",
    "decision_entries",
    "export_jsonl",
    "read_checkpoint",
    "shadow_entries",
    "verify_ledger",
]

logger = structlog.get_logger(__name__)


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
    skipped_checkpoints: int = 0
    """Messages of the checkpoint stream that are not a trusted gate's checkpoint
    (``skip_invalid_external``): reported, and not counted for or against the file."""


def read_checkpoint(data: object, trusted: Mapping[str, VerifyKey]) -> CheckpointClaim | str:
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
    walk: ChainWalk,
    ledger_id: str | None,
    claims: Sequence[CheckpointClaim],
    reason: str | None = None,
    seq: int | None = None,
    skipped: int = 0,
) -> LedgerReport:
    return LedgerReport(
        skipped_checkpoints=skipped,
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


def _judge(
    walk: ChainWalk, ledger_id: str, claims: Sequence[CheckpointClaim], skipped: int = 0
) -> LedgerReport:
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
        return _report(walk, ledger_id, claims, skipped=skipped)
    seq, reason = min(problems)
    return _report(walk, ledger_id, claims, reason, seq, skipped)


def verify_ledger(
    db_path: str | os.PathLike[str],
    checkpoints: Sequence[bytes],
    trusted_keys: Mapping[str, VerifyKey],
    *,
    skip_invalid_external: bool = False,
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

    With ``skip_invalid_external`` (checkpoints read from the shared stream), an
    outside message that is not a trusted gate's checkpoint is counted in
    ``skipped_checkpoints`` and otherwise ignored: whoever could write junk there
    must not be able to make every later verification fail, while every valid
    checkpoint still binds the file. The file's own checkpoints are never skipped.
    """
    report = _verify(db_path, checkpoints, trusted_keys, skip_invalid_external)
    logger.info("ledger.verified", ok=report.ok, reason=report.reason, seq=report.seq)
    return report


def _verify(
    db_path: str | os.PathLike[str],
    checkpoints: Sequence[bytes],
    trusted_keys: Mapping[str, VerifyKey],
    skip_invalid_external: bool = False,
) -> LedgerReport:
    walk = ChainWalk(0, GENESIS_HASH)
    try:
        conn = open_read_only(db_path)
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
            skipped = 0
            for external, data in [(True, d) for d in checkpoints] + [(False, d) for d in stored]:
                outcome = read_checkpoint(data, trusted_keys)
                if not isinstance(outcome, str):
                    found.add(outcome)
                elif external and skip_invalid_external:
                    skipped += 1
                else:
                    refusals.append(outcome)
            # The same checkpoint inside the file and on the stream counts once.
            claims = sorted(found, key=lambda claim: claim.seq)
            walk = ChainWalk(0, GENESIS_HASH, watch=(claim.seq for claim in claims))
            walk.run(conn.execute(select_entries_after(conn), (0,)))
        except sqlite3.Error:
            return _report(walk, None, (), LEDGER_UNREADABLE)
    if CHECKPOINT_BAD_SIGNATURE in refusals:
        return _report(walk, ledger_id, claims, CHECKPOINT_BAD_SIGNATURE, skipped=skipped)
    if refusals:
        return _report(walk, ledger_id, claims, CHECKPOINT_MALFORMED, skipped=skipped)
    return _judge(walk, ledger_id, claims, skipped)


def export_jsonl(db_path: str | os.PathLike[str], out: TextIO) -> int:
    """Write every entry, in seq order, as one canonical JSON line for auditors.

    Each line is :func:`ledger_schema.entry_document` plus ``entry_hash``, so
    an auditor recomputes every hash from the lines alone
    (:func:`ledger_schema.parse_export_line`). Returns the number of lines.
    """
    count = 0
    try:
        conn = open_read_only(db_path)
        with contextlib.closing(conn):
            for row in conn.execute(select_entries_after(conn), (0,)):
                try:
                    stored = stored_entry(row)
                except MalformedEntry as exc:
                    raise LedgerIntegrityError(ENTRY_MALFORMED, row[0]) from exc
                out.write(canonical_bytes(export_document(stored)).decode("utf-8") + "\n")
                count += 1
    except sqlite3.Error as exc:
        raise EvidenceStoreUnavailable("evidence ledger could not be read") from exc
    return count


_SELECT_DECISION: Final = (
    "SELECT {columns} FROM evidence_entries WHERE decision_id = ? ORDER BY seq"
)


def decision_entries(db_path: str | os.PathLike[str], decision_id: str) -> list[StoredEntry]:
    """Every entry naming ``decision_id`` (its decision, then its transitions), in seq
    order, read-only. Issue 25: ``explain`` reads a decision from the evidence.

    Each row is decoded as the audit decodes it (a malformed one raises
    :class:`LedgerIntegrityError`); whether the chain holds is :func:`verify_ledger`'s
    question, which the caller asks first.
    """
    return _entries_where(db_path, _SELECT_DECISION, (decision_id,))


def _entries_where(
    db_path: str | os.PathLike[str], select: str, params: tuple[object, ...]
) -> list[StoredEntry]:
    """The entries ``select`` (with ``{columns}`` for this file's columns) finds,
    read-only, decoded as the audit decodes them."""
    try:
        conn = open_read_only(db_path)
        with contextlib.closing(conn):
            query = select.format(columns=entry_columns_sql(conn))
            rows = conn.execute(query, params).fetchall()
    except sqlite3.Error as exc:
        raise EvidenceStoreUnavailable("evidence ledger could not be read") from exc
    found = []
    for row in rows:
        try:
            found.append(stored_entry(row))
        except MalformedEntry as exc:
            raise LedgerIntegrityError(ENTRY_MALFORMED, row[0]) from exc
    return found


_SELECT_SHADOW: Final = (
    "SELECT {columns} FROM evidence_entries "
    "WHERE kind = 'shadow' AND at >= ? AND at < ? ORDER BY seq"
)


def shadow_entries(
    db_path: str | os.PathLike[str], since_ms: int = 0, until_ms: int = 2**53
) -> list[StoredEntry]:
    """Every ``shadow`` entry recorded at ``since_ms <= at < until_ms``, in seq order,
    read-only (issue 25: ``release diff`` over recorded traffic). Decoded and refused
    as :func:`decision_entries` does; the caller asks :func:`verify_ledger` first."""
    return _entries_where(db_path, _SELECT_SHADOW, (since_ms, until_ms))
