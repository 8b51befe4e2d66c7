"""Court e-filing: scenario 1's transmission to a court, as a filing outbox.

A filing is ``outbox/<order_id>.json`` holding ``{order_id, court, document,
content_sha256, filed_at, filing_number}``. The order id is the submission id, as a court's
e-filing API takes a client-chosen submission id and answers a repeat with
the filing it already has: the idempotency key goes to the external system
wherever that system supports one. So:

- A filing is written atomically and never overwritten
  (:func:`smf_assurance.adapters.connectors.create_atomically`): a crash leaves either no
  filing or a whole one.
- A second execution under the same order id writes nothing and returns the
  existing filing's reference; a different filing under that id is a
  conflict, answered ``failed`` / ``filing_conflict`` as a court would answer
  409, and nothing new is filed.
- Missing or invalid ``court`` / ``document`` arguments: ``failed`` /
  ``invalid_arguments``, before anything is written.

The receipt is the court's filing number (the requester is shown the connector's
receipt), ``ECF-`` and eight digits derived
from the order id, as a court numbers a submission it accepts: a repeat of
the same submission gets the same number. It names neither the court nor the
document, so the report carries no argument values; the gate keeps it with
the approval's outcome for the requester and the approver, never in the
evidence ledger.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Annotated, Any, Final

import msgspec

from smf_assurance.adapters.connector.sdk import (
    AmbiguousExecution,
    Connector,
    ExecutionOutcome,
)
from smf_assurance.adapters.connectors import create_atomically
from smf_assurance.subjects.clock import Clock, wall_clock_ms
from smf_assurance.subjects.messages import ExecuteOrder

REASON_INVALID_ARGUMENTS: Final = "invalid_arguments"
REASON_FILING_CONFLICT: Final = "filing_conflict"
REASON_FILING_UNREADABLE: Final = "filing_unreadable"
FILING_NUMBER_PREFIX: Final = "ECF-"
FILING_NUMBER_DIGITS: Final = 8
MAX_FILING_BYTES: Final = 64 * 1024

Text = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]


class FilingArguments(msgspec.Struct, frozen=True):
    """What the connector needs from ``order.arguments``; other keys are ignored."""

    court: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    document: Text


class Filing(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One filing in the outbox."""

    order_id: str
    court: str
    document: str
    content_sha256: str
    filed_at: int
    filing_number: str = ""
    """The court's number for the filing; empty in a filing written before it had one."""


def filing_number(order_id: str) -> str:
    """The number the court gives a submission: fixed by its submission id (the order
    id), so a repeated submission is answered with the number it already has."""
    return FILING_NUMBER_PREFIX + str(int(order_id, 16) % 10**FILING_NUMBER_DIGITS).zfill(
        FILING_NUMBER_DIGITS
    )


def _arguments(arguments: dict[str, Any]) -> FilingArguments | None:
    try:
        return msgspec.convert(arguments, FilingArguments)
    except msgspec.ValidationError:
        return None


class CourtEFilingConnector(Connector):
    """Files ``order.content`` (by its SHA-256) with ``court`` as ``document``."""

    def __init__(self, outbox: Path, *, clock: Clock = wall_clock_ms) -> None:
        self.outbox: Final = outbox
        self._clock = clock

    def filing_path(self, order_id: str) -> Path:
        return self.outbox / f"{order_id}.json"

    async def execute(self, order: ExecuteOrder) -> ExecutionOutcome:
        arguments = _arguments(order.arguments)
        if arguments is None:
            return ExecutionOutcome.failed(REASON_INVALID_ARGUMENTS)
        filing = Filing(
            order_id=order.order_id,
            court=arguments.court,
            document=arguments.document,
            content_sha256=hashlib.sha256(order.content.encode("utf-8")).hexdigest(),
            filed_at=self._clock(),
            filing_number=filing_number(order.order_id),
        )
        return await asyncio.to_thread(self._file, filing)

    def _file(self, filing: Filing) -> ExecutionOutcome:
        self.outbox.mkdir(parents=True, exist_ok=True)
        path = self.filing_path(filing.order_id)
        if create_atomically(path, msgspec.json.encode(filing)):
            return ExecutionOutcome.confirmed(filing.filing_number)
        return self._existing(path, filing)

    def _existing(self, path: Path, filing: Filing) -> ExecutionOutcome:
        """The submission id is taken: the same filing is confirmed, another is a conflict."""
        try:
            with path.open("rb") as handle:
                existing = msgspec.json.decode(handle.read(MAX_FILING_BYTES + 1), type=Filing)
        except (OSError, msgspec.DecodeError) as exc:
            # Something sits under our submission id that we cannot read: whether
            # our filing went out is unknown.
            raise AmbiguousExecution(REASON_FILING_UNREADABLE) from exc
        same = (existing.order_id, existing.court, existing.document, existing.content_sha256)
        if same != (filing.order_id, filing.court, filing.document, filing.content_sha256):
            return ExecutionOutcome.failed(REASON_FILING_CONFLICT)
        return ExecutionOutcome.confirmed(
            existing.filing_number or filing_number(existing.order_id)
        )
