"""Cluster benchmark: what the cluster stores cost, and what a second gate replica gives.

In one run on a ``LocalNatsCluster`` (three nats-server nodes from
``deploy/nats/cluster.conf`` on 127.0.0.1, stores in a temporary directory):

1. Claim latency, the one-shot ``approved -> executing`` step, SQLite beside
   JetStream KV: per round a held approval is created and approved (untimed),
   then only ``store.claim(...)`` is timed. ``claim sqlite`` runs on a
   temporary SQLite file (``SqliteApprovalStore``, one machine), ``claim kv``
   on an R3 bucket of the cluster (``KvApprovalStore``; a bench bucket and
   content stream of their own, so no gate ever sweeps them).
2. propose -> verdict throughput of allows with ONE gate replica and with TWO,
   each replica its own ``smf-assurance up --cluster --no-connectors``
   process, started on its own node (``--nats`` names that node alone; with
   all three seeds the client would pick one at random) and used once its
   readiness line is out. The proposals are DMS deletions of fresh documents,
   signed before the series, sent by the bench process with ``in_flight``
   outstanding; no connector runs, so an allow ends when its order is stored.
   The floor: a bare echo (a plain subscription replying the same signed
   bytes) on the node the first replica uses.

Where everything sits, so the figures can be compared: gate-1 on nats-1,
gate-2 on nats-2, the echo responder on nats-1, and the bench client on
nats-3, the node no gate uses; every request (echo or proposal) crosses one
route to its responder and one back. Placement is read back from each node's
``/connz``, and the two-replica series records how many proposals each
replica served (``$SRV.STATS``). A wrong outcome, a series whose served
counts do not add up, or a replica that served nothing is an error, never a
figure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final, Literal

import nats
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.cli.output import Progress
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.cluster import ClusterNode, LocalNatsCluster
from smf_assurance.ops.local.natsserver import parent_death_guard
from smf_assurance.ops.local.state import (
    ADAPTER_ID,
    DEMO_TENANT,
    RUNTIME_ID,
    StateDir,
    provision_demo,
)
from smf_assurance.pipeline.stores.approvals import ApprovalStore
from smf_assurance.pipeline.stores.approvals_kv import KvApprovalStore
from smf_assurance.pipeline.stores.approvals_sqlite import SqliteApprovalStore
from smf_assurance.pipeline.stores.streams import wait_for_jetstream
from smf_assurance.subjects.approvals import ApprovalBinding, approval_id_for
from smf_assurance.subjects.canonical import sha256_identity
from smf_assurance.subjects.clock import monotonic_s, wall_clock_ms
from smf_assurance.subjects.envelope import content_hash_of
from smf_assurance.subjects.messages import DataFacts
from smf_assurance.subjects.registry import load_registry
from smf_tools.bench.bus import (
    DEFAULT_IN_FLIGHT,
    ECHO_SUBJECT,
    WARM_UP,
    BenchError,
    cpu_model,
    until_answered,
)
from smf_tools.bench.stats import Summary, summarize

log = structlog.get_logger(__name__)

DEFAULT_ROUNDS: Final = 1000
"""Claims per store; also the requests per throughput series (at least 4x in flight)."""
REPLICAS: Final = 3
CLAIM_SQLITE: Final = "claim sqlite (1 machine)"
CLAIM_KV: Final = f"claim kv R{REPLICAS} (3-node cluster)"
ECHO: Final = "echo"
GATES: Final = ("gate-1", "gate-2")
"""Gate ``i`` runs on node ``i``; the bench client uses the node after the last gate."""
CLIENT_NODE: Final = len(GATES)
CLIENT_NAME: Final = "smf-bench-cluster-client"
BENCH_BUCKET: Final = "smf_bench_approvals"
BENCH_CONTENT: Final = "SMF_BENCH_APPROVAL_CONTENT"
GATE_SERVICE: Final = "smf-gate"
GATE_FILES: Final = (
    "keys/gate.key",
    "keys/gate.nkey",
    "keys/tenant-pseudonym.key",
    "release-trust-root.json",
    "releases",
    "registry.json",
)
"""What a replica's state directory holds of the seed, as ``deploy/init-state.sh``
provisions the compose gates: one identity, and a ledger and lock of its own."""
HELD: Final = b"To the Clerk of Court: a 1 KB court filing held for approval. " * 16
BINDING_TTL_MS: Final = 300_000
APPROVER: Final = "attorney-alex"
READY_TIMEOUT_S: Final = 90.0
STOP_TIMEOUT_S: Final = 30.0
"""``up`` itself allows its stack 20 s to stop."""
REQUEST_TIMEOUT_S: Final = 60.0
STATS_TIMEOUT_S: Final = 5.0
STEPS: Final = 8
"""cluster up, two claim series, echo, gate-1 up, one replica, gate-2 up, two replicas."""


# --- results: integers all the way, so every printed ratio can be recomputed ----------


def ratio_x1000(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` in thousandths, rounded half up, in integers only:
    canonical JSON has no floats, and a reader recomputes it from the printed values."""
    if denominator <= 0:
        raise ValueError("a ratio needs a positive denominator")
    return (2000 * numerator + denominator) // (2 * denominator)


