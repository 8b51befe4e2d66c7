"""What has been held, and where it stands: the one reader of pending approvals.

ARCHITECTURE.md, "One proposal through the bus" and "Exact-action approval":
a hold is announced on ``smf.approval.pending.<tenant>`` and kept on the
``SMF_APPROVALS`` stream; ``smf.approval.status`` tells anyone an approval's
current state. The command line (``smf-assurance approvals pending``), the
console's board and the notifier all read through here, so they list the same
approvals. What the reader keeps true:

- It reads through the gate (``smf.approval.announcements``), never the stream:
  an approver and the console hold no JetStream at all on a bus with authorization
  (``smf_assurance.subjects.bus_access``, "No deputy"), and the gate answers each
  principal with its own tenants' announcements, by the account the server names.
- It asks from where it stopped last; approvals held before the reader started
  are read too, and a stream made again (another epoch) is read from its start.
- Only what decodes as a :class:`PendingAnnouncement` is returned.
- Announcements carry identities and reasons, never content or recipient, so
  nothing read here needs an approver's entitlement to be seen.
"""

from __future__ import annotations

from typing import Final

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    AnnouncementsReply,
    AnnouncementsRequest,
    PendingAnnouncement,
)

REQUEST_TIMEOUT_S: Final = 5.0
MAX_PAGES: Final = 64
"""Pages one :meth:`PendingReader.read_new` asks for at most; the next call goes on."""


class AnnouncementsRefused(NatsError):
    """The gate refused to list announcements; ``reason_code`` says why."""

    def __init__(self, reason_code: str) -> None:
        super().__init__()
        self.reason_code = reason_code

    def __str__(self) -> str:
        return f"the gate refused to list announcements: {self.reason_code}"


class ApprovalStatus(msgspec.Struct, frozen=True):
    """Reply of ``smf.approval.status``: no content, anyone on the bus may ask."""

    approval_id: str
    state: str


class PendingReader:
    """Reads the announcements of one tenant (or every tenant it may) from where it
    stopped last."""

    def __init__(
        self, nc: Client, tenant: str | None = None, timeout: float = REQUEST_TIMEOUT_S
    ) -> None:
        self.nc = nc
        self.tenant = names.token(tenant) if tenant is not None else None
        self.timeout = timeout
        self._after = 0
        self._epoch: str | None = None

    async def read_new(self) -> list[PendingAnnouncement]:
        """The announcements added since the last read, oldest first.

        Raises :class:`smf_assurance.subjects.names.SubjectError` (at construction) when
        the tenant is not a tenant id, :class:`AnnouncementsRefused` when the gate
        refuses (a tenant this principal does not serve, among others), and the bus's
        own errors as they come (``NoRespondersError`` when no gate serves).
        """
        found: list[PendingAnnouncement] = []
        for _ in range(MAX_PAGES):
            reply = await self._ask()
            self._epoch, self._after = reply.epoch, reply.next_after
            found.extend(kept.announcement for kept in reply.announcements)
            if not reply.more:
                break
        return found

    async def _ask(self) -> AnnouncementsReply:
        request = AnnouncementsRequest(
            schema="smf.approval-announcements/1",
            after_seq=self._after,
            epoch=self._epoch,
            tenant=self.tenant,
        )
        msg = await self.nc.request(
            names.APPROVAL_ANNOUNCEMENTS, msgspec.json.encode(request), timeout=self.timeout
        )
        headers = msg.headers or {}
        if names.HEADER_SERVICE_ERROR_CODE in headers:
            raise AnnouncementsRefused(headers.get(names.HEADER_SERVICE_ERROR) or "refused")
        try:
            return msgspec.json.decode(msg.data, type=AnnouncementsReply)
        except msgspec.DecodeError as exc:
            raise AnnouncementsRefused("malformed_reply") from exc

    async def close(self) -> None:
        """Nothing is held on the bus; kept so callers close what they open."""


async def read_pending(nc: Client, tenant: str | None) -> list[PendingAnnouncement]:
    """Every announcement the gate keeps, oldest first, one per approval (its first)."""
    seen: dict[str, PendingAnnouncement] = {}
    reader = PendingReader(nc, tenant)
    for announcement in await reader.read_new():
        seen.setdefault(announcement.approval_id, announcement)
    return list(seen.values())


async def approval_state(nc: Client, approval_id: str, timeout: float) -> str:
    """The gate's current state of one approval (``unknown`` when it holds no record)."""
    reply = await nc.request(names.APPROVAL_STATUS, approval_id.encode(), timeout=timeout)
    return msgspec.json.decode(reply.data, type=ApprovalStatus).state
