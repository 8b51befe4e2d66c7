"""The fixtures, builders and constants of tests/cli/test_cli_robustness.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

__all__ = ["first_decision"]


def first_decision(ledger: Path) -> str:
    """The id of the first decision a demo's ledger holds (``explain``'s argument)."""
    with closing(sqlite3.connect(ledger)) as conn:
        row = conn.execute("SELECT decision_id FROM evidence_entries WHERE seq = 1").fetchone()
    return str(row[0])