def ns(value_us: float) -> int:
    """A percentile in integer nanoseconds (the samples were integer nanoseconds)."""
    return round(value_us * 1000)


@dataclasses.dataclass(frozen=True, slots=True)
class Rate:
    """``requests`` requests, ``in_flight`` outstanding, done in ``elapsed_us``.

    ``served`` is how many of them each gate replica answered (empty for the echo).
    """

    label: str
    replicas: int
    requests: int
    in_flight: int
    elapsed_us: int
    served: tuple[tuple[str, int], ...] = ()

    @property
    def per_second(self) -> int:
        return (2_000_000 * self.requests + self.elapsed_us) // (2 * self.elapsed_us)

    def over_x1000(self, other: Rate) -> int:
        """This rate over ``other``'s, from the request counts and elapsed times behind
        the printed rates (the req/s column is rounded to integers; this is not)."""
        return ratio_x1000(self.requests * other.elapsed_us, other.requests * self.elapsed_us)


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterResult:
    nats_server: str
    nodes: int
    cpus: int
    cpu_model: str
    rounds: int
    in_flight: int
    requests: int
    placement: tuple[tuple[str, str], ...]
    """(connection, node) for the bench client and each gate replica."""
    leaders: tuple[tuple[str, str], ...]
    """(stream, node leading it) for the bench bucket and its content stream."""
    claims: tuple[Summary, Summary]
    """SQLite, then KV."""
    rates: tuple[Rate, Rate, Rate]
    """Echo, one replica, two replicas."""
    sync_always: bool
    """Whether every node reported ``sync_always`` in its ``/varz`` (JetStream syncs each
    write before acknowledging it, ``deploy/nats/cluster.conf``): the durability the
    figures were measured with."""

    def claim_ratio_x1000(self, percentile: Literal["p50", "p95", "p99"] = "p50") -> int:
        """KV claim over SQLite claim at ``percentile``, from the printed nanoseconds."""
        sqlite, kv = (ns(getattr(s, f"{percentile}_us")) for s in self.claims)
        return ratio_x1000(kv, sqlite)

    def two_over_one_x1000(self) -> int:
        return self.rates[2].over_x1000(self.rates[1])


# --- the binding the claim series hold --------------------------------------------


