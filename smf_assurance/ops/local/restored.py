"""That a state was restored from a backup, and when: the marker ``restore`` writes
and the gate reads at every start.

``GateConfig.restored_at_ms`` says what the gate does with it: a backup may be older
than the last moment its gate served, so nothing signed before the restore is decided
again, and no approval open in the restored state is resolved.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import msgspec

from smf_assurance.pipeline.stores.state_check import StateRefused

RESTORE_MARKER: Final = "restored.json"
"""Written by a restore into the state it makes: when it was restored, and when the
backup began. The gate reads it at every start (:func:`restored_at`)."""
MAX_MARKER_BYTES: Final = 4096


class RestoreMarker(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """That a state was restored, and from a backup begun when."""

    schema: str
    restored_at_ms: int
    backup_started_at_ms: int


MARKER_SCHEMA: Final = "smf.restore-marker/1"


def restored_at(root: Path) -> int | None:
    """When the state in ``root`` was restored from a backup, or None when it never was.

    ``GateConfig.restored_at_ms`` says what the gate does with it. A marker that is
    there but cannot be read is refused (the gate will not start): without it the
    gate would decide again what its backup's gate may have decided after the backup
    began."""
    path = root / RESTORE_MARKER
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_MARKER_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateRefused(path, "restore_marker_unreadable", exc.strerror or "") from exc
    try:
        marker = msgspec.json.decode(data, type=RestoreMarker)
    except msgspec.DecodeError as exc:
        raise StateRefused(
            path,
            "restore_marker_unreadable",
            "it says when this state was restored from a backup; restore the backup "
            "again (the gate will not decide what it cannot tell was decided before)",
        ) from exc
    if marker.schema != MARKER_SCHEMA or len(data) > MAX_MARKER_BYTES:
        raise StateRefused(path, "restore_marker_unreadable", f"not a {MARKER_SCHEMA}")
    return marker.restored_at_ms


def write_restore_marker(root: Path, restored_at_ms: int, backup_started_at_ms: int) -> None:
    """Write the marker into the state folder ``root`` (0600, synced): the restore is
    not done until a gate started on it knows."""
    marker = RestoreMarker(
        schema=MARKER_SCHEMA,
        restored_at_ms=restored_at_ms,
        backup_started_at_ms=backup_started_at_ms,
    )
    fd = os.open(root / RESTORE_MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(msgspec.json.encode(marker))
        handle.flush()
        os.fsync(handle.fileno())
