"""Notifications to entitled approvers, end to end.

A real nats-server with the full stack (``smf_assurance.ops.local.stack.start_stack``: gate and
example connectors, bus permissions on), real held filings proposed through
the gate (``tests.support.console.hold_filing``), the notifier from
``smf_assurance.approver.notify.service.start_notifier`` connected as the ``console``
principal, a real SMTP server (aiosmtpd's protocol on 127.0.0.1, port 0) and a
real aiohttp webhook receiver on 127.0.0.1 that checks every request's
signature with its own HMAC code, written from the documented algorithm (not
with ``smf_assurance.approver.notify.channels``).

The roster: ``attorney-alex`` and ``attorney-bea`` (tenant-acme, licensed
attorneys: entitled), ``paralegal-pat`` (tenant-acme, no licensed role: the
requester) and ``olive-other`` (an attorney of tenant-beta). The notifier's
file lists contacts for all four under tenant-acme, so every non-entitled one
is a contact the notifier could reach and must not.

What these tests prove:

- One e-mail and one signed webhook per entitled approver per approval, in
  Slack and Teams format, and nothing to the paralegal or the other tenant's
  attorney, over further rounds too; no message carries the held content, an
  argument, the destination address, the matter, organization or actor: the
  bytes are absent from every e-mail and every webhook body; each carries the
  console link, the tenant and the expiry in UTC (or the tenant's configured zone).
- A reminder reaches each entitled approver once, before expiry (the gate
  still says ``pending`` when it lands), and none for an approval resolved
  before its reminder was due, nor for one that expired first.
- SMTP refusing, a webhook answering 500 and a webhook that never answers:
  attempts stop at the bound, nothing is sent to anyone else, the approval
  stays pending, and an attorney's allow-once still executes it once (one
  filing in the outbox); no log event carries a secret, an address or a URL.
- A restart reads what was announced while it was down and sends it, and
  sends nothing it had already sent; a second notifier cannot open a record
  in use.
- ``smf-assurance notify`` runs until SIGTERM with one readiness line and
  delivers; a bad config is one line and exit 1, naming the key and never
  the secret.

What they do not prove: delivery through real Slack, Teams or a mail relay
with STARTTLS and login (the local SMTP server speaks plain SMTP without
authentication); the window between a server's acceptance and the record's
commit (``smf_assurance.approver.notify.sent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import pytest
from aiohttp import web
from aiosmtpd.smtp import SMTP, Envelope, Session
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.approver.client import ApproverClient
from smf_assurance.approver.console.access import Roster
from smf_assurance.approver.directory import load_directory
from smf_assurance.approver.notify.config import NotifyConfig, NotifyConfigError, load_config
from smf_assurance.approver.notify.notice import email_for, notice_for
from smf_assurance.approver.notify.sent import RecordInUseError, SentRecord
from smf_assurance.approver.notify.service import (
    Notifier,
    NotifierSettings,
    RunningNotifier,
    start_notifier,
)
from smf_assurance.approver.pending import approval_state
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.defaults import CONSOLE, OPERATOR
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.notices import NOTICES_FILE
from smf_assurance.ops.local.stack import Stack, seed_demo_directory, start_stack
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir, provision_demo
from smf_assurance.pipeline.chain.announcements import AnnouncementDesk
from smf_assurance.pipeline.service import Requester
from smf_assurance.pipeline.stores.streams import approval_stream_config
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import PendingAnnouncement, SummaryReply, SummaryRequest
from smf_assurance.subjects.bus_access import connect_options
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.messages import ProposedDestination
from smf_assurance.subjects.registry import KeyRegistry, RegistryFile, encode_registry, entry_for
from tests.support.announcements import pending_announcement
from tests.support.bus_helpers import wait_for
from tests.support.clocks import OffsetClock
from tests.support.console import (
    ATTORNEY,
    OTHER_TENANT_ATTORNEY,
    PARALEGAL,
    hold_filing,
    outbox,
    provision,
)

FILING = SCENARIOS[0]
SECOND_ATTORNEY = "attorney-bea"
ENTITLED = (ATTORNEY, SECOND_ATTORNEY)
EVERYONE = (ATTORNEY, SECOND_ATTORNEY, PARALEGAL, OTHER_TENANT_ATTORNEY)
WEBHOOK_SECRET = "whsec-acme-0123456789abcdef"
DESTINATION = "clerk-intake@sdny.example"
LEAD_S = 60
TTL_MS = 300_000
"""customer.acme.transmission-window in smf_assurance/governance/corpus/scenarios/policies.json."""


def mailbox(principal: str) -> str:
    return f"{principal}@firm.example"


def forbidden(content: str) -> list[bytes]:
    """Bytes of what is held that no notification may carry."""
    values = [
        content,
        *(str(v) for v in FILING.arguments.values()),
        DESTINATION,
        FILING.actor.matter_id,
        FILING.actor.organization_id,
        PARALEGAL,
        FILING.native_tool,
    ]
    return [v.encode() for v in values]


# --- a real SMTP server --------------------------------------------------------------


@dataclass
class Mail:
    recipients: tuple[str, ...]
    raw: bytes

    @property
    def message(self) -> EmailMessage:
        parsed = message_from_bytes(self.raw, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed

    @property
    def text(self) -> str:
        text: str = self.message.get_content()
        return text


@dataclass
class MailServer:
    """aiosmtpd's SMTP protocol on this loop; ``refuse`` answers every DATA with 451."""

    port: int = 0
    received: list[Mail] = field(default_factory=list)
    refused: int = 0
    refuse: bool = False

    async def handle_DATA(self, _server: SMTP, _session: Session, envelope: Envelope) -> str:
        if self.refuse:
            self.refused += 1
            return "451 4.3.0 mail system down for the test"
        assert isinstance(envelope.content, bytes)
        self.received.append(Mail(tuple(envelope.rcpt_tos), envelope.content))
        return "250 OK"

    def to(self, principal: str) -> list[Mail]:
        return [m for m in self.received if mailbox(principal) in m.recipients]


