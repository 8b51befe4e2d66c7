"""``smf.approval.announcements``: pending announcements read through the gate.

Approvers and the console do not read the ``SMF_APPROVALS`` stream themselves
(``smf_assurance.subjects.bus_access``, "No deputy"): a stream reader's pull, ack or
consumer request makes JetStream write to a subject the reader chose, and a stream's
information lists every tenant's subject. So the gate reads the stream for them and
answers each asker with its own tenants' announcements only.

Who asks is the server's word (:class:`~smf_assurance.pipeline.service.Requester`):
on a bus with authorization every approver and the console are alone in an account
named after the principal, and the server names that account on each request that
crosses into the gate's. A request that does not cross comes from inside the gate's
account (a gate replica, the operator) or from a bus without authorization, where every
client may subscribe to every announcement anyway: it is answered for every tenant.

Refusals, each with its reason code: a crossing request whose account the server did
not name (``requester_unknown``), one from a principal the release does not name or
whose role reads no announcements (``requester_not_approver``), a tenant the asker
does not serve (``tenant_not_permitted``), a request that does not decode
(``malformed_request``), JetStream not answering (``announcements_unavailable``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from smf_assurance.pipeline.service import Requester, StageRefusal
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    MAX_ANNOUNCEMENTS,
    AnnouncementsReply,
    AnnouncementsRequest,
    KeptAnnouncement,
    PendingAnnouncement,
)
from smf_assurance.subjects.registry import KeyRegistry

ALL_PENDING: Final = f"{names.APPROVAL_PENDING_PREFIX}.>"
MAX_SCANNED: Final = 4 * MAX_ANNOUNCEMENTS
"""Messages one answer reads at most (other tenants' included): the work a request
can cause is bounded; ``more`` tells the asker to come back."""

REQUESTER_UNKNOWN: Final = "requester_unknown"
REQUESTER_NOT_APPROVER: Final = "requester_not_approver"
TENANT_NOT_PERMITTED: Final = "tenant_not_permitted"
MALFORMED_REQUEST: Final = "malformed_request"
UNAVAILABLE: Final = "announcements_unavailable"

EVERY_TENANT: Final = None
"""What :func:`readable_tenants` returns for an asker that may read every tenant."""


def readable_tenants(requester: Requester, registry: KeyRegistry) -> frozenset[str] | None:
    """The tenants ``requester`` may read, or :data:`EVERY_TENANT`; else a refusal."""
    if not requester.crossed:
        return EVERY_TENANT
    if requester.account is None:
        raise StageRefusal(REQUESTER_UNKNOWN)
    for principal in registry.principals.values():
        if principal.name != requester.account:
            continue
        if principal.entry.role == "console":
            return EVERY_TENANT
        if principal.entry.role == "approver":
            return frozenset(principal.entry.tenants)
    raise StageRefusal(REQUESTER_NOT_APPROVER, requester.account)


@dataclass
class AnnouncementDesk:
    """Answers ``smf.approval.announcements`` from the gate's own JetStream context."""

    js: JetStreamContext
    registry: Callable[[], KeyRegistry]
    """The release in force's registry, read at each request."""

    async def handle(self, data: bytes, requester: Requester) -> bytes:
        try:
            request = msgspec.json.decode(data, type=AnnouncementsRequest)
        except msgspec.DecodeError as exc:
            raise StageRefusal(MALFORMED_REQUEST) from exc
        tenants = readable_tenants(requester, self.registry())
        if request.tenant is not None:
            if tenants is not EVERY_TENANT and request.tenant not in tenants:
                raise StageRefusal(TENANT_NOT_PERMITTED, request.tenant)
            tenants = frozenset({request.tenant})
        try:
            reply = await self._read(request, tenants)
        except (NatsError, NatsTimeoutError, TimeoutError) as exc:
            raise StageRefusal(UNAVAILABLE, type(exc).__name__) from exc
        return msgspec.json.encode(reply)

    async def _read(
        self, request: AnnouncementsRequest, tenants: frozenset[str] | None
    ) -> AnnouncementsReply:
        try:
            info = await self.js.stream_info(names.APPROVAL_STREAM)
        except NotFoundError:  # no stream (yet): nothing is kept to list
            return AnnouncementsReply(
                schema="smf.approval-announcements-reply/1",
                epoch="",
                next_after=0,
                more=False,
                announcements=(),
            )
        epoch = "" if info.created is None else info.created.isoformat()
        after = request.after_seq if request.epoch == epoch else 0
        subject = ALL_PENDING
        if tenants is not EVERY_TENANT and len(tenants) == 1:
            subject = names.approval_pending_subject(next(iter(tenants)))
        found: list[KeptAnnouncement] = []
        last = info.state.last_seq
        seq, scanned = after, 0
        while seq < last and len(found) < MAX_ANNOUNCEMENTS and scanned < MAX_SCANNED:
            try:
                msg = await self.js.get_msg(
                    names.APPROVAL_STREAM, seq=seq + 1, subject=subject, next=True
                )
            except NotFoundError:
                seq = last  # nothing of this subject after seq
                break
            scanned += 1
            assert msg.seq is not None
            seq = msg.seq
            announcement = _announcement(msg.data)
            if announcement is None:
                continue  # never listed: not an announcement the gate publishes
            if msg.subject != names.approval_pending_subject(announcement.tenant_id):
                continue  # filed under another tenant's subject: never listed
            if tenants is not EVERY_TENANT and announcement.tenant_id not in tenants:
                continue
            found.append(KeptAnnouncement(seq=seq, announcement=announcement))
        return AnnouncementsReply(
            schema="smf.approval-announcements-reply/1",
            epoch=epoch,
            next_after=seq,
            more=seq < last,
            announcements=tuple(found),
        )


def _announcement(data: bytes | None) -> PendingAnnouncement | None:
    try:
        return msgspec.json.decode(data or b"", type=PendingAnnouncement)
    except (msgspec.DecodeError, ValueError):
        return None
