"""The bus lets no one in where they don't belong, as the server enforces it.

Every principal of the demo registry connects with its own real credential
(``keys/<principal>.nkey``) to a server whose authorization was generated
from that registry (``smf_assurance.ops.local.bus_auth``), and tries every action of the table
below. What its role may do must succeed; everything else must be refused BY
THE SERVER: a permissions violation naming the subject, seen on the client's
connection, never a timeout that could mean anything. The same table runs on
one embedded server and on the three-node cluster (``LocalNatsCluster``,
started from the node config docker-compose.yml mounts).

Also: an anonymous client is refused; an operator may delete and purge (on a
scratch stream); a runtime revoked by a new release is disconnected, and its
next connection and publish are refused, within seconds, with no gate restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from smf_assurance.core.release_trust import ReleaseTrust, TrustedTime, VerifiedRelease
from smf_assurance.governance.releases import latest_in_inbox, load_trust_root
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.bus_auth import read_user_public, write_user_seed
from smf_assurance.ops.local.bus_follow import ClusterFollower, ReloadError
from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.confine.profile import launcher_principal
from smf_assurance.ops.local.defaults import CONSOLE, OPERATOR, PUBLISHER
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config, start_embedded_server, start_stack
from smf_assurance.ops.local.state import MODEL_GATEWAY, RUNTIME_ID, StateDir, refresh_demo_release
from smf_assurance.ops.runtimes.provision import provision_launcher, provision_runtime
from smf_assurance.pipeline.assembly import BusUnavailableError, start_gate
from smf_assurance.pipeline.stores.tool_calls_kv import BUCKET as TOOL_CALLS
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import (
    CLIENT_API,
    GATE_ACCOUNT,
    BusCredential,
    account_of,
    connector_durable,
    permissions_for,
)
from smf_assurance.subjects.call_context import CALL_CONTEXT_BUCKET, CALL_CONTEXT_STREAM
from smf_assurance.subjects.holds import HOLDS_BUCKET, HOLDS_KEY
from smf_assurance.subjects.registry import RegistryFile, encode_registry
from smf_assurance.subjects.release import RELEASE_BUCKET, encode_bundle
from smf_assurance.subjects.tainted_content import TAINTED_CONTENT_BUCKET, TAINTED_CONTENT_STREAM
from tests.support.bus_helpers import registry_entries, wait_for
from tests.support.bus_permissions import API, Action, Outcome, Prober, who

GATE, RUNTIME, DMS, COURT, ATTORNEY = "gate", "runtime", "dms", "court-efiling", "attorney-alex"
LAUNCHER: Final = launcher_principal(RUNTIME_ID)
"""The scripted runtime's launcher: not in the demo registry (the demo runs no runtime
confined), added for the matrix (:func:`launched`) as ``runtime add`` adds one."""
ROLES: Final = (
    GATE,
    RUNTIME,
    DMS,
    COURT,
    ATTORNEY,
    CONSOLE,
    PUBLISHER,
    MODEL_GATEWAY,
    LAUNCHER,
    OPERATOR,
)
EVERYONE: Final = frozenset(ROLES)
OTHER_TENANT: Final = "tenant-other"


CAPI = CLIENT_API
"""How every principal but the gate calls JetStream: outside the gate's account, the
calls its role may make are imported under it; inside, the server maps it onto the API
before checking a permission, so it widens nothing there."""
ACTIONS: Final = (
    Action("read every order", "sub", "smf.execute.>", who()),
    Action("read the dms orders", "sub", "smf.execute.dms", who()),
    Action("publish an order", "pub", "smf.execute.dms", who(GATE)),
    Action("publish an approval outcome", "pub", "smf.approval.outcome." + "ab" * 32, who(GATE)),
    # Only the gate tells runtimes to ask an expired approval again; they listen.
    Action("tell runtimes to ask again", "pub", "smf.approval.again." + "ab" * 32, who(GATE)),
    Action("hear an ask-again", "sub", "smf.approval.again." + "ab" * 32, who(RUNTIME)),
    Action("publish an announcement", "pub", "smf.approval.pending.tenant-acme", who(GATE)),
    Action("publish a checkpoint", "pub", "smf.ledger.checkpoint.smf-gate", who(GATE)),
    Action("report as dms", "pub", "smf.result.dms", who(DMS)),
    Action("report as court-efiling", "pub", "smf.result.court-efiling", who(COURT)),
    Action("report as the runtime", "pub", "smf.result.scripted-demo", who(RUNTIME)),
    Action(
        "consume the dms durable",
        "req",
        f"{CAPI}.CONSUMER.MSG.NEXT.{names.EXECUTE_STREAM}.{connector_durable(DMS)}",
        who(DMS),
        b'{"batch":1,"no_wait":true}',
    ),
    Action(
        "consume the court-efiling durable",
        "req",
        f"{CAPI}.CONSUMER.MSG.NEXT.{names.EXECUTE_STREAM}.{connector_durable(COURT)}",
        who(COURT),
        b'{"batch":1,"no_wait":true}',
    ),
    Action(
        "consume the dms durable as the gate",
        "req",
        f"{API}.CONSUMER.MSG.NEXT.{names.EXECUTE_STREAM}.{connector_durable(DMS)}",
        who(),
        b'{"batch":1,"no_wait":true}',
    ),
    # The gate creates each connector's durable, with its filter; no connector creates
    # one (its delivery subject would be another reply subject of its choosing).
    Action(
        "create a connector's durable",
        "req",
        f"{API}.CONSUMER.CREATE.{names.EXECUTE_STREAM}.{connector_durable(DMS)}.smf.execute.dms",
        who(GATE),
    ),
    Action(
        "create its own durable",
        "req",
        f"{CAPI}.CONSUMER.CREATE.{names.EXECUTE_STREAM}.{connector_durable(DMS)}.smf.execute.dms",
        who(GATE),
    ),
    Action(
        "create an unfiltered order consumer",
        "req",
        f"{API}.CONSUMER.CREATE.{names.EXECUTE_STREAM}.{connector_durable(DMS)}",
        who(),
    ),
    Action("delete SMF_EXECUTE", "req", f"{API}.STREAM.DELETE.{names.EXECUTE_STREAM}", who()),
    Action(
        "delete SMF_EXECUTE through the client prefix",
        "req",
        f"{CAPI}.STREAM.DELETE.{names.EXECUTE_STREAM}",
        who(),
    ),
    Action("purge SMF_EXECUTE", "req", f"{API}.STREAM.PURGE.{names.EXECUTE_STREAM}", who()),
    Action(
        "delete the checkpoints",
        "req",
        f"{API}.STREAM.DELETE.{names.CHECKPOINT_STREAM}",
        who(),
    ),
    Action("purge the checkpoints", "req", f"{API}.STREAM.PURGE.{names.CHECKPOINT_STREAM}", who()),
    Action("delete the release bucket", "req", f"{API}.STREAM.DELETE.KV_{RELEASE_BUCKET}", who()),
    Action("purge the release bucket", "req", f"{API}.STREAM.PURGE.KV_{RELEASE_BUCKET}", who()),
    Action("delete the approvals KV bucket", "req", f"{API}.STREAM.DELETE.KV_smf_approvals", who()),
    Action(
        "purge the claims KV bucket", "req", f"{API}.STREAM.PURGE.KV_smf_proposal_claims", who()
    ),
    Action("write a release", "pub", f"$KV.{RELEASE_BUCKET}.release.x", who(PUBLISHER)),
    # Runtime stops and decided tool calls, on a cluster; gates only.
    Action("read the tool-call bucket", "req", f"{API}.STREAM.INFO.KV_{TOOL_CALLS}", who(GATE)),
    Action("note a decided tool call", "pub", f"$KV.{TOOL_CALLS}.note.x", who(GATE)),
    Action("purge the tool-call bucket", "req", f"{API}.STREAM.PURGE.KV_{TOOL_CALLS}", who()),
    Action(
        "read a release",
        "req",
        f"{CAPI}.STREAM.INFO.KV_{RELEASE_BUCKET}",
        who(GATE, RUNTIME, PUBLISHER),
    ),
    Action(
        "read a release as the gate", "req", f"{API}.STREAM.INFO.KV_{RELEASE_BUCKET}", who(GATE)
    ),
    # Publishers ask each gate what it did with a release; only gates answer.
    Action("ask the gates' release report", "req", names.RELEASE_REPORT, who(PUBLISHER), b"{}"),
    Action("serve the release report", "sub", names.RELEASE_REPORT, who(GATE)),
    Action("propose", "req", names.PROPOSE, who(RUNTIME), b"not a proposal"),
    Action("attest", "req", names.ATTEST, who(RUNTIME), b"not an attestation"),
    # Only a runtime's launcher says it runs confined; the runtime itself cannot.
    Action("attest confinement", "req", names.CONFINEMENT, who(LAUNCHER), b"not one"),
    Action("serve smf.confinement", "sub", names.CONFINEMENT, who(GATE)),
    # The gate's legal holds: a runtime (its launcher, with its credential) asks them;
    # only gates serve them; only the gate's account writes or reads the bucket.
    Action("ask the gate's legal holds", "req", names.HOLDS, who(RUNTIME), b"{}"),
    Action("serve smf.holds", "sub", names.HOLDS, who(GATE)),
    Action("write the legal holds", "pub", f"$KV.{HOLDS_BUCKET}.{HOLDS_KEY}", who(GATE)),
    Action(
        "read the legal holds bucket", "req", f"{CAPI}.STREAM.INFO.KV_{HOLDS_BUCKET}", who(GATE)
    ),
    Action("purge the legal holds", "req", f"{API}.STREAM.PURGE.KV_{HOLDS_BUCKET}", who()),
    Action("stream output", "pub", "smf.output.s-1", who(RUNTIME, MODEL_GATEWAY)),
    # Only the model gateway asks whom it may serve; each refusal is a ledger entry.
    Action("ask a model admission", "req", names.GATEWAY_ADMIT, who(MODEL_GATEWAY), b"{}"),
    # what gate replicas tell each other (attestations, decided tool calls, stops)
    Action("publish a replica sync", "pub", f"{names.GATE_SYNC_PREFIX}.stop", who(GATE)),
    Action("read the replica sync", "sub", f"{names.GATE_SYNC_PREFIX}.>", who(GATE)),
    # Tool-call accounting: only the gateway asks; only an operator lifts a stop.
    Action("ask the tool-call accounting", "req", names.GATEWAY_CALLS, who(MODEL_GATEWAY), b"{}"),
    Action("clear a runtime's stop", "req", names.GATEWAY_CLEAR, who(), b"{}"),
    # Only an operator asks the gates' status (runtimes' attestations, ledger
    # tail); only gates answer it.
    Action("ask the gates' status", "req", names.GATE_STATUS, who(), b"{}"),
    Action("serve the gate status", "sub", names.GATE_STATUS, who(GATE)),
    # Session taint outside the runtime: only the gateway records the context of a call
    # it issued; gates read (and watch) it; no runtime can write a clean one for its call.
    Action(
        "write a call context",
        "pub",
        f"$KV.{CALL_CONTEXT_BUCKET}.scripted-demo.smfc{'0' * 24}",
        who(MODEL_GATEWAY),
    ),
    Action(
        "read a call context",
        "req",
        f"{CAPI}.STREAM.MSG.GET.{CALL_CONTEXT_STREAM}",
        who(GATE, MODEL_GATEWAY),
    ),
    Action(
        "read a call context as the gate",
        "req",
        f"{API}.STREAM.MSG.GET.{CALL_CONTEXT_STREAM}",
        who(GATE),
    ),
    Action(
        "watch the call contexts",
        "req",
        f"{API}.CONSUMER.CREATE.{CALL_CONTEXT_STREAM}.x.$KV.{CALL_CONTEXT_BUCKET}.probe",
        who(GATE),
    ),
    Action("delete a call context", "req", f"{API}.STREAM.MSG.DELETE.{CALL_CONTEXT_STREAM}", who()),
    Action(
        "reconfigure the call contexts", "req", f"{API}.STREAM.UPDATE.{CALL_CONTEXT_STREAM}", who()
    ),
    # Files carry taint: only the gateway writes and reads what tainted sessions wrote
    # (digests); gates only create the bucket; nobody else reads, writes or deletes it.
    Action(
        "write a tainted-content record",
        "pub",
        f"$KV.{TAINTED_CONTENT_BUCKET}.scripted-demo.smfc{'0' * 24}.0",
        who(MODEL_GATEWAY),
    ),
    Action(
        "read the tainted-content records",
        "req",
        f"{CAPI}.STREAM.MSG.GET.{TAINTED_CONTENT_STREAM}",
        who(GATE, MODEL_GATEWAY),
    ),
    Action(
        "delete a tainted-content record",
        "req",
        f"{API}.STREAM.MSG.DELETE.{TAINTED_CONTENT_STREAM}",
        who(),
    ),
    Action(
        "reconfigure the tainted-content bucket",
        "req",
        f"{API}.STREAM.UPDATE.{TAINTED_CONTENT_STREAM}",
        who(),
    ),
    Action("resolve an approval", "req", names.APPROVAL_RESOLVE, who(ATTORNEY, CONSOLE)),
    Action("show an approval", "req", names.APPROVAL_SHOW, who(ATTORNEY, CONSOLE)),
    # A person's signed question of where their requests stand.
    Action("track approvals", "req", names.APPROVAL_TRACK, who(ATTORNEY, CONSOLE)),
    Action(
        "ask an expired approval again", "req", names.APPROVAL_REREQUEST, who(ATTORNEY, CONSOLE)
    ),
    # The OpenClaw plugin's hold asks it (smf_assurance/adapters/openclaw/src/gate.ts); Hermes
    # never does.
    Action(
        "ask an approval's state",
        "req",
        names.APPROVAL_STATUS,
        who(GATE, ATTORNEY, CONSOLE, RUNTIME),
    ),
    Action(
        "read the tenant's announcements",
        "sub",
        "smf.approval.pending.tenant-acme",
        who(ATTORNEY, CONSOLE),
    ),
    Action(
        "read another tenant's announcements",
        "sub",
        f"smf.approval.pending.{OTHER_TENANT}",
        who(CONSOLE),
    ),
    # Approvers and the console read the backlog through the gate, never the stream:
    # no consumer of theirs, no stream information naming other tenants.
    Action(
        "page another tenant's announcements",
        "req",
        f"{CAPI}.CONSUMER.CREATE.{names.APPROVAL_STREAM}.x.smf.approval.pending.{OTHER_TENANT}",
        who(GATE),
    ),
    Action(
        "read the announcements' stream information",
        "req",
        f"{CAPI}.STREAM.INFO.{names.APPROVAL_STREAM}",
        who(GATE),
    ),
    Action(
        "ask the gate for announcements",
        "req",
        names.APPROVAL_ANNOUNCEMENTS,
        who(GATE, ATTORNEY, CONSOLE),
        b"{}",
    ),
    Action("serve smf.propose", "sub", names.PROPOSE, who(GATE)),
    Action("serve a stage", "sub", names.STAGE_DISPATCH, who(GATE)),
    Action("call the dispatch stage", "req", names.STAGE_DISPATCH, who(GATE)),
    Action("read the gate's replies", "sub", "_INBOX.gate.>", who(GATE)),
    Action("read the runtime's replies", "sub", "_INBOX.runtime.>", who(RUNTIME)),
)


def ping_subject(state: StateDir, principal: str) -> str | None:
    """For a principal outside the gate's account, a plain subject it may publish."""
    entry = next(e for e in registry_entries(state.registry) if e.key.principal == principal)
    if account_of(entry) == GATE_ACCOUNT:
        return None
    return next(
        s
        for s in permissions_for(entry).publish_allow
        if "*" not in s and ">" not in s and not s.startswith("$")
    )


