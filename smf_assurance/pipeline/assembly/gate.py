"""``start_gate``: stores, stages, the chain, services and loops, in order.

A deployment can run each stage in its own process or all in one;
``co_located`` additionally calls the stages in process, passing Structs,
instead of over their subjects (the services still answer on the bus for
other gates and for ``$SRV`` tooling). Both paths run the same typed stage
code under the same refusal contract (``smf_assurance.pipeline.chain.transport``).

Order matters and is kept here: streams before anything publishes; the
release before the registry is trusted; evidence and claim stores before any
stage can decide; recovery before the first proposal; every subscription
flushed to the server before ``start_gate`` returns, so an early proposal
never finds no responder. A failure part way closes what was opened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import msgspec
import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.client import JetStreamContext
from nats.micro.service import Service

from smf_assurance.core.approval_rules import BINDING_BROKEN
from smf_assurance.core.decision import Decision
from smf_assurance.core.normalize import Normalized
from smf_assurance.core.projection import (
    DEFAULT_DETECTION_WINDOW_CHARS,
    AnalysisProjection,
    PolicySet,
)
from smf_assurance.core.release_trust import VerifiedRelease
from smf_assurance.pipeline.assembly import loops
from smf_assurance.pipeline.assembly.config import GateConfig, ReleaseSource
from smf_assurance.pipeline.assembly.deployment import Placed, Strategy, deployment_for
from smf_assurance.pipeline.chain.announcements import AnnouncementDesk
from smf_assurance.pipeline.chain.approvals import ApprovalDesk, DeskError
from smf_assurance.pipeline.chain.buffer import OutputBuffer
from smf_assurance.pipeline.chain.contracts import (
    DispatchReceipt,
    DispatchRequest,
    EvaluateRequest,
)
from smf_assurance.pipeline.chain.decide import EvaluateStage, NormalizeStage
from smf_assurance.pipeline.chain.dispatch import DispatchStage, OrderFence
from smf_assurance.pipeline.chain.gate import Gate, GateSettings
from smf_assurance.pipeline.chain.outcomes import OutcomeDesk
from smf_assurance.pipeline.chain.summaries import SummaryDesk
from smf_assurance.pipeline.chain.transport import BusStage, LocalStage, StageClient, serve
from smf_assurance.pipeline.desks.attestation import AttestationDesk
from smf_assurance.pipeline.desks.confinement import ConfinementDesk
from smf_assurance.pipeline.desks.gate_status import GateStatusDesk
from smf_assurance.pipeline.desks.holds import HoldsDesk, HoldsMirror
from smf_assurance.pipeline.desks.model_admission import ModelAdmissionDesk
from smf_assurance.pipeline.desks.runtime_stops import RuntimeStops
from smf_assurance.pipeline.desks.tool_calls import ToolCallDesk
from smf_assurance.pipeline.followers.releases import ReleaseWatcher
from smf_assurance.pipeline.followers.replica_sync import ReplicaSync
from smf_assurance.pipeline.followers.shadow import ShadowDesk
from smf_assurance.pipeline.followers.shadow_releases import ShadowReleases
from smf_assurance.pipeline.service import (
    BusUnavailableError,
    ConcurrentHandler,
    Endpoint,
    Handler,
    StageAuth,
    join_bus,
    start_service,
)
from smf_assurance.pipeline.stores.approvals import ApprovalStore
from smf_assurance.pipeline.stores.call_context import CallContextMirror, ensure_call_context_bucket
from smf_assurance.pipeline.stores.checkpoint_stream import newest_checkpoint, read_checkpoints
from smf_assurance.pipeline.stores.claims import ProposalClaims
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.pipeline.stores.holds import open_holds
from smf_assurance.pipeline.stores.ledger import Ledger
from smf_assurance.pipeline.stores.orders import OrderBook
from smf_assurance.pipeline.stores.state_check import check_state, valid_checkpoints
from smf_assurance.pipeline.stores.streams import (
    JetStreamUnavailableError,
    ensure_connector_durables,
    ensure_gate_streams,
    registered_connectors,
    wait_for_jetstream,
)
from smf_assurance.pipeline.stores.tainted_content import ensure_tainted_content_bucket
from smf_assurance.pipeline.stores.tool_calls import ToolCallStore
from smf_assurance.subjects import names
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.messages import Proposal
from smf_assurance.subjects.registry import KeyRegistry
from smf_assurance.subjects.release import (
    ReleaseCheckError,
    ReleaseReportRequest,
    sign_release_report,
)

log = structlog.get_logger(__name__)


@dataclass
class RunningGate:
    nc: Client
    js: JetStreamContext
    gate: Gate
    desk: ApprovalDesk
    ledger: Ledger
    claims: ProposalClaims
    approvals: ApprovalStore
    orders: OrderBook
    outcomes: OutcomeDesk
    buffer: OutputBuffer
    attestation: AttestationDesk
    services: list[Service] = field(default_factory=list)
    handlers: list[ConcurrentHandler] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    releases: ReleaseWatcher | None = None
    syncs: list[ReplicaSync] = field(default_factory=list)
    tool_calls: ToolCallStore | None = None
    """The stops and decided tool calls kept across a restart."""
    stops: RuntimeStops | None = None
    call_contexts: CallContextMirror | None = None
    """The tool-call contexts the model gateway recorded."""
    shadows: ShadowReleases | None = None
    """The shadow release beside the active one; release mode only."""
    shadow: ShadowDesk | None = None
    """Where each decision is judged again under the shadow, after its verdict."""
    holds: HoldsMirror | None = None
    """The hold list the gate decides with, read from its bucket every second."""

    async def stop_serving(self) -> None:
        """Stop the loops, the buffer and every service, and finish requests in flight."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.buffer.stop()
        if self.call_contexts is not None:
            await self.call_contexts.stop()
        for sync in self.syncs:
            await sync.stop()
        for service in self.services:
            await service.stop()
        for handler in self.handlers:
            await handler.drain()
        await self.gate.settled()
        if self.shadow is not None:
            await self.shadow.close()  # its last entries, before the ledger closes

    async def close(self) -> None:
        await self.stop_serving()
        if self.shadows is not None:
            await self.shadows.close()
        if self.releases is not None:
            await self.releases.close()
        await self.ledger.close()
        await self.claims.close()
        if self.tool_calls is not None:
            await self.tool_calls.close()
        await self.approvals.close()
        await self.orders.close()
        if not self.nc.is_closed:
            await self.nc.drain()

    async def serve(
        self,
        name: str,
        endpoints: list[Endpoint],
        *,
        description: str,
        auth: StageAuth | None,
        queue_group: str = names.QUEUE_GROUP,
    ) -> None:
        service, handlers = await start_service(
            self.nc, name, endpoints, description=description, auth=auth, queue_group=queue_group
        )
        self.services.append(service)
        self.handlers.extend(handlers)


