"""The fixtures, builders and constants of tests/bus/test_bus_faults.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

from pathlib import Path

import msgspec

from smf_assurance.adapters.connectors.dms import DELETED_DIR, Tombstone
from smf_assurance.ops.local.state import StateDir
from tests.support.bus_helpers import (
    connector_durable,
)

__all__ = ["DMS_DURABLE", "seed_documents", "tombstones"]

DMS_DURABLE = connector_durable("dms")


def seed_documents(state: StateDir, documents: list[str]) -> Path:
    store = state.connector_dir("dms") / "store"
    store.mkdir(parents=True, exist_ok=True)
    for document in documents:
        (store / document).write_text(f"{document}\n")
    return store


def tombstones(store: Path) -> list[Tombstone]:
    """The DMS connector's completed deletions: one tombstone per order. Not every
    entry of ``.deleted`` is one: while an order runs the folder also holds its
    ``<order_id>.doc`` copy and ``create_atomically``'s ``.<name>.*.tmp`` file."""
    deleted = store / DELETED_DIR
    if not deleted.exists():
        return []
    return [
        msgspec.json.decode(path.read_bytes(), type=Tombstone)
        for path in deleted.iterdir()
        if not path.name.endswith(".doc") and not path.name.startswith(".")
    ]