async def run_matrix(servers: list[str], state: StateDir) -> list[str]:
    """Every action for every role; the list of rows that differ from the table."""
    wrong: list[str] = []
    operator_credential = state.existing_credential(OPERATOR)
    assert operator_credential is not None
    operator = await nats.connect(servers=servers, **operator_credential.connect_options())
    try:
        for role in ROLES:
            wrong += await _role_rows(servers, state, role, operator)
    finally:
        await operator.close()
    return wrong


async def _role_rows(servers: list[str], state: StateDir, role: str, operator: Client) -> list[str]:
    wrong: list[str] = []
    credential = state.existing_credential(role)
    assert credential is not None, role
    prober = await Prober.connect(servers, credential, ping_subject(state, role))
    try:
        for action in ACTIONS:
            try:
                observed = await prober.try_action(action, operator)
            except AssertionError as exc:
                wrong.append(f"{role}: {action.name}: {exc}")
                continue
            expected: Outcome = "allowed" if role in action.allowed else "refused"
            if observed != expected:
                wrong.append(f"{role}: {action.name}: expected {expected}, got {observed}")
    finally:
        await prober.close()
    return wrong


async def anonymous_refused(url: str) -> bool:
    try:
        nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    except NatsError as exc:
        return "authorization violation" in str(exc).lower()
    await nc.close()
    return False