@dataclass(frozen=True)
class _Stages:
    """The three typed stages and how the gate reaches each."""

    normalize: NormalizeStage
    evaluate: EvaluateStage
    dispatch: DispatchStage
    auth: StageAuth

    def clients(
        self, nc: Client, co_located: bool
    ) -> tuple[
        StageClient[Proposal, Normalized],
        StageClient[EvaluateRequest, Decision],
        StageClient[DispatchRequest, DispatchReceipt],
    ]:
        if co_located:
            return LocalStage(self.normalize), LocalStage(self.evaluate), LocalStage(self.dispatch)
        return (
            BusStage(nc, names.STAGE_NORMALIZE, Normalized, self.auth),
            BusStage(nc, names.STAGE_EVALUATE, Decision, self.auth),
            BusStage(nc, names.STAGE_DISPATCH, DispatchReceipt, self.auth),
        )

    def endpoints(self) -> list[Endpoint]:
        return [
            Endpoint("normalize", names.STAGE_NORMALIZE, serve(self.normalize, Proposal)),
            Endpoint("evaluate", names.STAGE_EVALUATE, serve(self.evaluate, EvaluateRequest)),
            Endpoint("dispatch", names.STAGE_DISPATCH, serve(self.dispatch, DispatchRequest)),
        ]


