"""State that lies is refused: what a gate checks of its files before it serves.

ARCHITECTURE.md, "Evidence" and "Exact-action approval". The stores trust what they
read: a claim row stops a replay, an approval's row says whether it may be approved,
the ledger's tail is what the next checkpoint signs. Someone with the files (or a
disk that failed) can make them say something else, and a gate that started on them
would act on it. So :func:`check_state` runs before any store is opened, and each
way a state file can lie has its own reason code (STYLE.md, python-tuf):

- ``state_file_malformed``: ``PRAGMA quick_check`` fails on a SQLite file (the
  ledger, the approvals, the release state, an earlier version's claim file). The
  ledger audit reads only the rows it walks; a damaged page elsewhere (an index, a
  claims table) passes it and breaks a lookup later.
- the ledger's own reason codes (``truncated_after_checkpoint``,
  ``checkpoint_mismatch``, ``chain_broken``, ...): the file is held against the
  newest checkpoint this gate signed on the bus, and against every checkpoint in the
  file, by :func:`~smf_assurance.pipeline.stores.ledger_audit.verify_ledger`, the
  same audit ``smf-assurance ledger verify --nats`` runs. A cut tail or a replaced
  file shows there.
- ``ledger_missing``: no ledger file, while the bus holds a checkpoint this gate
  signed. The ledger would otherwise be created afresh, and its lost entries (and
  the claims in it) silently forgotten.
- ``claims_missing`` (one machine, where the claims live in the ledger file): an
  allow of the claim retention window whose entry does not say its claim was
  refused (``claims.CLAIM_NOT_WRITTEN``), with no claim row. A replay of that
  proposal would be claimed again and executed twice. The refusal ends by itself
  once the window has passed: a replay is then stale before any claim is read.
- ``approval_missing`` / ``approval_state_behind_ledger`` (one machine): an
  approval the ledger holds has no row, or its row is in an earlier state than the
  ledger recorded for it (a consumed or executing approval set back to
  ``pending`` would be approved and executed again). The ledger writes a state only
  after the store made it, so its last state can never be ahead of the row's.
- ``state_file_too_open`` / ``state_folder_too_open``: a store file any other user
  may read or write (its ``-wal`` and ``-shm`` too), or a folder holding one that
  others may enter. The gate refuses rather than tightens: a mode it did not set was
  set by someone, and the operator decides; the line says the ``chmod`` to run. The
  stores create their files 0600 (``sqlite_worker``), so only an older or changed
  file meets this.

Blocking file I/O; the gate runs :func:`check_state` in a thread. It reads, never
writes: every file is opened read-only.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import structlog

from smf_assurance.pipeline.stores.claims import CLAIM_NOT_WRITTEN
from smf_assurance.pipeline.stores.ledger_audit import read_checkpoint, verify_ledger
from smf_assurance.pipeline.stores.sqlite_worker import open_read_only
from smf_assurance.subjects.keys import VerifyKey

__all__ = [
    "APPROVAL_MISSING",
    "APPROVAL_STATE_BEHIND_LEDGER",
    "CLAIMS_MISSING",
    "LEDGER_MISSING",
    "STATE_FILE_MALFORMED",
    "STATE_FILE_TOO_OPEN",
    "STATE_FOLDER_TOO_OPEN",
    "StateFiles",
    "StateRefused",
    "check_state",
    "too_open",
    "valid_checkpoints",
]

log = structlog.get_logger(__name__)

STATE_FILE_MALFORMED: Final = "state_file_malformed"
LEDGER_MISSING: Final = "ledger_missing"
CLAIMS_MISSING: Final = "claims_missing"
APPROVAL_MISSING: Final = "approval_missing"
APPROVAL_STATE_BEHIND_LEDGER: Final = "approval_state_behind_ledger"
STATE_FILE_TOO_OPEN: Final = "state_file_too_open"
STATE_FOLDER_TOO_OPEN: Final = "state_folder_too_open"

SIDECARS: Final = ("", "-wal", "-shm")
"""A SQLite file and the two files beside it that hold its content in WAL mode."""
PRIVATE: Final = 0o077
"""Mode bits that let anyone but the owner in: none may be set on a state file or
folder (files 0600, folders 0700)."""
CLOCK_SLACK_MS: Final = 60_000
"""The claims check reads entries from the ledger's end back to the retention window;
it reads this much further, since the entries of one group commit take their times
a little apart (and a clock may step back)."""

_STEP: Final = {"held": 0, "pending": 0, "approved": 1, "executing": 2}
"""How far an approval has gone, by state; every terminal state is 3."""
_TERMINAL_STEP: Final = 3


class StateRefused(RuntimeError):
    """The gate will not start on this state: one line naming the file, a reason
    code and what to do (the message is what ``up`` prints)."""

    def __init__(self, path: Path, reason_code: str, detail: str) -> None:
        one_line = " ".join(detail.split())  # SQLite's messages may span lines
        super().__init__(f"{path}: {reason_code}: {one_line}")
        self.path = path
        self.reason_code = reason_code


@dataclass(frozen=True)
class StateFiles:
    """The state files of one gate, as its configuration names them."""

    ledger: Path
    approvals: Path | None = None
    """The approval store's file; None on a cluster (a replicated bucket)."""
    claims_in_ledger: bool = False
    """The proposal claims are a table of the ledger file (one machine)."""
    earlier_claims: Path | None = None
    """An earlier version's claim file, merged into the ledger at start: its rows
    count as claims (checked for damage and mode when present)."""
    others: tuple[Path, ...] = field(default_factory=tuple)
    """Other SQLite files of the gate, checked for damage and mode when present (the
    release state)."""


