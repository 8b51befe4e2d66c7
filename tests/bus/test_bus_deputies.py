"""No deputy on the bus: a reply subject chosen by a requester makes nobody write there.

``smf_assurance.subjects.bus_access`` ("No deputy"): every principal but the gate's
replicas, the operator and Swarm is alone in an account of its own, which imports from
the gate's account only what its role may use. Each attack below is a real principal,
with its real credential, sending on a path its role may use (a request to the gate, a
pull, an ack, a publish into a stream, a JetStream API read) with its reply subject set
to something that would hurt: a JetStream API call that deletes or purges a stream, a
KV key (the next release), an order subject, another tenant's announcement subject,
the checkpoint stream. Before this design, responders (the gate) and JetStream itself
wrote their answers there.

Each attack is observed twice, positively: the answer WAS given (the operator, inside
the gate's account, sees it published on the server's mapped reply ``_R_.…``, which
lands in the attacker's own account), and every target is as it was (the streams
exist with the same message counts, the KV key is absent). Each path has its control:
the same request with the attacker's own inbox is answered. The same attacks run on
one server and on the three-node cluster.

The code half: inside the gate's account, or on a bus without accounts, the gate drops
a request whose reply is not an inbox, and counts it (``$SRV.STATS``), so the same
attack sent by the operator, or by any client of an open bus, writes nothing either.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from smf_assurance.approver.pending import AnnouncementsRefused, PendingReader
from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.defaults import CONSOLE, OPERATOR, PUBLISHER
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config, start_embedded_server
from smf_assurance.ops.local.state import (
    MODEL_GATEWAY,
    StateDir,
    provision_demo,
    refresh_demo_release,
)
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.assembly.config import ClusterSettings
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import (
    CLIENT_API,
    REQUEST_INFO_HEADER,
    RESPONSE_ROOT,
    connector_durable,
)
from smf_assurance.subjects.call_context import CALL_CONTEXT_BUCKET
from smf_assurance.subjects.registry import RegistryFile, encode_registry, entry_for
from smf_assurance.subjects.release import RELEASE_BUCKET
from tests.support.announcements import pending_announcement
from tests.support.bus_helpers import registry_entries, wait_for

RUNTIME, DMS, ATTORNEY = "runtime", "dms", "attorney-alex"
OTHER_ATTORNEY: Final = "attorney-olga"
OTHER_TENANT: Final = "tenant-other"
ACME: Final = "tenant-acme"
RUNTIME_ID: Final = "scripted-demo"
NEXT_RELEASE_KEY: Final = f"$KV.{RELEASE_BUCKET}.release.999999"
ANSWER_S: Final = 10.0

TARGETS: Final = (
    f"$JS.API.STREAM.DELETE.{names.EXECUTE_STREAM}",
    f"$JS.API.STREAM.PURGE.{names.RESULT_STREAM}",
    f"$JS.API.STREAM.DELETE.{names.CHECKPOINT_STREAM}",
    f"$JS.API.STREAM.DELETE.KV_{RELEASE_BUCKET}",
    NEXT_RELEASE_KEY,
    names.execute_subject(DMS),
    names.approval_pending_subject(OTHER_TENANT),
    names.checkpoint_subject("forged"),
)
"""Where an attacker would have the answer written."""

WATCHED_STREAMS: Final = (
    names.EXECUTE_STREAM,
    names.RESULT_STREAM,
    names.CHECKPOINT_STREAM,
    names.APPROVAL_STREAM,
    f"KV_{RELEASE_BUCKET}",
)


def provision(state: StateDir) -> None:
    """The demo state, plus an attorney of another tenant with a bus credential."""
    provision_demo(state)
    current = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
    olga = entry_for(
        state.key(OTHER_ATTORNEY),
        OTHER_ATTORNEY,
        "approver",
        tenants=(OTHER_TENANT,),
        licensed_roles=("licensed_attorney",),
        nats_user=state.bus_user(OTHER_ATTORNEY),
    )
    state.registry.write_bytes(encode_registry((*current.entries, olga)))
    refresh_demo_release(state)


@dataclass
class Bus:
    urls: list[str]
    state: StateDir
    gate: RunningGate
    operator: Client
    witnessed: list[Msg] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def connect(self, principal: str) -> Client:
        credential = self.state.existing_credential(principal)
        assert credential is not None, principal
        return await nats.connect(
            servers=self.urls, connect_timeout=5, error_cb=_quiet, **credential.connect_options()
        )

    async def counts(self) -> dict[str, int]:
        js = self.operator.jetstream(timeout=ANSWER_S)
        return {stream: (await js.stream_info(stream)).state.messages for stream in WATCHED_STREAMS}

    async def next_release_key_absent(self) -> bool:
        js = self.operator.jetstream(timeout=ANSWER_S)
        try:
            await js.get_msg(f"KV_{RELEASE_BUCKET}", subject=NEXT_RELEASE_KEY)
        except NotFoundError:
            return True
        return False

    async def witness(self, send: Callable[[], Awaitable[None]]) -> None:
        """Run ``send`` and wait until an answer is published on a mapped reply."""
        self.witnessed.clear()
        self.arrived.clear()
        await send()
        await asyncio.wait_for(self.arrived.wait(), ANSWER_S)


async def _quiet(_exc: Exception) -> None:
    """Permission violations are what some attacks expect; the assertions judge."""


@contextlib.asynccontextmanager
async def running_bus(state: StateDir, urls: list[str], cluster: bool) -> AsyncIterator[Bus]:
    settings = ClusterSettings(replicas=3) if cluster else None
    gate = await start_gate(gate_config(state, ",".join(urls), co_located=True, cluster=settings))
    credential = state.existing_credential(OPERATOR)
    assert credential is not None
    operator = await nats.connect(servers=urls, **credential.connect_options())
    bus = Bus(urls, state, gate, operator)

    async def seen(msg: Msg) -> None:
        bus.witnessed.append(msg)
        bus.arrived.set()

    # a witness on every node: a mapped reply is published where its responder is
    witnesses = [await nats.connect(url, **credential.connect_options()) for url in urls]
    for witness in witnesses:
        await witness.subscribe(f"{RESPONSE_ROOT}.>", cb=seen)
        await witness.flush()
    # one message in each stream an attack would empty or fill
    js = operator.jetstream(timeout=ANSWER_S)
    await js.publish(names.result_subject("seed"), b"{}")
    try:
        yield bus
    finally:
        for witness in witnesses:
            await witness.close()
        await operator.close()
        await gate.close()


@pytest.fixture
def other_tenant_state(tmp_path: Path) -> StateDir:
    other_tenant_state = StateDir(tmp_path / "state")
    provision(other_tenant_state)
    return other_tenant_state


@pytest.fixture(params=["one server", "cluster"])
async def bus(
    request: pytest.FixtureRequest, other_tenant_state: StateDir, tmp_path: Path
) -> AsyncIterator[Bus]:
    if request.param == "one server":
        server: EmbeddedNatsServer = start_embedded_server(other_tenant_state)
        try:
            async with running_bus(other_tenant_state, [server.url], cluster=False) as running:
                yield running
        finally:
            server.close()
        return
    async with LocalNatsCluster(tmp_path / "cluster") as nodes:
        await nodes.authorize(registry_entries(other_tenant_state.registry))
        async with running_bus(other_tenant_state, nodes.urls, cluster=True) as running:
            yield running


Send = Callable[[Client, str], Awaitable[None]]


async def output_close(nc: Client, reply: str) -> None:
    """A malformed output close: the gate answers it with a refusal. A stream of its own
    each time: on a cluster a stream's close is answered once, by one replica."""
    subject = names.output_subject(f"s-{secrets.token_hex(8)}")
    await nc.publish(subject, b"junk", reply=reply, headers={names.HEADER_FINAL: "1"})