async def _open_shadows(
    config: GateConfig, js: JetStreamContext, releases: ReleaseWatcher | None, replicas: int
) -> ShadowReleases | None:
    """The shadow release, verified against the release just loaded; only in
    release mode (a projection folder has no trusted state to verify one against)."""
    source = config.policy
    if releases is None or not isinstance(source, ReleaseSource):
        return None
    shadows = ShadowReleases(releases, source.trust_root, config.clock)
    try:
        await shadows.start(js, replicas=replicas)
    except BaseException:
        await shadows.close()
        raise
    return shadows


def _on_switch(
    config: GateConfig, running: RunningGate, shadows: ShadowReleases | None
) -> Callable[[VerifiedRelease], None]:
    """What a release switch changes, in the switch itself: the shadow stops (it was a
    candidate to replace the release now gone), and the new registry replaces the
    approval desk's, the outcome desk's and the gate's."""

    def adopt(release: VerifiedRelease) -> None:
        if shadows is not None:
            shadows.on_active_switch(release)  # before the new release decides
        running.desk.registry = release.registry
        running.outcomes.registry = release.registry
        running.gate.adopt_registry(release.registry)
        # a connector the new release adds gets its durable (it may not create one)
        created = asyncio.create_task(_create_durables(running.js, release.registry))
        running.tasks.append(created)
        if config.on_release is not None:
            try:
                config.on_release(release)
            except Exception as exc:  # noqa: BLE001 - a follower's failure is not the gate's
                log.error("release_follower_failed", error=type(exc).__name__)

    return adopt


async def _create_durables(js: JetStreamContext, registry: KeyRegistry) -> None:
    """The durables of a new release's connectors; a failure is logged, and the
    connector waits for its durable (it never runs without one)."""
    try:
        await ensure_connector_durables(js, registered_connectors(registry))
    except (NatsError, TimeoutError) as exc:
        log.error("connector_durables_failed", error=type(exc).__name__)


def _shadow_desk(
    config: GateConfig,
    shadows: ShadowReleases | None,
    ledger: Ledger,
    undo: contextlib.AsyncExitStack,
) -> ShadowDesk | None:
    """The desk that judges each decision under the shadow after its verdict
    and writes the disagreements to this gate's ledger."""
    if shadows is None:
        return None
    desk = ShadowDesk(shadows, EvidenceWriter(ledger, config.tenant_key, config.clock))
    desk.start()
    undo.push_async_callback(desk.close)
    return desk


async def _open_releases(
    config: GateConfig, js: JetStreamContext, replicas: int
) -> ReleaseWatcher | None:
    """Release mode: run only on verified releases, from the bucket and inbox."""
    source = config.policy
    if not isinstance(source, ReleaseSource):
        return None
    watcher = await ReleaseWatcher.open(
        source.trust_root, source.state, config.clock, inbox=source.inbox
    )
    try:
        await watcher.start(js, tick_seconds=source.tick_seconds, replicas=replicas)
    except BaseException:
        await watcher.close()
        raise
    if watcher.active is None:
        log.error("gate_has_no_verified_release", gate=config.name)
    return watcher


def _binding_broken_stop(
    stops: RuntimeStops,
) -> Callable[[str, str, dict[str, str]], Awaitable[object]]:
    """How the approval desk stops a runtime whose report broke its binding."""

    async def stop(runtime_id: str, tenant_id: str, subject: dict[str, str]) -> object:
        return await stops.stop_recorded(
            runtime_id, tenant_id, subject, (BINDING_BROKEN,), "runtime_stopped_binding_broken"
        )

    return stop


def _runtime_stops(
    config: GateConfig,
    placed: Placed,
    attestation: AttestationDesk,
    ledger: Ledger,
    releases: ReleaseWatcher | None,
) -> RuntimeStops:
    """The gate's stops, loaded by :func:`_start_accounting`."""
    return RuntimeStops(
        store=placed.calls,
        attestation=attestation,
        evidence=EvidenceWriter(ledger, config.tenant_key, config.clock),
        release_id=_active_release(releases),
        clear_beside=placed.clear_beside,
    )