def valid_checkpoints(envelopes: Iterable[bytes], trusted: Mapping[str, VerifyKey]) -> list[bytes]:
    """The envelopes a trusted gate key signed, as checkpoints; the others are skipped
    and counted in the log (a junk message on the stream must not stop a gate for
    ever, and it vouches for nothing)."""
    kept, skipped = [], 0
    for data in envelopes:
        if isinstance(read_checkpoint(data, trusted), str):
            skipped += 1
        else:
            kept.append(data)
    if skipped:
        log.warning("ledger_checkpoints_skipped", count=skipped)
    return kept


def check_state(
    files: StateFiles,
    checkpoints: Sequence[bytes],
    trusted: Mapping[str, VerifyKey],
    *,
    now_ms: int,
    claim_retention_ms: int,
) -> None:
    """Raise :class:`StateRefused` for the first way the files lie (module docstring);
    return when none does. ``checkpoints``: the gate's verified checkpoints from the
    bus (:func:`valid_checkpoints`), or none."""
    sqlite_files = [files.ledger, *files.others]
    for extra in (files.approvals, files.earlier_claims):
        if extra is not None:
            sqlite_files.append(extra)
    for path in sqlite_files:  # first: even a read-only open makes a -shm of its mode
        _check_mode(path)
    for path in sqlite_files:
        _quick_check(path)
    _check_ledger(files.ledger, checkpoints, trusted)
    if files.claims_in_ledger and files.ledger.exists():
        _check_claims(files, now_ms - claim_retention_ms, claim_retention_ms)
    if files.approvals is not None and files.ledger.exists():
        _check_approvals(files.ledger, files.approvals)


def too_open(path: Path) -> bool:
    """Whether anyone but the owner may read, write or enter ``path``."""
    return bool(stat.S_IMODE(path.stat().st_mode) & PRIVATE)


# --- damage -----------------------------------------------------------------------


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[sqlite3.Connection]:
    try:
        conn = open_read_only(path)
    except sqlite3.Error as exc:
        detail = f"damaged or unreadable ({exc}); restore it from a backup"
        raise StateRefused(path, STATE_FILE_MALFORMED, detail) from exc
    with contextlib.closing(conn):
        yield conn


def _quick_check(path: Path) -> None:
    """``PRAGMA quick_check``: every page, cell and record of the file is sound (it
    skips only the UNIQUE and index-content checks of ``integrity_check``)."""
    if not path.exists():
        return
    with _reading(path) as conn:
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError as exc:
            detail = f"damaged, not a sound SQLite file ({exc}); restore it from a backup"
            raise StateRefused(path, STATE_FILE_MALFORMED, detail) from exc
    if rows != [("ok",)]:
        first = str(rows[0][0]) if rows else "no answer"
        raise StateRefused(
            path,
            STATE_FILE_MALFORMED,
            f"damaged: SQLite's quick_check found {len(rows)} problem(s), first: {first}; "
            "restore it from a backup",
        )


# --- the ledger against its checkpoints -------------------------------------------


def _check_ledger(
    path: Path, checkpoints: Sequence[bytes], trusted: Mapping[str, VerifyKey]
) -> None:
    if not path.exists():
        if checkpoints:
            raise StateRefused(
                path,
                LEDGER_MISSING,
                f"no ledger file, but this gate signed {len(checkpoints)} checkpoint(s) of "
                "one on the bus; restore it rather than start an empty one",
            )
        return
    report = verify_ledger(path, checkpoints, trusted)
    if report.ok:
        return
    at = f" at seq {report.seq}" if report.seq is not None else ""
    raise StateRefused(
        path,
        report.reason or "ledger_unverified",
        f"the ledger does not verify{at} against its signed checkpoints "
        f"({len(checkpoints)} from the bus); `smf-assurance ledger verify --nats` says more",
    )


