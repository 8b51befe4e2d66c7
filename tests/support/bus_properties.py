"""The fixtures, builders and constants of tests/bus/test_bus_properties.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.api import RawStreamMsg
from nats.js.client import JetStreamContext

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.demo.script import ScriptedAction
from smf_assurance.ops.demo.script import actor as demo_actor
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir, provision_demo
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.messages import DataFacts, ExecuteOrder, Proposal

__all__ = [
    "MODES",
    "GateStarter",
    "deletion",
    "execute_count",
    "from_scenario",
    "ledger_entries",
    "open_order",
    "provisioned_state",
    "runtime_client",
    "stored_orders",
]

MODES = pytest.mark.parametrize("co_located", [False, True], ids=["bus-stages", "co-located"])


def provisioned_state(tmp_path: Path) -> StateDir:
    """Keys and registry for the gate, the scripted runtime, connectors, approvers."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    return state


@dataclass
class GateStarter:
    """Starts gates on one server and state directory; closes them all at the end."""

    state: StateDir
    url: str
    started: list[RunningGate] = field(default_factory=list)

    async def __call__(self, co_located: bool = False) -> RunningGate:
        gate = await start_gate(
            gate_config(state=self.state, nats_url=self.url, co_located=co_located)
        )
        self.started.append(gate)
        return gate

    async def stop(self, gate: RunningGate) -> None:
        """Close ``gate`` now: its connection drained, it sends nothing more."""
        self.started.remove(gate)
        await gate.close()

    async def close(self) -> None:
        for gate in self.started:
            await gate.close()


def runtime_client(nc: Client, state: StateDir, *, timeout: float = 10.0) -> ProposalClient:
    return ProposalClient(
        nc,
        state.key("runtime"),
        RUNTIME_ID,
        "1.0",
        ADAPTER_ID,
        timeout=timeout,
        gate_keys=state.gate_keys(),
    )


def from_scenario(runtime: ProposalClient, action: ScriptedAction, **changes: Any) -> Proposal:
    """The scripted runtime's proposal for ``action``, with a fresh proposal id."""
    return runtime.build(
        native_tool=action.native_tool,
        arguments=changes.pop("arguments", action.arguments),
        actor=action.actor,
        facts=changes.pop("facts", action.facts),
        content=action.content,
        destination=action.destination,
        **changes,
    )


def deletion(runtime: ProposalClient, document_id: str, *, hold: bool = False) -> Proposal:
    """A DMS deletion: allowed by the retention policy, denied under legal hold.

    Claims are per proposal, so every call builds a fresh proposal id; distinct
    documents give distinct operations.
    """
    return runtime.build(
        native_tool="dms_delete",
        arguments={"document_id": document_id},
        actor=demo_actor("associate-ann", "associate"),
        facts=DataFacts(classification="internal", injection_taint="clear", legal_hold=hold),
    )


async def execute_count(js: JetStreamContext) -> int:
    info = await js.stream_info(names.EXECUTE_STREAM)
    return info.state.messages


async def stored_orders(js: JetStreamContext) -> list[RawStreamMsg]:
    """Every order SMF_EXECUTE holds, in sequence order (a gate's void, which holds
    the place of an order that was never stored, is no order: ``is_void``)."""
    info = await js.stream_info(names.EXECUTE_STREAM)
    first, last = info.state.first_seq, info.state.last_seq
    if info.state.messages == 0:
        return []
    stored = [await js.get_msg(names.EXECUTE_STREAM, seq) for seq in range(first, last + 1)]
    return [m for m in stored if not is_void(m.data or b"")]


def is_void(raw: bytes) -> bool:
    """A gate-signed OrderVoid (``smf_assurance.pipeline.chain.dispatch.OrderFence``)."""
    return dsse.decode_envelope(raw).payload_type == names.PAYLOAD_ORDER_VOID


def open_order(raw: bytes, gate_key: SigningKey) -> ExecuteOrder:
    order, _ = dsse.open_struct(
        dsse.decode_envelope(raw),
        {gate_key.key_id: gate_key.verify_key},
        ExecuteOrder,
        names.PAYLOAD_ORDER,
    )
    return order


def ledger_entries(state: StateDir) -> int:
    """Entries in the evidence ledger file, read-only (the gate keeps writing)."""
    uri = state.ledger.resolve().as_uri() + "?mode=ro"
    with sqlite3.connect(uri, uri=True) as conn:
        (count,) = conn.execute("SELECT count(*) FROM evidence_entries").fetchone()
    return int(count)
