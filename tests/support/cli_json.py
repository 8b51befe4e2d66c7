"""The fixtures, builders and constants of tests/cli/test_cli_json.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import nats

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.state import (
    ADAPTER_ID,
    RUNTIME_ID,
    StateDir,
)
from smf_assurance.subjects.bus_access import connect_options

__all__ = ["hold_filing"]


async def hold_filing(url: str, state: StateDir) -> str:
    """Scenario 1 proposed as the scripted runtime: the gate holds it for an attorney."""
    filing = SCENARIOS[0]
    nc = await nats.connect(url, **connect_options(state.existing_credential("runtime")))
    try:
        runtime = ProposalClient(
            nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
        )
        verdict = await runtime.propose(
            runtime.build(
                native_tool=filing.native_tool,
                arguments=filing.arguments,
                actor=filing.actor,
                facts=filing.facts,
                content=filing.content,
                destination=filing.destination,
            )
        )
    finally:
        await nc.drain()
    assert verdict.outcome == "held", verdict
    assert verdict.approval_id is not None
    return verdict.approval_id
