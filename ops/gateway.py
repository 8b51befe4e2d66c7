"""Assemble and run the gate: stages as nats.micro services, stores, streams.

A deployment can run each stage in its own process or all in one (issue 3);
``co_located=True`` additionally calls the stages in-process instead of over
their subjects (the services still answer on the bus for other gates and for
``$SRV`` tooling). Both paths use the same stage code and refusal contract.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import nats
import structlog
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.client import JetStreamContext
from nats.micro.service import Service

from ops.cluster import seed_urls
from ops.projections import load_policy_set
from ops.releases import load_trust_root
from ops.runtimes import start_attestation
from ops.state import RELEASE_SIGNER, StateDir, refresh_demo_release
from pipeline.core.normalize import MapperTable, decode_mapper
from pipeline.core.projection import PolicySet
from pipeline.core.release_trust import ReleaseTrustError, VerifiedRelease
from pipeline.stages.approvals import ApprovalDesk, DeskError
from pipeline.stages.buffer import BufferLimits, OutputBuffer
from pipeline.stages.decide import EvaluateStage, NormalizeStage
from pipeline.stages.dispatch import DispatchStage
from pipeline.stages.gate import Gate, GateSettings
from pipeline.stages.releases import ReleaseWatcher
from pipeline.stages.service import (
    BusStage,
    ConcurrentHandler,
    Endpoint,
    LocalStage,
    StageAuth,
    StageClient,
    StageHandler,
    start_service,
)
from pipeline.stages.streams import ensure_gate_streams
from pipeline.stores.approvals import ApprovalStore
from pipeline.stores.approvals_kv import KvApprovalStore
from pipeline.stores.approvals_sqlite import SqliteApprovalStore
from pipeline.stores.claims import ClaimStore, ProposalClaims
from pipeline.stores.claims_kv import KvClaimStore
from pipeline.stores.ledger import Ledger
from subjects import names
from subjects.registry import load_registry

log = structlog.get_logger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def load_mapper_tables() -> dict[str, MapperTable]:
    """The shipped per-adapter mapper tables (``pipeline/mappers/*.json``)."""
    tables: dict[str, MapperTable] = {}
    folder = resources.files("pipeline").joinpath("mappers")
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            table = decode_mapper(entry.read_bytes())
            tables[table.adapter_id] = table
    return tables


@dataclass(frozen=True)
class ClusterSettings:
    """Run as one replica of several on a NATS cluster (issue 11; ARCHITECTURE.md, "Scale").

    The approval and proposal-claim stores move to replicated JetStream KV
    buckets (compare-and-set by revision), and every stream and bucket the gate
    creates gets ``replicas`` copies.
    """

    replicas: int = 3


@dataclass
class GateOptions:
    state: StateDir
    nats_url: str
    co_located: bool = False
    projection_dir: Path | None = None
    clock: Callable[[], int] = wall_clock_ms
    stage_timeout: float = 2.0
    sweep_seconds: float = 1.0
    buffer_limits: BufferLimits | None = None
    name: str = names.DEFAULT_GATE_NAME
    release_tick_seconds: float = 5.0
    cluster: ClusterSettings | None = None
    claim_prune_seconds: float = 60.0
    """How often the gate forgets proposal claims past their retention."""


@dataclass
class RunningGate:
    nc: Client
    js: JetStreamContext
    gate: Gate
    desk: ApprovalDesk
    ledger: Ledger
    claims: ProposalClaims
    approvals: ApprovalStore
    buffer: OutputBuffer
    services: list[Service] = field(default_factory=list)
    handlers: list[ConcurrentHandler] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    releases: ReleaseWatcher | None = None

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.releases is not None:
            await self.releases.close()
        await self.buffer.stop()
        for service in self.services:
            await service.stop()
        for handler in self.handlers:
            await handler.drain()
        await self.ledger.close()
        await self.claims.close()
        await self.approvals.close()
        if not self.nc.is_closed:
            await self.nc.drain()


def _honour_cancel() -> None:
    """Re-raise a cancel that nats-py's ``asyncio.wait_for`` (Python 3.11) turned into
    a TimeoutError when it landed as the call's own deadline passed; a loop that
    swallowed it would make ``RunningGate.close()`` wait for its task forever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def _follow_reports(js: JetStreamContext, desk: ApprovalDesk) -> None:
    """A durable consumer on SMF_RESULT: a report that arrives while no gate
    runs is read when one starts (the deadline sweep covers a lost report)."""
    sub = await js.pull_subscribe(f"{names.RESULT_PREFIX}.>", durable="smf-gate-results")
    try:
        while True:
            try:
                messages = await sub.fetch(16, timeout=1.0)
            except (NatsTimeoutError, TimeoutError):
                # fetch raises nats' TimeoutError or asyncio's, depending on where
                # its deadline passed; both mean "no report yet", never "stop".
                _honour_cancel()
                continue
            except Exception:
                # While the connection is down fetch fails at once; the task
                # must outlive that, or reports are never read again.
                log.exception("execution_report_fetch_failed")
                await asyncio.sleep(1.0)
                continue
            for msg in messages:
                try:
                    await desk.handle_report(msg.data)
                except Exception:
                    log.exception("execution_report_failed")
                await msg.ack()
    finally:
        # A fetch cancelled at shutdown can leave a message in the subscription's
        # queue that nobody takes; nc.drain() would then wait for it forever.
        try:
            await sub.unsubscribe()
        except Exception:
            log.exception("report_subscription_unsubscribe_failed")


async def _sweep(desk: ApprovalDesk, buffer: OutputBuffer, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        buffer.sweep()
        try:
            await desk.sweep()
        except Exception:
            _honour_cancel()
            log.exception("approval_sweep_failed")


async def _prune_claims(gate: Gate, every: float) -> None:
    """Keep the claim store bounded: forget claims no replay can still use
    (:attr:`GateSettings.claim_retention_ms`). Every replica of a cluster runs
    this; the KV store deletes each claim only at the revision it judged. A
    failed pass forgets nothing, so it is logged and retried, never fatal."""
    while True:
        await asyncio.sleep(every)
        try:
            pruned = await gate.prune_claims()
        except Exception:
            _honour_cancel()
            log.exception("claim_prune_failed")
            continue
        if pruned:
            log.info("claims_pruned", count=pruned)


async def _start_releases(options: GateOptions, js: JetStreamContext) -> ReleaseWatcher | None:
    """Release mode (issue 6): a state directory with a trust root runs only on
    verified releases, from its inbox and the ``SMF_RELEASES`` bucket."""
    state = options.state
    if not state.trust_root.exists():
        return None
    if options.projection_dir is not None:
        raise ValueError("projection_dir would bypass the verified release of this state dir")
    if state.key_path(RELEASE_SIGNER).exists():
        # This state directory is its own release authority (demo, up): sign its registry.
        refresh_demo_release(state)
    watcher = await ReleaseWatcher.open(
        load_trust_root(state.trust_root),
        state.release_state,
        options.clock,
        inbox=state.release_inbox,
    )
    try:
        await watcher.start(
            js,
            tick_seconds=options.release_tick_seconds,
            replicas=1 if options.cluster is None else options.cluster.replicas,
        )
    except BaseException:
        await watcher.close()
        raise
    if watcher.active is None:
        log.error("gate_has_no_verified_release", state_dir=str(state.root))
    return watcher


def _desk_policy_set(evaluate: EvaluateStage) -> Callable[[], PolicySet]:
    """The approval desk re-binds to the release in force, or refuses with its reason."""

    def current() -> PolicySet:
        try:
            return evaluate.current()
        except ReleaseTrustError as exc:
            raise DeskError(exc.reason_code) from exc

    return current


def _adopt_registry(gate: Gate, desk: ApprovalDesk) -> Callable[[VerifiedRelease], None]:
    """A new release's registry replaces the running one, between two messages."""

    def adopt(release: VerifiedRelease) -> None:
        desk.registry = release.registry
        gate.registry = release.registry
        gate.__post_init__()  # recomputes the key map the gate verifies signatures with

    return adopt


async def _open_stores(
    options: GateOptions, js: JetStreamContext
) -> tuple[ProposalClaims, ApprovalStore]:
    """SQLite files on one machine; replicated JetStream KV on a cluster (issue 11)."""
    if options.cluster is None:
        claims: ProposalClaims = await ClaimStore.open(options.state.claims)
        approvals: ApprovalStore = await SqliteApprovalStore.open(options.state.approvals)
        return claims, approvals
    replicas = options.cluster.replicas
    return (
        await KvClaimStore.open(js, replicas=replicas),
        await KvApprovalStore.open(js, replicas=replicas),
    )


def _close_claim(
    claims: ProposalClaims, clock: Callable[[], int]
) -> Callable[[str], Awaitable[bool]]:
    """One replica answers each output close: the one whose claim on it lands first.

    The claim lives in the proposal-claim store under its own prefix, so it is as
    durable and as atomic across replicas as the claim of a proposal.
    """

    async def claim(stream_id: str) -> bool:
        return await claims.claim(f"output-close:{stream_id}", "output-close", stream_id, clock())

    return claim


async def start_gate(options: GateOptions) -> RunningGate:
    state = options.state
    registry = load_registry(state.registry)
    gate_key = state.key("gate")
    nc = await nats.connect(
        servers=list(seed_urls(options.nats_url)),  # one URL, or a cluster's seeds
        name=options.name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
    )
    js = nc.jetstream()
    replicas = 1 if options.cluster is None else options.cluster.replicas
    try:
        await ensure_gate_streams(js, replicas)
        releases = await _start_releases(options, js)
    except BaseException:
        await nc.close()
        raise
    if releases is not None and releases.active is not None:
        registry = releases.active.registry

    checkpoint_subject = names.checkpoint_subject(options.name)

    async def publish_checkpoint(envelope: bytes) -> None:
        await js.publish(checkpoint_subject, envelope)

    ledger = await Ledger.open(state.ledger, signer=gate_key, on_checkpoint=publish_checkpoint)
    claims, approvals = await _open_stores(options, js)

    evaluate = (
        EvaluateStage(None, options.clock, release=releases.current)
        if releases is not None
        else EvaluateStage(load_policy_set(options.projection_dir), options.clock)
    )
    stage_handlers: dict[str, StageHandler] = {
        names.STAGE_NORMALIZE: NormalizeStage(load_mapper_tables()),
        names.STAGE_EVALUATE: evaluate,
        names.STAGE_DISPATCH: DispatchStage(js, gate_key, options.clock),
    }

    # Stage traffic on the bus is authenticated with a key only the gate holds:
    # otherwise any client could call the dispatch stage, or answer a stage first.
    stage_auth = StageAuth.from_seed(gate_key.seed())

    def client(subject: str) -> StageClient:
        if options.co_located:
            return LocalStage(stage_handlers[subject])
        return BusStage(nc, subject, stage_auth)

    tenant_key = state.pseudonym_key()
    desk = ApprovalDesk(
        store=approvals,
        nc=nc,
        js=js,
        registry=registry,
        ledger=ledger,
        dispatch=client(names.STAGE_DISPATCH),
        policy_set=_desk_policy_set(evaluate),
        clock=options.clock,
        tenant_key=tenant_key,
        stage_timeout=options.stage_timeout,
        signer=gate_key,  # runtimes act only on outcomes the gate signed (docs/SUBJECTS.md)
    )
    if options.cluster is None:
        await desk.recover()
    else:
        # On a cluster the open approvals belong to every replica, not to this one: a
        # replica that (re)starts must not invalidate what another holds. Executing
        # work a crashed replica left behind ends execution_unknown by the execution
        # deadline sweep (ApprovalDesk.sweep), never claimed again (issue 11).
        log.info("gate_recovery_left_to_the_cluster", gate=options.name)
    gate = Gate(
        settings=GateSettings(tenant_key=tenant_key, stage_timeout=options.stage_timeout),
        registry=registry,
        normalize=client(names.STAGE_NORMALIZE),
        evaluate=client(names.STAGE_EVALUATE),
        dispatch=client(names.STAGE_DISPATCH),
        ledger=ledger,
        claims=claims,
        clock=options.clock,
        signer=gate_key,
        hold=desk,
    )
    buffer = OutputBuffer(
        nc,
        gate,
        options.clock,
        options.buffer_limits,
        close_claim=None if options.cluster is None else _close_claim(claims, options.clock),
    )
    running = RunningGate(
        nc=nc,
        js=js,
        gate=gate,
        desk=desk,
        ledger=ledger,
        claims=claims,
        approvals=approvals,
        buffer=buffer,
        releases=releases,
    )
    if releases is not None:
        releases.on_switch = _adopt_registry(gate, desk)
    await start_attestation(running, state)  # issue 8: smf.attest, and admission by it
    await buffer.start()
    stages, handlers = await start_service(
        nc,
        "smf-stages",
        [Endpoint(subject.rsplit(".", 1)[1], subject, h) for subject, h in stage_handlers.items()],
        description="SMF gate stages: normalize, evaluate, dispatch",
        auth=stage_auth,
    )
    running.services.append(stages)
    running.handlers.extend(handlers)
    front, front_handlers = await start_service(
        nc,
        "smf-gate",
        [Endpoint("propose", names.PROPOSE, gate.handle_propose)],
        description="SMF Assurance Gate: propose -> verdict",
    )
    running.services.append(front)
    running.handlers.extend(front_handlers)
    desk_service, desk_handlers = await start_service(
        nc,
        "smf-approvals",
        [
            Endpoint("resolve", names.APPROVAL_RESOLVE, desk.handle_resolve),
            Endpoint("show", names.APPROVAL_SHOW, desk.handle_show),
            Endpoint("status", names.APPROVAL_STATUS, desk.handle_status),
        ],
        description="SMF approval desk: resolve, show, status",
    )
    running.services.append(desk_service)
    running.handlers.extend(desk_handlers)
    running.tasks += [
        asyncio.create_task(_follow_reports(js, desk)),
        asyncio.create_task(_sweep(desk, buffer, options.sweep_seconds)),
        asyncio.create_task(_prune_claims(gate, options.claim_prune_seconds)),
    ]
    # A round trip, so the server has every subscription above before anyone is
    # told the gate serves; otherwise an early proposal finds no responder.
    await nc.flush()
    log.info("gate_started", nats=options.nats_url, co_located=options.co_located)
    return running