@contextlib.asynccontextmanager
async def mail_server() -> AsyncIterator[MailServer]:
    mail = MailServer()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(mail, hostname="smtp.test"), "127.0.0.1", 0)
    mail.port = server.sockets[0].getsockname()[1]
    try:
        yield mail
    finally:
        server.close()
        await server.wait_closed()


# --- a real webhook receiver -------------------------------------------------------


@dataclass
class Hook:
    approver: str
    body: bytes
    signed: bool

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Checks ``X-Smf-Signature`` as README "Notifications" tells a receiver to."""

    url: str = ""
    received: list[Hook] = field(default_factory=list)
    answer: dict[str, int] = field(default_factory=dict)
    """approver -> status to answer (default 200); 0 never answers."""
    attempts: dict[str, int] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.Response:
        approver = request.match_info["approver"]
        body = await request.read()
        self.attempts[approver] = self.attempts.get(approver, 0) + 1
        status = self.answer.get(approver, 200)
        if status == 0:
            await asyncio.Event().wait()  # a receiver that hangs until the client gives up
        timestamp = request.headers.get("X-Smf-Timestamp", "")
        expected = hmac.new(
            WEBHOOK_SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256
        ).hexdigest()
        fresh = timestamp.isdigit() and abs(time.time() - int(timestamp)) <= 300
        signed = fresh and hmac.compare_digest(
            f"v1={expected}", request.headers.get("X-Smf-Signature", "")
        )
        if status == 200:
            self.received.append(Hook(approver, body, signed))
        return web.Response(status=status if signed else 401)

    def to(self, principal: str) -> list[Hook]:
        return [h for h in self.received if h.approver == principal]


@contextlib.asynccontextmanager
async def webhook_receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hook/{approver}", receiver.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    receiver.url = f"http://127.0.0.1:{int(runner.addresses[0][1])}"
    try:
        yield receiver
    finally:
        await runner.cleanup()


# --- the world -----------------------------------------------------------------------


def write_config(
    path: Path,
    mail: MailServer,
    receiver: Receiver,
    *,
    max_attempts: int = 3,
    principals: tuple[str, ...] = EVERYONE,
    content: bool = False,
) -> Path:
    """Contacts for everyone under tenant-acme (or ``principals``, each an approver of
    the roster: an unknown id is refused); attorney-bea's webhook in Teams format."""
    secret_file = path.parent / "acme-webhook.secret"
    secret_file.write_text(WEBHOOK_SECRET + "\n")
    lines = [
        'console_url = "https://console.firm.example/"',
        f"reminder_lead_seconds = {LEAD_S}",
        f'record = "{path.parent / "notify.sqlite"}"',
        f"max_attempts = {max_attempts}",
        "retry_seconds = 0.05",
        "webhook_timeout_seconds = 0.5",
        "[tenants.tenant-acme]",
        f"content = {'true' if content else 'false'}",
        "[tenants.tenant-acme.smtp]",
        'host = "127.0.0.1"',
        f"port = {mail.port}",
        'sender = "approvals@firm.example"',
        "timeout_seconds = 5",
        "[tenants.tenant-acme.webhook]",
        f'secret_file = "{secret_file}"',
    ]
    for principal in principals:
        form = "teams" if principal == SECOND_ATTORNEY else "slack"
        lines += [
            f"[tenants.tenant-acme.approvers.{principal}]",
            f'email = "{mailbox(principal)}"',
            f'webhook_url = "{receiver.url}/hook/{principal}"',
            f'webhook_format = "{form}"',
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class World:
    state: StateDir
    stack: Stack
    clock: OffsetClock
    nc: Client
    mail: MailServer
    receiver: Receiver
    config_path: Path
    notifier: RunningNotifier | None = None

    @property
    def config(self) -> NotifyConfig:
        return load_config(self.config_path)

    async def start(self) -> RunningNotifier:
        self.notifier = await start_notifier(
            NotifierSettings(
                nats_url=self.stack.url,
                registry=self.state.registry,
                config=self.config,
                credential=self.state.existing_credential(CONSOLE),
                interval_seconds=0.05,
                clock=self.clock,
                directory=load_directory(self.state.directory),
            )
        )
        return self.notifier

    async def stop(self) -> None:
        if self.notifier is not None:
            await self.notifier.close()
            self.notifier = None

    async def rounds(self, count: int = 3) -> None:
        """Wait until the running notifier has done ``count`` more full rounds."""
        assert self.notifier is not None
        notifier = self.notifier.notifier
        target = notifier.rounds + count
        await wait_for(lambda: notifier.rounds >= target, timeout=15)

    async def hold(self, content: str, destination: str = DESTINATION) -> str:
        """The demo filing with this content and a destination address, held by the gate."""
        runtime = ProposalClient(
            self.nc,
            self.state.key("runtime"),
            RUNTIME_ID,
            "1.0",
            ADAPTER_ID,
            gate_keys=self.state.gate_keys(),
        )
        verdict = await runtime.propose(
            runtime.build(
                native_tool=FILING.native_tool,
                arguments=FILING.arguments,
                actor=FILING.actor,
                facts=FILING.facts,
                content=content,
                destination=ProposedDestination(
                    address=destination, locality=FILING.destination.locality
                ),
            )
        )
        assert verdict.outcome == "held", verdict.reason_codes
        assert verdict.approval_id is not None
        return verdict.approval_id

    def approver(self, principal: str) -> ApproverClient:
        return ApproverClient(self.nc, self.state.key(principal), principal)

    async def state_of(self, approval_id: str) -> str:
        return await approval_state(self.nc, approval_id, 5)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with a_world(tmp_path) as made:
        yield made


@contextlib.asynccontextmanager
async def a_world(
    tmp_path: Path, *, gate_allows: bool = False, notifier_allows: bool = False
) -> AsyncIterator[World]:
    """The roster, the stack, the mail server and the webhook receiver; ``gate_allows``:
    the gate's operator lets tenant-acme's notices carry words (``notices.toml``, with the
    demo's tenant directory); ``notifier_allows``: the notifier's file does."""
    configure_logging(json=True, level=os.environ.get("NOTIFY_TEST_LOG", "error"))
    state = StateDir(tmp_path / "state")
    provision(state)
    current = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
    bea = entry_for(
        state.key(SECOND_ATTORNEY),
        SECOND_ATTORNEY,
        "approver",
        tenants=("tenant-acme",),
        licensed_roles=("licensed_attorney",),
    )
    state.registry.write_bytes(encode_registry((*current.entries, bea)))
    seed_demo_directory(state)
    if gate_allows:
        (state.root / NOTICES_FILE).write_text('content_tenants = ["tenant-acme"]\n')
    stack = await start_stack(state)
    clock = OffsetClock()
    stack.gate.desk.clock = clock
    nc = await nats.connect(stack.url, **connect_options(state.existing_credential(OPERATOR)))
    async with mail_server() as mail, webhook_receiver() as receiver:
        config = write_config(tmp_path / "notify.toml", mail, receiver, content=notifier_allows)
        world = World(state, stack, clock, nc, mail, receiver, config)
        try:
            yield world
        finally:
            await world.stop()
            await nc.drain()
            await stack.stop()


def of(approval_id: str, items: list[Mail] | list[Hook]) -> list[Any]:
    """The messages about one approval (each names its id)."""
    return [i for i in items if approval_id in (i.text if isinstance(i, Mail) else i.body.decode())]


def expiry_utc(expires_at_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires_at_ms / 1000))