async def operator_may_destroy(servers: list[str], state: StateDir) -> None:
    credential = state.existing_credential(OPERATOR)
    assert credential is not None
    nc = await nats.connect(servers=servers, **credential.connect_options())
    try:
        js = nc.jetstream(timeout=10)

        async def created() -> bool:
            # Right after a cluster's reload JetStream may not answer for a moment
            # (no responders, or a timeout while its meta leader is elected): that is
            # not the permission under test, so wait for the stream to be created.
            try:
                await js.add_stream(name="SMF_SCRATCH", subjects=["scratch.>"])
            except (NatsError, TimeoutError):
                return False
            return True

        await wait_for(created, timeout=30, interval=0.2)

        async def stored() -> bool:
            # A stream just created on a cluster is not yet known on every node: a publish
            # to the node this client is on finds no stream for a moment ("no response
            # from stream", seen once in a fresh-clone run), which is not the permission
            # under test either; the stream stores it once its interest has spread.
            try:
                await js.publish("scratch.a", b"x")
            except (NatsError, TimeoutError):
                return False
            return True

        await wait_for(stored, timeout=30, interval=0.2)
        await js.purge_stream("SMF_SCRATCH")
        assert await js.delete_stream("SMF_SCRATCH")
    finally:
        await nc.close()


