"""What has been held, and where it stands: the one reader of pending approvals.

ARCHITECTURE.md, "One proposal through the bus" and "Exact-action approval":
a hold is announced on ``smf.approval.pending.<tenant>`` and kept on the
``SMF_APPROVALS`` stream; ``smf.approval.status`` tells anyone an approval's
current state. The command line (``smf-assurance approvals pending``) and the
console's board both read through here, so they list the same approvals.
What the reader keeps true:

- It reads through a consumer of its own, filtered to its tenant's subject
  and named in the create request (issue 15: the bus lets an approver create
  consumers only with its tenants' filters, so the server, not this code,
  keeps other tenants' announcements from it). The consumer is ephemeral
  (memory, one replica, gone after a minute unused), starts at the first
  sequence not yet read, and is deleted on ``close``; approvals held before
  the reader started are read too.
- A recreated stream (another creation time) is read again from its start.
- Only what decodes as a :class:`PendingAnnouncement` is returned; the gate
  publishes only valid ones, so anything else is never listed.
- Announcements carry identities and reasons, never content or recipient, so
  nothing read here needs an approver's entitlement to be seen.
"""

from __future__ import annotations

import contextlib
import secrets
from datetime import datetime
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import PendingAnnouncement

ALL_PENDING: Final = f"{names.APPROVAL_PENDING_PREFIX}.>"
BATCH: Final = 256
FETCH_TIMEOUT_S: Final = 2.0
IDLE_CONSUMER_S: Final = 60.0


class ApprovalStatus(msgspec.Struct, frozen=True):
    """Reply of ``smf.approval.status``: no content, anyone on the bus may ask."""

    approval_id: str
    state: str


class PendingReader:
    """Reads the announcements of one tenant (or all) from where it stopped last."""

    def __init__(self, js: JetStreamContext, tenant: str | None = None) -> None:
        self.js = js
        self.tenant = tenant
        self.subject: Final = names.approval_pending_subject(tenant) if tenant else ALL_PENDING
        self._next_seq = 1
        self._stream_created: datetime | None = None
        self._sub: JetStreamContext.PullSubscription | None = None
        self._consumer: str | None = None

    async def read_new(self) -> list[PendingAnnouncement]:
        """The announcements added since the last read, oldest first.

        Raises ``NotFoundError`` when the gate has not created its stream,
        :class:`smf_assurance.subjects.names.SubjectError` when the tenant is not a tenant
        id, and the bus's own errors as they come (a permissions violation
        among them, when this principal may not read that tenant).
        """
        info = await self.js.stream_info(names.APPROVAL_STREAM)
        if info.created != self._stream_created:
            await self.close()  # a new (or recreated) stream: read it all
            self._stream_created = info.created
            self._next_seq = 1
        if not info.state.messages or self._next_seq > info.state.last_seq:
            return []
        sub, pending = await self._position(max(self._next_seq, info.state.first_seq))
        found: list[PendingAnnouncement] = []
        while pending:
            try:
                batch = await sub.fetch(min(pending, BATCH), timeout=FETCH_TIMEOUT_S)
            except (NatsTimeoutError, TimeoutError):
                break
            for msg in batch:
                pending = msg.metadata.num_pending
                self._next_seq = msg.metadata.sequence.stream + 1
                try:
                    found.append(msgspec.json.decode(msg.data, type=PendingAnnouncement))
                except (msgspec.DecodeError, ValueError):
                    continue  # not an announcement the gate would publish: never listed
        if not pending:
            self._next_seq = max(self._next_seq, info.state.last_seq + 1)
        return found

    async def _position(self, start_seq: int) -> tuple[JetStreamContext.PullSubscription, int]:
        """The reader's consumer (made again if it expired idle) and what it has pending."""
        if self._sub is not None and self._consumer is not None:
            try:
                info = await self.js.consumer_info(names.APPROVAL_STREAM, self._consumer)
            except NotFoundError:
                await self.close()
            else:
                return self._sub, info.num_pending
        await self._open(start_seq)
        assert self._sub is not None
        assert self._consumer is not None
        info = await self.js.consumer_info(names.APPROVAL_STREAM, self._consumer)
        return self._sub, info.num_pending

    async def _open(self, start_seq: int) -> None:
        name = f"smf-pending-{secrets.token_hex(8)}"
        config = ConsumerConfig(
            name=name,
            filter_subject=self.subject,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start_seq,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=IDLE_CONSUMER_S,
            mem_storage=True,
            num_replicas=1,
        )
        await self.js.add_consumer(names.APPROVAL_STREAM, config)
        self._consumer = name
        self._sub = await self.js.pull_subscribe_bind(name, names.APPROVAL_STREAM)

    async def close(self) -> None:
        """Delete the reader's consumer (best effort: it expires when idle anyway)."""
        sub, name = self._sub, self._consumer
        self._sub, self._consumer = None, None
        if sub is not None:
            with contextlib.suppress(NatsError, TimeoutError):
                await sub.unsubscribe()
        if name is not None:
            with contextlib.suppress(NatsError, TimeoutError):
                await self.js.delete_consumer(names.APPROVAL_STREAM, name)


async def read_pending(js: JetStreamContext, tenant: str | None) -> list[PendingAnnouncement]:
    """Every announcement on the stream, oldest first, one per approval (its first)."""
    seen: dict[str, PendingAnnouncement] = {}
    reader = PendingReader(js, tenant)
    try:
        for announcement in await reader.read_new():
            seen.setdefault(announcement.approval_id, announcement)
    finally:
        await reader.close()
    return list(seen.values())


async def approval_state(nc: Client, approval_id: str, timeout: float) -> str:
    """The gate's current state of one approval (``unknown`` when it holds no record)."""
    reply = await nc.request(names.APPROVAL_STATUS, approval_id.encode(), timeout=timeout)
    return msgspec.json.decode(reply.data, type=ApprovalStatus).state
