"""The compiled OpenClaw plugin on a bus that enforces its permissions.

The plugin is driven as in tests/runtimes/test_openclaw_plugin.py (same Node driver,
same gate), but the gate's nats-server runs with the authorization generated
from the registry (``smf_assurance.ops.local.stack.start_embedded_server``), as a real deployment
runs it.

Proves: with its own credential (``credentialFile``, the principal its
``keyFile`` names, the inbox prefix ``_INBOX.<principal>``) an allowed read
returns its params; with a seed the registry does not know the server refuses
the connection and the call is blocked (``bus_credential_refused``) before the
gate decides anything, and no order exists on ``SMF_EXECUTE``; the plugin's own
shared connection is refused a subscription to ``smf.execute.>`` by the server
(``bus_permission_denied``) and may subscribe to approval outcomes.

Does not prove: anything about OpenClaw itself (tests/runtimes/test_openclaw_conformance.py
runs the refusals inside the real runtime).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from smf_assurance.governance.releases import latest_in_inbox
from smf_assurance.ops.local.bus_auth import write_user_seed
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config, start_embedded_server
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import names
from tests.support import openclaw_plugin as plugin_tests
from tests.support.clocks import OffsetClock
from tests.support.release_helpers import publish_as_publisher

openclaw_state = plugin_tests.openclaw_state
clock = plugin_tests.clock
node_bin = plugin_tests.node_bin
READ = {"path": "/srv/matters/2026-0042/notes.txt", "offset": 1, "limit": 40}


@pytest.fixture
def nats_server(openclaw_state: StateDir) -> Iterator[EmbeddedNatsServer]:
    """The gate's bus with authorization on, allowing exactly the state's registry."""
    server = start_embedded_server(openclaw_state)
    yield server
    server.close()


@pytest.fixture
async def gate(
    openclaw_state: StateDir, nats_server: EmbeddedNatsServer, clock: OffsetClock
) -> AsyncIterator[RunningGate]:
    """The plugin tests' gate, with its release put into the bucket by the publisher
    (on this bus the gate may not write it)."""
    running = await start_gate(
        gate_config(
            state=openclaw_state, nats_url=nats_server.url, clock=clock, sweep_seconds=3600.0
        )
    )
    bundle = latest_in_inbox(openclaw_state.release_inbox)
    assert bundle is not None
    await publish_as_publisher(nats_server.url, openclaw_state, bundle)
    yield running
    await asyncio.wait_for(running.close(), plugin_tests.CLOSE_TIMEOUT_S)


async def orders(running: RunningGate) -> int:
    info = await running.js.stream_info(names.EXECUTE_STREAM)
    return int(info.state.messages)


async def test_with_its_credential_an_allowed_read_returns_its_params(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_server: EmbeddedNatsServer
) -> None:
    config = plugin_tests.plugin_config(openclaw_state, nats_server.url)
    async with plugin_tests.driver(node_bin, config) as drv:
        result = await drv.before("read", READ, "call-allow")
    assert set(result) == {"params"}, result
    assert result["params"] == READ


async def test_a_seed_the_registry_does_not_know_is_refused_and_the_call_blocked(
    node_bin: str,
    openclaw_state: StateDir,
    gate: RunningGate,
    nats_server: EmbeddedNatsServer,
    tmp_path: Path,
) -> None:
    unknown = tmp_path / "unknown.nkey"
    write_user_seed(unknown)
    config = plugin_tests.plugin_config(
        openclaw_state, nats_server.url, credentialFile=str(unknown), gateTimeoutMs=2000
    )
    before = await orders(gate)
    async with plugin_tests.driver(node_bin, config) as drv:
        result = await drv.before("read", READ, "call-refused")
        stderr = "\n".join(drv.stderr)
    assert result.get("block") is True, result
    assert "bus_credential_refused" in result["blockReason"]
    assert unknown.read_text().strip() not in result["blockReason"] + stderr
    assert await orders(gate) == before


@pytest.mark.parametrize(
    ("subject", "subscribed", "reason"),
    [
        ("smf.execute.>", False, "bus_permission_denied"),
        ("smf.execute.dms", False, "bus_permission_denied"),
        ("_INBOX.gate.>", False, "bus_permission_denied"),
        ("smf.approval.outcome.>", True, None),
    ],
)
async def test_the_plugins_connection_reads_no_order(
    node_bin: str,
    openclaw_state: StateDir,
    gate: RunningGate,
    nats_server: EmbeddedNatsServer,
    subject: str,
    subscribed: bool,
    reason: str | None,
) -> None:
    config = plugin_tests.plugin_config(openclaw_state, nats_server.url)
    async with plugin_tests.driver(node_bin, config) as drv:
        answer = await drv.call("subscribe", subject=subject)
    assert answer == {"subscribed": subscribed, "reason": reason}