@pytest.fixture
def server(state: StateDir) -> Iterator[EmbeddedNatsServer]:
    server = start_embedded_server(state)
    yield server
    server.close()


@pytest.fixture
def launched(state: StateDir) -> StateDir:
    """The demo state with the scripted runtime's launcher in its registry."""
    provision_launcher(state, RUNTIME_ID)
    return state


@pytest.mark.claim("bus-access.each-role-its-part")
async def test_every_role_may_do_exactly_its_part_on_one_server(launched: StateDir) -> None:
    server = start_embedded_server(launched)
    try:
        assert await anonymous_refused(server.url)
        assert await run_matrix([server.url], launched) == []
        await operator_may_destroy([server.url], launched)
    finally:
        server.close()


@pytest.mark.claim("bus-access.each-role-its-part")
async def test_every_role_may_do_exactly_its_part_on_the_cluster(
    nats_cluster: LocalNatsCluster, launched: StateDir
) -> None:
    await nats_cluster.authorize(registry_entries(launched.registry))
    for url in nats_cluster.urls:
        assert await anonymous_refused(url)
    assert await run_matrix(nats_cluster.urls, launched) == []
    await operator_may_destroy(nats_cluster.urls, launched)


async def test_the_matrix_sees_a_refusal_it_is_told_to_expect(
    server: EmbeddedNatsServer, state: StateDir
) -> None:
    """A control: the prober reports a real refusal as refused and an allowed
    action as allowed, so an all-green matrix is not the prober seeing nothing."""
    credential = state.existing_credential(RUNTIME)
    assert credential is not None
    prober = await Prober.connect([server.url], credential)
    try:
        operator_credential = state.existing_credential(OPERATOR)
        assert operator_credential is not None
        operator = await nats.connect(server.url, **operator_credential.connect_options())
        assert await prober.try_action(ACTIONS[0], operator) == "refused"
        allowed = Action("ok", "pub", "smf.output.s-2", EVERYONE)
        assert await prober.try_action(allowed, operator) == "allowed"
        await operator.close()
    finally:
        await prober.close()


