"""The notifier: every entitled approver is told once that an approval waits, and reminded once.

What the loop keeps true:

- **Only entitled approvers.** The recipients of an approval are the approvers
  the roster (the registry file, re-read when it changes) lets resolve it:
  its tenant is one of theirs and they hold every role it requires
  (:func:`smf_assurance.approver.console.access.entitled`, the gate's own rule,
  ``smf_assurance.core.approval_rules.check_entitled``), and the operator's file
  names a contact for them under that tenant. A contact listed for anyone
  else (another tenant's attorney, a paralegal) receives nothing; a roster
  that cannot be read notifies nobody.
- **Once per (approval, approver, channel, kind)**, across restarts
  (:mod:`smf_assurance.approver.notify.sent`): the stream is read from its start at every
  start, and what the record holds is not sent again.
- **Only while pending.** Before each round, every open approval's state is
  asked of the gate (``smf.approval.status``); one that is resolved, expired,
  unknown to the gate, or past its ``expires_at_ms`` by this clock is dropped
  and gets nothing more, neither a first notice nor a reminder. A gate that
  does not answer gets nothing sent this round (fail closed: no notice about
  an approval whose state is not known).
- **A reminder**, once, from ``reminder_lead_ms`` before expiry, to those who
  were sent the first notice on that channel.
- **An outage changes nothing but the notices.** A failed delivery is logged by
  its kind (:class:`smf_assurance.approver.notify.channels.DeliveryError`: no address, URL or
  secret), retried with exponential back-off up to ``max_attempts`` per run,
  then given up with one error line. The notifier publishes nothing the gate
  reads and holds no key: the gate never waits on it, and it cannot approve,
  deny or extend anything; an approval nobody decides expires to a denial at
  the gate as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import aiohttp
import msgspec
import nats
import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.approver.console.access import Roster, entitled
from smf_assurance.approver.directory import Directory
from smf_assurance.approver.notify.channels import DeliveryError, post_webhook, send_email
from smf_assurance.approver.notify.config import Contact, NotifyConfig, TenantChannels
from smf_assurance.approver.notify.notice import (
    Notice,
    NoticeKind,
    NoticeWords,
    email_for,
    notice_for,
    slack_body,
    teams_body,
    words_for,
)
from smf_assurance.approver.notify.sent import Channel, SentKey, SentRecord
from smf_assurance.approver.pending import PendingReader, approval_state
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    MAX_TRACKED,
    PendingAnnouncement,
    SummaryReply,
    SummaryRequest,
)
from smf_assurance.subjects.bus_access import BusCredential, bus_error_reason, connect_options
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.registry import Principal

log = structlog.get_logger(__name__)

CLOSE_GRACE_SECONDS: Final = 5.0
"""How long closing waits for a loop that did not finish its round in time, once cancelled."""


@dataclass
class _Retry:
    attempts: int = 0
    next_at_ms: int = 0


class Notifier:
    """Reads announcements, asks their state, and sends what is due; one round per :meth:`step`."""

    def __init__(
        self,
        config: NotifyConfig,
        nc: Client,
        roster: Roster,
        record: SentRecord,
        session: aiohttp.ClientSession,
        clock: Callable[[], int] = wall_clock_ms,
        status_timeout: float = 2.0,
        directory: Directory | None = None,
    ) -> None:
        directory = directory or Directory()
        self.config = config
        self.nc = nc
        self.roster = roster
        self.record = record
        self.session = session
        self.clock = clock
        self.status_timeout = status_timeout
        self.reader = PendingReader(nc)
        self.open: dict[str, PendingAnnouncement] = {}
        self.directory = directory
        self.words: dict[str, NoticeWords] = {}
        """What the gate's summary said of each open approval whose tenant allows
        content in notices (:meth:`_summaries`)."""
        self._retries: dict[SentKey, _Retry] = {}
        self.rounds = 0
        self._stopping = asyncio.Event()
        """Rounds completed: what a test or a health probe waits on, never a sleep."""

    def stop(self) -> None:
        """End :meth:`run` after the round in flight, so what it sends is recorded."""
        self._stopping.set()

    async def run(self, interval: float) -> None:
        task = asyncio.current_task()
        while not self._stopping.is_set():
            try:
                await self.step()
            except (NatsError, TimeoutError) as exc:
                log.warning("notify_round_failed", error=bus_error_reason(exc))
            except Exception as exc:  # noqa: BLE001 - a notifier that stops leaves approvals unseen
                # by type only: a traceback's message may quote a contact, URL or secret
                log.error("notify_round_crashed", error=type(exc).__name__)
            # As in the console's board: Python 3.11's wait_for (inside nats-py's
            # requests) can swallow a cancel; honour it here so close() returns.
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._stopping.wait()

    async def step(self) -> None:
        await self._read()
        await self._summaries()
        now = self.clock()
        rounds = [self._round(a, now) for a in list(self.open.values())]
        await asyncio.gather(*rounds)
        self.rounds += 1

    async def _read(self) -> None:
        try:
            announcements = await self.reader.read_new()
        except (NatsError, TimeoutError) as exc:
            log.info("notify_announcements_unread", error=bus_error_reason(exc))
            return  # the open ones are still followed below; nothing new is read
        for announcement in announcements:
            if announcement.tenant_id in self.config.tenants:
                self.open.setdefault(announcement.approval_id, announcement)

    async def _summaries(self) -> None:
        """Ask the gate, once per approval, what a notice may say of the open approvals
        whose tenant allows content in notices. The gate answers only for tenants its
        operator opted in too, and only for pending ones; anything it leaves out, and
        every failure to ask, leaves the notice content-free (fail closed). The log
        names the failure, never a word of a summary."""
        wanted = {
            a.approval_id: a
            for a in self.open.values()
            if self.config.tenants[a.tenant_id].content and a.approval_id not in self.words
        }
        if not wanted:
            return
        asked = tuple(wanted)[:MAX_TRACKED]
        request = SummaryRequest(schema="smf.approval-summary/1", approval_ids=asked)
        try:
            reply = await self.nc.request(
                names.APPROVAL_SUMMARY, msgspec.json.encode(request), timeout=self.status_timeout
            )
        except (NatsError, TimeoutError) as exc:
            log.info("notify_summaries_unavailable", error=bus_error_reason(exc))
            return
        refused = (reply.headers or {}).get(names.HEADER_SERVICE_ERROR)
        if refused is not None:
            log.info("notify_summaries_refused", reason=refused)
            return
        try:
            summaries = msgspec.json.decode(reply.data, type=SummaryReply).summaries
        except msgspec.DecodeError:
            log.warning("notify_summaries_unreadable")
            return
        for summary in summaries:
            announcement = wanted.get(summary.approval_id)
            if announcement is None or announcement.tenant_id != summary.tenant_id:
                continue  # not asked, or not of the tenant the announcement names
            self.words[summary.approval_id] = words_for(
                summary, self.directory, announcement.channel
            )

    async def _round(self, announcement: PendingAnnouncement, now: int) -> None:
        approval_id = announcement.approval_id
        if now >= announcement.expires_at_ms:
            self._drop(approval_id)
            return
        try:
            state = await approval_state(self.nc, approval_id, self.status_timeout)
        except (NatsError, TimeoutError, msgspec.DecodeError) as exc:
            log.warning(
                "notify_state_unknown", approval_id=approval_id, error=bus_error_reason(exc)
            )
            return
        if state != "pending":
            self._drop(approval_id)
            return
        tenant = self.config.tenants[announcement.tenant_id]
        sends = [
            self._serve(announcement, tenant, principal.name, contact, channel, now)
            for principal in self._entitled(announcement)
            if (contact := tenant.contacts.get(principal.name)) is not None
            for channel in _channels(contact)
        ]
        await asyncio.gather(*sends)

    def _entitled(self, announcement: PendingAnnouncement) -> list[Principal]:
        registry = self.roster.current()
        return sorted(
            (
                p
                for p in registry.principals.values()
                if p.entry.role == "approver"
                and entitled(p, announcement.tenant_id, announcement.required_roles)
            ),
            key=lambda p: p.name,
        )

    def _drop(self, approval_id: str) -> None:
        self.open.pop(approval_id, None)
        self.words.pop(approval_id, None)
        self._retries = {k: r for k, r in self._retries.items() if k[0] != approval_id}

    async def _serve(
        self,
        announcement: PendingAnnouncement,
        tenant: TenantChannels,
        approver_id: str,
        contact: Contact,
        channel: Channel,
        now: int,
    ) -> None:
        """The first notice if not sent yet; else the reminder once it is due."""
        first: SentKey = (announcement.approval_id, approver_id, channel, "pending")
        if not await self.record.sent(first):
            await self._attempt(first, announcement, tenant, contact, now)
            return
        if now < announcement.expires_at_ms - self.config.reminder_lead_ms:
            return
        reminder: SentKey = (announcement.approval_id, approver_id, channel, "reminder")
        if not await self.record.sent(reminder):
            await self._attempt(reminder, announcement, tenant, contact, now)

    async def _attempt(
        self,
        key: SentKey,
        announcement: PendingAnnouncement,
        tenant: TenantChannels,
        contact: Contact,
        now: int,
    ) -> None:
        retry = self._retries.setdefault(key, _Retry())
        if retry.attempts >= self.config.max_attempts or now < retry.next_at_ms:
            return
        retry.attempts += 1
        approval_id, approver_id, channel, kind = key
        fields = {"approval_id": approval_id, "approver_id": approver_id, "channel": channel}
        words = self.words.get(approval_id) if tenant.content else None
        notice = notice_for(announcement, _kind(kind), self.config.console_url, tenant.zone, words)
        try:
            await self._send(notice, tenant, contact, channel)
        except DeliveryError as exc:
            delay_ms = int(self.config.retry_seconds * 1000) << (retry.attempts - 1)
            retry.next_at_ms = now + delay_ms
            log.warning(
                "notify_failed", kind=kind, error=exc.kind, attempt=retry.attempts, **fields
            )
            if retry.attempts >= self.config.max_attempts:
                log.error("notify_gave_up", kind=kind, error=exc.kind, **fields)
            return
        await self.record.mark(key, self.clock())
        self._retries.pop(key, None)
        log.info("notify_sent", kind=kind, **fields)

    async def _send(
        self, notice: Notice, tenant: TenantChannels, contact: Contact, channel: Channel
    ) -> None:
        if channel == "email":
            assert tenant.smtp is not None  # load_config checks both
            assert contact.email is not None
            await send_email(tenant.smtp, email_for(notice, tenant.smtp.sender, contact.email))
            return
        assert tenant.webhook_secret is not None
        assert contact.webhook_url is not None
        body = slack_body(notice) if contact.webhook_format == "slack" else teams_body(notice)
        await post_webhook(
            self.session,
            contact.webhook_url,
            tenant.webhook_secret,
            body,
            wall_clock_ms() // 1000,  # the receiver checks freshness against its own wall clock
            self.config.webhook_timeout_seconds,
        )


def _channels(contact: Contact) -> tuple[Channel, ...]:
    email: tuple[Channel, ...] = ("email",) if contact.email is not None else ()
    webhook: tuple[Channel, ...] = ("webhook",) if contact.webhook_url is not None else ()
    return email + webhook


def _kind(kind: str) -> NoticeKind:
    return "reminder" if kind == "reminder" else "pending"


# --- running it -------------------------------------------------------------------


@dataclass
class NotifierSettings:
    nats_url: str
    registry: Path
    config: NotifyConfig
    credential: BusCredential | None = None
    """A ``console``-role principal: it reads every tenant's announcements and asks states."""
    interval_seconds: float = 1.0
    status_timeout: float = 2.0
    clock: Callable[[], int] = wall_clock_ms
    directory: Directory | None = None
    """The tenant directory, for the names a notice gives where content is allowed."""


