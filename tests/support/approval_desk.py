"""The fixtures, builders and constants of tests/bus/test_approval_desk.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js.client import JetStreamContext

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.adapters.connector.sdk import ConnectorRunner, RunnerConfig
from smf_assurance.approver.client import ApproverClient, content_matches
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import example_connectors, gate_config
from smf_assurance.ops.local.state import (
    ADAPTER_ID,
    DEMO_TENANT,
    RUNTIME_ID,
    StateDir,
    provision_demo,
)
from smf_assurance.ops.runtimes.provision import (
    provision_openclaw_runtime,
)
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import (
    ResolutionReply,
    open_outcome,
)
from smf_assurance.subjects.bus_access import connect_options
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.messages import (
    ExecuteOrder,
    Proposal,
    Verdict,
)
from smf_assurance.subjects.registry import RegistryFile, encode_registry, entry_for, load_registry
from tests.support.bus_helpers import wait_for
from tests.support.clocks import OffsetClock as Clock

__all__ = [
    "ATTORNEY",
    "CLOSE_TIMEOUT_S",
    "CUSTOMER_TTL_MS",
    "OTHER_TENANT_ATTORNEY",
    "PARALEGAL",
    "SELF_APPROVER",
    "approve",
    "approver",
    "clock",
    "connectors_running",
    "court_filing",
    "file_report",
    "gate",
    "held_filing",
    "hold",
    "ledger_rows",
    "ledger_statuses",
    "next_outcome",
    "order_count",
    "orders",
    "provision_with_extra_approvers",
    "runtime",
    "send",
    "state_of",
    "status",
    "with_payload",
]

COURT_FILING: Final = SCENARIOS[0]


ATTORNEY: Final = "attorney-alex"


PARALEGAL: Final = "paralegal-pat"


SELF_APPROVER: Final = "sam-self"
"""An attorney in the roster who is also the requesting actor of one test."""


OTHER_TENANT_ATTORNEY: Final = "olive-other"
"""A licensed attorney of another tenant only."""


OTHER_TENANT: Final = "tenant-beta"


CLOSE_TIMEOUT_S: Final = 15.0


CUSTOMER_TTL_MS: Final = 300_000
"""customer.acme.transmission-window in smf_assurance/governance/corpus/scenarios/policies.json."""


def provision_with_extra_approvers(state: StateDir) -> None:
    """The demo state, plus a self-approving attorney and another tenant's attorney,
    and the OpenClaw runtime (a second runtime, whose tools it executes itself)."""
    provision_demo(state)
    current = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
    extra = (
        entry_for(
            state.key(SELF_APPROVER),
            SELF_APPROVER,
            "approver",
            tenants=(DEMO_TENANT,),
            licensed_roles=("licensed_attorney",),
        ),
        entry_for(
            state.key(OTHER_TENANT_ATTORNEY),
            OTHER_TENANT_ATTORNEY,
            "approver",
            tenants=(OTHER_TENANT,),
            licensed_roles=("licensed_attorney",),
        ),
    )
    state.registry.write_bytes(encode_registry(current.entries + extra))
    # These tests stand in for the OpenClaw plugin on the bus, so they cannot attest;
    # the plugin's own attestation is tested in test_openclaw_plugin.py.
    # Also re-signs the release with this registry.
    provision_openclaw_runtime(state, require_attestation=False)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def gate(
    approvers_state: StateDir, nats_server: EmbeddedNatsServer, clock: Clock
) -> AsyncIterator[RunningGate]:
    running = await start_gate(
        gate_config(
            state=approvers_state, nats_url=nats_server.url, clock=clock, sweep_seconds=3600.0
        )
    )
    yield running
    await asyncio.wait_for(running.close(), CLOSE_TIMEOUT_S)  # a hang fails, loudly


@contextlib.asynccontextmanager
async def connectors_running(
    state: StateDir, url: str, ack_wait: float = 30.0
) -> AsyncIterator[None]:
    """The example connectors, each on its own connection with its own credential,
    as ``smf_assurance.ops.local.stack`` runs them. Each sets its durable's ack wait to
    ``ack_wait``; nats-server applies a changed wait to a delivery still unacknowledged,
    so a test that restarts a crashed connector passes the crashed one's wait."""
    registry = load_registry(state.registry)
    connections: list[Client] = []
    runners: list[ConnectorRunner] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for connector_id, connector in example_connectors(state).items():
            folder = state.connector_dir(connector_id)
            folder.mkdir(parents=True, exist_ok=True)
            credential = state.existing_credential(connector_id)
            nc = await nats.connect(url, connect_timeout=2, **connect_options(credential))
            connections.append(nc)
            runner = ConnectorRunner(
                nc,
                connector,
                connector_id=connector_id,
                signing_key=state.key(connector_id),
                gate_keys=registry.trusted("gate"),
                state_dir=folder,
                config=RunnerConfig(create_durable=True, ack_wait=ack_wait, fetch_timeout=0.2),
            )
            runners.append(runner)
            tasks.append(asyncio.create_task(runner.run()))
        for runner in runners:
            await asyncio.wait_for(runner.ready.wait(), 10)
        yield
    finally:
        for runner in runners:
            runner.stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        for nc in connections:
            await nc.drain()


