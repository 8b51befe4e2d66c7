"""The model gateway's question to the gate (issue 16): may this runtime be served now?

Both runtimes reach their model through an OpenAI-compatible endpoint; the
model gateway is that endpoint, outside the runtime. It serves a runtime
only while the gate holds a fresh, accepted attestation from it: a runtime
in safe mode or with its plugin disabled never attests (RUNTIMES.md,
"Hermes Agent"), so it gets no completion at all, and so no tool call to run.

The gateway asks on ``smf.gateway.admit`` with a :class:`GatewayAdmit`
(bus permissions let only the gateway role ask, ``subjects.bus_access``);
the gate answers with a :class:`GatewayAdmission` signed with its key, which
the gateway verifies before it serves anything.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from subjects.envelope import Classification, Name
from subjects.patterns import Code, MessageId, Millis, Token, ToolCallId

MAX_CALLS_PER_ASK: Final = 256
"""At most this many tool-call ids in one :class:`GatewayCalls`; the gateway asks in
batches of it."""

ProviderName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")]


class GatewayAdmit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One model request's admission question; ``tenant_id`` names whose ledger
    pseudonym a refusal is recorded under.

    ``provider`` and ``classification`` make the model request a governed egress
    (issue 16): the provider the request would go to, and the highest
    classification of what it carries (the runtime's declared facts, raised by
    the gate's detectors over the messages). The gate admits it only when the
    release in force names that provider for that classification."""

    schema: Literal["smf.gateway-admit/1"]
    request_id: MessageId
    runtime_id: Token
    tenant_id: Name
    provider: ProviderName
    classification: Classification
    issued_at_ms: Millis


class GatewayAdmission(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer: ``admitted`` with the attested runtime version, or the
    reason codes of the refusal and the ledger entry that records it."""

    schema: Literal["smf.gateway-admission/1"]
    request_id: str
    runtime_id: str
    admitted: bool
    reason_codes: tuple[Code, ...]
    runtime_version: str | None = None
    """The attested version; the gateway's output closes name it (the gate admits
    a close only under the attested version)."""
    expires_at_ms: int | None = None
    """When the attestation's lease ends; the gateway never serves past it."""
    evidence: tuple[str, ...] = ()


class GatewayCalls(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``smf.gateway.calls`` (tool-call accounting): did the gate decide a proposal for
    each of these tool calls of this runtime? The ids are those the gateway issued
    itself, for tool results a request now carries back to the model."""

    schema: Literal["smf.gateway-calls/1"]
    request_id: MessageId
    runtime_id: Token
    tenant_id: Name
    tool_call_ids: Annotated[
        tuple[ToolCallId, ...], msgspec.Meta(min_length=1, max_length=MAX_CALLS_PER_ASK)
    ]
    issued_at_ms: Millis


class GatewayCallsAnswer(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer, signed with its key: the ids no verified proposal carried.
    When any is uncovered the gate has recorded ``ungated_tool_result`` and stopped
    the runtime (``stopped``) until an operator clears it."""

    schema: Literal["smf.gateway-calls-answer/1"]
    request_id: str
    runtime_id: str
    uncovered: tuple[str, ...]
    stopped: bool = False
    reason_codes: tuple[Code, ...] = ()
    evidence: tuple[str, ...] = ()


class GatewayClear(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``smf.gateway.clear``: an operator lifts the stop of one runtime (only the
    operator role may publish it, ``subjects.bus_access``)."""

    schema: Literal["smf.gateway-clear/1"]
    runtime_id: Token


class GatewayCleared(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer to a clear. A stop is lifted only once the clear is in the
    gate's ledger (``evidence``) and the stop is gone from its store; otherwise the
    runtime stays ``stopped`` and ``reason_codes`` say why (issue 16, item 3)."""

    schema: Literal["smf.gateway-cleared/1"]
    runtime_id: str
    was_stopped: bool
    stopped: bool = False
    """Still stopped after this clear (it could not be recorded or stored, or a newer
    stop stands)."""
    reason_codes: tuple[Code, ...] = ()
    evidence: tuple[str, ...] = ()
