"""The local stack: embedded nats-server, the gate, and the example connectors.

What ``smf-assurance up`` and ``demo`` run (issue 3). Every piece of state
lives under the state directory; the embedded server is started unless a
NATS URL is given, and is stopped (never left running) when the stack stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.aio.client import Client

from adapters.connector.sdk import Connector, ConnectorRunner, RunnerConfig
from adapters.connectors.court_efiling import CourtEFilingConnector
from adapters.connectors.dms import DocumentStoreConnector
from ops.gateway import GateOptions, RunningGate, start_gate
from ops.natsserver import EmbeddedNatsServer
from ops.state import StateDir
from subjects.registry import load_registry

STOP_GRACE_SECONDS = 5.0


@dataclass
class Stack:
    state: StateDir
    url: str
    gate: RunningGate
    server: EmbeddedNatsServer | None = None
    connector_nc: Client | None = None
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
        if self.connector_nc is not None and not self.connector_nc.is_closed:
            await self.connector_nc.drain()
        await self.gate.close()
        if self.server is not None:
            self.server.stop()


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
) -> Stack:
    server = None
    if nats_url is None:
        server = EmbeddedNatsServer(state.nats).start()
        nats_url = server.url
    try:
        gate = await start_gate(GateOptions(state=state, nats_url=nats_url, co_located=co_located))
    except BaseException:
        if server is not None:
            server.stop()
        raise
    stack = Stack(state=state, url=nats_url, gate=gate, server=server)
    if with_connectors:
        try:
            await _start_connectors(stack)
        except BaseException:
            await stack.stop()
            raise
    return stack


async def _start_connectors(stack: Stack) -> None:
    state = stack.state
    registry = load_registry(state.registry)
    stack.connector_nc = await nats.connect(stack.url, name="smf-connectors")
    for connector_id, connector in example_connectors(state).items():
        folder = state.connector_dir(connector_id)
        folder.mkdir(parents=True, exist_ok=True)
        for sub in ("outbox", "store"):
            (folder / sub).mkdir(exist_ok=True)
        runner = ConnectorRunner(
            stack.connector_nc,
            connector,
            connector_id=connector_id,
            signing_key=state.key(connector_id),
            gate_keys=registry.trusted("gate"),
            state_dir=folder,
            config=RunnerConfig(ack_wait=30.0, fetch_timeout=0.5),
        )
        stack.runners.append(runner)
        stack.tasks.append(asyncio.create_task(runner.run()))
    for runner in stack.runners:
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
