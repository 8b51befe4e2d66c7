"""The approval contract: the exact-action binding, resolutions, announcements.

ARCHITECTURE.md, "Exact-action approval": an ApprovalBinding covers the
decision, the operation, the canonical argument hash, the content hash, the
destination identity, release, projection, policy fingerprint, tenant,
organization, matter, actor, required role, creation time and expiry (TTL at
most 600 s). An approver signs a resolution that names the binding digest it
saw, so an approval of one thing can never be spent on another. Only
``allow-once`` or ``deny`` exist.

The final outcome of a held proposal travels back to its runtime on
``smf.approval.outcome.<approval hex>`` signed by the gate
(:func:`sign_outcome`), and a runtime acts on it only after
:func:`open_outcome` (or its TypeScript twin,
``smf_assurance/adapters/openclaw/src/contract/outcome.ts``)
has verified the signature against the gate keys it trusts and checked that
it names this approval, this decision and this operation: the pending
announcement makes all three public, so an unsigned outcome would let any bus
client release a held call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.canonical import Identity, identity_of, struct_identity
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.messages import Outcome, Verdict
from smf_assurance.subjects.patterns import ApproverNote, Code, Millis

MAX_TTL_MS: Final = 600_000
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]

ApprovalState = Literal[
    "pending",
    "approved",
    "executing",
    "consumed",
    "execution_unknown",
    "denied",
    "expired",
    "invalidated",
    "failed",
]
TERMINAL_STATES: Final = frozenset(
    {"consumed", "execution_unknown", "denied", "expired", "invalidated", "failed"}
)
ResolutionDecision = Literal["allow-once", "deny"]
DenyReason = Literal[
    "wrong_recipient", "wrong_document", "needs_changes", "not_authorized", "other"
]
"""Why an approver denied: a closed list, so that
the evidence holds a reason code and never the approver's words."""
DENY_REASONS: Final[dict[DenyReason, str]] = {
    "wrong_recipient": "Wrong recipient or destination",
    "wrong_document": "Wrong document or content",
    "needs_changes": "Needs changes before it can go",
    "not_authorized": "Not authorized for this matter or client",
    "other": "Other (see the note)",
}
"""Each reason with the label approvers read; the console's form
(``smf_assurance/approver/console/static/index.html``) and the command line offer exactly these."""
DENIED_BY_APPROVER: Final = "approver_denied"


def deny_reason_code(reason: DenyReason) -> str:
    """The reason code a denial for ``reason`` carries into evidence and the outcome."""
    return f"{DENIED_BY_APPROVER}_{reason}"