def approval_binding(label: str, now_ms: int) -> ApprovalBinding:
    """A valid binding for a held court filing, distinct per ``label``.

    Shaped as the desk's ``bind`` makes one (every field set, the approval id
    derived from the decision id), with identities of labels in place of the
    hashes of a real proposal: the claim compares and digests them the same way.
    """
    decision_id = _identity(f"decision:{label}")
    return ApprovalBinding(
        approval_id=approval_id_for(decision_id),
        decision_id=decision_id,
        operation_hash=_identity(f"operation:{label}"),
        canonical_args_hash=_identity(f"args:{label}"),
        content_hash=content_hash_of(HELD.decode("utf-8")),
        destination_identity_hash=_identity("court:sdny"),
        release_id="release-bench",
        projection_id=_identity("projection"),
        policy_fingerprint=_identity("policy"),
        tenant_id=DEMO_TENANT,
        organization_id="org-acme-llp",
        matter_id="matter-2026-0042",
        actor_id="paralegal-pat",
        required_roles=("licensed_attorney",),
        required_approvals=1,
        created_at_ms=now_ms,
        expires_at_ms=now_ms + BINDING_TTL_MS,
    )


def _identity(label: str) -> str:
    return sha256_identity(label.encode("utf-8"))


SPARE_DOCUMENTS: Final = 1_000_000
"""Offset of the warm-up documents, so they never share an id with a timed one."""
MAX_SPREAD_PROPOSALS: Final = 200
SPREAD_RETRY_S: Final = 0.05
NOT_YET_REACHABLE: Final = frozenset({"gate_unreachable", "gate_timeout"})
"""What the runtime's client says before a new replica's interest reached its node."""


async def claim_series(label: str, store: ApprovalStore, rounds: int) -> Summary:
    """Per round: create and approve a held approval (untimed), then time its claim."""
    clock = time.perf_counter_ns
    samples: list[int] = []
    for n in range(WARM_UP + rounds):
        now = wall_clock_ms()
        binding = approval_binding(f"{label}-{n}", now)
        held = await store.create(binding, HELD, now)
        await store.approve(binding.approval_id, held.digest, APPROVER, now)
        start = clock()
        claimed = await store.claim(binding.approval_id, binding, now)
        elapsed = clock() - start
        if claimed.state != "executing" or claimed.held_payload != HELD:
            raise BenchError(f"{label}: a claim returned {claimed!r}")
        if n >= WARM_UP:
            samples.append(elapsed)
    return summarize(label, samples)


# --- throughput ---------------------------------------------------------------------

Call = Callable[[int], Awaitable[None]]


async def _warm_up(call: Call) -> None:
    """``WARM_UP`` untimed calls, all at once: connections, caches and streams warm."""
    await asyncio.gather(*(call(n) for n in range(WARM_UP)))


