"""The older version's state folder (``tests/data/older-state/<commit>/``), unpacked.

Made by ``python -m smf_tools.fixtures.older_state COMMIT`` with that commit's own code
(its ``MANIFEST.toml`` says how, and what is in it). ``recorded.json`` is what the older
code did and what its files held, read with plain SQLite when the fixture was made: the
numbers today's code is held to.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import stat
import tarfile
import tomllib
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

import msgspec

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.messages import Proposal

OLDER_COMMIT: Final = "6e1624e39cc5bd9a16c13a5a773127c0160cbbd2"
"""The last commit that passed CI before the upgrade work; the project has no tags."""
FIXTURE: Final = Path(__file__).resolve().parents[1] / "data" / "older-state" / OLDER_COMMIT


class Replay(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A direct allow the older gate decided and its connector executed."""

    proposal_id: str
    signed_b64: str
    order_id: str
    decision_id: str
    issued_at_ms: int

    @property
    def signed(self) -> bytes:
        """The very bytes the older runtime sent."""
        return base64.b64decode(self.signed_b64)


class OlderFiles(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    ledger_entries: int
    ledger_kinds: dict[str, int]
    ledger_schema_version: int
    claims: dict[str, str]
    approval_states: dict[str, str]


class Recorded(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    commit: str
    replay: Replay
    approvals: dict[str, str]
    """The approvals the steps after the demo left: one ``denied``, one ``pending``."""
    stopped_at_ms: int
    """When the older stack had stopped (its last clock reading is not later)."""
    older_files: OlderFiles


def recorded() -> Recorded:
    return msgspec.json.decode((FIXTURE / "recorded.json").read_bytes(), type=Recorded)


def manifest() -> dict[str, Any]:
    return tomllib.loads((FIXTURE / "MANIFEST.toml").read_text())


def _safe_member(member: tarfile.TarInfo) -> bool:
    """A folder or a regular file under ``state/``: no link, device, absolute path or
    ``..``, so unpacking cannot write outside the test's folder."""
    path = PurePosixPath(member.name)
    return (
        (member.isdir() or member.isfile())
        and not path.is_absolute()
        and ".." not in path.parts
        and path.parts[0] == "state"
    )


def unpack(into: Path) -> StateDir:
    """The older state folder, unpacked under ``into`` as ``state/``.

    Folders 0700, files 0600, as the older ``up`` left them: the gate refuses a state
    folder or store file others may enter (``state_check``), and git keeps no such
    modes, so the archive carries them and this sets them again whatever the umask.
    """
    with tarfile.open(FIXTURE / "state.tar.gz") as tar:
        members = tar.getmembers()
        unsafe = [m.name for m in members if not _safe_member(m)]
        if unsafe:
            raise ValueError(f"the older state archive holds unsafe members: {unsafe}")
        tar.extractall(into, members=members)
        for member in members:
            (into / member.name).chmod(0o700 if member.isdir() else 0o600)
    return StateDir(into / "state")


def archived_modes() -> dict[str, int]:
    """Each member's mode as the archive records it (before :func:`unpack` sets any)."""
    with tarfile.open(FIXTURE / "state.tar.gz") as tar:
        return {m.name: m.mode for m in tar.getmembers()}


def too_open(root: Path) -> list[str]:
    """The paths under ``root`` (itself included) that others may read or enter."""
    paths = [root, *root.rglob("*")]
    return [str(p) for p in paths if stat.S_IMODE(p.stat().st_mode) & 0o077]


@dataclass(frozen=True)
class LedgerRow:
    seq: int
    kind: str
    disposition: str | None
    status: str | None
    decision_id: str | None
    reason_codes: tuple[str, ...]
    entry_hash: str


def ledger_rows(ledger: Path) -> list[LedgerRow]:
    """Every evidence entry of the file, in order, read read-only."""
    with closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT seq, kind, disposition, status, decision_id, reason_codes, entry_hash "
            "FROM evidence_entries ORDER BY seq"
        ).fetchall()
    return [
        LedgerRow(seq, kind, disposition, status, decision_id, tuple(json.loads(codes)), hashed)
        for seq, kind, disposition, status, decision_id, codes, hashed in rows
    ]


def count(path: Path, table: str) -> int:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def schema(path: Path) -> set[tuple[str, str, str]]:
    """The file's tables, indexes and triggers with their SQL, as SQLite keeps them
    (a column added by ``ALTER TABLE`` shows in the table's SQL)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL"
        ).fetchall()
    return {(kind, name, " ".join(sql.split())) for kind, name, sql in rows}


def approvals_expiry(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return dict(conn.execute("SELECT approval_id, expires_at_ms FROM approvals").fetchall())


async def assert_replay_answered_from_record(
    runtime: ProposalClient,
    proposal_id: str,
    signed: bytes,
    order_id: str | None,
    resigned: Proposal,
    *,
    restored: bool = False,
) -> None:
    """A gate on an older state (an upgrade's, a restored backup's) meets a proposal the
    older gate executed: its very bytes get the recorded verdict (the same order,
    consumed), and the same proposal id signed afresh is a duplicate, or, on a restored
    state within its record-only window (``GateSettings.record_only_until_ms``), gets the
    recorded verdict too. Neither is decided again. ``resigned`` is the same id, built
    now."""
    again = await runtime.send(proposal_id, signed)
    assert again.outcome == "allow", again.reason_codes
    assert again.order_id == order_id
    assert {"recorded_verdict", "order_consumed"} <= set(again.reason_codes)
    # The client's wait is wall time; the proposal's deadline is the gate's clock.
    refused = await runtime.send(resigned.proposal_id, runtime.sign(resigned), wait=10.0)
    if restored:
        assert refused.order_id == order_id, refused
        assert {"recorded_verdict", "order_consumed"} <= set(refused.reason_codes)
        return
    assert refused.outcome == "deny"
    assert "duplicate_proposal" in refused.reason_codes