class ApprovalBinding(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything an approval is bound to; its digest is what approvers sign."""

    approval_id: Identity
    decision_id: Identity
    operation_hash: Identity
    canonical_args_hash: Identity
    content_hash: Identity
    destination_identity_hash: Identity
    release_id: Name
    projection_id: Identity
    policy_fingerprint: Identity
    tenant_id: Name
    organization_id: Name
    matter_id: Name
    actor_id: Name
    required_roles: Annotated[tuple[Name, ...], msgspec.Meta(min_length=1, max_length=16)]
    required_approvals: Annotated[int, msgspec.Meta(ge=1, le=16)]
    created_at_ms: Millis
    expires_at_ms: Millis

    def __post_init__(self) -> None:
        """TTL at most 600 s (ARCHITECTURE.md, "Exact-action approval")."""
        ttl = self.expires_at_ms - self.created_at_ms
        if not 0 < ttl <= MAX_TTL_MS:
            raise ValueError(f"approval TTL must be within (0, {MAX_TTL_MS}] ms")


def binding_digest(binding: ApprovalBinding) -> str:
    """The identity an approver's resolution must name."""
    return struct_identity(binding)


def approval_id_for(decision_id: str) -> str:
    """One approval per decision: a new decision (any changed field) is a new approval."""
    return identity_of({"approval_for": decision_id})


class ApprovalResolution(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True
):
    """An approver's signed answer to one approval (payload of a DSSE envelope).

    A deny may name a ``deny_reason`` from the
    closed list and carry a free-text ``note`` for the requester. Both are inside
    the signed payload, so nobody between the approver and the gate can change
    or strip them. They are optional and omitted when absent (``omit_defaults``),
    so a resolution signed before they existed has the same canonical bytes and
    its signature still verifies. An allow-once carries neither, and a note
    comes only with a reason: anything else does not decode (the gate answers
    ``malformed_resolution``).
    """

    schema: Literal["smf.approval-resolution/1"]
    approval_id: Identity
    decision: ResolutionDecision
    binding_digest: Identity
    resolver_id: Name
    resolved_at_ms: Millis
    deny_reason: DenyReason | None = None
    note: ApproverNote | None = None

    def __post_init__(self) -> None:
        """A reason or note only on a deny; a note only with a reason."""
        if self.decision != "deny" and (self.deny_reason is not None or self.note is not None):
            raise ValueError("only a deny carries a reason or a note")
        if self.note is not None and self.deny_reason is None:
            raise ValueError("a note comes with a closed deny reason")

    def denial_reason_codes(self) -> tuple[str, ...]:
        """What a deny records as evidence and tells the runtime: ``approver_denied``,
        then the closed reason's code when there is one (never the note)."""
        if self.deny_reason is None:
            return (DENIED_BY_APPROVER,)
        return (DENIED_BY_APPROVER, deny_reason_code(self.deny_reason))


class ResolutionReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer on ``smf.approval.resolve``."""

    schema: Literal["smf.resolution-reply/1"]
    approval_id: str
    accepted: bool
    state: str
    reason_codes: tuple[Code, ...] = ()
    order_id: str | None = None


class PendingAnnouncement(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """That an approval waits, announced on ``smf.approval.pending.<tenant>``.

    An announcement reaches every reader of its tenant's subject, so
    it tells them only what lets an approver find it and decide to look: the
    kind of action, the rules and reasons, who may approve, until when. It
    carries no hash of the content, the arguments or the destination (an
    unkeyed hash would confirm a guessed recipient or argument offline), no
    binding digest, and no matter, organization or actor id. The whole
    binding, and what would be sent, are shown only to an entitled approver
    (``smf.approval.show``), who checks the content against the digest there.
    The tenant is named: the subject routes by it and the bus permits
    approvers by it; it names the firm's customer, not a person or a matter.
    """

    schema: Literal["smf.approval-pending/2"]
    approval_id: Identity
    tenant_id: Name
    required_roles: tuple[Name, ...]
    required_approvals: Annotated[int, msgspec.Meta(ge=1, le=16)]
    created_at_ms: Millis
    expires_at_ms: Millis
    capability: str
    channel: str
    locality: str
    native_tool: str
    rule_ids: tuple[str, ...]
    reason_codes: tuple[str, ...]


MAX_ANNOUNCEMENTS: Final = 256
"""How many announcements one reply on ``smf.approval.announcements`` carries."""


class AnnouncementsRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Which pending announcements an approver or the console asks the gate for, on
    ``smf.approval.announcements``: those kept after ``after_seq`` in the stream of
    ``epoch`` (none yet: from the start), of ``tenant`` only when named.

    Not signed: the gate answers by the account the server says the request came
    from (one account per principal), so nobody can ask as another principal, and
    the answer tells nothing the principal's subscription does not already deliver.
    """

    schema: Literal["smf.approval-announcements/1"]
    after_seq: Annotated[int, msgspec.Meta(ge=0)] = 0
    epoch: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    tenant: Name | None = None


class KeptAnnouncement(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One announcement and where the stream keeps it."""

    seq: Annotated[int, msgspec.Meta(ge=1)]
    announcement: PendingAnnouncement


class AnnouncementsReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer: announcements the asker may read, oldest first.

    ``epoch`` names the stream they come from (a stream made again is read from its
    start); ``next_after`` is what to ask after next time; ``more`` says the gate
    stopped at :data:`MAX_ANNOUNCEMENTS` and there is more to read now.
    """

    schema: Literal["smf.approval-announcements-reply/1"]
    epoch: Annotated[str, msgspec.Meta(max_length=64)]
    next_after: Annotated[int, msgspec.Meta(ge=0)]
    more: bool
    announcements: Annotated[
        tuple[KeptAnnouncement, ...], msgspec.Meta(max_length=MAX_ANNOUNCEMENTS)
    ]


class ShowRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An approver's signed request to see one approval's binding and content."""

    schema: Literal["smf.approval-show/1"]
    approval_id: Identity
    resolver_id: Name
    requested_at_ms: Millis


MAX_TRACKED: Final = 256
"""How many approval ids one track request may ask about."""
MAX_RECEIPT_CHARS: Final = 256
"""A connector's receipt, as long as ``ExecutionReport.external_ref`` may be."""
Receipt = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_RECEIPT_CHARS)]


MAX_SUMMARY_CHARS: Final = 200
"""A notice's line: a destination or a document title cut to this length."""
SummaryText = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SUMMARY_CHARS)]


class SummaryRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The notifier's request, on ``smf.approval.summary``, for the words a notice may carry
    of these pending approvals. Unsigned: who asks is the server's word (the console's
    account), as for announcements."""

    schema: Literal["smf.approval-summary/1"]
    approval_ids: Annotated[tuple[Identity, ...], msgspec.Meta(max_length=MAX_TRACKED)]


class ApprovalSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a notice may say of one pending approval, where the firm allows content in
    notices: which matter, where it goes, which document. Never the content itself, the
    arguments, the actor or a rule."""

    approval_id: Identity
    tenant_id: Name
    matter_id: Name
    document: SummaryText
    destination: SummaryText | None = None


class SummaryReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer on ``smf.approval.summary``: a summary for each asked approval that
    is pending, of a tenant the gate's operator opted in; every other id is left out."""

    schema: Literal["smf.approval-summary-reply/1"]
    summaries: tuple[ApprovalSummary, ...]


class TrackRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A person's signed request to see where approvals stand (a requester sees the
    state of their own requests), on ``smf.approval.track``.

    ``approval_ids`` are only candidates: the gate answers for an id only when the
    signer is the binding's requesting actor in one of their tenants, or could resolve
    it; every other id is left out of the answer, exactly as an id the gate never held,
    so the answer tells nobody that someone else's request exists.
    """

    schema: Literal["smf.approval-track/1"]
    viewer_id: Name
    approval_ids: Annotated[tuple[Identity, ...], msgspec.Meta(max_length=MAX_TRACKED)]
    requested_at_ms: Millis


TrackRelation = Literal["requester", "approver"]


class TrackedApproval(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Where one approval stands, for its requester or an approver who may resolve it.

    ``outcome_codes`` are a denial's reason codes (the closed list, never the note);
    ``receipt`` is what the connector returned with a confirmed execution (a court's
    filing number, a message id), kept with the outcome and never in the ledger or a log.
    """

    approval_id: Identity
    state: ApprovalState
    relation: TrackRelation
    tenant_id: Name
    created_at_ms: Millis
    expires_at_ms: Millis
    outcome_codes: tuple[Code, ...] = ()
    receipt: Receipt | None = None
    order_id: str | None = None


class TrackReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer on ``smf.approval.track``: only the approvals the signer may see."""

    schema: Literal["smf.approval-track-reply/1"]
    approvals: tuple[TrackedApproval, ...]


class ReRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A requester's signed request to ask an expired approval of theirs again, so an
    expired approval is not a dead end, on ``smf.approval.rerequest``.

    Never a revival: the expired approval stays expired and its binding unusable. The
    gate only tells the runtime that proposed it (:class:`AskAgain`), which proposes the
    action anew: a new proposal, decided again under the release in force, so a new
    decision, a new binding and a new approval id, approved or denied on its own.
    """

    schema: Literal["smf.approval-rerequest/1"]
    approval_id: Identity
    requester_id: Name
    requested_at_ms: Millis


class ReRequestReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer on ``smf.approval.rerequest``."""

    schema: Literal["smf.approval-rerequest-reply/1"]
    approval_id: str
    accepted: bool
    reason_codes: tuple[Code, ...] = ()
    proposed_again: Outcome | None = None
    """What happened once the runtimes were told: the verdict of a new proposal of the
    same operation (its ``operation_hash``) this gate decided within :attr:`waited_ms`
    of the notice. None: it decided none in that time (no runtime held the action
    any more, or its new proposal went to another gate replica or was refused before
    the gate knew its operation), so the requester is never told it was asked anew
    when nothing was proposed."""
    new_approval_id: Identity | None = None
    """The new approval, when :attr:`proposed_again` is ``held``."""
    waited_ms: Annotated[int, msgspec.Meta(ge=0)] = 0
    """How long the gate waited for that new proposal."""


class AskAgain(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate-signed notice on ``smf.approval.again.<approval hex>`` that the requester
    asked for this expired approval again; the runtime holding the proposal it was made
    from acts on it only after :func:`open_ask_again` (the approval, decision and
    operation ids are public in the announcement and the outcome, so the signature is
    the control, as for outcomes)."""

    schema: Literal["smf.approval-ask-again/1"]
    approval_id: Identity
    decision_id: Identity
    operation_hash: Identity
    asked_at_ms: Millis


def sign_ask_again(notice: AskAgain, gate_key: SigningKey) -> bytes:
    return dsse.encode_envelope(dsse.sign_struct(names.PAYLOAD_ASK_AGAIN, notice, [gate_key]))


