"""Durable orders: every nats-server this project runs syncs each JetStream write to
disk before acknowledging it (``JETSTREAM_SYNC_INTERVAL`` in
``smf_assurance/ops/local/natsserver.py`` says why).

What is asserted is what the running server reports about itself, not the text of a
config: the real nats-server, started from the config ``EmbeddedNatsServer`` wrote
(open bus and authorization on) or from ``deploy/nats/cluster.conf``
(``LocalNatsCluster``), answers ``/varz`` with ``jetstream.config.sync_always: true``.
The control proves the probe can fail: a server on the same command line whose config
has no ``jetstream`` block reports ``false`` (nats-server's two-minute default).

What it does not prove: that the disk honours the fsync (a drive's volatile write
cache, a virtual disk that acknowledges early), nor anything about power loss itself;
a SIGKILLed process does not lose the page cache, so no kill test here can show it.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.ops.local.bus_auth import (
    SYSTEM_PRINCIPAL,
    render_authorization,
    render_open_config,
    write_authorization,
)
from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.natsserver import (
    HOST,
    EmbeddedNatsServer,
    PortReservation,
    reserve_port,
)
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.registry import load_registry
from tests.test_bus_properties import provisioned_state

VARZ_TIMEOUT_S = 10.0


class Monitored(EmbeddedNatsServer):
    """The embedded server exactly as the product runs it (its own config and
    ``command()``), plus a monitoring port that only this test opens."""

    def __init__(self, state_dir: Path, monitor: PortReservation, **kwargs: Any) -> None:
        super().__init__(state_dir, **kwargs)
        self.monitor: PortReservation = monitor

    def command(self) -> list[str]:
        return [*super().command(), "-m", str(self.monitor.port)]


def varz(port: int) -> dict[str, Any]:
    """The server's ``/varz`` (it is served once ``start()`` returned: nats-server
    writes the ports file that ``start()`` waits for after every listener is up)."""
    url = f"http://{HOST}:{port}/varz"
    with urllib.request.urlopen(url, timeout=VARZ_TIMEOUT_S) as answer:
        found: dict[str, Any] = json.load(answer)
    return found


def sync_always(doc: dict[str, Any]) -> bool:
    config = doc["jetstream"]["config"]
    assert config["store_dir"], config  # JetStream is on: the setting is about its store
    return bool(config.get("sync_always", False))


def started(server: Monitored) -> dict[str, Any]:
    server.start()
    try:
        return varz(server.monitor.port)
    finally:
        server.close()
        server.monitor.close()


@pytest.mark.claim("verdict-agrees.sync-always")
def test_the_embedded_open_bus_syncs_every_jetstream_write(tmp_path: Path) -> None:
    server = Monitored(tmp_path / "nats", reserve_port())
    assert sync_always(started(server))


@pytest.mark.claim("verdict-agrees.sync-always")
def test_the_embedded_bus_with_authorization_syncs_every_jetstream_write(
    tmp_path: Path,
) -> None:
    state: StateDir = provisioned_state(tmp_path)
    server = Monitored(state.nats, reserve_port(), authorization=True)
    entries = [p.entry for p in load_registry(state.registry).principals.values()]
    text = render_authorization(entries, state.bus_user(SYSTEM_PRINCIPAL))
    write_authorization(server.authorization_path, text)
    assert sync_always(started(server))


@pytest.mark.claim("verdict-agrees.sync-always")
def test_a_server_without_the_setting_reports_the_two_minute_default(tmp_path: Path) -> None:
    """The control: the same binary and command line, a config with no ``jetstream``
    block, and the probe says so; without it the two tests above could not fail."""
    plain = tmp_path / "plain.conf"
    plain.write_text(render_open_config(), encoding="utf-8")
    server = Monitored(tmp_path / "nats", reserve_port(), config_file=plain)
    doc = started(server)
    assert not sync_always(doc)
    assert doc["jetstream"]["config"]["sync_interval"] == 120_000_000_000  # ns: two minutes


@pytest.mark.claim("verdict-agrees.sync-always")
async def test_every_node_of_the_cluster_syncs_every_jetstream_write(
    nats_cluster: LocalNatsCluster,
) -> None:
    """``deploy/nats/cluster.conf`` as ``LocalNatsCluster`` and docker-compose run it."""
    for node in nats_cluster.nodes:
        status, body = await asyncio.wait_for(node.monitor("/varz"), VARZ_TIMEOUT_S)
        assert status == 200, (node.name, body[:200])
        assert sync_always(json.loads(body)), node.name
