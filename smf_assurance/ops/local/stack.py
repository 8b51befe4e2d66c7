"""The local stack: embedded nats-server, the gate, and the example connectors.

What ``smf-assurance up`` and ``demo`` run. Every piece of state
lives under the state directory; the embedded server is started unless a
NATS URL is given, and is stopped (never left running) when the stack stops.

A NATS URL may be a comma-separated list of seeds of one cluster;
the gate and the connectors connect with the whole list
(``smf_assurance.ops.local.cluster.nats_servers``). ``start_connectors`` runs the example
connectors alone, against gates that run elsewhere (``up --connectors-only``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import nats
import structlog
from nats.aio.client import Client

from smf_assurance.adapters.connector.sdk import Connector, ConnectorRunner, RunnerConfig
from smf_assurance.adapters.connectors.court_efiling import CourtEFilingConnector
from smf_assurance.adapters.connectors.dms import DocumentStoreConnector
from smf_assurance.core.projection import PolicySet
from smf_assurance.core.release_trust import VerifiedRelease
from smf_assurance.governance.projections import load_policy_set
from smf_assurance.governance.releases import load_trust_root
from smf_assurance.ops.local.bus_auth import (
    SYSTEM_PRINCIPAL,
    authorization_steps,
    read_authorization,
    render_authorization,
    write_authorization,
)
from smf_assurance.ops.local.cluster import nats_servers, seed_urls
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.notices import notice_content_tenants
from smf_assurance.ops.local.restored import restored_at
from smf_assurance.ops.local.state import (
    DEMO_TENANT,
    RELEASE_SIGNER,
    StateDir,
    refresh_demo_release,
    write_private,
)
from smf_assurance.ops.runtimes.provision import LiveRequirements
from smf_assurance.pipeline.assembly import (
    ClusterSettings,
    GateConfig,
    ReleaseSource,
    RunningGate,
    StorePaths,
    start_gate,
)
from smf_assurance.pipeline.chain.buffer import BufferLimits
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import connect_options
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.registry import load_registry

log = structlog.get_logger(__name__)

STOP_GRACE_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 2.0


def gate_config(
    state: StateDir,
    nats_url: str,
    *,
    co_located: bool = False,
    projection_dir: Path | None = None,
    clock: Callable[[], int] = wall_clock_ms,
    stage_timeout: float = 2.0,
    sweep_seconds: float = 1.0,
    buffer_limits: BufferLimits | None = None,
    name: str = names.DEFAULT_GATE_NAME,
    release_tick_seconds: float = 5.0,
    cluster: ClusterSettings | None = None,
    claim_prune_seconds: float = 60.0,
) -> GateConfig:
    """The explicit settings of the gate a state directory describes.

    Keys, registry and store paths come from ``state``. A state directory with
    a release trust root runs only on verified releases, from its
    inbox and the ``SMF_RELEASES`` bucket; one that is also its own release
    authority (``demo``, ``up``) first signs its current registry as the next
    release. Without a trust root the gate runs on the projection in
    ``projection_dir`` (the shipped scenarios by default), which a trust root
    forbids: it would bypass the verified release. The attestation requirements
    are read again at every release switch
    (``smf_assurance.ops.runtimes.provision.LiveRequirements``,
    the config's ``on_release``), so a runtime ``runtime add`` published must
    attest from the moment its key is trusted.
    """
    policy: ReleaseSource | PolicySet
    if state.trust_root.exists():
        if projection_dir is not None:
            raise ValueError("projection_dir would bypass the verified release of this state dir")
        if state.key_path(RELEASE_SIGNER).exists():
            refresh_demo_release(state)
        policy = ReleaseSource(
            trust_root=load_trust_root(state.trust_root),
            state=state.release_state,
            inbox=state.release_inbox,
            tick_seconds=release_tick_seconds,
        )
    else:
        policy = load_policy_set(projection_dir)
    registry = load_registry(state.registry)
    requirements = LiveRequirements(state, registry)
    return GateConfig(
        servers=seed_urls(nats_url),
        gate_key=state.key("gate"),
        tenant_key=state.pseudonym_key(),
        registry=registry,
        stores=StorePaths(ledger=state.ledger, claims=state.claims, approvals=state.approvals),
        policy=policy,
        credential=state.existing_credential("gate"),
        attestation=requirements,
        on_release=requirements.follow,
        name=name,
        co_located=co_located,
        cluster=cluster,
        clock=clock,
        stage_timeout=stage_timeout,
        sweep_seconds=sweep_seconds,
        buffer_limits=buffer_limits,
        claim_prune_seconds=claim_prune_seconds,
        restored_at_ms=restored_at(state.root),
        notice_content_tenants=notice_content_tenants(state.root),
    )


@dataclass
class Connectors:
    """The example connectors, each on its own NATS connection as its own principal
    (a connector may consume only its own durable)."""

    state: StateDir
    url: str
    connections: list[Client] = field(default_factory=list)
    runners: list[ConnectorRunner] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def stop(self) -> None:
        for runner in self.runners:
            runner.stop()
        if self.tasks:
            # Let an order in hand finish; cancelling mid-execution would leave it ambiguous.
            _, pending = await asyncio.wait(self.tasks, timeout=STOP_GRACE_SECONDS)
            for task in pending:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        for nc in self.connections:
            if not nc.is_closed:
                await nc.drain()

    @property
    def connected(self) -> bool:
        """Every connector still has its connection (nats-py gives up reconnecting)."""
        return bool(self.connections) and not any(nc.is_closed for nc in self.connections)


@dataclass
class Stack:
    state: StateDir
    url: str
    gate: RunningGate
    server: EmbeddedNatsServer | None = None
    connectors: Connectors | None = None

    async def stop(self) -> None:
        if self.connectors is not None:
            await self.connectors.stop()
        await self.gate.close()
        if self.server is not None:
            self.server.close()


def example_connectors(state: StateDir) -> dict[str, Connector]:
    return {
        "court-efiling": CourtEFilingConnector(state.connector_dir("court-efiling") / "outbox"),
        "dms": DocumentStoreConnector(state.connector_dir("dms") / "store"),
    }


async def start_stack(
    state: StateDir,
    *,
    nats_url: str | None = None,
    with_connectors: bool = True,
    co_located: bool = True,
    gate_name: str | None = None,
    cluster: ClusterSettings | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> Stack:
    """The gate (named ``gate_name``, a cluster replica with ``cluster``, reading
    the time from ``clock``) and, unless told otherwise, the example connectors, on
    ``nats_url`` (``URL[,URL...]``) or on an embedded nats-server.

    The embedded server runs with authorization on: generated from
    the state's registry before it starts, and again from the registry of every
    release the gate switches to, reloaded without a restart. The connectors take
    the gate keys of every release the gate switches to (:func:`connectors_follow`).
    """
    server = None
    if nats_url is None:
        server = start_embedded_server(state)
        nats_url = server.url
    runners: list[ConnectorRunner] = []
    try:
        config = gate_config(state, nats_url, co_located=co_located, cluster=cluster, clock=clock)
        if gate_name is not None:
            config = dataclasses.replace(config, name=gate_name)
        if server is not None:
            config = dataclasses.replace(
                config, on_release=both(config.on_release, follow_releases(state, server))
            )
        config = dataclasses.replace(
            config, on_release=both(config.on_release, connectors_follow(runners))
        )
        gate = await start_gate(config)
    except BaseException:
        if server is not None:
            server.close()
        raise
    stack = Stack(state=state, url=nats_url, gate=gate, server=server)
    if with_connectors:
        try:
            stack.connectors = await start_connectors(state, nats_url)
            runners.extend(stack.connectors.runners)
        except BaseException:
            await stack.stop()
            raise
    return stack


def start_embedded_server(state: StateDir, folder: Path | None = None) -> EmbeddedNatsServer:
    """The state's nats-server, authorization on, allowing exactly the state's registry.

    ``folder`` (default ``state.nats``) holds the server's store, log and
    authorization: a second server of the same registry (the tests' "no gate
    on this bus") gets a folder of its own."""
    server = EmbeddedNatsServer(state.nats if folder is None else folder, authorization=True)
    entries = [p.entry for p in load_registry(state.registry).principals.values()]
    system_user = state.bus_user(SYSTEM_PRINCIPAL)
    write_authorization(server.authorization_path, render_authorization(entries, system_user))
    return server.start()


def both(
    first: Callable[[VerifiedRelease], None] | None, second: Callable[[VerifiedRelease], None]
) -> Callable[[VerifiedRelease], None]:
    """Two followers of the release in force, in order: the second runs even when the
    first failed (the gate logs the failure)."""

    def follow(release: VerifiedRelease) -> None:
        try:
            if first is not None:
                first(release)
        finally:
            second(release)

    return follow


def follow_releases(
    state: StateDir, server: EmbeddedNatsServer
) -> Callable[[VerifiedRelease], None]:
    """Keep the server's authorization that of the release in force: a principal
    added is let in, one revoked is disconnected, without a restart."""
    system_user = state.bus_user(SYSTEM_PRINCIPAL)

    def follow(release: VerifiedRelease) -> None:
        entries = [p.entry for p in release.registry.principals.values()]
        current = read_authorization(server.authorization_path)
        changed = False
        for text in authorization_steps(current, entries, system_user):
            if write_authorization(server.authorization_path, text):
                server.reload()
                changed = True
        if changed:
            log.info("bus_authorization_followed_release", release_id=release.release_id)

    return follow


def connectors_follow(runners: list[ConnectorRunner]) -> Callable[[VerifiedRelease], None]:
    """Give the connectors the gate keys of the release in force (``runners``, filled
    once they started): a gate key ``keys rotate`` added signs orders they take, and
    one ``keys retire`` retired signs none, without a restart."""

    def follow(release: VerifiedRelease) -> None:
        keys = release.registry.trusted("gate")
        for runner in runners:
            runner.trust_gate_keys(keys)

    return follow


async def start_connectors(state: StateDir, nats_url: str) -> Connectors:
    """Start the example connectors on ``nats_url`` (``URL[,URL...]``) and wait
    until each is ready; stops what it started if one is not."""
    connectors = Connectors(state=state, url=nats_url)
    try:
        await _start_runners(connectors)
    except BaseException:
        await connectors.stop()
        raise
    return connectors


async def _log_bus_error(exc: Exception) -> None:
    """nats-py's default error callback prints a traceback per failed attempt
    (twice a second on a dead bus); the type is what an operator needs."""
    log.warning("connector_bus_error", error=type(exc).__name__)


async def _start_runners(connectors: Connectors) -> None:
    state = connectors.state
    registry = load_registry(state.registry)
    for connector_id, connector in example_connectors(state).items():
        nc = await nats.connect(
            nats_servers(connectors.url),
            name=f"smf-connector-{connector_id}",
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            error_cb=_log_bus_error,
            **connect_options(state.existing_credential(connector_id)),
        )
        connectors.connections.append(nc)
        folder = state.connector_dir(connector_id)
        folder.mkdir(parents=True, exist_ok=True)
        for sub in ("outbox", "store"):
            (folder / sub).mkdir(exist_ok=True)
        runner = ConnectorRunner(
            nc,
            connector,
            connector_id=connector_id,
            signing_key=state.key(connector_id),
            gate_keys=registry.trusted("gate"),
            state_dir=folder,
            config=RunnerConfig(fetch_timeout=0.5),  # the durable is the gate's
        )
        connectors.runners.append(runner)
        connectors.tasks.append(asyncio.create_task(runner.run()))
    for runner in connectors.runners:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(runner.ready.wait(), 10)
        if not runner.ready.is_set():
            raise RuntimeError(f"connector {runner.connector_id} did not start")


DEMO_DIRECTORY: Final = """\
# The demo firm's tenant directory: the names the console and `approvals show`
# put beside the raw ids a held action is bound to. Operator data, read by
# nothing else and never written to the ledger or the bus; the format and its
# rules are in docs/CONSOLE.md, "The tenant directory". The demo writes it only
# where no file for this tenant exists, and never changes one.
schema = "smf.tenant-directory/1"
tenant_id = "tenant-acme"

[courts.sdny]
name = "U.S. District Court, Southern District of New York"

[matters."matter-2026-0042"]
name = "Acme v. Globex (discovery)"
client = "Acme Corporation"

[matters."matter-2026-0042".cases.sdny]
caption = "Acme Corp. v. Globex Inc."
docket = "1:26-cv-01234 (JMF)"

[recipients."counsel@globex.example"]
name = "Dana Whitfield, counsel for Globex"
"""
"""The demo's court, matter and case by name: an approver of the demo reads a held
filing as a lawyer does, not as ``sdny (not in the directory)``."""


def seed_demo_directory(state: StateDir) -> Path | None:
    """Write the demo tenant's directory file when the state holds none for it (the
    operator's own file is never replaced); the file written, or None."""
    folder = state.directory
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{DEMO_TENANT}.toml"
    if path.exists():
        return None
    write_private(path, DEMO_DIRECTORY.encode("utf-8"))
    return path


def seed_demo_documents(state: StateDir) -> Path:
    store = state.connector_dir("dms") / "store"
    store.mkdir(parents=True, exist_ok=True)
    for doc in ("doc-1207", "doc-4711"):
        path = store / doc
        if not path.exists():
            path.write_text(f"{doc}: demo document\n")
    return store
