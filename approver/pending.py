"""What has been held, and where it stands: the one reader of pending approvals.

ARCHITECTURE.md, "One proposal through the bus" and "Exact-action approval":
a hold is announced on ``smf.approval.pending.<tenant>`` and kept on the
``SMF_APPROVALS`` stream; ``smf.approval.status`` tells anyone an approval's
current state. The command line (``smf-assurance approvals pending``) and the
console's board both read through here, so they list the same approvals.
What the reader keeps true:

- It creates no consumer on the gate's stream just to look: announcements
  are read with direct gets from the last sequence seen (``get_msg`` with
  ``next`` also skips sequences the stream has aged out), so approvals held
  before the reader started are read too.
- A recreated stream (another creation time) is read again from its start.
- Only what decodes as a :class:`PendingAnnouncement` is returned; the gate
  publishes only valid ones, so anything else is never listed.
- Announcements carry identities and reasons, never content or recipient, so
  nothing read here needs an approver's entitlement to be seen.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from subjects import names
from subjects.approvals import PendingAnnouncement

ALL_PENDING: Final = f"{names.APPROVAL_PENDING_PREFIX}.>"


class ApprovalStatus(msgspec.Struct, frozen=True):
    """Reply of ``smf.approval.status``: no content, anyone on the bus may ask."""

    approval_id: str
    state: str


class PendingReader:
    """Reads the announcements of one tenant (or all) from where it stopped last."""

    def __init__(self, js: JetStreamContext, tenant: str | None = None) -> None:
        self.js = js
        self.tenant = tenant
        self._next_seq = 0
        self._stream_created: datetime | None = None

    async def read_new(self) -> list[PendingAnnouncement]:
        """The announcements added since the last read, oldest first.

        Raises ``NotFoundError`` when the gate has not created its stream,
        :class:`subjects.names.SubjectError` when the tenant is not a tenant
        id, and the bus's own errors as they come.
        """
        info = await self.js.stream_info(names.APPROVAL_STREAM)
        subject = names.approval_pending_subject(self.tenant) if self.tenant else ALL_PENDING
        if info.created != self._stream_created:
            self._stream_created = info.created  # a new (or recreated) stream: read it all
            self._next_seq = 0
        stream = info.state
        found: list[PendingAnnouncement] = []
        seq = max(self._next_seq, stream.first_seq)
        while stream.messages and seq <= stream.last_seq:
            try:
                raw = await self.js.get_msg(names.APPROVAL_STREAM, seq, subject=subject, next=True)
            except NotFoundError:
                break
            seq = (raw.seq or seq) + 1
            try:
                found.append(msgspec.json.decode(raw.data or b"", type=PendingAnnouncement))
            except (msgspec.DecodeError, ValueError):
                continue  # not an announcement the gate would publish: never listed
        self._next_seq = max(self._next_seq, seq)
        return found


async def read_pending(js: JetStreamContext, tenant: str | None) -> list[PendingAnnouncement]:
    """Every announcement on the stream, oldest first, one per approval (its first)."""
    seen: dict[str, PendingAnnouncement] = {}
    for announcement in await PendingReader(js, tenant).read_new():
        seen.setdefault(announcement.approval_id, announcement)
    return list(seen.values())


async def approval_state(nc: Client, approval_id: str, timeout: float) -> str:
    """The gate's current state of one approval (``unknown`` when it holds no record)."""
    reply = await nc.request(names.APPROVAL_STATUS, approval_id.encode(), timeout=timeout)
    return msgspec.json.decode(reply.data, type=ApprovalStatus).state
