"""Gate replicas tell each other what they learn of runtimes
(``smf_assurance.pipeline.followers.replica_sync``).

On a three-node cluster, two gate replicas (each with its own ledger) of one
registry. Proves: an attestation answered by one replica admits the runtime
at both (each verified it itself); a tool-call id noted by one replica from a
verified proposal is covered at the other, so the model gateway's question
can go to either; a stop made by either stops the runtime at both, and an
operator's clear lifts it at both; a sync message without the gates' MAC
changes nothing. A replica that restarts after a stop and a decided call loads
both from the shared KV bucket before it serves (it heard no message of them);
a clear whose evidence cannot be written lifts nothing at either replica nor in
the bucket; one that is recorded lifts the stop at both and in the bucket, so a
replica restarted after it is not stopped. Does not prove: a replica that was
down when a note failed to reach the bucket learns it (it then reports the call
uncovered: fails closed).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client

from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import provision_runtime
from smf_assurance.pipeline.assembly import ClusterSettings, RunningGate, start_gate
from smf_assurance.pipeline.desks.tool_calls import STOPPED
from smf_assurance.pipeline.followers.replica_sync import ORIGIN_HEADER
from smf_assurance.pipeline.service import STAGE_MAC_HEADER, StageAuth
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.messages import DataFacts, Proposal, ProposedDestination
from smf_assurance.subjects.model_gateway import GatewayCleared
from smf_tools.bench.gateway import attest
from tests.support.approval_gate_child import OwnLedgerState
from tests.support.bus_helpers import registry_entries, wait_for
from tests.support.model_gateway import ACTOR

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
            gates.append(await start_replica(state, nats_cluster, index, name))
        credential = state.existing_credential(OPERATOR)
        assert credential is not None
        operator = await nats.connect(nats_cluster.urls[2], **credential.connect_options())
        yield state, gates[0], gates[1], operator
    finally:
        if operator is not None:
            await operator.close()
        for gate in gates:
            if not gate.nc.is_closed:  # a test may have stopped one and started another
                await gate.close()


async def start_replica(
    state: StateDir, cluster: LocalNatsCluster, index: int, name: str
) -> RunningGate:
    """Gate replica ``name`` on node ``index``, with its own ledger file."""
    own = OwnLedgerState(state.root, own_ledger=ledger_of(state, name))
    config = gate_config(
        own, cluster.urls[index], co_located=True, cluster=ClusterSettings(replicas=3)
    )
    return await start_gate(dataclasses.replace(config, name=name))


def ledger_of(state: StateDir, name: str) -> Path:
    return state.root / f"{name}-ledger.db"


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
    auth = StageAuth.from_tenant_key(state.pseudonym_key())
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


async def ask_calls(state: StateDir, url: str, call_id: str) -> list[str]:
    """The model gateway's question for one tool call; the ids the gate found uncovered."""
    ask = {
        "schema": "smf.gateway-calls/1",
        "request_id": "m-" + call_id[4:] * 2,
        "runtime_id": RUNTIME_ID,
        "tenant_id": "tenant-acme",
        "tool_call_ids": [call_id],
        "issued_at_ms": time.time_ns() // 1_000_000,
    }
    gateway = state.existing_credential("model-gateway")
    assert gateway is not None
    nc = await nats.connect(url, **gateway.connect_options())
    try:
        reply = await nc.request(names.GATEWAY_CALLS, json.dumps(ask).encode(), timeout=10)
    finally:
        await nc.close()
    uncovered: list[str] = json.loads(dsse.decode_envelope(reply.data).raw_payload)["uncovered"]
    return uncovered


async def clear_runtime(operator: Client) -> GatewayCleared:
    clear = msgspec.json.encode({"schema": "smf.gateway-clear/1", "runtime_id": RUNTIME_ID})
    reply = await operator.request(names.GATEWAY_CLEAR, clear, timeout=10)
    return msgspec.json.decode(reply.data, type=GatewayCleared)


def refuse_evidence(ledgers: list[Path], refuse: bool) -> None:
    """Every evidence write of these ledgers fails inside its transaction (a trigger
    another connection puts on each file), or no longer does."""
    for path in ledgers:
        with sqlite3.connect(path) as conn:
            conn.execute(
                "CREATE TRIGGER test_refuse_entries BEFORE INSERT ON evidence_entries"
                " BEGIN SELECT RAISE(ABORT, 'no room'); END"
                if refuse
                else "DROP TRIGGER test_refuse_entries"
            )


async def test_a_restarted_replica_loads_stops_and_decided_calls_from_the_bucket(
    pair: tuple[StateDir, RunningGate, RunningGate, Client], nats_cluster: LocalNatsCluster
) -> None:
    state, gate_a, gate_b, operator = pair
    url = nats_cluster.urls[0]
    ack = await attest(state, url, PRINCIPAL, RUNTIME_ID, PIN)
    assert ack.accepted
    await wait_for(lambda: standing(gate_a) is None and standing(gate_b) is None, timeout=10)
    decided = "smfc" + "4" * 24
    await gate_a.gate.decide(proposal_with_call(decided))  # its note is in the bucket
    assert await ask_calls(state, url, "smfc" + "5" * 24) == ["smfc" + "5" * 24]
    await wait_for(lambda: standing(gate_a) == STOPPED == standing(gate_b), timeout=10)

    await gate_b.close()
    restarted = await start_replica(state, nats_cluster, 1, "gate-b")
    try:
        # at once, and with no message from gate-a: loaded from the bucket
        assert standing(restarted) == STOPPED
        calls = restarted.gate.decided_calls
        assert calls is not None
        assert calls.covered(RUNTIME_ID, decided)
        assert not calls.covered(RUNTIME_ID, "smfc" + "5" * 24)

        ledgers = [ledger_of(state, "gate-a"), ledger_of(state, "gate-b")]
        refuse_evidence(ledgers, True)
        refused = await clear_runtime(operator)
        assert (refused.stopped, refused.reason_codes) == (True, ("evidence_store_unavailable",))
        assert restarted.tool_calls is not None
        assert await restarted.tool_calls.stop_of(RUNTIME_ID) is not None
        assert standing(gate_a) == STOPPED == standing(restarted)
        refuse_evidence(ledgers, False)

        cleared = await clear_runtime(operator)
        assert (cleared.was_stopped, cleared.stopped, cleared.reason_codes) == (True, False, ())
        await wait_for(
            lambda: standing(gate_a) == standing(restarted) == "runtime_attestation_missing",
            timeout=10,
        )
        assert await restarted.tool_calls.stop_of(RUNTIME_ID) is None
        await restarted.close()
        restarted = await start_replica(state, nats_cluster, 1, "gate-b")
        assert standing(restarted) == "runtime_attestation_missing"
    finally:
        await restarted.close()
