"""What the TLS tests read of a cluster's nodes: their monitoring endpoints."""

from __future__ import annotations

import json
from typing import Any

from smf_assurance.ops.local.cluster import LocalNatsCluster


async def monitor(cluster: LocalNatsCluster, node: int, path: str) -> dict[str, Any]:
    """``GET path`` of node ``node``'s monitoring port, decoded (``/varz``, ``/connz``)."""
    status, body = await cluster.node(node).monitor(path)
    assert status == 200, body
    found: dict[str, Any] = json.loads(body)
    return found


async def tls_connections_of(cluster: LocalNatsCluster, user: str) -> list[str]:
    """The TLS version of each connection of nkey ``user`` on any node ("" when plain)."""
    versions = []
    for node in range(len(cluster.nodes)):
        for connection in (await monitor(cluster, node, "/connz?auth=1"))["connections"]:
            if connection.get("authorized_user") == user:
                versions.append(connection.get("tls_version", ""))
    return versions