# --- revocation by a new release ------------------------------------------------------

REVOKED: Final = "runtime-b"


@pytest.mark.claim("bus-access.revoked-cut-off")
async def test_a_runtime_revoked_by_a_new_release_is_cut_off_without_a_gate_restart(
    state: StateDir,
) -> None:
    provision_runtime(state, REVOKED, "runtime-b-id", require_attestation=False)
    stack = await start_stack(state, with_connectors=False)
    credential = state.existing_credential(REVOKED)
    assert credential is not None
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    revoked = await nats.connect(
        stack.url, allow_reconnect=False, closed_cb=on_closed, **credential.connect_options()
    )
    try:
        await revoked.publish("smf.output.s-1", b"before")
        await revoked.flush()
        registry = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
        kept = tuple(e for e in registry.entries if e.key.principal != REVOKED)
        state.registry.write_bytes(encode_registry(kept))
        refresh_demo_release(state)  # a new signed release without runtime-b, in the inbox
        assert stack.gate.releases is not None
        await stack.gate.releases.scan_inbox()
        await wait_for(closed.is_set, timeout=10)  # "within seconds": the deadline bounds it
        with pytest.raises(NatsError, match="Authorization Violation"):
            await nats.connect(
                stack.url, connect_timeout=5, allow_reconnect=False, **credential.connect_options()
            )
        assert stack.server is not None
        assert stack.server.running  # the server reloaded; nothing restarted
        # The others are still served: the scripted runtime is still in the registry,
        # and what it publishes reaches the gate's side (the operator's subscription),
        # with no permission error from the server.
        runtime = state.existing_credential(RUNTIME)
        operator = state.existing_credential(OPERATOR)
        assert runtime is not None
        assert operator is not None
        delivered: list[bytes] = []
        errors: list[Exception] = []

        async def on_delivered(msg: Msg) -> None:
            delivered.append(msg.data)

        async def on_error(exc: Exception) -> None:
            errors.append(exc)

        watcher = await nats.connect(stack.url, **operator.connect_options())
        await watcher.subscribe("smf.output.s-3", cb=on_delivered)
        await watcher.flush()
        still = await nats.connect(stack.url, error_cb=on_error, **runtime.connect_options())
        await still.publish("smf.output.s-3", b"after")
        await still.flush()
        await wait_for(lambda: bool(delivered or errors), timeout=10)
        assert (delivered, errors) == ([b"after"], [])
        await still.close()
        await watcher.close()
    finally:
        if not revoked.is_closed:
            await revoked.close()
        await stack.stop()


