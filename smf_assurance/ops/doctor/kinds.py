"""What a doctor check is about and what it found, as words a script reads, and the
thresholds its options default to.

A module of its own so the command line's ``--json`` schema
(``smf_assurance.ops.cli.cli_json``) and ``doctor``'s parser name them
without importing the checks and the bus client they need.
"""

from __future__ import annotations

from typing import Final, Literal

DEFAULT_LEASE_WARN_HOURS: Final = 24
DEFAULT_CHECKPOINT_AGE_S: Final = 120
"""Twice the ledger's checkpoint window (``Ledger.open``'s ``checkpoint_seconds``)."""

Status = Literal["ok", "warn", "fail", "skip"]
"""ok: checked and fine; warn: checked, works, needs attention soon; fail: checked and
broken; skip: not checked (the row says why), never counted as ok."""
Kind = Literal[
    "bus",
    "release",
    "service",
    "runtime",
    "confinement",
    "stream",
    "connector",
    "ledger",
    "console",
    "directory",
    "files",
]
