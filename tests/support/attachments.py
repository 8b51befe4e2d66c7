"""The fixtures, builders and constants of tests/bus/test_attachments.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from typing import Final

from smf_assurance.ops.demo.script import one_page_pdf
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.attachments import (
    attachment_argument,
)

__all__ = ["OTHER_PDF", "_tamper"]

OTHER_PDF: Final = one_page_pdf(("MOTION TO DISMISS", "Not the document the attorney saw."))


def _tamper(state: StateDir, approval_id: str, data: bytes) -> None:
    """Replace the held PDF in the gate's store with ``data`` and its own true digest."""
    with contextlib.closing(sqlite3.connect(state.approvals)) as conn, conn:
        (payload,) = conn.execute(
            "SELECT held_payload FROM approvals WHERE approval_id = ?", (approval_id,)
        ).fetchone()
        held = json.loads(payload)
        held["arguments"]["document_file"] = attachment_argument(
            "motion-to-compel.pdf", "application/pdf", data
        )
        conn.execute(
            "UPDATE approvals SET held_payload = ? WHERE approval_id = ?",
            (json.dumps(held).encode(), approval_id),
        )
