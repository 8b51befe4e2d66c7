"""``$SRV.STATS`` tells the truth about the traffic a gate served.

The counters are read the way operators read them, with a ``$SRV.STATS``
request to each service over the bus, after sending a known mix: allowed and
denied proposals, and malformed ones the edge refuses. What they must show:
every request counted once on the endpoint that served it, every error reply
counted as an error with its reason code, and processing time measured where
the work is done, so the propose endpoint (which waits on its stages) reports
at least the time its stages report. nats.micro alone timed the spawning of a
task and never saw an error.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config, start_stack
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import names
from tests.support.bus_helpers import wait_for
from tests.support.bus_properties import deletion, runtime_client

ALLOWED = 5
DENIED = 3
MALFORMED = 2
GATE_SERVICES = {
    "smf-gate",
    "smf-stages",
    "smf-attest",
    "smf-approvals",
    "smf-gateway-admit",
    "smf-gateway-calls",
    "smf-release-report",
    "smf-gate-status",
}


@pytest.fixture
async def gate(state: StateDir, nats_server: EmbeddedNatsServer) -> AsyncIterator[RunningGate]:
    """Stages over the bus, so each stage's endpoint serves real requests."""
    running = await start_gate(gate_config(state, nats_server.url, co_located=False))
    yield running
    await running.close()


async def stats(nc: Client, service: str) -> dict[str, dict[str, Any]]:
    reply = await nc.request(f"$SRV.STATS.{service}", b"", timeout=5)
    return {e["name"]: e for e in json.loads(reply.data)["endpoints"]}


async def test_stats_count_what_was_served(gate: RunningGate, nc: Client, state: StateDir) -> None:
    runtime = runtime_client(nc, state)
    for n in range(ALLOWED):
        assert (await runtime.propose(deletion(runtime, f"doc-{n}"))).outcome == "allow"
    for n in range(DENIED):
        denied = await runtime.propose(deletion(runtime, f"held-{n}", hold=True))
        assert denied.outcome == "deny"
    for _ in range(MALFORMED):
        reply = await nc.request(names.PROPOSE, b"not an envelope", timeout=5)
        assert (reply.headers or {})[names.HEADER_SERVICE_ERROR] == "malformed_proposal"

    async def all_counted() -> bool:
        front = (await stats(nc, "smf-gate"))["propose"]
        return bool(front["num_requests"] == ALLOWED + DENIED + MALFORMED)

    # A request is counted when its reply has been sent, which may follow the
    # runtime's receipt of it by a moment.
    await wait_for(all_counted, timeout=10)
    front = (await stats(nc, "smf-gate"))["propose"]
    stages = await stats(nc, "smf-stages")
    assert front["num_errors"] == MALFORMED
    assert front["last_error"] == "malformed_proposal"
    decided = ALLOWED + DENIED
    assert stages["normalize"]["num_requests"] == decided
    assert stages["evaluate"]["num_requests"] == decided
    assert stages["dispatch"]["num_requests"] == ALLOWED
    assert all(stages[e]["num_errors"] == 0 for e in ("normalize", "evaluate", "dispatch"))
    staged = sum(stages[e]["processing_time"] for e in ("normalize", "evaluate", "dispatch"))
    assert staged > 0
    assert front["processing_time"] >= staged
    assert front["average_processing_time"] == front["processing_time"] // front["num_requests"]


async def test_stage_refusals_are_counted_as_errors(gate: RunningGate, nc: Client) -> None:
    """An unauthenticated call to a stage is refused, and counted as that error."""
    reply = await nc.request(names.STAGE_DISPATCH, b"{}", timeout=5)
    assert (reply.headers or {})[names.HEADER_SERVICE_ERROR] == "stage_unauthenticated"
    dispatch = (await stats(nc, "smf-stages"))["dispatch"]
    assert (dispatch["num_requests"], dispatch["num_errors"]) == (1, 1)
    assert dispatch["last_error"] == "stage_unauthenticated"


async def test_a_bare_ping_on_an_authorizing_bus_is_answered_by_every_gate_service(
    tmp_path: Path,
) -> None:
    """NATS tooling lists services with a bare ``$SRV.PING`` (and reads ``$SRV.STATS``
    the same way). A gate holds all its services on one connection, and the server
    allowed it one reply per request: on a bus with authorization every reply to a bare
    ping was refused as a publish violation, and tooling saw no gate at all (the attack
    on visibility, ``smf_assurance.ops.local.bus_auth.RESPONSES_PER_REQUEST``)."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    stack = await start_stack(state, with_connectors=False)
    try:
        credential = state.existing_credential(OPERATOR)
        assert credential is not None
        operator = await nats.connect(stack.url, **credential.connect_options())
        try:
            for verb in ("PING", "STATS"):
                answers: list[str] = []

                async def heard(msg: Msg) -> None:
                    answers.append(json.loads(msg.data)["name"])  # noqa: B023 - awaited below

                inbox = operator.new_inbox()
                sub = await operator.subscribe(inbox, cb=heard)
                await operator.publish(f"$SRV.{verb}", b"", reply=inbox)
                await wait_for(lambda: set(answers) >= GATE_SERVICES, timeout=10)  # noqa: B023
                await sub.unsubscribe()
        finally:
            await operator.close()
    finally:
        await stack.stop()