async def until(predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 15) -> None:
    await wait_for(predicate, timeout=timeout)


# --- the tests -------------------------------------------------------------------------


@pytest.mark.claim("notifications.entitled-only")
async def test_each_entitled_approver_gets_one_email_and_one_webhook_without_content(
    world: World,
) -> None:
    content = f"Motion to compel, sealed exhibit {os.urandom(6).hex()}"
    await world.start()
    approval_id = await world.hold(content)
    await until(
        lambda: all(len(world.mail.to(p)) == 1 and len(world.receiver.to(p)) == 1 for p in ENTITLED)
    )
    await world.rounds(5)  # more rounds send nothing more, and nothing to anyone else

    for principal in ENTITLED:
        assert len(world.mail.to(principal)) == 1
        assert len(world.receiver.to(principal)) == 1
    for principal in (PARALEGAL, OTHER_TENANT_ATTORNEY):
        assert world.mail.to(principal) == []
        assert world.receiver.to(principal) == []
        assert principal not in world.receiver.attempts
    assert len(world.mail.received) == 2
    assert len(world.receiver.received) == 2
    assert all(h.signed for h in world.receiver.received)

    announced_expiry = None
    for mail in world.mail.received:
        text = mail.text
        assert approval_id in text
        assert "https://console.firm.example/?approval=sha256%3A" in text
        assert "Tenant: tenant-acme" in text
        announced_expiry = text.split("Expires: ")[1].split(" (")[0]
        assert announced_expiry.endswith(" UTC")
    slack = world.receiver.to(ATTORNEY)[0].json
    assert slack["text"] == "An approval for tenant-acme is waiting"
    assert slack["blocks"][1]["elements"][0]["url"].endswith(approval_id.replace(":", "%3A"))
    teams = world.receiver.to(SECOND_ATTORNEY)[0].json
    assert teams["@type"] == "MessageCard"
    assert {f["name"]: f["value"] for f in teams["sections"][0]["facts"]} == {
        "Approval": approval_id,
        "Tenant": "tenant-acme",
        "Expires": announced_expiry,
    }
    for raw in [m.raw for m in world.mail.received] + [h.body for h in world.receiver.received]:
        for secret in forbidden(content):
            assert secret not in raw, secret


