"""The bus over TLS (issue 39, "TLS everywhere a network is crossed").

Everything is real: three ``nats-server`` nodes started from ``deploy/nats/cluster.conf``
with the TLS includes ``smf-assurance tls init`` writes (``LocalNatsCluster(tls=True)``,
its own CA and certificate), a gate and a runtime's client connecting through the one
place every component builds its connection (``bus_access.connect_options``, which reads
``SMF_NATS_CA``).

Proves:
- A gate on one node and a runtime on another decide an allowed deletion over TLS: the
  verdict arrives signed and its order is stored in the replicated order stream, which
  the three nodes keep through their routes; each node's monitoring shows every client
  connection with a TLS version, and TLS required of clients and of routes, verified
  both ways (``/varz``: routes carry no TLS version in ``/routez``).
- A confined runtime's launcher forwards the runtime's plain connection (its unix
  socket) to the bus over TLS, and the runtime is served as itself.
- A client that does not speak TLS first, and one that trusts another CA, are refused
  before they say who they are: the plain one gets no greeting, the other fails the
  certificate check; no node counts a connection of theirs.

Does not prove: TLS between machines (the nodes share one loopback; the names in the
certificate are ``localhost`` and ``127.0.0.1``), certificate expiry or revocation
handling, nor HTTPS for the console and the model gateway (not built yet). The OpenClaw
plugin's own TLS is ``tests/runtimes/test_openclaw_tls.py``'s.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import nats
import pytest
from nats.errors import Error as NatsError

from smf_assurance.ops.local.bus_auth import public_user
from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.confine import relay
from smf_assurance.ops.local.confine.sidecar import NatsForwarder
from smf_assurance.ops.local.stack import gate_config, seed_demo_documents
from smf_assurance.ops.local.state import StateDir
from smf_assurance.ops.local.tls import init_tls
from smf_assurance.pipeline.assembly import ClusterSettings, start_gate
from smf_assurance.pipeline.stores.streams import wait_for_jetstream
from smf_assurance.subjects.bus_access import TLS_CA_ENV, connect_options, inbox_prefix
from smf_assurance.subjects.messages import Verdict
from tests.support.approval_desk import provision_with_extra_approvers
from tests.support.bus_helpers import registry_entries, wait_for
from tests.support.bus_properties import deletion, open_order, runtime_client, stored_orders
from tests.support.bus_tls import monitor, tls_connections_of

REPLICAS = 3
JS_API_TIMEOUT = 30.0


@pytest.mark.claim("bus-access.tls-across-the-network")
async def test_a_gate_and_a_runtime_decide_and_store_an_order_over_tls(
    tmp_path: Path, tls_cluster: LocalNatsCluster
) -> None:
    state = StateDir(tmp_path / "state")
    provision_with_extra_approvers(state)
    await tls_cluster.authorize(registry_entries(state.registry))
    store = seed_demo_documents(state)
    (store / "tls-doc").write_text("a document the DMS connector may delete\n")
    config = gate_config(
        state, tls_cluster.urls[0], cluster=ClusterSettings(replicas=REPLICAS), co_located=True
    )
    gate = await start_gate(config)
    runtime_nc = await nats.connect(
        tls_cluster.urls[1], **connect_options(state.existing_credential("runtime"))
    )
    operator = await nats.connect(tls_cluster.urls[2], **connect_options(tls_cluster.operator))
    try:
        await wait_for_jetstream(operator, JS_API_TIMEOUT)
        client = runtime_client(runtime_nc, state)
        verdict = await client.propose(deletion(client, "tls-doc"))
        assert isinstance(verdict, Verdict)
        assert verdict.outcome == "allow", verdict
        stored = await stored_orders(operator.jetstream(timeout=JS_API_TIMEOUT))
        orders = [open_order(raw.data or b"", state.key("gate")) for raw in stored]
        assert [o.decision_id for o in orders] == [verdict.decision_id]
        for node in range(REPLICAS):
            connections = (await monitor(tls_cluster, node, "/connz"))["connections"]
            assert connections, node
            assert all(c.get("tls_version", "").startswith("1.") for c in connections)
            routes = (await monitor(tls_cluster, node, "/routez"))["routes"]
            assert len({r["remote_name"] for r in routes}) == REPLICAS - 1
            varz = await monitor(tls_cluster, node, "/varz")
            assert varz["tls_required"] is True
            assert (varz["cluster"]["tls_required"], varz["cluster"]["tls_verify"]) == (True, True)
    finally:
        await runtime_nc.close()
        await operator.close()
        await gate.close()


@pytest.mark.claim("bus-access.tls-across-the-network")
async def test_a_plain_client_and_one_trusting_another_ca_are_refused(
    tmp_path: Path, tls_cluster: LocalNatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = [(await monitor(tls_cluster, n, "/varz"))["connections"] for n in range(REPLICAS)]
    monkeypatch.delenv(TLS_CA_ENV)
    with pytest.raises((NatsError, TimeoutError)) as plain:
        # the server waits 2 s for a TLS handshake that never comes, then closes
        await nats.connect(
            tls_cluster.urls[0],
            connect_timeout=5,
            allow_reconnect=False,
            **connect_options(tls_cluster.operator),
        )
    assert not isinstance(plain.value, ssl.SSLError)
    other = init_tls(tmp_path / "other-ca", ())
    monkeypatch.setenv(TLS_CA_ENV, str(other.ca_cert))
    with pytest.raises(ssl.SSLCertVerificationError):
        await nats.connect(
            tls_cluster.urls[0],
            connect_timeout=2,
            allow_reconnect=False,
            **connect_options(tls_cluster.operator),
        )

    async def none_left() -> bool:
        """No connection of theirs is left: the server counts a refused handshake until
        it has seen the socket close, which under load it may not have yet (and a client
        of an earlier test, closing when ``before`` was read, may since have gone)."""
        after = [(await monitor(tls_cluster, n, "/varz"))["connections"] for n in range(REPLICAS)]
        return all(a <= b for a, b in zip(after, before, strict=True))

    await wait_for(none_left, timeout=10)


@pytest.mark.claim("bus-access.tls-across-the-network")
async def test_a_confined_runtimes_forwarder_reaches_the_bus_over_tls(
    tmp_path: Path, tls_cluster: LocalNatsCluster
) -> None:
    """The launcher's NATS forwarder, given the bus's TLS, connects TLS first and hands
    the runtime (a plain client on its unix socket, as inside the sandbox) a greeting
    that asks no TLS: the runtime is served, as itself, over a TLS connection."""
    state = StateDir(tmp_path / "state")
    provision_with_extra_approvers(state)
    await tls_cluster.authorize(registry_entries(state.registry))
    credential = state.existing_credential("runtime")
    assert credential is not None
    seed = credential.seed_file.read_bytes()
    forwarder = NatsForwarder(
        "127.0.0.1", tls_cluster.node(0).port, seed, connect_options(None)["tls"]
    )
    path = str(tmp_path / "nats.sock")
    unix = await forwarder.serve(path)
    tcp = await asyncio.start_server(relay._handler(path), "127.0.0.1", 0)
    inside = tcp.sockets[0].getsockname()[1]
    try:
        nc = await nats.connect(
            f"nats://127.0.0.1:{inside}",
            inbox_prefix=inbox_prefix(credential.principal),
            allow_reconnect=False,
            connect_timeout=10,
        )
        try:
            await nc.flush(timeout=10)
            versions = await tls_connections_of(tls_cluster, public_user(seed))
        finally:
            await nc.close()
    finally:
        tcp.close()
        unix.close()
    assert len(versions) == 1, versions
    assert versions[0].startswith("1."), versions
    assert forwarder.counters.refused == {}