def runtime(nc: Client, state: StateDir) -> ProposalClient:
    return ProposalClient(
        nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
    )


def approver(nc: Client, state: StateDir, name: str) -> ApproverClient:
    return ApproverClient(nc, state.key(name), name)


async def next_outcome(sub: Subscription, state: StateDir, held: Verdict) -> Verdict:
    """The next message on a held proposal's outcome subject, verified as a runtime
    must verify it (gate-signed, this approval, decision and operation)."""
    assert held.approval_id is not None
    assert held.decision_id is not None
    assert held.operation_hash is not None
    return open_outcome(
        (await sub.next_msg(timeout=5)).data,
        load_registry(state.registry).trusted("gate"),
        approval_id=held.approval_id,
        decision_id=held.decision_id,
        operation_hash=held.operation_hash,
    )


def court_filing(
    client: ProposalClient,
    *,
    arguments: dict[str, Any] | None = None,
    content: str | None = None,
    **actor_changes: str,
) -> Proposal:
    """Scenario 1 (a paralegal's court filing), with any field changed on request."""
    action = COURT_FILING
    return client.build(
        native_tool=action.native_tool,
        arguments=dict(action.arguments) if arguments is None else arguments,
        actor=msgspec.structs.replace(action.actor, **actor_changes),
        facts=action.facts,
        content=action.content if content is None else content,
        destination=action.destination,
    )


async def hold(client: ProposalClient, proposal: Proposal) -> Verdict:
    verdict = await client.propose(proposal)
    assert verdict.outcome == "held", verdict
    assert verdict.approval_id is not None
    return verdict


async def held_filing(nc: Client, state: StateDir, **changes: Any) -> Verdict:
    client = runtime(nc, state)
    return await hold(client, court_filing(client, **changes))


async def orders(
    js: JetStreamContext, state: StateDir
) -> list[tuple[ExecuteOrder, dict[str, str]]]:
    """Every ExecuteOrder in SMF_EXECUTE, verified against the gate's key."""
    gate_keys = load_registry(state.registry).trusted("gate")
    info = await js.stream_info(names.EXECUTE_STREAM)
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1) if info.state.messages else ():
        raw = await js.get_msg(names.EXECUTE_STREAM, seq)
        assert raw.data is not None
        order, _ = dsse.open_struct(
            dsse.decode_envelope(raw.data), gate_keys, ExecuteOrder, names.PAYLOAD_ORDER
        )
        found.append((order, dict(raw.headers or {})))
    return found


async def order_count(js: JetStreamContext) -> int:
    return (await js.stream_info(names.EXECUTE_STREAM)).state.messages


async def state_of(running: RunningGate, approval_id: str) -> str:
    record = await running.approvals.get(approval_id)
    assert record is not None
    return record.state


def ledger_rows(ledger: Path, approval_id: str) -> list[tuple[str | None, tuple[str, ...]]]:
    """``(status, reason_codes)`` of every ledger entry for one approval, in order."""
    uri = ledger.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        rows = conn.execute(
            "SELECT status, reason_codes FROM evidence_entries WHERE approval_id = ? ORDER BY seq",
            (approval_id,),
        ).fetchall()
    return [(status, tuple(json.loads(reasons))) for status, reasons in rows]


def ledger_statuses(ledger: Path, approval_id: str) -> list[str | None]:
    return [status for status, _ in ledger_rows(ledger, approval_id)]


def with_payload(signed: bytes, **changes: Any) -> bytes:
    """The same signatures over a payload with ``changes``: a tampered resolution."""
    envelope = dsse.decode_envelope(signed).envelope
    payload = json.loads(base64.b64decode(envelope.payload))
    payload.update(changes)
    forged = base64.b64encode(canonical_bytes(payload)).decode()
    return dsse.encode_envelope(msgspec.structs.replace(envelope, payload=forged))


async def send(nc: Client, signed: bytes) -> ResolutionReply:
    reply = await nc.request(names.APPROVAL_RESOLVE, signed, timeout=5)
    return msgspec.json.decode(reply.data, type=ResolutionReply)


async def status(nc: Client, approval_id: str) -> str:
    reply = await nc.request(names.APPROVAL_STATUS, approval_id.encode(), timeout=5)
    return str(json.loads(reply.data)["state"])


async def approve(nc: Client, state: StateDir, approval_id: str) -> ResolutionReply:
    """The attorney looks, checks the content against the digest, and allows once."""
    view, reply = await approver(nc, state, ATTORNEY).review_and_resolve(approval_id, "allow-once")
    assert content_matches(view)
    return reply


async def file_report(nc: Client, reporter: str, signed: bytes) -> None:
    """Store a report in SMF_RESULT and wait until the gate has handled it: the
    gate's durable consumer acknowledges a report only after ``handle_report``."""
    js = nc.jetstream()
    ack = await js.publish(names.result_subject(reporter), signed, timeout=5)

    async def handled() -> bool:
        info = await js.consumer_info(names.RESULT_STREAM, "smf-gate-results")
        return info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= ack.seq

    await wait_for(handled, timeout=10)
