"""Every subject, stream and header name on the bus, in one place.

Subjects are the public API (ARCHITECTURE.md, "One proposal through the
bus"); docs/SUBJECTS.md describes each one. Version: the ``v1`` payload types
below change only by adding a new version beside the old one.
"""

from __future__ import annotations

import re
from typing import Final

from smf_assurance.subjects.patterns import SUBJECT_TOKEN_PATTERN

CONTRACT_VERSION: Final = "1"

PROPOSE: Final = "smf.propose"
"""Runtimes request; the gate replies with a Verdict it signed (:data:`PAYLOAD_VERDICT`)."""
OUTPUT_PREFIX: Final = "smf.output"
"""``smf.output.<stream_id>``: streamed output chunks from runtimes."""
EXECUTE_PREFIX: Final = "smf.execute"
"""``smf.execute.<connector_id>``: gated orders, a JetStream stream."""
RESULT_PREFIX: Final = "smf.result"
"""``smf.result.<connector_id>``: connector execution reports."""
APPROVAL_PENDING_PREFIX: Final = "smf.approval.pending"
"""``smf.approval.pending.<tenant>``: pending approvals, a JetStream stream."""
APPROVAL_RESOLVE: Final = "smf.approval.resolve"
"""Approvers request with a signed resolution; the gate replies."""
APPROVAL_OUTCOME_PREFIX: Final = "smf.approval.outcome"
"""``smf.approval.outcome.<approval hex>``: the held proposal's final Verdict, for its runtime,
as a DSSE envelope signed by the gate (:data:`PAYLOAD_APPROVAL_OUTCOME`); an unsigned or
otherwise signed message on it is ignored (``smf_assurance.subjects.approvals.open_outcome``)."""
APPROVAL_SHOW: Final = "smf.approval.show"
"""Approvers request (signed) the binding and held content of one approval."""
APPROVAL_STATUS: Final = "smf.approval.status"
"""Anyone on the bus may ask the state of an approval id (no content)."""
APPROVAL_REREQUEST: Final = "smf.approval.rerequest"
"""A requester asks (signed) that an expired approval of theirs be asked again."""
APPROVAL_AGAIN_PREFIX: Final = "smf.approval.again"
"""``smf.approval.again.<approval hex>``: the gate-signed notice that the requester asked for
an expired approval again; the runtime that proposed it proposes it anew."""
APPROVAL_TRACK: Final = "smf.approval.track"
"""A person on the roster requests (signed) where approvals stand: their own requests, and
those they may resolve, with a denial's reason codes and the connector's receipt."""
APPROVAL_SUMMARY: Final = "smf.approval.summary"
"""The console principal (the notifier runs as it) asks for the words a notice may carry of
pending approvals: matter, destination, document. The gate answers only the console, as
the server names it, and only for tenants the gate's operator opted in
(``smf_assurance.subjects.approvals.SummaryReply``); by default no tenant is."""
APPROVAL_ANNOUNCEMENTS: Final = "smf.approval.announcements"
"""An approver or the console asks for the pending announcements it may read (an
AnnouncementsRequest); the gate answers with those of the asking principal's tenants,
as the server names the principal (``smf_assurance.subjects.approvals.AnnouncementsReply``).
Approvers read no stream themselves: the server cannot confine what a stream reader's
requests make JetStream write, nor a stream's information to one tenant."""
SWARM_ANALYZE: Final = "smf.swarm.analyze"
"""Swarm analysis requests; Swarm publishes nothing on propose, approval or execute."""
ATTEST: Final = "smf.attest"
"""Runtimes request with a signed start-up attestation; the gate replies with an ack."""
CONFINEMENT: Final = "smf.confinement"
"""A runtime's launcher (``smf-assurance runtime run``) requests with its signed
confinement attestation (:data:`PAYLOAD_CONFINEMENT`); the gate replies with an ack
(``smf_assurance.subjects.confinement``)."""
HOLDS: Final = "smf.holds"
"""A runtime's launcher asks the gate's legal-hold list here (``smf_assurance.subjects.holds``):
the documents its sandbox mounts read-only. The gate answers from its KV bucket."""
GATEWAY_ADMIT: Final = "smf.gateway.admit"
"""The model gateway asks whether it may serve a runtime now; the gate replies
with a GatewayAdmission it signed (:data:`PAYLOAD_GATEWAY_ADMISSION`) and records every
refusal in its ledger."""
GATEWAY_CALLS: Final = "smf.gateway.calls"
"""The model gateway asks whether the gate decided a proposal for each tool call whose
result a request carries (tool-call accounting); the gate replies with a
GatewayCallsAnswer it signed (:data:`PAYLOAD_GATEWAY_CALLS`), and stops a runtime
that ran a tool no proposal covered."""
GATEWAY_CLEAR: Final = "smf.gateway.clear"
"""Operators request: lift the stop of one runtime (``model-gateway clear``)."""
RELEASE_REPORT: Final = "smf.release.report"
"""Publishers and operators request (a ReleaseReportRequest); EVERY gate replies with a
ReleaseReport it signed (:data:`smf_assurance.subjects.release.PAYLOAD_RELEASE_REPORT`): its active
release and its recent refusals."""
GATE_STATUS: Final = "smf.gate.status"
"""Operators request (a GateStatusRequest); EVERY gate replies with a GateStatus it signed
(:data:`PAYLOAD_GATE_STATUS`): each runtime's last attestation and standing, and its
ledger's tail against its last checkpoint (read by ``smf-assurance doctor``;
``smf_assurance.subjects.gate_status``)."""
GATE_SYNC_PREFIX: Final = "smf.gate.sync"
"""``smf.gate.sync.<kind>``: what gate replicas tell each other (attestations, decided
tool-call ids, stops; ``smf_assurance.pipeline.followers.replica_sync``); gates only."""
STORE_PREFIX: Final = "smf.store"
"""``smf.store.<stream>.>``: the gate's own storage streams (held content on a cluster);
no other principal reads or writes them."""
STAGE_PREFIX: Final = "smf.stage"
"""``smf.stage.<name>``: internal request/reply services of the gate."""

