"""Child of ``test_natsserver.py``'s forced port-collision test.

Runs inside its own network namespace (``unshare -n``, loopback only), where
the kernel's range of ports for ``bind(0)`` is ours to narrow. With the range
shrunk to a few ports, picking ports by binding port 0 and closing the probe
repeats a port at once (the old ``free_port()`` pattern that failed CI with
``address already in use``); the reservations of ``smf_assurance.ops.local.natsserver`` are then
made in that same narrow range, the range is widened again so that the
servers' own connections have ports, and a three-node cluster plus a single
server start, restart and serve on exactly the reserved ports.

Prints one JSON line: what the naive picks returned and the ports each server
ended on. Exits non-zero on any failure.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Final, Unpack

import nats

from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.natsserver import HOST, EmbeddedNatsServer
from smf_assurance.subjects.bus_access import ConnectOptions

RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
NARROW: Final = (40000, 40011)
"""Twelve ports: room for exactly the ten reservations below and two more."""
WIDE: Final = (40000, 60999)


def set_range(low: int, high: int) -> None:
    RANGE_FILE.write_text(f"{low} {high}\n")


def naive_picks(count: int) -> list[int]:
    """The racy pattern the product never uses: bind port 0, read the number, close."""
    picks = []
    for _ in range(count):
        with socket.socket() as probe:
            probe.bind((HOST, 0))
            picks.append(int(probe.getsockname()[1]))
    return picks


async def serves(url: str, **credential: Unpack[ConnectOptions]) -> bool:
    client = await nats.connect(url, connect_timeout=5, allow_reconnect=False, **credential)
    try:
        await client.flush(timeout=5)
        return True
    finally:
        await client.close()


async def main(root: Path) -> None:
    set_range(*NARROW)
    picks = naive_picks(9)
    cluster = LocalNatsCluster(root / "cluster")
    single = EmbeddedNatsServer(root / "single")
    set_range(*WIDE)
    reserved = [n.settings.client_port for n in cluster.nodes]
    reserved += [n.settings.http_port for n in cluster.nodes]
    reserved += [n.settings.cluster_port for n in cluster.nodes]
    reserved.append(single.port)
    try:
        await cluster.start()
        single.start()
        await cluster.restart_node("nats-2")
        single.restart()
        operator = cluster.operator.connect_options()  # the cluster admits no anonymous client
        assert all([await serves(url, **operator) for url in cluster.urls])
        assert await serves(single.url)
        ended = [n.settings.client_port for n in cluster.nodes]
        ended += [n.settings.http_port for n in cluster.nodes]
        ended += [n.settings.cluster_port for n in cluster.nodes]
        ended.append(single.port)
    finally:
        single.close()
        await cluster.close()
    sys.stdout.write(json.dumps({"naive": picks, "reserved": reserved, "ended": ended}) + "\n")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
