"""The OpenClaw plugin on a bus that requires TLS (issue 39, "TLS everywhere a network is
crossed").

The compiled plugin, loaded as OpenClaw loads it (``test/driver.mjs``), is given the
cluster's CA (``caFile``) and proposes a tool call to a gate on a three-node cluster that
requires TLS before its greeting (``LocalNatsCluster(tls=True)``, the node config the
compose deployment runs).

Proves: with the CA, the plugin's call is proposed, allowed and returned with exactly
its params, and its connection (its own nkey) is TLS on the node it reached; without a
CA (no ``caFile``, no ``SMF_NATS_CA``), and with a file that holds no certificate, every
call is blocked and the plugin never connects as itself.

Does not prove: the real OpenClaw runtime on a TLS bus (the conformance tests run it on
a loopback bus), TLS between machines.
"""

from __future__ import annotations

from pathlib import Path

import nats
import pytest

from smf_assurance.governance.releases import latest_in_inbox, publish_to_bucket
from smf_assurance.ops.local.bus_auth import public_user
from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import OPENCLAW_PRINCIPAL, provision_openclaw_runtime
from smf_assurance.pipeline.assembly import ClusterSettings, start_gate
from smf_assurance.subjects.bus_access import TLS_CA_ENV, connect_options
from smf_assurance.subjects.canonical import canonical_value
from tests.support.bus_helpers import registry_entries
from tests.support.bus_tls import tls_connections_of
from tests.support.openclaw_plugin import driver, node_bin, plugin_config

__all__ = ["node_bin"]

PARAMS = {"path": "/srv/matters/2026-0042/notes.txt", "offset": 1, "limit": 40}


def blocked(result: object) -> str:
    assert isinstance(result, dict), result
    assert result.get("block") is True, result
    reason: str = result["blockReason"]
    return reason


@pytest.mark.claim("bus-access.tls-across-the-network")
async def test_the_openclaw_plugin_proposes_over_tls_only_with_the_ca(
    tmp_path: Path,
    tls_cluster: LocalNatsCluster,
    node_bin: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    provision_openclaw_runtime(state)
    await tls_cluster.authorize(registry_entries(state.registry))
    gate = await start_gate(
        gate_config(state, tls_cluster.urls[0], cluster=ClusterSettings(replicas=3))
    )
    try:
        release = latest_in_inbox(state.release_inbox)
        assert release is not None
        operator = await nats.connect(tls_cluster.urls[2], **connect_options(tls_cluster.operator))
        try:  # where the plugin verifies it; on this bus only a publisher or the operator may
            await publish_to_bucket(operator.jetstream(timeout=30), release)
        finally:
            await operator.close()
        assert tls_cluster.tls is not None
        ca = str(tls_cluster.tls.ca_cert)
        monkeypatch.delenv(TLS_CA_ENV)  # the plugin is told only what its config says
        seed = state.bus_credential_path(OPENCLAW_PRINCIPAL).read_bytes()
        user = public_user(seed)

        no_ca = plugin_config(state, tls_cluster.urls[1], gateTimeoutMs=1000)
        async with driver(node_bin, no_ca) as drv:
            assert "gate_unreachable" in blocked(await drv.before("read", PARAMS, "c-plain"))
        not_pem = tmp_path / "not.pem"
        not_pem.write_text("not a certificate\n")
        bad = plugin_config(state, tls_cluster.urls[1], caFile=str(not_pem))
        async with driver(node_bin, bad) as drv:
            assert "smf_bus_ca_unusable" in blocked(await drv.before("read", PARAMS, "c-bad"))
        assert await tls_connections_of(tls_cluster, user) == []

        config = plugin_config(state, tls_cluster.urls[1], caFile=ca)
        async with driver(node_bin, config) as drv:
            result = await drv.before("read", PARAMS, "c-tls")
            assert result == {"params": canonical_value(PARAMS)}, result
            versions = await tls_connections_of(tls_cluster, user)
        assert len(versions) == 1, versions
        assert versions[0].startswith("1."), versions
    finally:
        await gate.close()