async def _start_accounting(
    config: GateConfig,
    nc: Client,
    auth: StageAuth,
    gate: Gate,
    stops: RuntimeStops,
    placed: Placed,
) -> list[ReplicaSync]:
    """The decided-call index and the stops as they stood, before anything is served:
    the stored notes within the index's bounds, oldest first (one
    that does not decode is left out: its id is reported uncovered), and every stored
    stop in force (one that does not decode ends the start: never read as "not
    stopped"). On a cluster the replicas' sync is heard first, so what another
    replica tells meanwhile is not lost between the read and the serving."""
    calls = gate.decided_calls
    confinement = gate.confinement
    assert confinement is not None
    syncs = placed.replica_sync(nc, auth, config.name, calls, stops.attestation, confinement, stops)
    for sync in syncs:
        await sync.start()
    store = placed.calls
    await store.prune_notes(calls.per_runtime, calls.max_runtimes)
    calls.load(await store.notes())
    loaded = await stops.load()
    if loaded:
        log.warning("runtime_stops_loaded", count=loaded)
    return syncs


def _active_analysis(
    releases: ReleaseWatcher | None,
) -> Callable[[], AnalysisProjection | None]:
    """The verified active release's analysis projection, for the desk to show each rule
    in the release's words; a gate on a projection folder has none."""
    if releases is None:
        return lambda: None
    return lambda: None if releases.active is None else releases.active.analysis


def _desk_policy_set(evaluate: EvaluateStage) -> Callable[[], PolicySet]:
    """The approval desk re-binds to the release in force, or refuses with its reason."""

    def current() -> PolicySet:
        try:
            return evaluate.current()
        except ReleaseCheckError as exc:
            raise DeskError(exc.reason_code) from exc

    return current


def _detection_window(evaluate: EvaluateStage) -> Callable[[], int]:
    """The release in force's detection window; with no release to use, the default
    (its decision is a denial anyway: the evaluator refuses without a release)."""

    def current() -> int:
        try:
            return evaluate.current().detection_window_chars
        except ReleaseCheckError:
            return DEFAULT_DETECTION_WINDOW_CHARS

    return current


async def start_gate(config: GateConfig) -> RunningGate:
    """Build and start one gate; on failure close what was opened and raise."""
    nc = await join_bus(config.servers, config.name, config.credential, config.join_seconds)
    async with contextlib.AsyncExitStack() as undo:
        undo.push_async_callback(nc.close)
        js = nc.jetstream()
        try:
            await wait_for_jetstream(nc, config.join_seconds)
        except JetStreamUnavailableError as exc:
            raise BusUnavailableError(str(exc)) from None
        deployment = deployment_for(config)
        replicas = deployment.replicas
        await ensure_gate_streams(js, replicas, record=config.stores.streams)
        await _check_state(config, js, deployment)
        releases = await _open_releases(config, js, replicas)
        if releases is not None:
            undo.push_async_callback(releases.close)
        shadows = await _open_shadows(config, js, releases, replicas)
        if shadows is not None:
            undo.push_async_callback(shadows.close)
        call_contexts = await _open_call_contexts(config, nc, js, releases, replicas)
        undo.push_async_callback(call_contexts.stop)
        running = await _assemble(
            config, deployment, nc, js, releases, undo, call_contexts, shadows
        )
        undo.pop_all()
        return running
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises


