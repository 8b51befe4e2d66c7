"""The fixtures, builders and constants of tests/bus/test_output_buffer.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

from smf_assurance.ops.demo.script import actor
from smf_assurance.subjects.messages import DataFacts, ProposedDestination

__all__ = ["ASSOCIATE", "CLEAN", "EXTERNAL", "split"]

CLEAN = DataFacts(classification="internal", injection_taint="clear", redaction_status="none")


EXTERNAL = ProposedDestination(address="client@acme-client.example", locality="external")


ASSOCIATE = actor("associate-ann", "associate")


def split(text: str, size: int = 7) -> list[bytes]:
    raw = text.encode()
    return [raw[i : i + size] for i in range(0, len(raw), size)]
