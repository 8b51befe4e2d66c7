"""The gate on a real nats-server: verdicts, what reaches smf.execute, and refusals."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import names
from tests.support.bus_helpers import ExecuteSpy


@pytest.fixture(params=[False, True], ids=["bus-stages", "co-located"])
async def gate(
    request: pytest.FixtureRequest, state: StateDir, nats_server: EmbeddedNatsServer
) -> AsyncIterator[RunningGate]:
    running = await start_gate(
        gate_config(state=state, nats_url=nats_server.url, co_located=request.param)
    )
    yield running
    await running.close()


def client(nc: Client, state: StateDir) -> ProposalClient:
    return ProposalClient(
        nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
    )


async def test_scenarios_get_their_verdicts_and_only_allows_reach_execute(
    gate: RunningGate, nc: Client, state: StateDir
) -> None:
    spy = await ExecuteSpy.attach(nc)
    runtime = client(nc, state)
    for action in SCENARIOS:
        proposal = runtime.build(
            native_tool=action.native_tool,
            arguments=action.arguments,
            actor=action.actor,
            facts=action.facts,
            content=action.content,
            destination=action.destination,
        )
        verdict = await runtime.propose(proposal)
        assert verdict.outcome == action.expected_outcome, (action.name, verdict)
        assert action.expected_reason in verdict.reason_codes
        assert verdict.reason_codes
        if verdict.outcome == "allow":
            assert verdict.order_id is not None
    # The gate publishes an order (acknowledged by the stream) before it replies,
    # so after the last verdict the stream holds every order there will be.
    info = await gate.js.stream_info(names.EXECUTE_STREAM)
    assert info.state.messages == 1
    assert [m.subject for m in await spy.settled()] == ["smf.execute.dms"]