async def _check_state(config: GateConfig, js: JetStreamContext, deployment: Strategy) -> None:
    """Refuse state that lies before any store opens it
    (``smf_assurance.pipeline.stores.state_check``): the files against themselves,
    the ledger against the newest checkpoint this gate signed on the bus (all of them
    when that one does not verify: junk on the stream is skipped, never trusted), the
    claims and approvals against the ledger, and their modes. A gate key the
    registry retired still counts: it signed this ledger's checkpoints before the
    rotation (``KeyRegistry.evidence_keys``)."""
    trusted = {
        **config.registry.evidence_keys("gate"),
        config.gate_key.key_id: config.gate_key.verify_key,
    }
    try:
        newest = await newest_checkpoint(js, config.name)
        envelopes = [] if newest is None else valid_checkpoints([newest], trusted)
        if newest is not None and not envelopes:
            envelopes = valid_checkpoints(await read_checkpoints(js, config.name), trusted)
    except (NatsError, TimeoutError) as exc:
        raise BusUnavailableError(f"cannot read the ledger checkpoints: {exc}") from None
    files = deployment.state_files(config)
    retention = GateSettings(tenant_key=config.tenant_key).claim_retention_ms
    await asyncio.to_thread(
        check_state,
        files,
        envelopes,
        trusted,
        now_ms=config.clock(),
        claim_retention_ms=retention,
    )


async def _assemble(
    config: GateConfig,
    deployment: Strategy,
    nc: Client,
    js: JetStreamContext,
    releases: ReleaseWatcher | None,
    undo: contextlib.AsyncExitStack,
    call_contexts: CallContextMirror,
    shadows: ShadowReleases | None = None,
) -> RunningGate:
    registry = config.registry
    if releases is not None and releases.active is not None:
        registry = releases.active.registry
    await ensure_connector_durables(js, registered_connectors(registry))

    checkpoint_subject = names.checkpoint_subject(config.name)

    async def publish_checkpoint(envelope: bytes) -> None:
        await js.publish(checkpoint_subject, envelope)

    ledger = await Ledger.open(
        config.stores.ledger, signer=config.gate_key, on_checkpoint=publish_checkpoint
    )
    undo.push_async_callback(ledger.close)
    placed = await deployment.open(config, js, ledger, undo)
    claims, approvals, orders, tool_calls = (
        placed.claims,
        placed.approvals,
        placed.orders,
        placed.calls,
    )

    if releases is not None:
        evaluate = EvaluateStage(None, config.clock, release=releases.current)
    else:
        assert isinstance(config.policy, PolicySet)
        evaluate = EvaluateStage(config.policy, config.clock)
    # Stage traffic on the bus is authenticated with a key only the gate holds:
    # otherwise any client could call the dispatch stage, or answer a stage first.
    # the gate's hold list decides its own proposals too: read once before any proposal
    # is served, then every second (a stale list refuses document writes and deletes)
    holds = HoldsMirror(await open_holds(js, deployment.replicas))
    await holds.refresh()
    stages = _Stages(
        normalize=NormalizeStage(config.mapper_tables, holds=holds.view),
        evaluate=evaluate,
        dispatch=DispatchStage(js, config.gate_key, config.clock, config.order_ttl_ms),
        auth=StageAuth.from_tenant_key(config.tenant_key),
    )
    normalize, evaluate_client, dispatch = stages.clients(nc, config.co_located)
    settings = GateSettings(
        tenant_key=config.tenant_key,
        stage_timeout=config.stage_timeout,
        order_ttl_ms=config.order_ttl_ms,
        restored_at_ms=config.restored_at_ms,
    )

    desk = ApprovalDesk(
        store=approvals,
        nc=nc,
        js=js,
        registry=registry,
        ledger=ledger,
        dispatch=dispatch,
        policy_set=_desk_policy_set(evaluate),
        clock=config.clock,
        tenant_key=config.tenant_key,
        stage_timeout=config.stage_timeout,
        execution_deadline_ms=config.execution_deadline_ms,
        order_ttl_ms=config.order_ttl_ms,
        claim_grace_ms=config.claim_grace_ms,
        signer=config.gate_key,  # runtimes act only on outcomes the gate signed
        restored_until_ms=settings.record_only_until_ms,
        analysis=_active_analysis(releases),
    )
    outcomes = OutcomeDesk(
        orders=orders,
        registry=registry,
        ledger=ledger,
        clock=config.clock,
        tenant_key=config.tenant_key,
        execution_deadline_ms=config.execution_deadline_ms,
        approvals=desk.settle_report,
        outcome_missing=placed.outcome_missing,
    )
    # Direct orders are never resumed; those past their deadline end unknown now,
    # the others keep waiting for their report (smf_assurance.pipeline.chain.outcomes). Safe on
    # a cluster too: settling is conditional, so one replica records each.
    await outcomes.recover()
    await placed.recover(desk)

    gate = Gate(
        settings=settings,
        registry=registry,
        normalize=normalize,
        evaluate=evaluate_client,
        dispatch=dispatch,
        ledger=ledger,
        claims=claims,
        clock=config.clock,
        signer=config.gate_key,
        outcomes=outcomes,
        deployment=placed,
        hold=desk,
        call_contexts=call_contexts,
        fence=OrderFence(js, config.gate_key, config.clock, config.stage_timeout),
        proposals_seen=desk.proposals_seen,
    )
    # Orders whose publish a stopped gate never saw confirmed: stored, or voided so
    # they never run (Gate.resolve_unconfirmed); a recorded verdict is then definite.
    await gate.resolve_unconfirmed(await orders.overdue(config.clock()))
    shadow = _shadow_desk(config, shadows, ledger, undo)
    gate.shadow = shadow
    attestation = _attestation_desk(config, gate, releases, ledger)
    gate.attestation = attestation
    gate.confinement = ConfinementDesk(
        registry=lambda: gate.registry,
        clock=gate.clock,
        attested_instance=attestation.attested_instance,
    )
    stops = _runtime_stops(config, placed, attestation, ledger, releases)
    syncs = await _start_accounting(config, nc, stages.auth, gate, stops, placed)
    buffer = OutputBuffer(
        nc,
        gate,
        config.clock,
        config.buffer_limits,
        answers_close=placed.answers_close,
        window_chars=_detection_window(evaluate),
    )
    running = RunningGate(
        nc=nc,
        js=js,
        gate=gate,
        desk=desk,
        ledger=ledger,
        claims=claims,
        approvals=approvals,
        orders=orders,
        outcomes=outcomes,
        buffer=buffer,
        attestation=attestation,
        releases=releases,
        tool_calls=tool_calls,
        stops=stops,
        syncs=syncs,
        call_contexts=call_contexts,
        shadows=shadows,
        shadow=shadow,
        holds=holds,
    )
    if releases is not None:
        releases.on_switch = _on_switch(config, running, shadows)
    desk.stop_runtime = _binding_broken_stop(stops)
    undo.push_async_callback(running.stop_serving)
    await buffer.start()
    await running.serve(
        "smf-stages",
        stages.endpoints(),
        description="SMF gate stages: normalize, evaluate, dispatch",
        auth=stages.auth,
    )
    await _serve_public(running, config, releases)
    await _serve_runtime_state(running, config, releases, evaluate.current)
    running.tasks += [
        asyncio.create_task(loops.follow_reports(js, outcomes)),
        asyncio.create_task(loops.sweep(desk, outcomes, buffer, config.sweep_seconds, gate)),
        asyncio.create_task(loops.prune_claims(gate, config.claim_prune_seconds)),
        asyncio.create_task(holds.run()),
    ]
    # A round trip, so the server has every subscription above before anyone is
    # told the gate serves; otherwise an early proposal finds no responder.
    await nc.flush()
    log.info("gate_started", gate=config.name, co_located=config.co_located)
    return running


