"""The Hermes adapter on a bus that enforces its permissions.

The adapter's hooks are driven as in tests/runtimes/test_hermes_unit.py (same fixtures,
same fake host), but the gate's nats-server runs with the authorization
generated from the registry (``smf_assurance.ops.local.stack.start_embedded_server``), as a real
deployment runs it.

Proves: with its own credential (``SMF_BUS_CREDENTIAL``, the principal its key
file names, the inbox prefix ``_INBOX.<principal>``) the adapter attests and an
allowed read runs; with a seed the registry does not know the server refuses
the connection and the call is blocked (``bus_credential_refused``) before the
gate decides anything, and no order exists on ``SMF_EXECUTE``; the credential
the adapter connects with cannot read orders (``smf.execute.>``) or another
principal's replies, and can read approval outcomes, each answer given BY THE
SERVER (tests/support/bus_permissions.py's prober).

Does not prove: anything about Hermes itself (tests/runtimes/test_hermes_conformance.py
runs the same refusals inside the real runtime).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest

from smf_assurance.adapters.hermes import plugin
from smf_assurance.adapters.hermes.config import AdapterConfig
from smf_assurance.governance.releases import latest_in_inbox
from smf_assurance.ops.local.bus_auth import write_user_seed
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config, start_embedded_server
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import names
from tests.support import hermes_unit as unit
from tests.support.bus_permissions import Action, Prober, who
from tests.support.clocks import FrozenClock as Clock
from tests.support.release_helpers import publish_as_publisher

# The fixtures of the unit tests, on the enforcing server below.
clock = unit.clock
held_dir = unit.held_dir
context_file = unit.context_file
adapters = unit.adapters
hermes = unit.hermes


@pytest.fixture
def nats_server(hermes_state: StateDir) -> Iterator[EmbeddedNatsServer]:
    """The gate's bus with authorization on, allowing exactly the state's registry."""
    server = start_embedded_server(hermes_state)
    yield server
    server.close()


@pytest.fixture
async def gate(
    hermes_state: StateDir, nats_server: EmbeddedNatsServer, clock: Clock
) -> AsyncIterator[RunningGate]:
    """The unit tests' gate, with its release put into the bucket by the publisher
    (on this bus the gate may not write it)."""
    running = await start_gate(
        gate_config(
            state=hermes_state,
            nats_url=nats_server.url,
            co_located=True,
            clock=clock,
            sweep_seconds=3600,
        )
    )
    bundle = latest_in_inbox(hermes_state.release_inbox)
    assert bundle is not None
    await publish_as_publisher(nats_server.url, hermes_state, bundle)
    yield running
    await asyncio.wait_for(running.close(), 15)


async def orders(running: RunningGate) -> int:
    info = await running.js.stream_info(names.EXECUTE_STREAM)
    return int(info.state.messages)


async def test_with_its_credential_the_adapter_attests_and_an_allowed_read_runs(
    hermes: plugin.HermesAdapter, tmp_path: Path
) -> None:
    args = {"path": str(tmp_path / "notes.txt")}
    assert await unit.hook(hermes.pre_tool_call, **unit.pre("read_file", args)) is None
    assert hermes.last_ack is not None
    assert hermes.last_ack.accepted


async def test_a_seed_the_registry_does_not_know_is_refused_and_the_call_blocked(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
    tmp_path: Path,
) -> None:
    unknown = tmp_path / "unknown.nkey"
    write_user_seed(unknown)
    env = unit.env_for(hermes_state, nats_server.url, context_file, SMF_BUS_CREDENTIAL=str(unknown))
    adapter = unit.make_adapter(adapters, env)
    assert adapter.problems == []  # a well-formed seed: only the server can tell
    before = await orders(gate)
    args = {"path": str(tmp_path / "notes.txt")}
    result = await unit.hook(adapter.pre_tool_call, **unit.pre("read_file", args))
    assert result["action"] == "block"
    assert "bus_credential_refused" in result["message"]
    assert unknown.read_text().strip() not in result["message"]
    assert adapter.last_ack is None  # nothing reached the gate
    assert await orders(gate) == before


async def test_anonymous_is_refused_too(
    hermes_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    with pytest.raises(nats.errors.NoServersError):
        await nats.connect(nats_server.url, connect_timeout=2, max_reconnect_attempts=1)


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (Action("read every order", "sub", "smf.execute.>", who()), "refused"),
        (Action("read the dms orders", "sub", "smf.execute.dms", who()), "refused"),
        (Action("read the gate's replies", "sub", "_INBOX.gate.>", who()), "refused"),
        (Action("read another runtime's replies", "sub", "_INBOX.runtime.>", who()), "refused"),
        (Action("publish an order", "pub", "smf.execute.dms", who()), "refused"),
        (Action("read approval outcomes", "sub", "smf.approval.outcome.>", who()), "allowed"),
        (Action("read its own replies", "sub", "_INBOX.hermes-runtime.>", who()), "allowed"),
    ],
    ids=lambda v: v.name if isinstance(v, Action) else v,
)
async def test_the_adapters_credential_reads_no_order_and_no_other_inbox(
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    action: Action,
    expected: str,
) -> None:
    """The credential exactly as the adapter's config reads it and its bridge connects."""
    env = unit.env_for(hermes_state, nats_server.url, context_file)
    credential = AdapterConfig.from_env(env).bus_credential
    assert credential is not None
    assert credential.connect_options()["inbox_prefix"] == "_INBOX.hermes-runtime"
    operator_credential = hermes_state.existing_credential(OPERATOR)
    assert operator_credential is not None
    operator = await nats.connect(nats_server.url, **operator_credential.connect_options())
    # alone in its account: its own inbox is seen through its own request's answer
    prober = await Prober.connect([nats_server.url], credential, names.PROPOSE)
    try:
        assert await prober.try_action(action, operator) == expected
    finally:
        await prober.close()
        await operator.close()
