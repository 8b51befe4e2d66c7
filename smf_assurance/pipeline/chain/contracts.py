"""Messages between the gate's own stages (internal: not part of the public bus API).

Each stage takes exactly what it reads: evaluation gets the
envelope and its hash, never the content it does not look at; dispatch gets
what it signs into the order.
"""

from __future__ import annotations

from typing import Any

import msgspec

from smf_assurance.core.approval_rules import HeldAction
from smf_assurance.core.decision import Decision
from smf_assurance.subjects.canonical import Identity
from smf_assurance.subjects.envelope import OperationEnvelope


class EvaluateRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``(envelope, operation hash) -> Decision``; ``operation_id`` names the decision."""

    envelope: OperationEnvelope
    operation_hash: Identity
    operation_id: str
    runtime_confined: bool = False
    """The gate holds the proposing runtime as confined (``smf_assurance.pipeline.stages.
    confinement``); a release's confinement policies then do not apply."""


class DispatchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything the dispatch stage needs to build and sign one order."""

    decision: Decision
    connector_id: str
    native_tool: str
    arguments: dict[str, Any]
    content: str
    destination_address: str
    approval_id: str | None = None
    not_after_ms: int | None = None
    """The order's deadline, which the caller also promises in its verdict: the time
    its one clock read when the order was given, plus the order budget. ``None``:
    the stage stamps its own clock plus the budget (a caller that promises none)."""
    publish_until_ms: int | None = None
    """The latest time the stage may still try to have the order stored: the
    requester's deadline, or the caller's own stage deadline. ``None``: one
    publish timeout from now."""


def order_request(
    action: HeldAction,
    connector_id: str,
    *,
    not_after_ms: int,
    publish_until_ms: int,
    approval_id: str | None = None,
) -> DispatchRequest:
    """The one road to ``smf.execute``: the dispatch request for the exact action a
    decision allows, a direct allow and an approved one alike, so an approved order
    carries the same fields, from the same places, as a direct one (ARCHITECTURE.md,
    "Exact-action approval": exactly one ExecuteOrder for the action decided).

    ``connector_id`` is the action's connector (a runtime-executed action has none
    and is never dispatched); ``approval_id`` names the approval that released it.
    """
    return DispatchRequest(
        decision=action.decision,
        connector_id=connector_id,
        native_tool=action.native_tool,
        arguments=action.arguments,
        content=action.content,
        destination_address=action.destination_address,
        approval_id=approval_id,
        not_after_ms=not_after_ms,
        publish_until_ms=publish_until_ms,
    )


class DispatchReceipt(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    order_id: str
    stream: str
    stream_seq: int
    duplicate: bool
    not_after_ms: int
    """The deadline signed into the stored order: what the verdict promises."""