_MALFORMED_REPORT_REQUEST: Final = b'{"error":"malformed_request"}'


async def _serve_public(
    running: RunningGate, config: GateConfig, releases: ReleaseWatcher | None
) -> None:
    """The subjects other principals call, with no stage MAC: each checks its caller's
    signature itself, or (the release report) tells only what the caller's bus
    permission already entitles it to read."""
    await running.serve(
        "smf-gate",
        [Endpoint("propose", names.PROPOSE, running.gate.handle_propose)],
        description="SMF Assurance Gate: propose -> verdict",
        auth=None,
    )
    await running.serve(
        "smf-approvals",
        [
            Endpoint("resolve", names.APPROVAL_RESOLVE, running.desk.handle_resolve),
            Endpoint("show", names.APPROVAL_SHOW, running.desk.handle_show),
            Endpoint("status", names.APPROVAL_STATUS, running.desk.handle_status),
            Endpoint("track", names.APPROVAL_TRACK, running.desk.handle_track),
            Endpoint("rerequest", names.APPROVAL_REREQUEST, running.desk.handle_rerequest),
            Endpoint(
                "announcements",
                names.APPROVAL_ANNOUNCEMENTS,
                None,
                identified=AnnouncementDesk(running.js, lambda: running.desk.registry).handle,
            ),
            Endpoint(
                "summary",
                names.APPROVAL_SUMMARY,
                None,
                identified=SummaryDesk(
                    lambda: running.approvals,
                    lambda: running.desk.registry,
                    config.notice_content_tenants,
                ).handle,
            ),
        ],
        description="SMF approval desk: resolve, show, status, track, rerequest, announcements, "
        "summary",
        auth=None,
    )
    confinement = running.gate.confinement
    assert confinement is not None
    await running.serve(
        "smf-attest",
        [
            Endpoint("attest", names.ATTEST, running.attestation.handle),
            Endpoint("confinement", names.CONFINEMENT, confinement.handle),
        ],
        description="SMF attestation: a runtime's attest -> ack; its launcher's confinement -> ack",
        auth=None,
    )
    # the legal holds a launcher mounts read-only: the gate creates the bucket, the
    # operator sets it (`smf-assurance holds`), no runtime can reach it
    assert running.holds is not None
    desk = HoldsDesk(running.holds.bucket)
    await running.serve(
        "smf-holds",
        [Endpoint("holds", names.HOLDS, desk.handle)],
        description="SMF legal holds: a launcher's request -> the gate's hold list",
        auth=None,
    )
    await _serve_release_report(running, config, releases)


