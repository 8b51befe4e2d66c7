"""Wire messages of the bus contract, version 1.

One frozen Struct per message, unknown fields rejected, closed vocabularies
(STYLE.md, "msgspec — Structs as the contract"): decoded once at the edge,
never re-validated inside the gate. Signed messages travel as DSSE envelopes
(``smf_assurance.subjects.dsse``) whose payload is the canonical JSON of one of these.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, Protocol

import msgspec

from smf_assurance.subjects.canonical import Identity, identity_of
from smf_assurance.subjects.envelope import (
    CitationVerification,
    Classification,
    InjectionTaint,
    Locality,
    Name,
    RedactionStatus,
    Surface,
)
from smf_assurance.subjects.patterns import (
    ApproverNote,
    Code,
    ConnectorId,
    InstanceId,
    MessageId,
    Millis,
    OrderId,
    Token,
    ToolCallId,
)

MAX_CONTENT_CHARS: Final = 512 * 1024
MAX_OUTPUT_WINDOW_CHARS: Final = 16 * 1024
"""Bound on :attr:`OutputClose.window`; a release's detection window is at most this."""


class ActorContext(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Who asks, for which client matter; copied into the envelope's professional group."""

    domain: Name
    tenant_id: Name
    organization_id: Name
    matter_id: Name
    actor_id: Name
    actor_roles: tuple[Name, ...]
    governing_laws: tuple[Name, ...]


class DataFacts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the adapter knows about the data; every omission defaults to ``unknown``."""

    classification: Classification = "unknown"
    injection_taint: InjectionTaint = "unknown"
    redaction_status: RedactionStatus = "unknown"
    redaction_evidence: Annotated[str, msgspec.Meta(max_length=1024)] | None = None
    legal_hold: bool | None = None
    citation_verification: CitationVerification = "unknown"


class ProposedDestination(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    address: Annotated[str, msgspec.Meta(max_length=2048)] = ""
    locality: Locality = "unknown"


class Proposal(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A runtime's proposed action, with the final arguments it will execute.

    ``omit_defaults``: only ``tool_call_id``, ``reply_by_ms`` and ``refused_locally`` have
    defaults, so every proposal without them encodes (and signs) byte for byte as
    before they existed.
    """

    schema: Literal["smf.proposal/1"]
    proposal_id: MessageId
    runtime_id: Token
    runtime_version: Name
    adapter_id: Name
    surface: Surface
    native_tool: Name
    arguments: dict[str, Any]
    content: Annotated[str, msgspec.Meta(max_length=MAX_CONTENT_CHARS)]
    destination: ProposedDestination
    actor: ActorContext
    facts: DataFacts
    issued_at_ms: Millis
    tool_call_id: ToolCallId | None = None
    """The model's id of the tool call this proposal decides, when the runtime has one
    (tool-call accounting): metadata for the model gateway's check that
    every tool result it sees was decided. It is not part of the operation: it
    enters neither the normalized envelope nor the operation hash."""
    reply_by_ms: Millis | None = None
    """The requester's deadline on its own clock (additive, optional): the requester
    stops waiting for the verdict at this time (plus a grace it states), so the gate
    starts no order and no hold for this proposal after it, and a copy of the same
    signed proposal that reaches the gate after it is answered with the proposal's
    recorded verdict instead of being decided (docs/SUBJECTS.md, "Requester's
    deadline"). Not part of the operation: it enters neither the envelope nor the
    operation hash."""
    refused_locally: Code | None = None
    """The adapter has already refused this call itself, for this reason (a path of its
    own credentials, arguments it cannot map, a tool it does not know): the proposal
    only reports the refusal so the gate records it like any denial and notes the
    call as decided (tool-call accounting: its error result is not an ungated one).
    The gate answers every such proposal with a denial, never an allow; the call's
    ``native_tool`` and ``arguments`` then say only which call it was (arguments
    empty: the refused ones are not sent)."""


Outcome = Literal["allow", "deny", "held"]


class Verdict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer to a proposal. ``deny`` always carries reason codes."""

    schema: Literal["smf.verdict/1"]
    proposal_id: str
    outcome: Outcome
    reason_codes: tuple[Code, ...]
    decision_id: str | None = None
    operation_hash: str | None = None
    release_id: str | None = None
    order_id: str | None = None
    connector_id: str | None = None
    approval_id: str | None = None
    expires_at_ms: int | None = None
    required_roles: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    approver_note: ApproverNote | msgspec.UnsetType = msgspec.UNSET
    """The denying approver's note to the requester, on a held proposal's final deny
    only. Unset is left out of the encoding, so a Verdict without a note has the
    same canonical bytes whether or not its signer knew this field."""


class ExecuteOrder(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A gated order to one connector; signed by the gate.

    ``order_id`` is the idempotency key: derived from the operation hash and
    the decision id, so a different payload can never share a key.
    """

    schema: Literal["smf.execute-order/1"]
    order_id: OrderId
    connector_id: ConnectorId
    operation_hash: Identity
    decision_id: Identity
    release_id: Name
    approval_id: str | None
    native_tool: Name
    arguments: dict[str, Any]
    content: Annotated[str, msgspec.Meta(max_length=MAX_CONTENT_CHARS)]
    destination_address: Annotated[str, msgspec.Meta(max_length=2048)]
    issued_at_ms: Millis
    not_after_ms: Millis


class OrderVoid(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's probe for an order whose publish it could not confirm, published on
    the order's subject under the order's ``Nats-Msg-Id`` (docs/SUBJECTS.md,
    "Unconfirmed orders"). Inside the stream's duplicate window JetStream answers it
    ``duplicate`` when the order is stored (and keeps nothing); otherwise it is
    stored in the order's place, and a connector refuses it (a gate-signed message
    that is no order: ``wrong_payload_type``) and records the order id ``failed``,
    so the order can never run after it."""

    schema: Literal["smf.order-void/1"]
    order_id: OrderId
    connector_id: ConnectorId
    voided_at_ms: Millis


ReportStatus = Literal["confirmed", "failed", "ambiguous"]


class ExecutionReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A connector's account of one order; signed by the connector."""

    schema: Literal["smf.execution-report/1"]
    order_id: OrderId
    connector_id: ConnectorId
    status: ReportStatus
    reason_code: Code
    at_ms: Millis
    external_ref: Annotated[str, msgspec.Meta(max_length=256)] | None = None


class ErrorReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Reply of an internal stage that refused its input."""

    schema: Literal["smf.error/1"]
    reason_code: Code
    detail: Annotated[str, msgspec.Meta(max_length=512)] = ""


def encode(message: msgspec.Struct) -> bytes:
    """JSON bytes of a message (unsigned replies; signed ones go through DSSE)."""
    return msgspec.json.encode(message)


class Decided(Protocol):
    """One decision on one operation, wherever it is carried: the gate's Decision,
    the claim that spends it, the approval binding that holds it, the order itself."""

    @property
    def operation_hash(self) -> str: ...

    @property
    def decision_id(self) -> str: ...


def order_id_for(decided: Decided) -> str:
    """The id of the order a decision opens, and its idempotency key
    (``Nats-Msg-Id``): bound to exactly one operation and one decision, so a
    different payload can never share it. Every road that opens, records, looks up
    or settles an order derives its id here, a direct allow and an approval alike,
    so the id a connector or runtime reports on is the one the gate recorded."""
    pair = {"operation_hash": decided.operation_hash, "decision_id": decided.decision_id}
    return identity_of(pair).removeprefix("sha256:")


class OutputClose(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The signed end of a streamed output, sent as a request on
    ``smf.output.<stream_id>``.

    Chunks travel unsigned; this message commits to their count, total size
    and content hash, so an injected, dropped or altered chunk makes the
    assembled text fail the check and the output is withheld.

    ``omit_defaults``: a close without a :attr:`window` encodes byte for byte as
    before the field existed (docs/SUBJECTS.md, "Additive optional fields").
    """

    schema: Literal["smf.output-close/1"]
    stream_id: Token
    proposal_id: MessageId
    runtime_id: Token
    runtime_version: Name
    adapter_id: Name
    surface: Surface
    chunk_count: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
    total_bytes: Annotated[int, msgspec.Meta(ge=0, le=2**31)]
    content_hash: Identity
    destination: ProposedDestination
    actor: ActorContext
    facts: DataFacts
    issued_at_ms: Millis
    window: Annotated[str, msgspec.Meta(max_length=MAX_OUTPUT_WINDOW_CHARS)] = ""
    """What was shown before this output in the same conversation, its tail: the
    detectors read the output after it, so a marker split
    across turns or tool calls is seen. Covered by the close's signature, not by the
    content hash; never released, never part of the proposal's content. The buffer
    reads at most the release's ``detection_window_chars`` of it (the last ones)."""
    instance_id: InstanceId | None = None
    """The runtime process the output was produced for, when its sender served a proven
    process (the model gateway, on an instance proof): the gate then releases it only
    while that process's own latest attestation stands
    (``AttestationDesk.admit``), not on another process's word. Covered by the close's
    signature; absent encodes as before (``omit_defaults``)."""


class OutputVerdict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The buffer's answer: the gate's verdict and, only when allowed, the text."""

    schema: Literal["smf.output-verdict/1"]
    stream_id: str
    verdict: Verdict
    released: str | None = None