async def test_a_gate_the_bus_refuses_fails_its_start_with_the_servers_reason(
    state: StateDir, server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    """A gate whose credential is not in the server's authorization ends its start at
    the first refusal (``BusUnavailableError``, naming the server's reason) instead
    of retrying until its join time runs out; the same gate with its registered
    credential starts. The join time is long: a refusal ends it, and a reset that
    hid the server's reason (seen once in a fresh-clone run) is tried past."""
    stranger = BusCredential("gate", tmp_path / "gate.nkey")
    write_user_seed(stranger.seed_file)
    config = dataclasses.replace(gate_config(state, server.url), join_seconds=60.0)
    with pytest.raises(BusUnavailableError, match=r"refused smf-gate .*Authorization Violation"):
        await start_gate(dataclasses.replace(config, credential=stranger))
    running = await start_gate(config)
    assert running.nc.is_connected
    await running.close()


def test_the_published_permission_table_is_what_the_server_is_given(
    state: StateDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/BUS-PERMISSIONS.md is ``bus permissions`` for the demo registry: the
    document readers rely on cannot drift from the authorization generated."""
    assert main(["bus", "permissions", "--state-dir", str(state.root)]) == 0
    generated = capsys.readouterr().out
    document = (Path(__file__).parents[2] / "docs" / "BUS-PERMISSIONS.md").read_text()
    block = document.split("```text\n", 1)[1].split("```", 1)[0]
    assert block == generated
    assert "smf.execute.>" not in {
        line.split()[-1] for line in generated.splitlines() if " subscribe " in line
    }


def verified_release(state: StateDir) -> VerifiedRelease:
    """The newest release in the state's inbox, verified as a gate would."""
    bundle = latest_in_inbox(state.release_inbox)
    assert bundle is not None
    now = TrustedTime(time.time_ns() // 1_000_000)
    return ReleaseTrust(load_trust_root(state.trust_root)).verify_update(encode_bundle(bundle), now)


async def test_the_cluster_follower_cuts_a_revoked_principal_off_every_node(
    state: StateDir, nats_cluster: LocalNatsCluster
) -> None:
    """``bus follow``'s follower applies a release without a principal on all three
    nodes: its connections on every node are closed and it cannot come back; a
    reload a node does not confirm leaves the follower unconfirmed, and the next
    apply of the same release reloads again."""
    provision_runtime(state, REVOKED, "runtime-b-id", require_attestation=False)
    refresh_demo_release(state)
    await nats_cluster.authorize(registry_entries(state.registry))
    credential = state.existing_credential(REVOKED)
    assert credential is not None
    closed = [asyncio.Event() for _ in nats_cluster.urls]
    revoked: list[Client] = []
    for url, event in zip(nats_cluster.urls, closed, strict=True):

        async def on_closed(event: asyncio.Event = event) -> None:
            event.set()

        revoked.append(
            await nats.connect(
                url, allow_reconnect=False, closed_cb=on_closed, **credential.connect_options()
            )
        )
    system = await nats.connect(nats_cluster.urls[0], **nats_cluster.system.connect_options())
    try:
        follower = ClusterFollower(
            authorization=nats_cluster.authorization_path,
            system_user=read_user_public(nats_cluster.system.seed_file),
            system=system,
            expected_servers=len(nats_cluster.urls) + 1,  # one node too many: never confirmed
        )
        registry = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
        kept = tuple(e for e in registry.entries if e.key.principal != REVOKED)
        state.registry.write_bytes(encode_registry(kept))
        refresh_demo_release(state)
        release = verified_release(state)
        with pytest.raises(ReloadError, match="3 of 4"):
            await follower.apply(release)
        assert not follower.confirmed
        assert not any(event.is_set() for event in closed)  # nothing reloaded yet

        follower.expected_servers = len(nats_cluster.urls)
        assert await follower.apply(release)  # the same file, reloaded because unconfirmed
        assert follower.confirmed
        for event in closed:
            await wait_for(event.is_set, timeout=10)
        for url in nats_cluster.urls:
            with pytest.raises(NatsError, match="Authorization Violation"):
                await nats.connect(
                    url, connect_timeout=5, allow_reconnect=False, **credential.connect_options()
                )
        assert not await follower.apply(release)  # confirmed and unchanged: nothing to do
        runtime = state.existing_credential(RUNTIME)
        assert runtime is not None
        for url in nats_cluster.urls:  # the others are still let in on every node
            still = await nats.connect(url, allow_reconnect=False, **runtime.connect_options())
            await still.close()
    finally:
        for nc in revoked:
            if not nc.is_closed:
                await nc.close()
        await system.close()
