"""Document store: scenario 2's deletion, on a folder of documents.

Documents are files ``store/<document_id>``; an order deletes
``arguments["document_id"]``, which must match ``^[A-Za-z0-9_-]{1,64}$`` in
full: no separators, no dots, so no ``..``, no absolute path and no reach
into ``store/.deleted`` (path traversal refused as ``invalid_arguments``).
Only regular files are documents; a directory or a link under that name is
``not_found``, never followed.

Crash-safe and idempotent by order id, in three durable steps:

1. rename ``store/<document_id>`` to ``store/.deleted/<order_id>.doc``: one
   atomic step removes the document from the store and remembers which order
   took it;
2. create the tombstone ``store/.deleted/<order_id>`` atomically: the order
   is complete;
3. remove the ``.doc`` copy, so the content is really gone.

A repeat under the same order id finds the tombstone (confirmed again, the
leftover copy of a crash after step 2 is removed) or the ``.doc`` copy of a
crash after step 1 (steps 2 and 3 are finished, confirmed). A document that is
missing under an order with neither is ``failed`` / ``not_found``.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
from pathlib import Path
from typing import Final

import msgspec

from smf_assurance.adapters.connector.sdk import (
    AmbiguousExecution,
    Connector,
    ExecutionOutcome,
)
from smf_assurance.adapters.connectors import create_atomically, fsync_dir
from smf_assurance.subjects.clock import Clock, wall_clock_ms
from smf_assurance.subjects.messages import ExecuteOrder

REASON_INVALID_ARGUMENTS: Final = "invalid_arguments"
REASON_NOT_FOUND: Final = "not_found"
REASON_TOMBSTONE_CONFLICT: Final = "tombstone_conflict"
REASON_TOMBSTONE_UNREADABLE: Final = "tombstone_unreadable"
REFERENCE_PREFIX: Final = "tombstone:"
DELETED_DIR: Final = ".deleted"
MAX_TOMBSTONE_BYTES: Final = 64 * 1024

_DOCUMENT_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Tombstone(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Proof that ``order_id`` deleted ``document_id``."""

    order_id: str
    document_id: str
    deleted_at: int


def valid_document_id(value: object) -> bool:
    """A whole-string match: ``re.match`` with ``$`` would let a trailing newline in."""
    return isinstance(value, str) and _DOCUMENT_ID.fullmatch(value) is not None


class DocumentStoreConnector(Connector):
    """Deletes one document per order from ``store``."""

    def __init__(self, store: Path, *, clock: Clock = wall_clock_ms) -> None:
        self.store: Final = store
        self.deleted: Final = store / DELETED_DIR
        self._clock = clock

    def tombstone_path(self, order_id: str) -> Path:
        return self.deleted / order_id

    async def execute(self, order: ExecuteOrder) -> ExecutionOutcome:
        document_id = order.arguments.get("document_id")
        if not valid_document_id(document_id):
            return ExecutionOutcome.failed(REASON_INVALID_ARGUMENTS)
        assert isinstance(document_id, str)
        return await asyncio.to_thread(self._delete, order.order_id, document_id)

    def _delete(self, order_id: str, document_id: str) -> ExecutionOutcome:
        self.deleted.mkdir(parents=True, exist_ok=True)
        tombstone = self.tombstone_path(order_id)
        taken = self.deleted / f"{order_id}.doc"
        if tombstone.exists():
            return self._replay(tombstone, taken, order_id, document_id)
        if not taken.exists():
            document = self.store / document_id
            try:
                mode = document.lstat().st_mode
            except FileNotFoundError:
                return ExecutionOutcome.failed(REASON_NOT_FOUND)
            if not stat.S_ISREG(mode):
                return ExecutionOutcome.failed(REASON_NOT_FOUND)
            os.rename(document, taken)
            fsync_dir(self.store)
            fsync_dir(self.deleted)
        record = Tombstone(order_id=order_id, document_id=document_id, deleted_at=self._clock())
        create_atomically(tombstone, msgspec.json.encode(record))
        self._purge(taken)
        return ExecutionOutcome.confirmed(REFERENCE_PREFIX + order_id)

    def _replay(
        self, tombstone: Path, taken: Path, order_id: str, document_id: str
    ) -> ExecutionOutcome:
        """The order already completed: confirm it again, and finish step 3."""
        try:
            with tombstone.open("rb") as handle:
                record = msgspec.json.decode(handle.read(MAX_TOMBSTONE_BYTES + 1), type=Tombstone)
        except (OSError, msgspec.DecodeError) as exc:
            raise AmbiguousExecution(REASON_TOMBSTONE_UNREADABLE) from exc
        if (record.order_id, record.document_id) != (order_id, document_id):
            return ExecutionOutcome.failed(REASON_TOMBSTONE_CONFLICT)
        self._purge(taken)
        return ExecutionOutcome.confirmed(REFERENCE_PREFIX + order_id)

    def _purge(self, taken: Path) -> None:
        if taken.exists():
            taken.unlink()
            fsync_dir(self.deleted)
