"""Gate replicas tell each other what they learn of runtimes (``pipeline.stages.replica_sync``).

On a three-node cluster, two gate replicas (each with its own ledger) of one
registry. Proves: an attestation answered by one replica admits the runtime
at both (each verified it itself); a tool-call id noted by one replica from a
verified proposal is covered at the other, so the model gateway's question
can go to either; a stop made by either stops the runtime at both, and an
operator's clear lifts it at both; a sync message without the gates' MAC
changes nothing. Does not prove: a replica that (re)starts after a message
was sent learns it (it starts empty and refuses, which fails closed).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client

from ops.bench.gateway import attest
from ops.cluster import LocalNatsCluster
from ops.runtimes import provision_runtime
from ops.stack import gate_config
from ops.state import OPERATOR, StateDir, provision_demo
from pipeline.assembly import ClusterSettings, RunningGate, start_gate
from pipeline.service import STAGE_MAC_HEADER, StageAuth
from pipeline.stages.replica_sync import ORIGIN_HEADER
from pipeline.stages.tool_calls import STOPPED
from subjects import dsse, names
from subjects.messages import DataFacts, Proposal, ProposedDestination
from tests.approval_gate_child import OwnLedgerState
from tests.bus_helpers import registry_entries, wait_for
from tests.test_model_gateway import ACTOR

PIN = "1.0.0"
RUNTIME_ID = "sync-demo"
PRINCIPAL = "sync-runtime"


@pytest.fixture
async def pair(
    tmp_path: Path, nats_cluster: LocalNatsCluster
) -> AsyncIterator[tuple[StateDir, RunningGate, RunningGate, Client]]:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    provision_runtime(state, PRINCIPAL, RUNTIME_ID, runtime_pin=PIN, require_release=False)
    await nats_cluster.authorize(registry_entries(state.registry))
    gates: list[RunningGate] = []
    operator = None
    try:
        for index, name in enumerate(("gate-a", "gate-b")):
            own = OwnLedgerState(state.root, own_ledger=state.root / f"{name}-ledger.db")
            config = gate_config(
                own,
                nats_cluster.urls[index],
                co_located=True,
                cluster=ClusterSettings(replicas=3),
            )
            gates.append(await start_gate(dataclasses.replace(config, name=name)))
        credential = state.existing_credential(OPERATOR)
        assert credential is not None
        operator = await nats.connect(nats_cluster.urls[2], **credential.connect_options())
        yield state, gates[0], gates[1], operator
    finally:
        if operator is not None:
            await operator.close()
        for gate in gates:
            await gate.close()


def standing(gate: RunningGate) -> str | None:
    return gate.attestation.standing(RUNTIME_ID)[0]


def proposal_with_call(call_id: str) -> Proposal:
    return Proposal(
        schema="smf.proposal/1",
        proposal_id="p-" + call_id,
        runtime_id=RUNTIME_ID,
        runtime_version=PIN,
        adapter_id="smf-hermes-adapter",
        surface="tool_call",
        native_tool="read_file",
        arguments={"path": "/tmp/notes.txt"},
        content="",
        destination=ProposedDestination(),
        actor=ACTOR,
        facts=DataFacts(),
        issued_at_ms=time.time_ns() // 1_000_000,
        tool_call_id=call_id,
    )


async def test_what_one_replica_learns_the_other_knows(
    pair: tuple[StateDir, RunningGate, RunningGate, Client],
) -> None:
    state, gate_a, gate_b, operator = pair
    url = operator.connected_url
    assert url is not None
    ack = await attest(state, f"nats://{url.netloc}", PRINCIPAL, RUNTIME_ID, PIN)
    assert ack.accepted
    await wait_for(lambda: standing(gate_a) is None and standing(gate_b) is None, timeout=10)

    # a proposal decided at gate-a only (called in process): its call id reaches gate-b
    await gate_a.gate.decide(proposal_with_call("smfc" + "1" * 24))
    calls_b = gate_b.gate.decided_calls
    assert calls_b is not None
    await wait_for(lambda: calls_b.covered(RUNTIME_ID, "smfc" + "1" * 24), timeout=10)

    # the gateway's question with an id nobody decided: whichever replica answers
    # stops the runtime, and both refuse it
    ask = {
        "schema": "smf.gateway-calls/1",
        "request_id": "m-" + "0" * 32,
        "runtime_id": RUNTIME_ID,
        "tenant_id": "tenant-acme",
        "tool_call_ids": ["smfc" + "2" * 24],
        "issued_at_ms": time.time_ns() // 1_000_000,
    }
    gateway = state.existing_credential("model-gateway")
    assert gateway is not None
    nc = await nats.connect(f"nats://{url.netloc}", **gateway.connect_options())
    try:
        reply = await nc.request(names.GATEWAY_CALLS, json.dumps(ask).encode(), timeout=10)
    finally:
        await nc.close()
    envelope = dsse.decode_envelope(reply.data)
    assert json.loads(envelope.raw_payload)["uncovered"] == ["smfc" + "2" * 24]
    await wait_for(lambda: standing(gate_a) == STOPPED == standing(gate_b), timeout=10)

    clear = msgspec.json.encode({"schema": "smf.gateway-clear/1", "runtime_id": RUNTIME_ID})
    await operator.request(names.GATEWAY_CLEAR, clear, timeout=10)
    # cleared at both: the stop is gone, and so is the attestation (attest again)
    await wait_for(
        lambda: standing(gate_a) == standing(gate_b) == "runtime_attestation_missing", timeout=10
    )


async def test_a_sync_message_without_the_gates_mac_changes_nothing(
    pair: tuple[StateDir, RunningGate, RunningGate, Client],
) -> None:
    state, gate_a, gate_b, operator = pair
    body = msgspec.json.encode({"runtime_id": RUNTIME_ID})
    await operator.publish(f"{names.GATE_SYNC_PREFIX}.stop", body)
    await operator.publish(
        f"{names.GATE_SYNC_PREFIX}.stop", body, headers={STAGE_MAC_HEADER: "0" * 64}
    )
    # then one the gates' key authenticates, on the same subscription: once it is
    # applied, the two before it were read, and ignored
    auth = StageAuth.from_seed(state.key("gate").seed())
    note = msgspec.json.encode({"runtime_id": RUNTIME_ID, "tool_call_id": "smfc" + "3" * 24})
    subject = f"{names.GATE_SYNC_PREFIX}.call"
    await operator.publish(
        subject,
        note,
        headers={ORIGIN_HEADER: "elsewhere", STAGE_MAC_HEADER: auth.request_tag(subject, note)},
    )
    for gate in (gate_a, gate_b):
        calls = gate.gate.decided_calls
        assert calls is not None
        await wait_for(lambda c=calls: c.covered(RUNTIME_ID, "smfc" + "3" * 24), timeout=10)
        assert gate.attestation.standing(RUNTIME_ID)[0] != STOPPED