def open_ask_again(
    data: bytes, gate_keys: Mapping[str, VerifyKey], *, approval_id: str
) -> AskAgain:
    """Verify a notice against the gate keys and check that it is about ``approval_id``
    (a genuine notice re-published on another approval's subject is refused)."""
    notice, _ = dsse.open_struct(
        dsse.decode_envelope(data), gate_keys, AskAgain, names.PAYLOAD_ASK_AGAIN
    )
    if notice.approval_id != approval_id:
        raise OutcomeMismatchError("the notice names another approval")
    if approval_id_for(notice.decision_id) != approval_id:
        raise OutcomeMismatchError("the notice's decision is not its approval's decision")
    return notice


RULE_NOT_DESCRIBED: Final = "no description in the release"
"""What is shown for a rule the deciding release does not describe: its id
and these words, never text of our own in the release's place."""


class RuleShown(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A rule that requires the approval, in the deciding release's own words: its
    title, statement and citation from the verified release. ``title``, ``statement``
    and ``citation`` are all ``None`` when
    the release does not describe the rule: the reader shows :data:`RULE_NOT_DESCRIBED`."""

    rule_id: str
    title: str | None = None
    statement: str | None = None
    citation: str | None = None


class ReasonShown(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A reason code with its plain-English words, so an approver is never left with a
    bare snake_case code. ``words`` is ``None`` for a code the gate's table has
    no entry for: the reader shows the code itself."""

    code: str
    words: str | None = None


class ApprovalView(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What an entitled approver is shown: the binding, its digest, and what will be sent.

    The approver checks ``content`` against ``binding.content_hash`` before
    signing (ARCHITECTURE.md, "Exact-action approval"). ``rules`` and ``reasons``
    say in words why the approval is required; they are additive and default to
    empty, so a view from a gate that does not send them still decodes. They are
    not part of the binding: they explain it, they do not change what is approved.
    """

    schema: Literal["smf.approval-view/1"]
    binding: ApprovalBinding
    binding_digest: Identity
    state: str
    native_tool: str
    destination_address: str
    content: str
    arguments_json: str
    rules: tuple[RuleShown, ...] = ()
    reasons: tuple[ReasonShown, ...] = ()


# --- the signed outcome of a held proposal -------------------------------------------


class OutcomeMismatchError(dsse.SignatureError):
    """A gate-signed outcome that is not about the call waiting for it.

    Stops a replay of an authentic outcome: the gate's allow for one approval
    re-published on another approval's subject, an outcome whose decision id
    does not derive its approval id (``approval_id_for``), or one naming
    another decision or operation than the held verdict did. Also refuses an
    outcome that is not final (``held``): only ``allow`` or ``deny`` end a wait.
    """


def sign_outcome(verdict: Verdict, gate_key: SigningKey) -> bytes:
    """The outcome as the gate publishes it: a DSSE envelope over the Verdict's
    canonical JSON, payload type :data:`names.PAYLOAD_APPROVAL_OUTCOME`, so the
    signature cannot be taken for an execute order or a checkpoint of the same key."""
    return dsse.encode_envelope(
        dsse.sign_struct(names.PAYLOAD_APPROVAL_OUTCOME, verdict, [gate_key])
    )


def open_outcome(
    data: bytes,
    gate_keys: Mapping[str, VerifyKey],
    *,
    approval_id: str,
    decision_id: str,
    operation_hash: str,
) -> Verdict:
    """Verify an approval outcome before anything acts on it.

    ARCHITECTURE.md, "Trust and identity on the bus": a receiver verifies
    against the keys the registry names for the role, here ``gate``. In order:

    1. a DSSE envelope signed by one of ``gate_keys`` for the approval-outcome
       payload type (``dsse`` errors: unsigned, unknown signer, forged,
       signed for another purpose);
    2. a canonical Verdict (:class:`dsse.MalformedPayloadError`);
    3. about this approval, a decision that derives it, this decision and this
       operation, and final (:class:`OutcomeMismatchError`).

    ``gate_keys`` empty refuses everything (:class:`dsse.UnknownSignerError`).
    """
    envelope = dsse.decode_envelope(data)
    verdict, _ = dsse.open_struct(envelope, gate_keys, Verdict, names.PAYLOAD_APPROVAL_OUTCOME)
    if verdict.approval_id != approval_id:
        raise OutcomeMismatchError("the outcome names another approval")
    if verdict.decision_id is None or approval_id_for(verdict.decision_id) != approval_id:
        raise OutcomeMismatchError("the outcome's decision is not its approval's decision")
    if verdict.decision_id != decision_id:
        raise OutcomeMismatchError("the outcome names another decision")
    if verdict.operation_hash != operation_hash:
        raise OutcomeMismatchError("the outcome names another operation")
    if verdict.outcome not in ("allow", "deny"):
        raise OutcomeMismatchError(f"an outcome is allow or deny, not {verdict.outcome}")
    return verdict