async def _rate(label: str, replicas: int, call: Call, requests: int, in_flight: int) -> Rate:
    """``requests`` calls, after the warm-up's, by ``in_flight`` workers, each starting
    its next when one ends."""
    counter = iter(range(WARM_UP, WARM_UP + requests))

    async def worker() -> None:
        for n in counter:
            await call(n)

    start = time.perf_counter_ns()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed_us = max(1, (time.perf_counter_ns() - start) // 1000)
    return Rate(label, replicas, requests, in_flight, elapsed_us)


def _signed_allows(runtime: ProposalClient, first: int, count: int) -> list[tuple[str, bytes]]:
    """DMS deletions of distinct documents, each allowed by the retention policy."""
    signed = []
    for n in range(first, first + count):
        proposal = runtime.build(
            native_tool="dms_delete",
            arguments={"document_id": f"doc-cluster-bench-{n}"},
            actor=actor("associate-ann", "associate"),
            facts=DataFacts(classification="internal", injection_taint="clear", legal_hold=False),
        )
        signed.append((proposal.proposal_id, runtime.sign(proposal)))
    return signed


async def _until_every_replica_serves(
    label: str, runtime: ProposalClient, gates: Sequence[GateProcess], first_document: int
) -> None:
    """Untimed allows until every replica has served one: a replica's queue interest
    reaches the client's node some time after its readiness line, and a series
    started before that would measure fewer replicas than it names."""
    start = await served_by(runtime.nc, gates)
    for proposal_id, data in _signed_allows(runtime, first_document, MAX_SPREAD_PROPOSALS):
        verdict = await runtime.send(proposal_id, data)
        if verdict.outcome != "allow" and not set(verdict.reason_codes) <= NOT_YET_REACHABLE:
            wrong = f"{verdict.outcome} {list(verdict.reason_codes)}"
            raise BenchError(f"{label}: warm-up proposals were not allowed, e.g. {wrong}")
        now = await served_by(runtime.nc, gates)
        if all(now[gate.name] > start[gate.name] for gate in gates):
            return
        if verdict.outcome != "allow":
            await asyncio.sleep(SPREAD_RETRY_S)
    raise BenchError(f"{label}: a replica received none of {MAX_SPREAD_PROPOSALS} proposals")


async def allow_series(
    label: str,
    runtime: ProposalClient,
    gates: Sequence[GateProcess],
    requests: int,
    in_flight: int,
    first_document: int,
) -> Rate:
    """Allows through the gate replicas running now; every verdict must be an allow,
    and the replicas' own request counts must account for every proposal."""
    signed = _signed_allows(runtime, first_document, WARM_UP + requests)
    wrong: list[str] = []

    async def propose(n: int) -> None:
        proposal_id, data = signed[n]
        verdict = await runtime.send(proposal_id, data)
        if verdict.outcome != "allow":
            wrong.append(f"{verdict.outcome} {list(verdict.reason_codes)}")

    await _until_every_replica_serves(label, runtime, gates, first_document + SPARE_DOCUMENTS)
    await _warm_up(propose)
    before = await served_by(runtime.nc, gates)
    rate = await _rate(label, len(gates), propose, requests, in_flight)
    after = await served_by(runtime.nc, gates)
    if wrong:
        raise BenchError(f"{label}: {len(wrong)} proposals were not allowed, e.g. {wrong[0]}")
    served = tuple((gate.name, after[gate.name] - before[gate.name]) for gate in gates)
    if sum(count for _, count in served) != requests:
        raise BenchError(f"{label}: the replicas served {served}, not {requests} in all")
    if any(count == 0 for _, count in served):
        raise BenchError(f"{label}: a replica served nothing ({served}); no figure for it")
    return dataclasses.replace(rate, served=served)


async def echo_series(
    client: Client, responder: Client, payload: bytes, requests: int, in_flight: int
) -> Rate:
    """The floor: the same signed bytes to a plain subscription that replies them."""

    async def echo_back(msg: Msg) -> None:
        await msg.respond(msg.data)

    sub = await responder.subscribe(ECHO_SUBJECT, cb=echo_back)
    await responder.flush()
    await until_answered(client, ECHO_SUBJECT, payload)

    async def echo(n: int) -> None:
        reply = await client.request(ECHO_SUBJECT, payload, timeout=REQUEST_TIMEOUT_S)
        if reply.data != payload:
            raise BenchError("echo: the reply is not the request")

    try:
        await _warm_up(echo)
        return await _rate(ECHO, 0, echo, requests, in_flight)
    finally:
        await sub.unsubscribe()


# --- gate replicas in their own processes -------------------------------------------


@dataclasses.dataclass
class GateProcess:
    """One ``smf-assurance up --cluster`` process; its output goes to files, so a
    full pipe never stalls it, and its log is there when it fails."""

    name: str
    proc: asyncio.subprocess.Process
    out: Path
    log: Path
    service_id: str = ""

    def tail(self) -> str:
        text = self.log.read_bytes()[-2000:].decode(errors="replace") if self.log.exists() else ""
        return text.strip() or "(no log)"

    async def stop(self) -> None:
        """SIGTERM (``up`` anchors its ledger and stops cleanly), SIGKILL after the grace."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self.proc.returncode != 0:
            log.warning("bench_gate_stop_unclean", gate=self.name, code=self.proc.returncode)


def provision_replica(seed: StateDir, root: Path) -> StateDir:
    """A replica's own state directory holding copies of the seed's identity files."""
    state = StateDir(root)
    state.create()
    state.keys.mkdir(mode=0o700)
    for item in GATE_FILES:
        source, target = seed.root / item, root / item
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)
    return state


async def start_replica(name: str, state: StateDir, url: str, work: Path) -> GateProcess:
    """``up --cluster`` on the one node ``url``; returns once its readiness line is out."""
    argv = [
        sys.executable,
        "-m",
        "smf_assurance.ops.cli.main",
        "up",
        "--cluster",
        "--replicas",
        str(REPLICAS),
        "--no-connectors",
        "--gate-name",
        name,
        "--nats",
        url,
        "--state-dir",
        str(state.root),
        "--json",
        "--json-logs",
        "--log-level",
        "warning",
    ]
    out, log_path = work / f"{name}.out", work / f"{name}.log"
    with out.open("wb") as stdout, log_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            # Its own process group, so a terminal's Ctrl-C reaches the bench alone
            # and the bench stops the replicas in order; and it dies with the bench.
            process_group=0,
            preexec_fn=parent_death_guard(),
        )
    gate = GateProcess(name, proc, out, log_path)
    deadline = monotonic_s() + READY_TIMEOUT_S
    while not out.read_bytes().endswith(b"\n"):
        if proc.returncode is not None or monotonic_s() > deadline:
            await gate.stop()
            raise BenchError(f"{name} did not get ready:\n{gate.tail()}")
        await asyncio.sleep(0.05)
    ready = json.loads(out.read_bytes())
    if ready.get("ready") is not True or ready.get("gate_name") != name:
        await gate.stop()
        raise BenchError(f"{name}: unexpected readiness line {ready!r}")
    return gate


async def _stats(nc: Client, expected: int) -> list[tuple[str, int]]:
    """(service instance id, proposals served) of each ``smf-gate`` instance."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(f"$SRV.STATS.{GATE_SERVICE}", b"", reply=inbox)
        found: list[tuple[str, int]] = []
        while len(found) < expected:
            try:
                msg = await sub.next_msg(timeout=STATS_TIMEOUT_S)
            except NatsTimeoutError:
                raise BenchError(f"{len(found)} of {expected} gate replicas answered") from None
            stats = json.loads(msg.data)
            served = sum(e["num_requests"] for e in stats["endpoints"] if e["name"] == "propose")
            found.append((str(stats["id"]), int(served)))
        return found
    finally:
        await sub.unsubscribe()


async def identify(nc: Client, gates: Sequence[GateProcess]) -> None:
    """Learn the service instance id of the replica started last (the one not yet known)."""
    known = {gate.service_id for gate in gates}
    new = [sid for sid, _ in await _stats(nc, len(gates)) if sid not in known]
    if len(new) != 1:
        raise BenchError(f"expected one new gate service instance, found {new}")
    gates[-1].service_id = new[0]


async def served_by(nc: Client, gates: Sequence[GateProcess]) -> dict[str, int]:
    """Proposals each replica has served so far, by gate name."""
    counts = dict(await _stats(nc, len(gates)))
    return {gate.name: counts[gate.service_id] for gate in gates}


# --- where things run ---------------------------------------------------------------


async def node_of(cluster: LocalNatsCluster, connection: str) -> str:
    """The node a named client connection is on, from the nodes' ``/connz``."""
    for node in cluster.nodes:
        _, body = await node.monitor("/connz?limit=4096")
        if any(c.get("name") == connection for c in json.loads(body).get("connections", [])):
            return node.name
    raise BenchError(f"no node has a connection named {connection}")


async def _leaders(nc: Client) -> tuple[tuple[str, str], ...]:
    js = nc.jetstream()
    found = []
    for stream in (f"KV_{BENCH_BUCKET}", BENCH_CONTENT):
        info = await js.stream_info(stream)
        found.append((stream, (info.cluster.leader if info.cluster else None) or "unknown"))
    return tuple(found)


# --- the run ------------------------------------------------------------------------


def run(
    rounds: int = DEFAULT_ROUNDS,
    in_flight: int = DEFAULT_IN_FLIGHT,
    progress: Progress | None = None,
) -> ClusterResult:
    """Every series on a fresh local cluster in a temporary directory, removed after."""
    if rounds < 1 or in_flight < 1:
        raise ValueError("rounds and in_flight must be at least 1")
    progress = progress or Progress("cluster bench", STEPS)
    try:
        with tempfile.TemporaryDirectory(prefix="smf-bench-cluster-") as tmp:
            return asyncio.run(_measure(Path(tmp), rounds, in_flight, progress))
    finally:
        progress.close()


async def _measure(root: Path, rounds: int, in_flight: int, progress: Progress) -> ClusterResult:
    requests = max(rounds, 4 * in_flight)
    step = 0

    def advance() -> None:
        nonlocal step
        step += 1
        progress.update(step)

    seed = StateDir(root / "seed")
    provision_demo(seed)
    async with LocalNatsCluster(root / "cluster") as cluster:
        await cluster.authorize(p.entry for p in load_registry(seed.registry).principals.values())
        sync_always = all([await _syncs_always(node) for node in cluster.nodes])
        advance()
        # The bench client is the harness operator: it writes the bench bucket and
        # proposes; the gates connect as the seed's gate.
        operator = cluster.operator.connect_options()
        client = await nats.connect(cluster.urls[CLIENT_NODE], name=CLIENT_NAME, **operator)
        responder = await nats.connect(cluster.urls[0], name="smf-bench-echo", **operator)
        gates: list[GateProcess] = []
        try:
            await wait_for_jetstream(client, REQUEST_TIMEOUT_S)
            claims = (
                await _claims_sqlite(root / "approvals.db", rounds),
                await _claims_kv(client, rounds),
            )
            advance()
            advance()
            leaders = await _leaders(client)
            runtime = ProposalClient(
                client,
                seed.key("runtime"),
                RUNTIME_ID,
                "1.0",
                ADAPTER_ID,
                timeout=REQUEST_TIMEOUT_S,
                gate_keys=seed.gate_keys(),
            )
            payload = _signed_allows(runtime, 0, 1)[0][1]
            echo = await echo_series(client, responder, payload, requests, in_flight)
            advance()
            rates: list[Rate] = [echo]
            for index, name in enumerate(GATES):
                state = provision_replica(seed, root / name)
                gates.append(await start_replica(name, state, cluster.urls[index], root))
                await identify(client, gates)
                advance()
                label = f"allow, {len(gates)} replica{'s' if len(gates) > 1 else ''}"
                first = index * (WARM_UP + requests)
                rates.append(await allow_series(label, runtime, gates, requests, in_flight, first))
                advance()
            placement = tuple(
                [(name, await node_of(cluster, name)) for name in (CLIENT_NAME, *GATES)]
            )
        finally:
            for gate in reversed(gates):
                await gate.stop()
            await responder.close()
            await client.close()
    return ClusterResult(
        nats_server=str(cluster.nodes[0].version),
        nodes=len(cluster.nodes),
        cpus=os.cpu_count() or 0,
        cpu_model=cpu_model(),
        rounds=rounds,
        in_flight=in_flight,
        requests=requests,
        placement=placement,
        leaders=leaders,
        claims=claims,
        rates=(rates[0], rates[1], rates[2]),
        sync_always=sync_always,
    )


async def _syncs_always(node: ClusterNode) -> bool:
    """What the running node says of its JetStream sync (``/varz``)."""
    status, body = await node.monitor("/varz")
    if status != 200:
        raise BenchError(f"{node.name}: /varz answered {status}")
    return bool(json.loads(body)["jetstream"]["config"].get("sync_always", False))


async def _claims_sqlite(path: Path, rounds: int) -> Summary:
    store = await SqliteApprovalStore.open(path)
    try:
        return await claim_series(CLAIM_SQLITE, store, rounds)
    finally:
        await store.close()


async def _claims_kv(nc: Client, rounds: int) -> Summary:
    store = await KvApprovalStore.open(
        nc.jetstream(), bucket=BENCH_BUCKET, content_stream=BENCH_CONTENT, replicas=REPLICAS
    )
    try:
        return await claim_series(CLAIM_KV, store, rounds)
    finally:
        await store.close()