async def test_reminder_before_expiry_once_and_none_after_resolution_or_expiry(
    world: World,
) -> None:
    await world.start()
    waiting = await world.hold(f"waiting {os.urandom(6).hex()}")
    resolved = await world.hold(f"resolved {os.urandom(6).hex()}")
    await until(lambda: len(world.mail.received) == 4 and len(world.receiver.received) == 4)
    _, reply = await world.approver(ATTORNEY).review_and_resolve(resolved, "deny")
    assert reply.accepted
    assert await world.state_of(resolved) == "denied"

    world.clock.advance(TTL_MS - LEAD_S * 1000 + 1_000)  # inside the reminder window
    await until(lambda: len(world.mail.received) == 6 and len(world.receiver.received) == 6)
    assert await world.state_of(waiting) == "pending"  # it landed before expiry
    await world.rounds(5)

    reminders = [m for m in world.mail.received if m.message["Subject"].startswith("Reminder")]
    assert sorted(m.recipients[0] for m in reminders) == sorted(mailbox(p) for p in ENTITLED)
    assert all(waiting in m.text for m in reminders)
    hooks = [h for h in world.receiver.received if "Reminder" in h.body.decode()]
    assert sorted(h.approver for h in hooks) == sorted(ENTITLED)
    assert of(resolved, world.mail.received) == of(resolved, world.mail.received)[:2]
    assert len(of(resolved, world.mail.received)) == 2
    assert len(of(resolved, world.receiver.received)) == 2

    expiring = await world.hold(f"expiring {os.urandom(6).hex()}")
    await until(lambda: len(of(expiring, world.mail.received)) == 2)
    await until(lambda: len(of(expiring, world.receiver.received)) == 2)
    world.clock.advance(TTL_MS + 1_000)  # past its expiry before any round saw the window
    await world.rounds(5)
    assert len(of(expiring, world.mail.received)) == 2
    assert len(of(expiring, world.receiver.received)) == 2
    assert len(of(waiting, world.mail.received)) == 4


@pytest.mark.claim("notifications.outage-stays-pending")
async def test_outage_leaves_the_approval_pending_and_resolvable(
    world: World, capfd: pytest.CaptureFixture[str]
) -> None:
    world.mail.refuse = True
    world.receiver.answer = {ATTORNEY: 500, SECOND_ATTORNEY: 0}  # 500, and a hang
    configure_logging(json=True, level="debug")
    await world.start()
    approval_id = await world.hold(f"during the outage {os.urandom(6).hex()}")
    await until(
        lambda: (
            world.mail.refused == 6 and all(world.receiver.attempts.get(p) == 3 for p in ENTITLED)
        )
    )
    await world.rounds(5)
    logged = capfd.readouterr().err
    events = [json.loads(line) for line in logged.splitlines() if line.startswith("{")]

    assert world.mail.refused == 6  # three attempts each for two entitled approvers, no more
    assert all(world.receiver.attempts.get(p) == 3 for p in ENTITLED)
    assert set(world.receiver.attempts) == set(ENTITLED)
    assert world.mail.received == []
    assert world.receiver.received == []
    assert await world.state_of(approval_id) == "pending"

    failures = [e for e in events if e["event"] == "notify_failed"]
    assert {e["error"] for e in failures} == {
        "smtp_refused",
        "webhook_status_500",
        "webhook_timeout",
    }
    assert len([e for e in events if e["event"] == "notify_gave_up"]) == 4
    for secret in (WEBHOOK_SECRET, world.receiver.url, "@firm.example"):
        assert secret not in logged

    view, reply = await world.approver(ATTORNEY).review_and_resolve(approval_id, "allow-once")
    assert reply.accepted, reply.reason_codes
    await until(lambda: len(outbox(world.state)) == 1)
    await until(lambda: _is(world, approval_id, "consumed"))
    assert view.binding.approval_id == approval_id


async def _is(world: World, approval_id: str, state: str) -> bool:
    return await world.state_of(approval_id) == state


@pytest.mark.claim("notifications.outage-stays-pending")
async def test_a_restart_sends_what_it_missed_and_nothing_twice(world: World) -> None:
    await world.start()
    with pytest.raises(RecordInUseError, match="held by another notifier"):
        await SentRecord.open(world.config.record)  # a second notifier on it would resend
    first = await world.hold(f"first {os.urandom(6).hex()}")
    # Stopped as soon as one notice is accepted: the others of that round are in
    # flight, and a stop must still record each one it sent.
    await until(lambda: len(world.mail.received) + len(world.receiver.received) >= 1)
    await world.stop()

    missed = await world.hold(f"held while the notifier was down {os.urandom(6).hex()}")
    await world.start()
    await until(lambda: len(of(missed, world.mail.received)) == 2)
    await until(lambda: len(of(missed, world.receiver.received)) == 2)
    await world.rounds(5)
    for principal in ENTITLED:
        assert len(of(first, world.mail.to(principal))) == 1
        assert len(of(first, world.receiver.to(principal))) == 1
    assert len(world.mail.received) == 4
    assert len(world.receiver.received) == 4