STAGE_NORMALIZE: Final = f"{STAGE_PREFIX}.normalize"
STAGE_EVALUATE: Final = f"{STAGE_PREFIX}.evaluate"
STAGE_DISPATCH: Final = f"{STAGE_PREFIX}.dispatch"

EXECUTE_STREAM: Final = "SMF_EXECUTE"
RESULT_STREAM: Final = "SMF_RESULT"
APPROVAL_STREAM: Final = "SMF_APPROVALS"
CHECKPOINT_STREAM: Final = "SMF_LEDGER_CHECKPOINTS"
DEFAULT_GATE_NAME: Final = "smf-gate"
"""A gate's name on the bus (connection name, checkpoint subject) unless given one."""
CHECKPOINT_PREFIX: Final = "smf.ledger.checkpoint"
"""``smf.ledger.checkpoint.<gate_name>``: one subject per gate ledger, so the
checkpoints of two replicas sharing the stream are told apart."""

QUEUE_GROUP: Final = "smf-gate"

HEADER_MSG_ID: Final = "Nats-Msg-Id"
"""JetStream de-duplicates on it within the stream's duplicate window."""
HEADER_OPERATION_HASH: Final = "Smf-Operation-Hash"
HEADER_DECISION_ID: Final = "Smf-Decision-Id"
HEADER_RELEASE_ID: Final = "Smf-Release-Id"
HEADER_APPROVAL_ID: Final = "Smf-Approval-Id"
HEADER_REASON: Final = "Smf-Reason"
HEADER_SEQUENCE: Final = "Smf-Sequence"
"""Output chunks: 0, 1, 2, ... per stream; a gap, duplicate or reordering fails the stream."""
HEADER_FINAL: Final = "Smf-Final"
"""Marks the signed close of an output stream (a request; the reply is the verdict)."""
HEADER_INSTANCE_PROOF: Final = "Smf-Instance-Proof"
"""HTTP, runtime -> model gateway: the adapter's signed :class:`InstanceProof` on every
model request (``smf_assurance.subjects.model_gateway``), so only the process that attested is
served."""
HEADER_SERVICE_ERROR_CODE: Final = "Nats-Service-Error-Code"
HEADER_SERVICE_ERROR: Final = "Nats-Service-Error"
"""The NATS service-error headers (the nats.micro convention, ADR-32): an error reply
carries a status code and, as the description, our reason code (docs/SUBJECTS.md,
"Error replies"). Declared here once for the gate, the runtime clients and tests."""
DELIVERY_CONNECTOR_PREFIX: Final = "deliver"