async def status(nc: Client, reply: str) -> None:
    await nc.publish(names.APPROVAL_STATUS, b"sha256:" + b"0" * 64, reply=reply)


async def announcements(nc: Client, reply: str) -> None:
    body = json.dumps({"schema": "smf.approval-announcements/1"}).encode()
    await nc.publish(names.APPROVAL_ANNOUNCEMENTS, body, reply=reply)


async def pull(nc: Client, reply: str) -> None:
    subject = f"{CLIENT_API}.CONSUMER.MSG.NEXT.{names.EXECUTE_STREAM}.{connector_durable(DMS)}"
    await nc.publish(subject, b'{"batch":1,"no_wait":true}', reply=reply)


async def durable_info(nc: Client, reply: str) -> None:
    subject = f"{CLIENT_API}.CONSUMER.INFO.{names.EXECUTE_STREAM}.{connector_durable(DMS)}"
    await nc.publish(subject, b"", reply=reply)


async def result(nc: Client, reply: str) -> None:
    """A publish into ``SMF_RESULT``: JetStream acknowledges it on the reply."""
    await nc.publish(names.result_subject(RUNTIME_ID), b"{}", reply=reply)


async def release_info(nc: Client, reply: str) -> None:
    await nc.publish(f"{CLIENT_API}.STREAM.INFO.KV_{RELEASE_BUCKET}", b"", reply=reply)


