"""Example connectors for the demo and the tests: a court e-filing
outbox (:mod:`.court_efiling`) and a document store (:mod:`.dms`).

They "behave like real ones: idempotent by key, crash-safe". The SDK already
refuses to execute an order twice; these connectors are idempotent on their
own as well, keyed by the order id, as an external system with an idempotency
key is. This module holds the crash-safe file primitives both use.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (a created, renamed or removed name) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_atomically(path: Path, data: bytes) -> bool:
    """Create ``path`` holding exactly ``data``, or leave an existing file alone.

    Write a temporary file in the same directory, fsync it, hard-link it to
    ``path`` (a rename that refuses to replace: ``link`` fails if the name
    exists, atomically), drop the temporary name and fsync the directory. A
    reader sees either no file or the whole file, never a part; a crash leaves
    at most a stray ``.<name>.*.tmp``. Returns False when ``path`` already
    existed, so a second writer can never overwrite the first.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fsync_dir(path.parent)
    return True