PAYLOAD_PROPOSAL: Final = "application/vnd.smf.proposal+json;v=1"
PAYLOAD_ORDER: Final = "application/vnd.smf.execute-order+json;v=1"
PAYLOAD_ORDER_VOID: Final = "application/vnd.smf.order-void+json;v=1"
"""A gate-signed void under an order's id (``OrderVoid``): never an order, so a
connector refuses it (``wrong_payload_type``) and records the id ``failed``."""
PAYLOAD_REPORT: Final = "application/vnd.smf.execution-report+json;v=1"
PAYLOAD_RESOLUTION: Final = "application/vnd.smf.approval-resolution+json;v=1"
PAYLOAD_OUTPUT_CLOSE: Final = "application/vnd.smf.output-close+json;v=1"
PAYLOAD_SWARM_REVIEW: Final = "application/vnd.smf.swarm-review+json;v=1"
PAYLOAD_SHOW_REQUEST: Final = "application/vnd.smf.approval-show+json;v=1"
PAYLOAD_TRACK_REQUEST: Final = "application/vnd.smf.approval-track+json;v=1"
PAYLOAD_REREQUEST: Final = "application/vnd.smf.approval-rerequest+json;v=1"
PAYLOAD_ASK_AGAIN: Final = "application/vnd.smf.approval-ask-again+json;v=1"
PAYLOAD_ATTESTATION: Final = "application/vnd.smf.runtime-attestation+json;v=1"
PAYLOAD_CONFINEMENT: Final = "application/vnd.smf.confinement-attestation+json;v=1"
"""A launcher's :class:`ConfinementAttestation`, signed by the launcher key."""
PAYLOAD_APPROVAL_OUTCOME: Final = "application/vnd.smf.approval-outcome+json;v=1"
"""A held proposal's final Verdict, signed by the gate key: the approval id, decision id,
operation hash and outcome it names are what a runtime may act on, and only those."""
PAYLOAD_GATEWAY_ADMISSION: Final = "application/vnd.smf.gateway-admission+json;v=1"
"""The gate's reply on :data:`GATEWAY_ADMIT`, signed by the gate key: only the gate can
tell the model gateway to serve a runtime."""
PAYLOAD_INSTANCE_PROOF: Final = "application/vnd.smf.instance-proof+json;v=1"
"""A runtime adapter's :class:`InstanceProof`, signed by the runtime key."""
PAYLOAD_GATEWAY_CALLS: Final = "application/vnd.smf.gateway-calls-answer+json;v=1"
"""The gate's reply on :data:`GATEWAY_CALLS`, signed by the gate key: only the gate can
tell the model gateway a tool result was decided."""
PAYLOAD_GATE_STATUS: Final = "application/vnd.smf.gate-status+json;v=1"
"""The gate's reply on :data:`GATE_STATUS`, signed by the gate key: no other client can
tell an operator that a runtime attested or the ledger is anchored."""
PAYLOAD_VERDICT: Final = "application/vnd.smf.verdict+json;v=1"
"""The gate's reply on :data:`PROPOSE`: the Verdict as a DSSE envelope signed by the gate
key, so no other client on the bus can answer a runtime "allow"
(``smf_assurance.subjects.verdicts``)."""
PAYLOAD_OUTPUT_VERDICT: Final = "application/vnd.smf.output-verdict+json;v=1"
"""The gate's reply to the signed close of an output stream: the OutputVerdict, signed
like :data:`PAYLOAD_VERDICT`, so no other client can release withheld output."""

_TOKEN: Final = re.compile(SUBJECT_TOKEN_PATTERN)


class SubjectError(ValueError):
    """A subject token would break the subject hierarchy (dots, wildcards, spaces)."""


def token(value: str) -> str:
    """Check one subject token: no ``.``, ``*``, ``>`` or whitespace can slip in."""
    if not _TOKEN.fullmatch(value):
        raise SubjectError(f"{value!r} is not a valid subject token")
    return value


def checkpoint_subject(gate_name: str) -> str:
    return f"{CHECKPOINT_PREFIX}.{token(gate_name)}"


def execute_subject(connector_id: str) -> str:
    """``smf.execute.<connector_id>``; delivery connectors are ``deliver.<channel>``."""
    head, _, channel = connector_id.partition(".")
    if channel and head == DELIVERY_CONNECTOR_PREFIX:
        return f"{EXECUTE_PREFIX}.{DELIVERY_CONNECTOR_PREFIX}.{token(channel)}"
    return f"{EXECUTE_PREFIX}.{token(connector_id)}"


def delivery_connector(channel: str) -> str:
    """The connector id that delivers released output on ``channel``."""
    return f"{DELIVERY_CONNECTOR_PREFIX}.{token(channel)}"


def result_subject(connector_id: str) -> str:
    return f"{RESULT_PREFIX}.{token(connector_id)}"


def output_subject(stream_id: str) -> str:
    return f"{OUTPUT_PREFIX}.{token(stream_id)}"


def approval_pending_subject(tenant_id: str) -> str:
    return f"{APPROVAL_PENDING_PREFIX}.{token(tenant_id)}"


def approval_again_subject(approval_id: str) -> str:
    """Where the gate tells runtimes that this expired approval is asked for again."""
    return f"{APPROVAL_AGAIN_PREFIX}.{token(approval_id.removeprefix('sha256:'))}"


def approval_outcome_subject(approval_id: str) -> str:
    """Keyed by the hex of the approval identity (``sha256:`` has no place in a token)."""
    return f"{APPROVAL_OUTCOME_PREFIX}.{token(approval_id.removeprefix('sha256:'))}"
