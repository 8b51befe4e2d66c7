"""The fixtures, builders and constants of tests/unit/test_ledger.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.pipeline.stores.ledger import (
    EvidenceEntry,
)
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.keyed import keyed_identifier

__all__ = ["attacker", "make_entry"]

TENANT_KEY = b"k" * 32


TENANT = keyed_identifier(TENANT_KEY, "tenant", "acme-legal")


def make_entry(i: int, **changes: Any) -> EvidenceEntry:
    fields: dict[str, Any] = {
        "kind": "decision",
        "operation_hash": identity_of({"operation": i}),
        "decision_id": identity_of({"decision": i}),
        "release_id": identity_of({"release": 7}),
        "projection_id": identity_of({"projection": 7}),
        "tenant_ref": TENANT,
        "at": 1_700_000_000_000 + i,
        "disposition": "deny",
        "status": None,
        "reason_codes": ("no_applicable_policy_for_consequential_operation",),
    }
    fields.update(changes)
    return EvidenceEntry(**fields)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "evidence.db"


@contextmanager
def attacker(db: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the file, in autocommit mode."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()