async def _serve_release_report(
    running: RunningGate, config: GateConfig, releases: ReleaseWatcher | None
) -> None:
    if releases is None:
        return  # a gate on a projection folder has no release to report
    await running.serve(
        "smf-release-report",
        [
            Endpoint(
                "report",
                names.RELEASE_REPORT,
                _release_reporter(config, releases, running.shadows, running.shadow),
            )
        ],
        description="SMF gate releases: report -> this gate's signed release report",
        auth=None,
        # a queue group of its own per gate: every replica answers, so a
        # publisher hears each gate's adoption or refusal, not one of them
        queue_group=f"{names.QUEUE_GROUP}.report.{names.token(config.name)}",
    )


def _release_reporter(
    config: GateConfig,
    releases: ReleaseWatcher,
    shadows: ShadowReleases | None = None,
    shadow: ShadowDesk | None = None,
) -> Handler:
    """``smf.release.report``: the watcher's report, signed with the gate
    key. A request that does not decode gets an unsigned refusal, which no
    publisher counts as an answer. The report names the shadow release and
    what the gate did with it, and a publisher asking after a shadow it published
    hears ``adopted`` once it runs (a refusal of it is told as any release's)."""

    async def handle(data: bytes) -> bytes:
        try:
            request = msgspec.json.decode(data or b"{}", type=ReleaseReportRequest)
        except msgspec.DecodeError:  # ValidationError is a DecodeError
            return _MALFORMED_REPORT_REQUEST
        report = releases.report(config.name, request)
        running = None if shadows is None else shadows.active
        if running is not None:
            counts = None if shadow is None else shadow.counts()
            report = msgspec.structs.replace(
                report,
                shadow=running.reported(),
                shadow_counts=msgspec.UNSET if counts is None else counts,
            )
            if request.manifest_hash == running.release.manifest_hash:
                report = msgspec.structs.replace(report, asked="adopted", asked_refusal=None)
        return sign_release_report(report, config.gate_key)

    return handle


