"""The fixtures, builders and constants of tests/unit/test_approval_rules.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from smf_assurance.core.approval_rules import (
    HeldAction,
    bind,
)
from smf_assurance.core.evaluator import evaluate
from smf_assurance.governance.projections import load_policy_set
from smf_assurance.subjects.approvals import (
    ApprovalBinding,
)
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.messages import Proposal
from tests.support.builders import AT_MS, normalized_proposal, proposal_dict

__all__ = ["binding_of", "held_filing"]


def held_filing(**changes: Any) -> HeldAction:
    """A court filing held for approval: normalized and evaluated for real."""
    filing = {
        "native_tool": "court_efile",
        "arguments": {"court": "sdny", "document": "brief.pdf"},
        "content": "The brief, as filed.",
    }
    proposal = msgspec.json.decode(json.dumps(proposal_dict(**filing)), type=Proposal)
    normalized = normalized_proposal(**filing)
    decision = evaluate(normalized.envelope, load_policy_set(), at_ms=AT_MS)
    assert decision.disposition == "conditional"
    held = HeldAction.of(proposal, normalized, decision)
    # the signed arguments and the runtime that proposed them, the normalized
    # content and destination: never the proposal's own claims about those
    assert (held.proposal_id, held.runtime_id) == ("prop-0001", "rt-test")
    assert (held.native_tool, held.arguments) == ("court_efile", filing["arguments"])
    assert (held.content, held.destination_address) == (
        normalized.content,
        normalized.destination_address,
    )
    assert (held.connector_id, held.envelope) == (normalized.connector_id, normalized.envelope)
    return msgspec.structs.replace(held, **changes)


def binding_of(held: HeldAction) -> ApprovalBinding:
    return bind(held, "rel-1", identity_of({"projection": 1}), AT_MS, AT_MS + 300_000)