async def call_context(nc: Client, reply: str) -> None:
    """A KV put into the call-context bucket: JetStream acknowledges it on the reply."""
    key = f"$KV.{CALL_CONTEXT_BUCKET}.{RUNTIME_ID}.smfc{'0' * 24}"
    await nc.publish(key, b"junk", reply=reply)


PATHS: Final[tuple[tuple[str, str, Send], ...]] = (
    ("runtime closes an output stream", RUNTIME, output_close),
    ("model gateway closes an output stream", MODEL_GATEWAY, output_close),
    ("attorney asks an approval's state", ATTORNEY, status),
    ("attorney asks for announcements", ATTORNEY, announcements),
    ("console asks for announcements", CONSOLE, announcements),
    ("connector pulls an order", DMS, pull),
    ("connector reads its durable", DMS, durable_info),
    ("runtime publishes a result", RUNTIME, result),
    ("runtime reads the release stream", RUNTIME, release_info),
    ("publisher reads the release stream", PUBLISHER, release_info),
    ("model gateway writes a call context", MODEL_GATEWAY, call_context),
)


@pytest.mark.claim("bus-access.no-deputy")
@pytest.mark.parametrize(("path", "principal", "send"), PATHS, ids=[p[0] for p in PATHS])
async def test_a_chosen_reply_subject_makes_nobody_write_there(
    bus: Bus, path: str, principal: str, send: Send
) -> None:
    before = await bus.counts()
    nc = await bus.connect(principal)
    try:
        # control: the path is live, its answer reaches the asker's own inbox
        inbox = nc.new_inbox()
        answers = await nc.subscribe(inbox)
        await send(nc, inbox)
        answered = await answers.next_msg(timeout=ANSWER_S)
        assert (answered.headers or {}).get("Status") != "503", "nobody serves the path"
        await answers.unsubscribe()
        for target in TARGETS:
            await bus.witness(functools.partial(send, nc, target))
            assert all(m.subject.startswith(f"{RESPONSE_ROOT}.") for m in bus.witnessed)
    finally:
        await nc.close()
    after = await bus.counts()
    # the result path adds its own results to SMF_RESULT, nothing else changes
    grown = {s: after[s] - before[s] for s in WATCHED_STREAMS if after[s] != before[s]}
    allowed = {names.RESULT_STREAM} if send is result else set()
    assert set(grown) <= allowed, grown
    assert all(n > 0 for n in grown.values()), grown  # nothing purged
    assert await bus.next_release_key_absent()


@pytest.mark.claim("bus-access.no-deputy")
async def test_an_ack_with_a_chosen_reply_purges_nothing(bus: Bus) -> None:
    """An ack's reply is answered by JetStream (it executed a purge before accounts)."""
    js = bus.operator.jetstream(timeout=ANSWER_S)
    for _ in range(len(TARGETS) + 1):
        await js.publish(names.execute_subject(DMS), b"not an order")
    before = await bus.counts()
    nc = await bus.connect(DMS)
    try:
        connector_js = nc.jetstream(prefix=CLIENT_API, timeout=ANSWER_S)
        sub = await connector_js.pull_subscribe_bind(connector_durable(DMS), names.EXECUTE_STREAM)
        control = (await sub.fetch(1, timeout=ANSWER_S))[0]
        await control.ack_sync(timeout=ANSWER_S)  # control: an ack is answered
        for target in TARGETS:
            delivered = (await sub.fetch(1, timeout=ANSWER_S))[0]
            assert delivered.reply is not None
            await bus.witness(functools.partial(nc.publish, delivered.reply, b"+ACK", reply=target))
    finally:
        await nc.close()
    assert await bus.counts() == before
    assert await bus.next_release_key_absent()


# --- the code half: the gate answers only on inboxes ------------------------------------


async def refused_replies(operator: Client, endpoint: str) -> int:
    reply = await operator.request("$SRV.STATS.smf-approvals", b"", timeout=ANSWER_S)
    stats = json.loads(reply.data)
    for ep in stats["endpoints"]:
        if ep["name"] == endpoint:
            return int((ep.get("data") or {}).get("refused_replies", 0))
    raise AssertionError(f"no endpoint {endpoint}")