# --- claims -----------------------------------------------------------------------


def _claimed(path: Path) -> set[str]:
    """The decision ids of the claim rows in ``path`` (none: no file, no table)."""
    if not path.exists():
        return set()
    with _reading(path) as conn:
        try:
            return {str(row[0]) for row in conn.execute("SELECT decision_id FROM proposal_claims")}
        except sqlite3.OperationalError:
            return set()  # no claims table: every allow in the window is missing


def _check_claims(files: StateFiles, since_ms: int, retention_ms: int) -> None:
    """Every allow since ``since_ms`` whose entry does not say its claim was refused
    has its claim row (by decision id, which the row and the entry share), in the
    ledger file or in the earlier claim file about to be merged into it."""
    ledger = files.ledger
    claimed = _claimed(ledger)
    if files.earlier_claims is not None:
        claimed |= _claimed(files.earlier_claims)
    with _reading(ledger) as conn:
        missing: list[tuple[int, int]] = []
        rows = conn.execute(
            "SELECT seq, kind, disposition, decision_id, reason_codes, at "
            "FROM evidence_entries ORDER BY seq DESC"
        )
        for seq, kind, disposition, decision_id, reasons, at in rows:
            if at < since_ms - CLOCK_SLACK_MS:
                break
            if kind != "decision" or disposition != "allow" or at < since_ms:
                continue
            if decision_id in claimed or CLAIM_NOT_WRITTEN & set(json.loads(reasons)):
                continue
            missing.append((seq, at))
    if missing:
        first_seq = min(seq for seq, _ in missing)
        lifts = max(at for _, at in missing) + retention_ms
        raise StateRefused(
            ledger,
            CLAIMS_MISSING,
            f"{len(missing)} allow(s) of the last {retention_ms // 1000} s have no proposal "
            f"claim (first at seq {first_seq}): a replay of them would be allowed again; "
            f"restore the file, or start after {_utc(lifts)} when they are past replay",
        )


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


# --- approvals --------------------------------------------------------------------


def _check_approvals(ledger: Path, approvals: Path) -> None:
    """Each approval the ledger names has its row, in a state at least as far on as
    the last one the ledger recorded for it."""
    with _reading(ledger) as conn:
        recorded: dict[str, int] = {}
        for approval_id, status in conn.execute(
            "SELECT approval_id, status FROM evidence_entries "
            "WHERE approval_id IS NOT NULL AND status IS NOT NULL"
        ):
            step = _STEP.get(status, _TERMINAL_STEP)
            recorded[approval_id] = max(step, recorded.get(approval_id, 0))
    if not recorded:
        return
    rows: dict[str, str] = {}
    if approvals.exists():
        # no table: no rows
        with _reading(approvals) as conn, contextlib.suppress(sqlite3.OperationalError):
            rows = dict(conn.execute("SELECT approval_id, state FROM approvals").fetchall())
    absent = sorted(a for a in recorded if a not in rows)
    if absent:
        raise StateRefused(
            approvals,
            APPROVAL_MISSING,
            f"{len(absent)} approval(s) the ledger holds have no record here "
            f"(first {absent[0]}); restore it from a backup",
        )
    behind = sorted(a for a, step in recorded.items() if _STEP.get(rows[a], _TERMINAL_STEP) < step)
    if behind:
        raise StateRefused(
            approvals,
            APPROVAL_STATE_BEHIND_LEDGER,
            f"{len(behind)} approval(s) are in an earlier state than the ledger recorded "
            f"(first {behind[0]}, now {rows[behind[0]]}); restore it from a backup",
        )


# --- modes ------------------------------------------------------------------------


def _check_mode(path: Path) -> None:
    folder = path.parent
    if folder.exists() and too_open(folder):
        raise StateRefused(
            folder,
            STATE_FOLDER_TOO_OPEN,
            f"mode {_mode(folder)} lets others in; run: chmod 700 '{folder}'",
        )
    parts = [path.with_name(path.name + suffix) for suffix in SIDECARS]
    open_parts = [part for part in parts if part.exists() and too_open(part)]
    if open_parts:
        first = open_parts[0]
        named = " ".join(f"'{part}'" for part in open_parts)
        raise StateRefused(
            first,
            STATE_FILE_TOO_OPEN,
            f"mode {_mode(first)} lets others read it; run: chmod 600 {named}",
        )


def _mode(path: Path) -> str:
    return f"{stat.S_IMODE(os.stat(path).st_mode):04o}"