async def _serve_runtime_state(
    running: RunningGate,
    config: GateConfig,
    releases: ReleaseWatcher | None,
    policy_set: Callable[[], PolicySet],
) -> None:
    """What the gate knows of runtimes beyond one proposal: the replicas' sync on a
    cluster, and what the model gateway asks: admission and tool-call
    accounting (its ``smf.gateway.clear`` is for operators only)."""
    attestation, ledger, gate, stops = (
        running.attestation,
        running.ledger,
        running.gate,
        running.stops,
    )
    assert gate.confinement is not None  # set by start_gate before anything is served
    admission = ModelAdmissionDesk(
        attestation=attestation,
        evidence=EvidenceWriter(ledger, config.tenant_key, config.clock),
        release_id=_active_release(releases),
        policy_set=policy_set,
        signer=config.gate_key,
        confinement=gate.confinement,
    )
    await running.serve(
        "smf-gateway-admit",
        [Endpoint("admit", names.GATEWAY_ADMIT, admission.handle)],
        description="SMF model gateway admission: admit -> signed admission",
        auth=None,
    )
    assert stops is not None
    accounting = ToolCallDesk(
        calls=gate.decided_calls,
        attestation=attestation,
        stops=stops,
        evidence=EvidenceWriter(ledger, config.tenant_key, config.clock),
        release_id=_active_release(releases),
        signer=config.gate_key,
    )
    await running.serve(
        "smf-gateway-calls",
        [
            Endpoint("calls", names.GATEWAY_CALLS, accounting.handle_calls),
            Endpoint("clear", names.GATEWAY_CLEAR, accounting.handle_clear),
        ],
        description="SMF tool-call accounting: calls -> signed answer; clear (operators)",
        auth=None,
    )
    status = GateStatusDesk(
        gate=config.name,
        attestation=attestation,
        ledger=ledger,
        release_id=_active_release(releases),
        clock=config.clock,
        signer=config.gate_key,
        confinement=gate.confinement,
    )
    await running.serve(
        "smf-gate-status",
        [Endpoint("status", names.GATE_STATUS, status.handle)],
        description="SMF gate status: status -> this gate's signed runtimes and ledger (operators)",
        auth=None,
        # every replica answers for itself, as with the release report
        queue_group=f"{names.QUEUE_GROUP}.status.{names.token(config.name)}",
    )


async def _open_call_contexts(
    config: GateConfig,
    nc: Client,
    js: JetStreamContext,
    releases: ReleaseWatcher | None,
    replicas: int,
) -> CallContextMirror:
    """What the chain's ``raise call context`` link reads: the bucket
    (created when absent, refused with other settings) and the gate's watch of it. A
    record counts only when a ``gateway`` key of the registry in force signed it: the
    active release's registry, as the gate adopts it at every switch, else the
    configured one."""
    await ensure_call_context_bucket(js, replicas, config.call_context_max_age_s)
    # beside it, what tainted sessions wrote: only model gateways use it, and no
    # gateway may create a bucket (docs/BUS-PERMISSIONS.md)
    await ensure_tainted_content_bucket(
        js, replicas, config.call_context_max_age_s, config.tainted_content_max_bytes
    )

    def gateway_keys() -> dict[str, VerifyKey]:
        active = releases.active if releases is not None else None
        registry = active.registry if active is not None else config.registry
        return registry.trusted("gateway")

    mirror = CallContextMirror(
        nc.jetstream(timeout=config.stage_timeout), gateway_keys, config.call_context_mirror
    )
    await mirror.start()
    return mirror


def _active_release(releases: ReleaseWatcher | None) -> Callable[[], str | None]:
    def release_id() -> str | None:
        active = releases.active if releases is not None else None
        return active.release_id if active is not None else None

    return release_id


def _attestation_desk(
    config: GateConfig, gate: Gate, releases: ReleaseWatcher | None, ledger: Ledger
) -> AttestationDesk:
    """``smf.attest``: the desk the chain's ``admit`` link asks first."""
    release_id = _active_release(releases)

    async def evidence_probe() -> bool:
        # A real round trip to the store: sign the tail (a no-op when it is signed).
        await ledger.checkpoint(gate.clock())
        return True

    return AttestationDesk(
        required=config.attestation,
        registry=lambda: gate.registry,
        clock=gate.clock,
        release_id=release_id,
        evidence_probe=evidence_probe,
    )
