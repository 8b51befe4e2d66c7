"""Messages between the gate's own stages (internal: not part of the public bus API)."""

from __future__ import annotations

from typing import Any

import msgspec

from pipeline.core.decision import Decision
from pipeline.core.normalize import Normalized


class EvaluateRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    normalized: Normalized
    operation_id: str


class DispatchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything the dispatch stage needs to build and sign one order."""

    decision: Decision
    connector_id: str
    native_tool: str
    arguments: dict[str, Any]
    content: str
    destination_address: str
    approval_id: str | None = None


class DispatchReceipt(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    order_id: str
    stream: str
    stream_seq: int
    duplicate: bool
