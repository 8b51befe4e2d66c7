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
from pathlib import Path

import pytest

from smf_assurance.ops.local.bus_auth import (
    SYSTEM_PRINCIPAL,
    render_authorization,
    render_open_config,
    write_authorization,
)
from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.natsserver import reserve_port
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.registry import load_registry
from smf_tools.bench.bus import (
    SYNC_SERIES,
    SYNC_STEPS,
    SYNC_THROUGHPUT,
    MonitoredServer,
    sync_always_of,
)
from tests.support.bus_properties import provisioned_state

VARZ_TIMEOUT_S = 10.0


def started(server: MonitoredServer) -> bool:
    """Whether ``server``, started, reports ``sync_always`` in its ``/varz``."""
    server.start()
    try:
        return sync_always_of(server)
    finally:
        server.close()


@pytest.mark.claim("verdict-agrees.sync-always")
def test_the_embedded_open_bus_syncs_every_jetstream_write(tmp_path: Path) -> None:
    assert started(MonitoredServer(tmp_path / "nats", reserve_port()))


@pytest.mark.claim("verdict-agrees.sync-always")
def test_the_embedded_bus_with_authorization_syncs_every_jetstream_write(
    tmp_path: Path,
) -> None:
    state: StateDir = provisioned_state(tmp_path)
    server = MonitoredServer(state.nats, reserve_port(), authorization=True)
    entries = [p.entry for p in load_registry(state.registry).principals.values()]
    text = render_authorization(entries, state.bus_user(SYSTEM_PRINCIPAL))
    write_authorization(server.authorization_path, text)
    assert started(server)


@pytest.mark.claim("verdict-agrees.sync-always")
def test_a_server_without_the_setting_reports_the_two_minute_default(tmp_path: Path) -> None:
    """The control: the same binary and command line, a config with no ``jetstream``
    block, and the probe says so; without it the two tests above could not fail."""
    plain = tmp_path / "plain.conf"
    plain.write_text(render_open_config(), encoding="utf-8")
    server = MonitoredServer(tmp_path / "nats", reserve_port(), config_file=plain)
    server.start()
    try:
        config = server.varz()["jetstream"]["config"]
        assert not sync_always_of(server)
        assert config["sync_interval"] == 120_000_000_000  # ns: two minutes
    finally:
        server.close()


@pytest.mark.claim("verdict-agrees.sync-always")
async def test_every_node_of_the_cluster_syncs_every_jetstream_write(
    nats_cluster: LocalNatsCluster,
) -> None:
    """``deploy/nats/cluster.conf`` as ``LocalNatsCluster`` and docker-compose run it."""
    for node in nats_cluster.nodes:
        status, body = await asyncio.wait_for(node.monitor("/varz"), VARZ_TIMEOUT_S)
        assert status == 200, (node.name, body[:200])
        config = json.loads(body)["jetstream"]["config"]
        assert config["store_dir"], node.name
        assert config.get("sync_always") is True, node.name


def test_bench_bus_reports_sync_always_beside_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No timing assertions: the bus bench runs the allow and the JetStream publish on
    the product's server and on the two-minute default, and reports each pair."""
    from smf_tools.cli import main  # noqa: PLC0415 - keep CLI imports out of the other tests

    assert main(["bench", "--bus", "--rounds", "3", "--in-flight", "2", "--json"]) == 0
    bus = json.loads(capsys.readouterr().out)["bus"]
    latency = {row["label"]: row for row in bus["latency"]}
    for label in (*SYNC_SERIES, *SYNC_STEPS):
        assert latency[label]["count"] == 3
    assert {row["label"] for row in bus["throughput"]} >= set(SYNC_THROUGHPUT)
    pairs = {row["label"]: row for row in bus["sync_always_over_default"]}
    assert set(pairs) == {
        "propose allow (bus stages)",
        "propose allow (co-located)",
        "jetstream publish + ack",
    }
    for label, row in pairs.items():
        assert row["p50_x1000"] > 0, label
        assert (row["throughput_x1000"] is None) == label.startswith("jetstream"), label