@dataclass
class RunningNotifier:
    notifier: Notifier
    nc: Client
    session: aiohttp.ClientSession
    record: SentRecord
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    finish_seconds: float = CLOSE_GRACE_SECONDS
    """How long a round may still take: its sends end within their own timeouts."""

    async def close(self) -> None:
        """Let the round in flight finish and record what it sent (a notice cancelled
        between the server's acceptance and the record would go out again after a
        restart), then cancel whatever is still running."""
        self.notifier.stop()
        if self.tasks:
            _, late = await asyncio.wait(self.tasks, timeout=self.finish_seconds)
            for task in late:
                task.cancel()
            if late:
                _, stuck = await asyncio.wait(late, timeout=CLOSE_GRACE_SECONDS)
                for task in stuck:
                    log.error("notify_task_did_not_stop", task=task.get_name())
        with contextlib.suppress(NatsError, TimeoutError):
            await self.notifier.reader.close()
        await self.session.close()
        await self.record.close()
        if not self.nc.is_closed:
            await self.nc.close()


async def _log_nats_error(exc: Exception) -> None:
    log.warning("notify_bus_error", error=bus_error_reason(exc))


async def start_notifier(settings: NotifierSettings) -> RunningNotifier:
    """Open the record, connect (reconnecting for as long as it runs), and start the loop."""
    record = await SentRecord.open(settings.config.record)
    try:
        nc = await nats.connect(
            settings.nats_url,
            name="smf-approver-notify",
            connect_timeout=2,
            max_reconnect_attempts=-1,
            reconnect_time_wait=1,
            error_cb=_log_nats_error,
            **connect_options(settings.credential),
        )
    except BaseException:
        await record.close()
        raise
    session = aiohttp.ClientSession()
    notifier = Notifier(
        settings.config,
        nc,
        Roster(settings.registry),
        record,
        session,
        settings.clock,
        settings.status_timeout,
        settings.directory,
    )
    config = settings.config
    slowest_send = max(
        [config.webhook_timeout_seconds]
        + [t.smtp.timeout_seconds for t in config.tenants.values() if t.smtp is not None]
    )
    running = RunningNotifier(notifier, nc, session, record)
    running.finish_seconds = settings.status_timeout + slowest_send + CLOSE_GRACE_SECONDS
    running.tasks.append(asyncio.create_task(notifier.run(settings.interval_seconds)))
    return running