@pytest.mark.claim("bus-access.no-deputy")
async def test_inside_the_gate_account_a_hostile_reply_is_dropped_and_counted(
    other_tenant_state: StateDir,
) -> None:
    server = start_embedded_server(other_tenant_state)
    try:
        async with running_bus(other_tenant_state, [server.url], cluster=False) as bus:
            before = await bus.counts()
            dropped = await refused_replies(bus.operator, "status")
            for target in TARGETS:
                await status(bus.operator, target)
            await bus.operator.flush()
            expected = dropped + len(TARGETS)
            await wait_for(lambda: _at_least(bus.operator, "status", expected), timeout=ANSWER_S)
            closes = bus.gate.buffer.refused_replies
            for target in TARGETS:
                await output_close(bus.operator, target)
            await bus.operator.flush()
            await wait_for(
                lambda: bus.gate.buffer.refused_replies == closes + len(TARGETS), timeout=ANSWER_S
            )
            assert await bus.counts() == before
            assert await bus.next_release_key_absent()
            # control: the same request with an inbox is answered
            reply = await bus.operator.request(names.APPROVAL_STATUS, b"x", timeout=ANSWER_S)
            assert json.loads(reply.data)["state"] == "unknown"
    finally:
        server.close()


async def _at_least(operator: Client, endpoint: str, floor: int) -> bool:
    return await refused_replies(operator, endpoint) >= floor


@pytest.mark.claim("bus-access.no-deputy")
async def test_on_a_bus_without_accounts_the_gate_still_answers_only_inboxes(
    other_tenant_state: StateDir, tmp_path: Path
) -> None:
    with EmbeddedNatsServer(tmp_path / "open") as server:
        gate = await start_gate(gate_config(other_tenant_state, server.url, co_located=True))
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream(timeout=ANSWER_S)
            before = (await js.stream_info(names.EXECUTE_STREAM)).state.messages
            for target in TARGETS:
                await output_close(nc, target)
            await nc.flush()
            await wait_for(lambda: gate.buffer.refused_replies == len(TARGETS), timeout=ANSWER_S)
            assert (await js.stream_info(names.EXECUTE_STREAM)).state.messages == before
            assert (await js.stream_info(names.CHECKPOINT_STREAM)).config.name
        finally:
            await nc.close()
            await gate.close()


# --- announcements through the gate, by the account the server names ------------------


def announcement(tenant: str, n: int) -> bytes:
    return msgspec.json.encode(pending_announcement(tenant, "sha256:" + f"{n:064x}"))


@pytest.mark.claim("bus-access.no-deputy")
async def test_each_reader_gets_its_own_tenants_announcements_from_the_gate(bus: Bus) -> None:
    js = bus.operator.jetstream(timeout=ANSWER_S)
    await js.publish(names.approval_pending_subject(ACME), announcement(ACME, 1))
    await js.publish(names.approval_pending_subject(OTHER_TENANT), announcement(OTHER_TENANT, 2))
    # filed under another tenant's subject: never listed to anyone
    await js.publish(names.approval_pending_subject(OTHER_TENANT), announcement(ACME, 3))

    async def read(principal: str, tenant: str | None = None) -> list[str]:
        nc = await bus.connect(principal)
        try:
            return [a.tenant_id for a in await PendingReader(nc, tenant).read_new()]
        finally:
            await nc.close()

    assert await read(ATTORNEY) == [ACME]
    assert await read(OTHER_ATTORNEY) == [OTHER_TENANT]
    assert await read(CONSOLE) == [ACME, OTHER_TENANT]
    assert await read(CONSOLE, OTHER_TENANT) == [OTHER_TENANT]
    with pytest.raises(AnnouncementsRefused, match="tenant_not_permitted"):
        await read(OTHER_ATTORNEY, ACME)
    # a forged request-info header is the server's to set: olga stays olga
    nc = await bus.connect(OTHER_ATTORNEY)
    try:
        body = json.dumps({"schema": "smf.approval-announcements/1"}).encode()
        forged = {REQUEST_INFO_HEADER: json.dumps({"acc": CONSOLE})}
        reply = await nc.request(
            names.APPROVAL_ANNOUNCEMENTS, body, timeout=ANSWER_S, headers=forged
        )
        tenants = [a["announcement"]["tenant_id"] for a in json.loads(reply.data)["announcements"]]
        assert tenants == [OTHER_TENANT]
    finally:
        await nc.close()
    # nobody outside the gate's account may ask JetStream about the stream itself
    nc = await bus.connect(OTHER_ATTORNEY)
    try:
        with pytest.raises(NatsError):
            await nc.request(f"{CLIENT_API}.STREAM.INFO.{names.APPROVAL_STREAM}", b"", timeout=2.0)
    finally:
        await nc.close()
