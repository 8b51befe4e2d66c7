"""What a valid evidence chain is, and the named ways a ledger file fails it.

ARCHITECTURE.md, "Evidence": entries are hash-chained (each
``entry_hash`` is the identity of its canonical document, which names the
previous entry's hash; entry 1 chains to
:data:`~smf_assurance.pipeline.stores.ledger_schema.GENESIS_HASH`) and seq runs from 1
without gaps. One walker, :class:`ChainWalk`, checks that rule for both
sides of the ledger: the writer (:mod:`smf_assurance.pipeline.stores.ledger`, re-checking
the unsigned tail before it signs it) and the offline audit
(:mod:`smf_assurance.pipeline.stores.ledger_audit`), so they cannot disagree about what a
valid chain is.

Each way a file can disagree with itself or with its signed checkpoints has
its own reason code (STYLE.md, python-tuf: one named failure per threat), and
the two errors the ledger raises live here because both sides raise them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from smf_assurance.pipeline.stores.ledger_schema import (
    EvidenceError,
    MalformedEntry,
    entry_hash_of,
    stored_entry,
)

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
    "ChainWalk",
    "EvidenceStoreUnavailable",
    "LedgerIntegrityError",
]

EVIDENCE_STORE_UNAVAILABLE: Final = "evidence_store_unavailable"

# Reason codes of verify_ledger, one per way the file can disagree with itself
# or with the signed checkpoints.
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


class ChainWalk:
    """Checks entries in seq order: contiguous seq, hash recomputes, prev chains.

    Shared by the writer (re-checking the unsigned tail at open) and the
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