def stray_announcement(now_ms: int) -> PendingAnnouncement:
    """A well-formed announcement of an approval no gate holds."""
    return PendingAnnouncement(
        schema="smf.approval-pending/2",
        approval_id="sha256:" + os.urandom(32).hex(),
        tenant_id="tenant-acme",
        required_roles=("licensed_attorney",),
        required_approvals=1,
        created_at_ms=now_ms,
        expires_at_ms=now_ms + TTL_MS,
        capability="transmit",
        channel="court",
        locality="external",
        native_tool=FILING.native_tool,
        rule_ids=(),
        reason_codes=(),
    )


async def test_an_announcement_the_gate_does_not_hold_notifies_nobody(world: World) -> None:
    """Only the gate may publish announcements; one the gate holds no record of
    (an operator's stray publish, or from before a gate restart) is ``unknown``
    on ``smf.approval.status`` and nobody is told of it."""
    stray = stray_announcement(world.clock())
    await world.nc.jetstream().publish(
        "smf.approval.pending.tenant-acme", msgspec.json.encode(stray)
    )
    await world.start()
    real = await world.hold(f"after the stray {os.urandom(6).hex()}")
    await until(lambda: len(of(real, world.mail.received)) == 2)
    await until(lambda: len(of(real, world.receiver.received)) == 2)
    await world.rounds(5)
    assert await world.state_of(stray.approval_id) == "unknown"
    assert of(stray.approval_id, world.mail.received) == []
    assert of(stray.approval_id, world.receiver.received) == []
    assert len(world.mail.received) == 2


