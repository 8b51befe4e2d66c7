"""The local stack: embedded nats-server, the gate, and the example connectors.

What ``smf-assurance up`` and ``demo`` run (issue 3). Every piece of state
lives under the state directory; the embedded server is started unless a
NATS URL is given, and is stopped (never left running) when the stack stops.

A NATS URL may be a comma-separated list of seeds of one cluster (issue 11);
the gate and the connectors connect with the whole list
(``ops.cluster.nats_servers``). ``start_connectors`` runs the example
connectors alone, against gates that run elsewhere (``up --connectors-only``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.aio.client import Client

from adapters.connector.sdk import Connector, ConnectorRunner, RunnerConfig
from adapters.connectors.court_efiling import CourtEFilingConnector
from adapters.connectors.dms import DocumentStoreConnector
from ops.cluster import nats_servers
from ops.gateway import ClusterSettings, GateOptions, RunningGate, start_gate
from ops.natsserver import EmbeddedNatsServer
from ops.state import StateDir
from subjects.registry import load_registry

STOP_GRACE_SECONDS = 5.0


@dataclass
class Connectors:
    """The example connectors, on their own NATS connection."""

    state: StateDir
    url: str
    nc: Client | None = None
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
        if self.nc is not None and not self.nc.is_closed:
            await self.nc.drain()


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
) -> Stack:
    """The gate (named ``gate_name``, a cluster replica with ``cluster``) and,
    unless told otherwise, the example connectors, on ``nats_url`` (``URL[,URL...]``)
    or on an embedded nats-server."""
    server = None
    if nats_url is None:
        server = EmbeddedNatsServer(state.nats).start()
        nats_url = server.url
    try:
        options = GateOptions(state, nats_url, co_located=co_located, cluster=cluster)
        if gate_name is not None:
            options = dataclasses.replace(options, name=gate_name)
        gate = await start_gate(options)
    except BaseException:
        if server is not None:
            server.close()
        raise
    stack = Stack(state=state, url=nats_url, gate=gate, server=server)
    if with_connectors:
        try:
            stack.connectors = await start_connectors(state, nats_url)
        except BaseException:
            await stack.stop()
            raise
    return stack


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


async def _start_runners(connectors: Connectors) -> None:
    state = connectors.state
    registry = load_registry(state.registry)
    connectors.nc = await nats.connect(nats_servers(connectors.url), name="smf-connectors")
    for connector_id, connector in example_connectors(state).items():
        folder = state.connector_dir(connector_id)
        folder.mkdir(parents=True, exist_ok=True)
        for sub in ("outbox", "store"):
            (folder / sub).mkdir(exist_ok=True)
        runner = ConnectorRunner(
            connectors.nc,
            connector,
            connector_id=connector_id,
            signing_key=state.key(connector_id),
            gate_keys=registry.trusted("gate"),
            state_dir=folder,
            config=RunnerConfig(ack_wait=30.0, fetch_timeout=0.5),
        )
        connectors.runners.append(runner)
        connectors.tasks.append(asyncio.create_task(runner.run()))
    for runner in connectors.runners:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(runner.ready.wait(), 10)
        if not runner.ready.is_set():
            raise RuntimeError(f"connector {runner.connector_id} did not start")


def seed_demo_documents(state: StateDir) -> Path:
    store = state.connector_dir("dms") / "store"
    store.mkdir(parents=True, exist_ok=True)
    for doc in ("doc-1207", "doc-4711"):
        path = store / doc
        if not path.exists():
            path.write_text(f"{doc}: demo document\n")
    return store
