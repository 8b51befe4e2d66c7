"""The approver's client: see a held action, check its content, sign allow-once or deny.

An approver signs with their own Ed25519 key; the resolution names the
binding digest they saw (ARCHITECTURE.md, "Exact-action approval"), so
neither a page server nor anyone on the bus can forge or redirect it.
Depends on ``subjects/`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from nats.aio.client import Client

from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    ApprovalResolution,
    ApprovalView,
    DenyReason,
    ReRequest,
    ReRequestReply,
    ResolutionDecision,
    ResolutionReply,
    ShowRequest,
    TrackReply,
    TrackRequest,
    binding_digest,
)
from smf_assurance.subjects.attachments import AttachmentError, check_attachments
from smf_assurance.subjects.canonical import CanonicalJSONError, identity_of
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.envelope import content_hash_of
from smf_assurance.subjects.keys import SigningKey


class ApproverError(Exception):
    """The gate refused the request; ``reason_code`` says why."""

    def __init__(self, reason_code: str) -> None:
        super().__init__(reason_code)
        self.reason_code = reason_code


def content_matches(view: ApprovalView) -> bool:
    """The visible check: the content and the arguments shown are the ones the binding
    covers, every document in those arguments is the bytes its digest names
    (:mod:`smf_assurance.subjects.attachments`), and the binding shown is the one whose
    digest will be signed. Arguments that do not parse or have no canonical form match
    nothing."""
    shown = content_hash_of(view.content)
    try:
        arguments = msgspec.json.decode(view.arguments_json, type=dict[str, Any])
        check_attachments(arguments)
        arguments_match = identity_of(arguments) == view.binding.canonical_args_hash
    except (msgspec.DecodeError, CanonicalJSONError, AttachmentError):
        return False
    return (
        arguments_match
        and shown == view.binding.content_hash
        and binding_digest(view.binding) == view.binding_digest
    )


@dataclass(frozen=True, slots=True)
class ApproverClient:
    nc: Client
    key: SigningKey
    approver_id: str
    timeout: float = 5.0

    async def show(self, approval_id: str) -> ApprovalView:
        request = ShowRequest(
            schema="smf.approval-show/1",
            approval_id=approval_id,
            resolver_id=self.approver_id,
            requested_at_ms=wall_clock_ms(),
        )
        signed = encode_envelope(sign_struct(names.PAYLOAD_SHOW_REQUEST, request, [self.key]))
        reply = await self.nc.request(names.APPROVAL_SHOW, signed, timeout=self.timeout)
        headers = reply.headers or {}
        if names.HEADER_SERVICE_ERROR_CODE in headers:
            raise ApproverError(headers.get(names.HEADER_SERVICE_ERROR, "gate_error"))
        return msgspec.json.decode(reply.data, type=ApprovalView)

    async def track(self, approval_ids: Sequence[str]) -> TrackReply:
        """Where these approvals stand, as far as the gate lets this person see:
        their own requests and those they may resolve; any other id is left out."""
        request = TrackRequest(
            schema="smf.approval-track/1",
            viewer_id=self.approver_id,
            approval_ids=tuple(approval_ids),
            requested_at_ms=wall_clock_ms(),
        )
        signed = encode_envelope(sign_struct(names.PAYLOAD_TRACK_REQUEST, request, [self.key]))
        reply = await self.nc.request(names.APPROVAL_TRACK, signed, timeout=self.timeout)
        headers = reply.headers or {}
        if names.HEADER_SERVICE_ERROR_CODE in headers:
            raise ApproverError(headers.get(names.HEADER_SERVICE_ERROR, "gate_error"))
        return msgspec.json.decode(reply.data, type=TrackReply)

    async def rerequest(self, approval_id: str) -> ReRequestReply:
        """Ask the gate to have an expired request of this person's asked anew:
        a new proposal and binding, never the old one revived."""
        request = ReRequest(
            schema="smf.approval-rerequest/1",
            approval_id=approval_id,
            requester_id=self.approver_id,
            requested_at_ms=wall_clock_ms(),
        )
        signed = encode_envelope(sign_struct(names.PAYLOAD_REREQUEST, request, [self.key]))
        reply = await self.nc.request(names.APPROVAL_REREQUEST, signed, timeout=self.timeout)
        return msgspec.json.decode(reply.data, type=ReRequestReply)

    def sign_resolution(
        self,
        approval_id: str,
        decision: ResolutionDecision,
        digest: str,
        *,
        deny_reason: DenyReason | None = None,
        note: str | None = None,
    ) -> bytes:
        """Sign a resolution; a deny's closed reason and note are signed with it
        inside the payload, so the gate receives them as the approver wrote them or not
        at all.
        ``msgspec.ValidationError`` when the combination is not one the gate accepts."""
        resolution = msgspec.convert(
            {
                "schema": "smf.approval-resolution/1",
                "approval_id": approval_id,
                "decision": decision,
                "binding_digest": digest,
                "resolver_id": self.approver_id,
                "resolved_at_ms": wall_clock_ms(),
                "deny_reason": deny_reason,
                "note": note,
            },
            type=ApprovalResolution,
        )
        return encode_envelope(sign_struct(names.PAYLOAD_RESOLUTION, resolution, [self.key]))

    async def send(self, signed: bytes) -> ResolutionReply:
        reply = await self.nc.request(names.APPROVAL_RESOLVE, signed, timeout=self.timeout)
        headers = reply.headers or {}
        if names.HEADER_SERVICE_ERROR_CODE in headers:
            raise ApproverError(headers.get(names.HEADER_SERVICE_ERROR, "gate_error"))
        return msgspec.json.decode(reply.data, type=ResolutionReply)

    async def resolve(
        self,
        approval_id: str,
        decision: ResolutionDecision,
        digest: str,
        *,
        deny_reason: DenyReason | None = None,
        note: str | None = None,
    ) -> ResolutionReply:
        signed = self.sign_resolution(
            approval_id, decision, digest, deny_reason=deny_reason, note=note
        )
        return await self.send(signed)

    async def review_and_resolve(
        self,
        approval_id: str,
        decision: ResolutionDecision,
        *,
        deny_reason: DenyReason | None = None,
        note: str | None = None,
    ) -> tuple[ApprovalView, ResolutionReply]:
        """Fetch, check content against the digest, then sign what was checked."""
        view = await self.show(approval_id)
        if not content_matches(view):
            raise ApproverError("content_digest_mismatch")
        reply = await self.resolve(
            approval_id, decision, view.binding_digest, deny_reason=deny_reason, note=note
        )
        return view, reply