async def test_without_a_gate_to_confirm_pending_nothing_is_sent(
    demo_state: StateDir, nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    """Fail closed: nobody lists announcements yet, then an announcement listed on a bus
    where no gate answers ``smf.approval.status``: each round sends nothing, to anyone."""
    async with mail_server() as mail, webhook_receiver() as receiver:
        config = load_config(write_config(tmp_path / "notify.toml", mail, receiver))
        nc = await nats.connect(nats_server.url)
        record = await SentRecord.open(config.record)
        session = aiohttp.ClientSession()
        notifier = Notifier(config, nc, Roster(demo_state.registry), record, session)
        try:
            await notifier.step()  # nobody lists announcements on this bus
            assert notifier.open == {}
            js = nc.jetstream()
            desk = AnnouncementDesk(js, lambda: KeyRegistry({}))  # the gate's listing alone

            async def listing(msg: Msg) -> None:
                await msg.respond(await desk.handle(msg.data, Requester(False, None)))

            await nc.subscribe(names.APPROVAL_ANNOUNCEMENTS, cb=listing)
            await notifier.step()  # no SMF_APPROVALS stream on this bus
            assert notifier.open == {}
            await js.add_stream(approval_stream_config())
            announcement = stray_announcement(wall_clock_ms())
            await js.publish("smf.approval.pending.tenant-acme", msgspec.json.encode(announcement))
            for _ in range(3):
                await notifier.step()
            assert list(notifier.open) == [announcement.approval_id]  # still waiting to know
        finally:
            await notifier.reader.close()
            await session.close()
            await record.close()
            await nc.close()
    assert mail.received == []
    assert receiver.attempts == {}


# --- configuration and the command line -----------------------------------------------


def test_a_bad_config_is_refused_naming_the_key_never_the_secret(tmp_path: Path) -> None:
    secret = tmp_path / "s"
    secret.write_text("hunter2-very-secret")
    base = f'console_url = "https://c.example/"\n[tenants.acme.webhook]\nsecret_file = "{secret}"\n'
    cases = {
        "": "Object missing required field `console_url`",
        'console_url = "ftp://x"\n[tenants]\n': "console_url: not an http(s) URL",
        base + '[tenants.acme.approvers.a]\nemail = "a@x.example"\n': "an email needs",
        base + "[tenants.acme.approvers.a]\n": "names neither email nor webhook_url",
        base + '[tenants.acme.approvers.a]\nwebhook_url = "hooks"\n': "not an http(s) URL",
        'console_url = "https://c.example/"\n[tenants.acme.approvers.a]\n'
        'webhook_url = "https://h.example/x"\n': "a webhook needs",
        'console_url = "https://c.example/"\n[tenants."a.b".approvers]\n': "not a tenant id",
        'console_url = "https://c.example/"\n[tenants.acme.webhook]\nsecret_env = "NOPE"\n'
        "[tenants.acme.approvers]\n": "$NOPE is not set",
        'console_url = "https://c.example/"\n[tenants.acme.smtp]\nhost = "h"\n'
        'sender = "s@x"\nusername = "u"\n[tenants.acme.approvers]\n': "come together",
        "console_url = [": "is not TOML",
        'console_url = "https://c.example/"\n[tenants.acme.smtp]\nhost = "h"\n'
        f'sender = "s@x"\nusername = "u"\npassword_file = "{secret}"\n[tenants.acme.approvers]\n': (
            "a login needs starttls = true"
        ),
        base + '[tenants.acme.approvers.a]\nwebhook_url = "http://hooks.example/x"\n': (
            "https required off this machine"
        ),
        'console_url = "https://c.example/"\nsurprise = 1\n[tenants]\n': "unknown field",
    }
    for text, reason in cases.items():
        path = tmp_path / "notify.toml"
        path.write_text(text)
        with pytest.raises(NotifyConfigError) as refused:
            load_config(path, environ={})
        assert reason in str(refused.value), (text, refused.value)
        assert "hunter2" not in str(refused.value)

    path = tmp_path / "notify.toml"
    path.write_text(
        base.replace(f'secret_file = "{secret}"', 'secret_env = "HOOK"')
        + '[tenants.acme.approvers.a]\nwebhook_url = "https://h.example/x"\n'
    )
    config = load_config(path, environ={"HOOK": "hunter2-from-env"})
    assert "hunter2" not in repr(config)
    assert config.tenants["acme"].webhook_secret is not None
    assert config.tenants["acme"].webhook_secret.reveal() == "hunter2-from-env"
    assert config.record == tmp_path / "notify.sqlite"
    with pytest.raises(NotifyConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


@pytest.mark.claim("notifications.local-time")
def test_a_notice_says_the_expiry_in_the_tenants_time_zone(tmp_path: Path) -> None:
    """Issue 38: the expiry in the time the tenant's approvers read (its ``time_zone``,
    else the file's, else UTC), with its offset at that instant and the zone's name, as
    the console writes it; a zone the machine does not know is refused naming the key."""
    base = 'console_url = "https://c.example/"\n'
    tenants = (
        '[tenants.acme]\ntime_zone = "America/New_York"\n[tenants.acme.approvers]\n'
        '[tenants.beta.approvers]\n[tenants.gamma]\ntime_zone = "UTC"\n'
        "[tenants.gamma.approvers]\n"
    )
    path = tmp_path / "notify.toml"
    path.write_text(base + 'time_zone = "Europe/London"\n' + tenants)
    config = load_config(path, environ={})
    winter = 1_796_458_615_000  # 2026-12-05 08:16:55 UTC
    summer = 1_783_000_805_000  # 2026-07-02 14:00:05 UTC

    def expiry(tenant: str, at_ms: int) -> str:
        announcement = pending_announcement(
            tenant, "sha256:" + "a" * 64, created_at_ms=at_ms - 300_000, expires_at_ms=at_ms
        )
        notice = notice_for(
            announcement, "pending", config.console_url, config.tenants[tenant].zone
        )
        text = email_for(notice, "a@x.example", "b@x.example").get_content()
        assert f"Expires: {notice.expiry} (denied if nobody decides by then)" in text
        return notice.expiry

    assert expiry("acme", winter) == "2026-12-05 03:16:55 UTC-05:00 (America/New_York)"
    assert expiry("acme", summer) == "2026-07-02 10:00:05 UTC-04:00 (America/New_York)"
    assert expiry("beta", winter) == "2026-12-05 08:16:55 UTC+00:00 (Europe/London)"
    assert expiry("beta", summer) == "2026-07-02 15:00:05 UTC+01:00 (Europe/London)"
    assert expiry("gamma", summer) == "2026-07-02 14:00:05 UTC"
    for text, key in (
        (base + 'time_zone = "Mars/Olympus"\n' + tenants, "time_zone: 'Mars/Olympus'"),
        (base + tenants.replace("America/New_York", "EST5EDT/../x"), "tenants.acme.time_zone"),
    ):
        path.write_text(text)
        with pytest.raises(NotifyConfigError, match="is not a time zone this machine knows"):
            load_config(path, environ={})
        with pytest.raises(NotifyConfigError) as refused:
            load_config(path, environ={})
        assert str(refused.value).startswith(key)


def test_notify_help_and_a_bad_config_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as shown:
        main(["notify", "--help"])
    assert shown.value.code == 0
    assert "--config FILE" in capsys.readouterr().out
    bad = tmp_path / "notify.toml"
    bad.write_text('console_url = "https://c.example/"\n[tenants.acme.approvers.a]\n')
    assert main(["notify", "--config", str(bad), "--nats", "nats://127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "smf-assurance: bad notifier config: tenants.acme.approvers.a: "
        "names neither email nor webhook_url\n"
    )
    assert main(["up", "--state-dir", str(tmp_path / "state"), "--notify", str(bad)]) == 1
    assert capsys.readouterr().err.startswith("smf-assurance: bad notifier config: ")
    assert not (tmp_path / "state").exists()  # refused before anything was made
    clash = ["up", "--connectors-only", "--nats", "nats://127.0.0.1:1", "--notify", str(bad)]
    assert main(clash) == 2
    assert "--connectors-only runs no gate: drop --notify" in capsys.readouterr().err


def run_until_record(
    argv: list[str], record: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """``main(argv)`` in this thread; another sends SIGTERM once the record file exists
    (opened after the command installed its handlers), never before."""
    finished = threading.Event()

    def stop_when_running() -> None:
        deadline = time.monotonic() + 30
        while not finished.is_set() and time.monotonic() < deadline:
            if record.exists():
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=stop_when_running)
    thread.start()
    try:
        code = main(argv)
    finally:
        finished.set()
        thread.join(30)
    out, err = capsys.readouterr()
    return code, out, err


def test_notify_command_prints_one_readiness_line_and_stops_on_sigterm(
    demo_state: StateDir,
    nats_server: EmbeddedNatsServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "notify.toml"
    config.write_text(
        'console_url = "https://console.example/"\nrecord = "one.sqlite"\n'
        '[tenants.tenant-acme.approvers.attorney-alex]\nwebhook_url = "https://h.example/x"\n'
        '[tenants.tenant-acme.webhook]\nsecret_env = "SMF_TEST_HOOK_SECRET"\n'
    )
    os.environ["SMF_TEST_HOOK_SECRET"] = WEBHOOK_SECRET
    try:
        base = ["notify", "--config", str(config), "--nats", nats_server.url]
        base += ["--registry", str(demo_state.registry), "--log-level", "error"]
        code, out, _ = run_until_record([*base, "--json"], tmp_path / "one.sqlite", capsys)
        assert code == 0
        assert json.loads(out) == {
            "ready": True,
            "nats_url": nats_server.url,
            "registry": str(demo_state.registry),
            "config": str(config),
            "record": str(tmp_path / "one.sqlite"),
            "tenants": 1,
            "contacts": 1,
        }
        config.write_text(config.read_text().replace("one.sqlite", "two.sqlite"))
        code, out, _ = run_until_record(base, tmp_path / "two.sqlite", capsys)
        assert code == 0
        assert out.startswith("notify: 1 tenant(s), 1 contact(s) (bus nats://127.0.0.1:")
        assert WEBHOOK_SECRET not in out

        code = main([*base[:-2], "--registry", str(tmp_path / "none.json")])
        assert code == 1
        assert capsys.readouterr().err.startswith(
            "smf-assurance: cannot read the approver roster: cannot read registry"
        )
        config.write_text(config.read_text().replace("two.sqlite", "no/such/dir/r.sqlite"))
        assert main(base) == 1
        assert capsys.readouterr().err.startswith("smf-assurance: cannot open the record ")
    finally:
        del os.environ["SMF_TEST_HOOK_SECRET"]


def test_up_runs_the_notifier_beside_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``up --notify FILE``: a filing held by that gate reaches its attorney by
    e-mail and webhook; SIGTERM stops both. The servers and the runtime run in a
    helper thread's own loop while ``main`` holds this thread."""
    state = StateDir(tmp_path / "state")
    config_path = tmp_path / "notify.toml"
    configured = threading.Event()
    outcome: dict[str, Any] = {}

    async def drive() -> None:
        async with mail_server() as mail, webhook_receiver() as receiver:
            write_config(config_path, mail, receiver, principals=(ATTORNEY, PARALEGAL))
            configured.set()
            url_file = state.root / "nats.url"
            await until(url_file.exists, timeout=60)
            nc = await nats.connect(
                url_file.read_text().strip(),
                **connect_options(state.existing_credential(OPERATOR)),
            )
            try:
                held = await hold_filing(nc, state, f"held by up {os.urandom(6).hex()}")
                outcome["state"] = await approval_state(nc, held, 5)
                await until(lambda: len(mail.received) >= 1 and len(receiver.received) >= 1)
                outcome["mail"] = [m.recipients for m in mail.received]
                outcome["hooks"] = [h.approver for h in receiver.received]
            finally:
                await nc.drain()

    def helper() -> None:
        try:
            asyncio.run(drive())
        except BaseException as exc:  # reported below; the test must still stop `up`
            outcome["error"] = repr(exc)
        finally:
            configured.set()
            if (state.root / "nats.url").exists():
                os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=helper)
    thread.start()
    try:
        assert configured.wait(30)
        argv = ["up", "--state-dir", str(state.root), "--notify", str(config_path)]
        code = main([*argv, "--json", "--log-level", "error"])
    finally:
        thread.join(60)
    out = capsys.readouterr().out
    assert outcome.get("error") is None, outcome
    assert code == 0
    assert json.loads(out.splitlines()[0])["notify_config"] == str(config_path)
    assert outcome["state"] == "pending"
    assert outcome["mail"] == [(mailbox(ATTORNEY),)]  # the demo roster's one attorney
    assert outcome["hooks"] == [ATTORNEY]


@pytest.fixture
def demo_state(tmp_path: Path) -> StateDir:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    return state


async def test_notify_command_delivers_until_sigterm(world: World) -> None:
    approval_id = await world.hold(f"for the command {os.urandom(6).hex()}")
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "smf_assurance.ops.cli.main",
        "notify",
        "--config",
        str(world.config_path),
        "--nats",
        world.stack.url,
        "--registry",
        str(world.state.registry),
        "--credential",
        str(world.state.bus_credential_path(CONSOLE)),
        "--json",
        "--log-level",
        "error",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        ready = json.loads(line)
        assert ready["ready"] is True
        assert (ready["tenants"], ready["contacts"]) == (1, 4)
        await until(lambda: len(of(approval_id, world.mail.received)) == 2, timeout=30)
        await until(lambda: len(of(approval_id, world.receiver.received)) == 2, timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(child.wait(), 30)
    assert code == 0
    assert sorted(m.recipients[0] for m in world.mail.received) == sorted(
        mailbox(p) for p in ENTITLED
    )


# --- words in notices, where the firm allows them ----------------------------------------

COURT_WORDS = (
    "To: U.S. District Court, Southern District of New York (sdny), "
    "Acme Corp. v. Globex Inc., Docket No. 1:26-cv-01234 (JMF)"
)
MATTER_WORDS = "Matter: Acme v. Globex (discovery), client Acme Corporation (matter-2026-0042)"
FIRST_LINE = "Motion to compel, for the May hearing."
SECOND_LINE = "Our settlement floor is two million."
"""Held text past the first line: in no notice, however the firm is configured."""


def words_forbidden() -> list[bytes]:
    """What no notice carries even where words are allowed: the content past its first
    line, the document's bytes, every other argument, the actor and the organization."""
    document = FILING.arguments["document_file"]
    assert isinstance(document, dict)
    return [
        SECOND_LINE.encode(),
        str(document["data_b64"])[:40].encode(),
        str(document["sha256"]).encode(),
        PARALEGAL.encode(),
        FILING.actor.organization_id.encode(),
    ]


@pytest.mark.claim("notifications.content-where-allowed")
async def test_where_both_allow_a_notice_names_document_court_and_matter_and_nothing_more(
    tmp_path: Path,
) -> None:
    async with a_world(tmp_path, gate_allows=True, notifier_allows=True) as world:
        await world.start()
        approval_id = await world.hold(f"{FIRST_LINE}\n{SECOND_LINE}", destination="sdny")
        await until(
            lambda: (
                len(of(approval_id, world.mail.received)) == 2
                and len(of(approval_id, world.receiver.received)) == 2
            )
        )

        document = f"Document: {FIRST_LINE} (motion-to-compel.pdf)"
        for principal in ENTITLED:
            (mail,) = of(approval_id, world.mail.to(principal))
            assert {document, COURT_WORDS, MATTER_WORDS} <= set(mail.text.splitlines())
        (slack,) = of(approval_id, world.receiver.to(ATTORNEY))
        slack_text = slack.json["blocks"][0]["text"]["text"]
        assert {document, COURT_WORDS, MATTER_WORDS} <= set(slack_text.splitlines())
        (teams,) = of(approval_id, world.receiver.to(SECOND_ATTORNEY))
        facts = {f["name"]: f["value"] for f in teams.json["sections"][0]["facts"]}
        assert facts["Document"] == document.removeprefix("Document: ")
        assert facts["To"] == COURT_WORDS.removeprefix("To: ")
        assert facts["Matter"] == MATTER_WORDS.removeprefix("Matter: ")
        sent = [m.raw for m in world.mail.received] + [h.body for h in world.receiver.received]
        for needle in words_forbidden():
            assert not any(needle in raw for raw in sent), needle
        for principal in (PARALEGAL, OTHER_TENANT_ATTORNEY):
            assert world.mail.to(principal) == []
            assert world.receiver.to(principal) == []


@pytest.mark.claim("notifications.content-where-allowed")
@pytest.mark.parametrize(
    ("gate_allows", "notifier_allows"),
    [pytest.param(True, False, id="gate-only"), pytest.param(False, True, id="notifier-only")],
)
async def test_either_side_alone_keeps_notices_content_free(
    tmp_path: Path, gate_allows: bool, notifier_allows: bool
) -> None:
    async with a_world(tmp_path, gate_allows=gate_allows, notifier_allows=notifier_allows) as world:
        await world.start()
        approval_id = await world.hold(f"{FIRST_LINE}\n{SECOND_LINE}", destination="sdny")
        await until(lambda: len(of(approval_id, world.mail.received)) == 2)
        await world.rounds()

    sent = [m.raw for m in world.mail.received] + [h.body for h in world.receiver.received]
    assert sent
    for needle in (FIRST_LINE, "sdny", "Southern District", "matter-2026-0042", "Acme v. Globex"):
        assert not any(needle.encode() in raw for raw in sent), needle


@pytest.mark.claim("notifications.content-where-allowed")
async def test_the_gate_gives_summaries_to_the_console_only_and_of_pending_approvals_only(
    tmp_path: Path,
) -> None:
    async with a_world(tmp_path, gate_allows=True) as world:
        held = await world.hold(f"{FIRST_LINE}\n{SECOND_LINE}", destination="sdny")
        decided = await world.hold("Another motion, already decided.")
        await world.approver(ATTORNEY).review_and_resolve(decided, "deny", deny_reason="other")
        request = msgspec.json.encode(
            SummaryRequest(schema="smf.approval-summary/1", approval_ids=(held, decided, held))
        )
        answers = {}
        for principal in (CONSOLE, OPERATOR):
            answers[principal] = await ask_summary(world, principal, request)
        with pytest.raises(nats.errors.TimeoutError):  # the server lets no approver ask
            await ask_summary(world, ATTORNEY, request, timeout=1)

    summaries = msgspec.json.decode(answers[CONSOLE].data, type=SummaryReply).summaries
    assert [(s.approval_id, s.matter_id, s.destination) for s in summaries] == [
        (held, "matter-2026-0042", "sdny")
    ]
    assert summaries[0].document == f"{FIRST_LINE} (motion-to-compel.pdf)"
    # the operator is inside the gate's own account: not the console as the server names it
    refused = answers[OPERATOR].headers or {}
    assert refused.get(names.HEADER_SERVICE_ERROR) == "requester_not_console"


async def ask_summary(world: World, principal: str, request: bytes, timeout: float = 5) -> Msg:
    nc = await nats.connect(
        world.stack.url,
        error_cb=quiet,
        **connect_options(world.state.existing_credential(principal)),
    )
    try:
        return await nc.request(names.APPROVAL_SUMMARY, request, timeout=timeout)
    finally:
        await nc.drain()


async def quiet(_exc: Exception) -> None:
    """An approver's refused publish is the server's answer here, not an error to log."""
