"""The fixtures, builders and constants of tests/runtimes/test_hermes_gateway.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

from typing import Any

__all__ = ["HELD_NOTICE", "decisions", "declared", "shown"]

HELD_NOTICE = "[SMF Assurance Gate: this reply is held for approval"


def shown(run: dict[str, Any]) -> str:
    """Everything Hermes printed (its terminal is stdout and stderr)."""
    return str(run["stdout"]) + str(run["stderr"])


def decisions(run: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(e["disposition"], e["reason_codes"]) for e in run["ledger"] if e["kind"] == "decision"]


def declared(run: dict[str, Any]) -> list[dict[str, Any]]:
    """What each proposal of the run declared (the adapter's word)."""
    return [b for b in run["bus"] if b["kind"] == "proposal"]
