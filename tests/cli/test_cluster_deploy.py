"""The cluster deployment: docker-compose.yml, deploy/, LocalNatsCluster, `up` flags.

No docker engine runs here, so the compose file is checked against everything
that can run without one: its NATS nodes' config file and variables with the
real nats-server (the same file and variables ``LocalNatsCluster`` starts),
every ``smf-assurance`` command in it with the real argument parser, and its
state provisioning and service commands by running them on this machine
against a ``LocalNatsCluster``, with the compose host names and paths mapped to
local ones. What stays unproven: that the images build and the containers
start (the ``nats`` image tag, the Dockerfile, compose's own semantics).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from aiohttp import web
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.api import KeyValueConfig, StreamConfig, StreamInfo
from nats.js.client import JetStreamContext
from nats.js.errors import KeyWrongLastSequenceError

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.approver.console.renderer import PDFJS_VERSION
from smf_assurance.ops.cli.commands.demo import ReportWatch
from smf_assurance.ops.cli.commands.up import check_flags
from smf_assurance.ops.cli.main import build_parser, main
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.cluster import (
    NODE_VARIABLES,
    LocalNatsCluster,
    nats_servers,
    seed_urls,
)
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.natsserver import (
    EmbeddedNatsServer,
    NatsServerError,
    parse_version,
    probe_version,
    resolve_binary,
)
from smf_assurance.ops.local.stack import Connectors, seed_demo_documents
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.ops.local.supervisor import serve_until_stopped
from smf_assurance.ops.local.tls import init_tls, issue_cert, server_context
from smf_assurance.pipeline.assembly import ClusterSettings, GateConfig
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import TLS_CA_ENV, connect_options
from smf_assurance.subjects.keys import load_private_key
from smf_assurance.subjects.registry import load_registry
from tests.support.bus_helpers import wait_for
from tests.support.cli_ops import drive_up

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
NATS_CONFIG_DIR = ROOT / "deploy" / "nats"
INIT_SCRIPT = ROOT / "deploy" / "init-state.sh"
SMF_IMAGE = "smf-assurance:local"
WAIT_SECONDS = 30.0

T = TypeVar("T")


# --- reading docker-compose.yml ------------------------------------------------------
#
# PyYAML is not installed here (and not a dependency of the project), so the file
# is kept to a small YAML subset that this reader reads exactly and refuses to
# guess about: block mappings and block lists, "double-quoted" (JSON) strings,
# plain words and integers, one-line JSON lists, full-line comments. Where PyYAML
# is installed, the two readings must agree.

_KEY = re.compile(r"[A-Za-z0-9_.-]+")
_PLAIN = re.compile(r"[A-Za-z0-9_./-]+")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


class ComposeSubsetError(ValueError):
    """The compose file uses YAML this reader does not read."""


@dataclass(frozen=True)
class _Line:
    number: int
    indent: int
    text: str


def load_compose_subset(text: str) -> Any:
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "\t" in raw:
            raise ComposeSubsetError(f"line {number}: tab")
        lines.append(_Line(number, len(raw) - len(raw.lstrip(" ")), stripped))
    value, end = _block(lines, 0, 0)
    if end != len(lines):
        raise ComposeSubsetError(f"line {lines[end].number}: unexpected indentation")
    return value


def _block(lines: list[_Line], pos: int, indent: int) -> tuple[Any, int]:
    if lines[pos].text.startswith("- "):
        items = []
        while pos < len(lines) and lines[pos].indent == indent:
            line = lines[pos]
            if not line.text.startswith("- "):
                raise ComposeSubsetError(f"line {line.number}: list item expected")
            items.append(_scalar(line.text[2:], line.number))
            pos += 1
        return items, pos
    mapping: dict[str, Any] = {}
    while pos < len(lines) and lines[pos].indent == indent:
        line = lines[pos]
        key, colon, rest = line.text.partition(":")
        if not colon or _KEY.fullmatch(key) is None or (rest and not rest.startswith(" ")):
            raise ComposeSubsetError(f"line {line.number}: 'key: value' expected")
        if key in mapping:
            raise ComposeSubsetError(f"line {line.number}: duplicate key {key!r}")
        pos += 1
        if rest.strip():
            mapping[key] = _scalar(rest.strip(), line.number)
        elif pos < len(lines) and lines[pos].indent > indent:
            mapping[key], pos = _block(lines, pos, lines[pos].indent)
        else:
            mapping[key] = None
    if pos < len(lines) and lines[pos].indent > indent:
        raise ComposeSubsetError(f"line {lines[pos].number}: unexpected indentation")
    return mapping, pos


def _scalar(text: str, number: int) -> Any:
    if text.startswith(('"', "[")):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ComposeSubsetError(f"line {number}: {exc}") from exc
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            raise ComposeSubsetError(f"line {number}: a list of strings expected")
        return value
    if text.isdigit():
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    if _PLAIN.fullmatch(text) is None or text.lower() in _YAML_WORDS:
        raise ComposeSubsetError(f"line {number}: quote {text!r}")
    return text


def load_compose() -> dict[str, Any]:
    text = COMPOSE.read_text(encoding="utf-8")
    doc = load_compose_subset(text)
    if importlib.util.find_spec("yaml") is not None:
        assert importlib.import_module("yaml").safe_load(text) == doc
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


def services_of(compose: dict[str, Any], image_prefix: str) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if str(service.get("image", "")).startswith(image_prefix)
    }


def config_variables(path: Path) -> set[str]:
    """The ``$VAR`` references of a nats-server config file (comments skipped)."""
    found: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        found.update(re.findall(r"\$([A-Za-z_][A-Za-z0-9_]*)", line.split("#", 1)[0]))
    return found


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    """A service's ``./source:target[:ro]`` volumes, as target -> repo-relative source."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            mounts[target] = source[2:]
    return mounts


def named_volumes(service: dict[str, Any]) -> dict[str, str]:
    """A service's named volumes, as target -> volume name."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if not source.startswith(("./", "/")):
            mounts[target] = source
    return mounts


def test_the_compose_file_is_read_exactly_or_refused() -> None:
    assert load_compose_subset('a:\n  b: "x: #y"\n  c: ["1", "2"]\n  d: 7\n  e:\n') == {
        "a": {"b": "x: #y", "c": ["1", "2"], "d": 7, "e": None}
    }
    for bad in (
        'a: "x"  # trailing comment',
        "a: yes",
        "a: 1:2",
        "a:\n  - x\n  b: y",
        "a: x\na: y",
        "a:\n    b: x\n  c: y",
        "a: [1, 2]",
        "a:\n\t- x",
    ):
        with pytest.raises(ComposeSubsetError):
            load_compose_subset(bad)


# --- the NATS nodes: one config file, for the containers and the local cluster --------


def test_nats_nodes_mount_exactly_the_config_files_the_local_cluster_runs(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    nodes = services_of(compose, "nats:")
    assert sorted(nodes) == ["nats-1", "nats-2", "nats-3"]
    harness = LocalNatsCluster(tmp_path / "unused")
    assert [node.name for node in harness.nodes] == sorted(nodes)
    harness_files = {harness.source_config.relative_to(ROOT).as_posix()}
    shipped = {path.relative_to(ROOT).as_posix() for path in NATS_CONFIG_DIR.iterdir()}
    assert shipped == harness_files
    # The harness runs a byte-identical copy, beside its own authorization include.
    assert harness.config_file.read_bytes() == harness.source_config.read_bytes()
    include = harness.authorization_path.relative_to(harness.config_file.parent)
    for name, node in nodes.items():
        mounts = bind_mounts(node)
        assert set(mounts.values()) == harness_files, name
        (config_target,) = mounts
        auth_dir = (Path(config_target).parent / include).parent.as_posix()
        assert named_volumes(node)[auth_dir] == "nats-auth", name
        tls_dir = (Path(config_target).parent / harness.tls_dir.name).as_posix()
        assert named_volumes(node)[tls_dir] == "nats-tls", name
        (target,) = mounts
        command = node["command"]
        assert command[0] == "nats-server"
        assert command[command.index("--config") + 1] == target, name
        assert not any(flag in command for flag in ("-c", "-js", "-sd", "-p", "-a")), name


def test_nats_nodes_set_exactly_the_variables_the_config_references(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    referenced = config_variables(LocalNatsCluster(tmp_path / "unused").config_file)
    assert referenced == set(NODE_VARIABLES)
    for name, node in services_of(compose, "nats:").items():
        assert set(node["environment"]) == referenced, name
    for local in LocalNatsCluster(tmp_path / "unused").nodes:
        assert set(local.env) == referenced


def test_the_compose_environment_is_a_valid_config_for_the_real_nats_server(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """``nats-server -t`` parses the file with each container's variables (and fails,
    naming the variable, on a missing or malformed one) and TLS on, without starting
    anything."""
    nodes = services_of(compose, "nats:")
    binary = resolve_binary()
    # The shipped file, copied beside an authorization include and TLS includes as
    # init writes them: the nodes' certificate and key are loaded, TLS is on.
    harness = LocalNatsCluster(tmp_path / "checked", tls=True)
    config = harness.config_file
    assert "handshake_first: true" in (harness.tls_dir / "client.conf").read_text()
    assert "verify: true" in (harness.tls_dir / "route.conf").read_text()
    names, routes = set(), set()
    for name, node in nodes.items():
        env = {k: str(v) for k, v in node["environment"].items()}
        checked = subprocess.run(
            [str(binary), "-c", str(config), "-t"],
            env={"PATH": os.environ["PATH"], **env},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert checked.returncode == 0, (name, checked.stdout + checked.stderr)
        names.add(env["NATS_SERVER_NAME"])
        routes.add(env["NATS_ROUTES"])
        cluster_port = env["NATS_CLUSTER_LISTEN"].rsplit(":", 1)[1]
        assert f"nats://{name}:{cluster_port}" in env["NATS_ROUTES"], name
        # JetStream state lives on the node's own named volume.
        volumes = named_volumes(node)
        assert volumes[env["NATS_STORE_DIR"]] == f"{name}-data"
        # A node starts only after init wrote its authorization.
        assert node["depends_on"]["init"] == {"condition": "service_completed_successfully"}
        # The health check asks the monitoring port for full health (JetStream with a
        # meta leader), so gates do not start against a cluster still electing one.
        http_port = env["NATS_HTTP"].rsplit(":", 1)[1]
        health = " ".join(node["healthcheck"]["test"])
        assert health.endswith(f"http://127.0.0.1:{http_port}/healthz"), name
    assert names == set(nodes)
    assert len(routes) == 1  # every node is given every route, its own included


def test_the_nats_image_is_the_release_the_wheel_ships(compose: dict[str, Any]) -> None:
    wheel = probe_version(resolve_binary())
    for name, node in services_of(compose, "nats:").items():
        match = re.fullmatch(r"nats:(\d+\.\d+\.\d+)(-[a-z0-9.]+)?", node["image"])
        assert match is not None, (name, node["image"])
        assert parse_version(f"nats-server: v{match.group(1)}") == wheel, name


# --- the SMF services: commands the real argument parser accepts ---------------------


def smf_commands(compose: dict[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """Every ``smf-assurance`` argv in the compose file: service commands (the
    image's entrypoint is ``smf-assurance``), health checks, and the lines of the
    init script that call it."""
    for name, service in services_of(compose, SMF_IMAGE).items():
        if "entrypoint" not in service:
            yield f"{name} command", service["command"]
        test = service.get("healthcheck", {}).get("test", [])
        if test[1:2] == ["smf-assurance"]:
            yield f"{name} healthcheck", test[2:]
    script = INIT_SCRIPT.read_text().replace("\\\n", " ")  # join continued lines
    for number, line in enumerate(script.splitlines(), start=1):
        words = shlex.split(line, comments=True)
        if words[:1] == ["smf-assurance"]:
            yield f"init-state.sh line {number}", words[1:]


def parse_cli(argv: list[str]) -> Any:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"the CLI refuses {argv}") from exc
    if args.command == "up":
        check_flags(args)
    return args


def test_every_smf_command_in_the_compose_file_parses(compose: dict[str, Any]) -> None:
    seen = [where for where, argv in smf_commands(compose) if parse_cli(argv)]
    assert any(where.startswith("init-state.sh") for where in seen)
    assert {"gate-1 command", "gate-2 command", "connectors command", "console command"} <= set(
        seen
    )


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
async def test_the_console_health_check_is_its_healthz_and_fails_on_503(
    compose: dict[str, Any], status: int, healthy: bool, tmp_path: Path
) -> None:
    """Compose asks the console's ``/healthz`` (200 only with the bus
    connected, the board fed and the gate answering; 503 naming what is wrong), not its
    page, which answers while the console is cut off, over HTTPS trusting the CA init
    made. The check's own command is run against a real local HTTPS server (its
    certificate issued from a CA made here, given in the CA file's place) answering
    ``status`` on that path."""
    test = compose["services"]["console"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    assert "https://127.0.0.1:8765/healthz" in test[3]
    ca_in_compose = "/var/lib/smf/bus-ca.pem"
    assert f"cafile='{ca_in_compose}'" in test[3]
    ca = init_tls(tmp_path / "ca", ())
    cert = issue_cert(ca.directory, "console", (), tmp_path / "console-tls")
    asked: list[str] = []

    async def healthz(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.Response(status=status, text="bus_disconnected" if status != 200 else "ok")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context(cert.cert, cert.key))
    await site.start()
    try:
        port = runner.addresses[0][1]
        code = test[3].replace("127.0.0.1:8765", f"127.0.0.1:{port}")
        code = code.replace(ca_in_compose, str(ca.ca_cert))
        done = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stderr=asyncio.subprocess.DEVNULL
        )
        returncode = await asyncio.wait_for(done.wait(), timeout=30)
    finally:
        await runner.cleanup()
    assert asked == ["/healthz"]
    assert (returncode == 0) is healthy


def test_runtimes_reach_only_the_bus_and_the_model_gateway(compose: dict[str, Any]) -> None:
    """The network a firm's runtime containers join is
    internal (no way out) and holds only the NATS nodes and the model gateway; only
    the gateway is on the providers' network, only the connectors on the external
    one. (Compose's own enforcement of these networks is not run here: no docker
    engine; tests/runtimes/test_model_gateway_netns.py shows the same shape with a real
    network namespace.)"""
    networks = compose["networks"]
    assert networks["runtimes"] == {"internal": True}
    members: dict[str, set[str]] = {name: set() for name in networks}
    for name, service in compose["services"].items():
        for network in service["networks"]:
            members[network].add(name)
    assert members["runtimes"] == {"nats-1", "nats-2", "nats-3", "model-gateway"}
    assert members["providers"] == {"model-gateway"}
    assert members["external"] == {"connectors"}
    gateway = parse_cli(compose["services"]["model-gateway"]["command"])
    assert gateway.gateway_command == "serve"
    assert (
        gateway.state_dir
        == Path(compose["services"]["init"]["environment"]["SMF_STATE_ROOT"]) / "model-gateway"
    )


def test_the_gates_are_distinct_cluster_replicas_of_one_nats_cluster(
    compose: dict[str, Any],
) -> None:
    nodes = services_of(compose, "nats:")
    client_urls = {
        f"nats://{name}:{node['environment']['NATS_LISTEN'].rsplit(':', 1)[1]}"
        for name, node in nodes.items()
    }
    gates = {}
    for name, service in services_of(compose, SMF_IMAGE).items():
        args = parse_cli(service["command"]) if "entrypoint" not in service else None
        if args is not None and args.command == "up" and not args.connectors_only:
            gates[name] = args
    assert sorted(gates) == ["gate-1", "gate-2"]
    assert {args.gate_name for args in gates.values()} == set(gates)
    assert len({args.state_dir for args in gates.values()}) == len(gates)
    for args in gates.values():
        assert args.cluster
        assert args.no_connectors
        assert set(args.nats.split(",")) == client_urls
    connectors = parse_cli(compose["services"]["connectors"]["command"])
    assert connectors.connectors_only
    assert set(connectors.nats.split(",")) == client_urls


def test_the_state_volume_is_provisioned_by_the_init_script_before_the_services_start(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    init = services["init"]
    (script_target,) = [t for t, s in bind_mounts(init).items() if s == "deploy/init-state.sh"]
    assert init["entrypoint"] == ["sh", script_target]
    state_root = init["environment"]["SMF_STATE_ROOT"]
    auth_dir = init["environment"]["SMF_NATS_AUTH_DIR"]
    tls_dir = init["environment"]["SMF_NATS_TLS_DIR"]
    assert named_volumes(init) == {
        state_root: "smf-state",
        auth_dir: "nats-auth",
        tls_dir: "nats-tls",
    }
    # only the nodes and init hold the nodes' key; every client trusts the CA init made
    for name, service in services.items():
        if "nats-tls" in named_volumes(service).values():
            assert name in {"init", "nats-1", "nats-2", "nats-3"}, name
        if any("nats://" in str(arg) for arg in service.get("command", [])):
            assert service["environment"][TLS_CA_ENV] == f"{state_root}/bus-ca.pem", name
    for name in ("gate-1", "gate-2", "connectors"):
        service = services[name]
        assert named_volumes(service) == {state_root: "smf-state"}
        args = parse_cli(service["command"])
        assert args.state_dir == Path(state_root) / name
    for name in ("gate-1", "gate-2"):
        needs = services[name]["depends_on"]
        assert needs["init"] == {"condition": "service_completed_successfully"}
        assert {needs[n]["condition"] for n in ("nats-1", "nats-2", "nats-3")} == {
            "service_healthy"
        }
    console = parse_cli(services["console"]["command"])
    assert console.registry == Path(state_root) / "seed" / "registry.json"
    assert console.credential == Path(state_root) / "seed" / "keys" / "console.nkey"
    # the pdf.js the image fetched at build time (Dockerfile), at the pinned version
    assert console.pdf_renderer == f"/opt/cache/smf-assurance/pdfjs-dist-{PDFJS_VERSION}"
    follower = services["bus-follow"]
    assert named_volumes(follower) == {state_root: "smf-state", auth_dir: "nats-auth"}
    assert parse_cli(follower["command"]).out == Path(auth_dir) / "authorization.conf"


# --- LocalNatsCluster: replicated JetStream that survives a node ---------------------


async def retry(what: Callable[[], Awaitable[T]], timeout: float = WAIT_SECONDS) -> T:
    """``what()`` until it succeeds; the cluster elects leaders for a few seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await what()
        except (NatsError, TimeoutError):
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.2)


async def wait_until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not await check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {WAIT_SECONDS} s: {what}")
        await asyncio.sleep(0.1)


def peers(info: StreamInfo) -> dict[str, bool]:
    """Each server holding the stream -> whether it is current."""
    cluster = info.cluster
    assert cluster is not None
    assert cluster.leader is not None
    held = {cluster.leader: True}
    held.update({str(peer.name): bool(peer.current) for peer in cluster.replicas or []})
    return held


async def lead_from(js: JetStreamContext, nc: Client, stream: str, node: str) -> StreamInfo:
    """Move the stream's leadership to ``node`` and return the stream as it reports it."""

    async def moved() -> bool:
        info = await retry(lambda: js.stream_info(stream))
        if info.cluster is not None and info.cluster.leader == node:
            return True
        request = json.dumps({"placement": {"preferred": node}}).encode()
        await retry(lambda: nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", request))
        return False

    await wait_until(moved, f"{stream} led by {node}")
    return await retry(lambda: js.stream_info(stream))


async def test_local_cluster_runs_the_deploy_config_with_three_nodes_and_a_meta_leader(
    nats_cluster: LocalNatsCluster,
) -> None:
    assert len(nats_cluster.urls) == 3
    assert nats_cluster.seeds == ",".join(nats_cluster.urls)
    for node in nats_cluster.nodes:
        assert node.command()[1:3] == ["-c", str(nats_cluster.config_file)]
        assert node.running
    leader = await nats_cluster.meta_leader()
    assert leader in {node.name for node in nats_cluster.nodes}
    status, body = await nats_cluster.node(0).monitor("/jsz")
    assert status == 200
    assert json.loads(body)["meta_cluster"]["cluster_size"] == 3


async def test_r3_stream_and_kv_stay_writable_without_their_leader_and_it_catches_up(
    nats_cluster: LocalNatsCluster,
) -> None:
    nc = await nats.connect(
        nats_cluster.urls,
        reconnect_time_wait=0.1,
        connect_timeout=2,
        **nats_cluster.operator.connect_options(),
    )
    try:
        js = nc.jetstream(timeout=2)
        stream = await js.add_stream(
            StreamConfig(name="DEPLOY", subjects=["deploy.>"], num_replicas=3)
        )
        assert stream.config.num_replicas == 3
        kv = await js.create_key_value(KeyValueConfig(bucket="deploy", replicas=3))
        revision = 0

        async def first_stored() -> bool:
            # A bucket just created on a cluster is not yet known on every node: a put to
            # the node this client is on finds no stream for a moment ("no response from
            # stream", seen once in a fresh-clone run), and stores nothing then. That is
            # not the property under test; its first put is.
            nonlocal revision
            try:
                revision = await kv.put("claim", b"first")
            except (nats.errors.Error, TimeoutError):
                return False
            return True

        await wait_for(first_stored, timeout=30, interval=0.2)
        await js.publish("deploy.a", b"before", headers={"Nats-Msg-Id": "before"})
        for name in ("DEPLOY", "KV_deploy"):
            info = await js.stream_info(name)
            assert info.config.num_replicas == 3
            assert set(peers(info)) == {node.name for node in nats_cluster.nodes}

        lost = peers(await js.stream_info("DEPLOY"))
        leader = next(iter(lost))  # peers() lists the leader first
        await nats_cluster.kill_node(leader)
        # Writable on two of three: a new leader takes over. A retried publish
        # carries its message id, so it is stored once however often it is sent.
        during = await retry(
            lambda: js.publish("deploy.a", b"during", headers={"Nats-Msg-Id": "during"})
        )
        assert during.seq == 2
        await wait_until(
            lambda: kv_led_elsewhere(js, leader), "the KV bucket has a leader on a live node"
        )
        updated = await retry(lambda: kv.update("claim", b"second", last=revision))
        # Compare-and-set still holds without the lost node.
        with pytest.raises(KeyWrongLastSequenceError):
            await kv.update("claim", b"stale", last=revision)

        await nats_cluster.restart_node(leader)

        async def all_current() -> bool:
            for stream in ("DEPLOY", "KV_deploy"):
                held = peers(await retry(partial(js.stream_info, stream)))
                if len(held) != 3 or not all(held.values()):
                    return False
            return True

        await wait_until(all_current, f"{leader} current again on both streams")
        # The rejoined node holds what was written while it was down: led from
        # it, the streams report every write.
        rejoined = await lead_from(js, nc, "DEPLOY", leader)
        assert (rejoined.state.messages, rejoined.state.last_seq) == (2, during.seq)
        rejoined_kv = await lead_from(js, nc, "KV_deploy", leader)
        assert rejoined_kv.state.last_seq == updated
        assert (await retry(lambda: kv.get("claim"))).value == b"second"
    finally:
        await nc.close()


async def kv_led_elsewhere(js: JetStreamContext, lost: str) -> bool:
    try:
        info = await js.stream_info("KV_deploy")
    except (NatsError, TimeoutError):
        return False
    return info.cluster is not None and info.cluster.leader not in (None, lost)


async def test_a_stopped_node_restarts_on_its_ports_and_store(
    nats_cluster: LocalNatsCluster,
) -> None:
    node = await nats_cluster.stop_node("nats-2")
    assert not node.running
    url = node.url
    await nats_cluster.wait_ready()  # two of three still elect a meta leader
    restarted = await nats_cluster.restart_node(1)
    assert restarted is node
    # A running node restarts too: stopped gracefully first.
    first = nats_cluster.node(0)
    pid = first.pid
    assert (await nats_cluster.restart_node("nats-1")).pid != pid
    assert node.running
    assert node.url == url
    assert (node.store_dir / "jetstream").is_dir()


def test_seed_lists_and_harness_arguments_are_checked(tmp_path: Path) -> None:
    assert seed_urls(" nats://a:1 ,nats://b:2") == ("nats://a:1", "nats://b:2")
    assert nats_servers("nats://a:1") == "nats://a:1"
    assert nats_servers("nats://a:1,nats://b:2") == ["nats://a:1", "nats://b:2"]
    with pytest.raises(ValueError, match="blank inside URL"):
        seed_urls("nats://a :1")
    with pytest.raises(ValueError, match="at least one node"):
        LocalNatsCluster(tmp_path, size=0)
    with pytest.raises(NatsServerError, match="no node config"):
        LocalNatsCluster(tmp_path, config_file=tmp_path / "missing.conf")
    with pytest.raises(KeyError):
        LocalNatsCluster(tmp_path).node("nats-9")


async def test_a_cluster_with_no_node_running_is_not_ready(tmp_path: Path) -> None:
    with pytest.raises(NatsServerError, match="no node is running"):
        await LocalNatsCluster(tmp_path).wait_ready(timeout=0)


async def test_a_cluster_that_cannot_form_stops_its_nodes_and_says_why(tmp_path: Path) -> None:
    cluster = LocalNatsCluster(tmp_path / "c", size=1, leader_timeout=0.5)
    # A one-node cluster whose only route points at itself has no peer to elect with.
    with pytest.raises(NatsServerError, match="not ready") as raised:
        await cluster.start()
    assert "nats-1" in str(raised.value)
    assert not any(node.running for node in cluster.nodes)


# --- `up` flags for a cluster deployment ---------------------------------------------


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_up_help_lists_the_cluster_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["up", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--cluster", "--replicas N", "--gate-name NAME", "--connectors-only"):
        assert flag in out
    assert "--nats URL[,URL...]" in out


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--cluster"], "--cluster needs --nats"),
        (["--connectors-only"], "--connectors-only needs --nats"),
        (["--replicas", "3", "--nats", "nats://127.0.0.1:1"], "--replicas applies to --cluster"),
        (["--cluster", "--replicas", "0", "--nats", "nats://127.0.0.1:1"], "0 is not 1 to 5"),
        (["--cluster", "--replicas", "6", "--nats", "nats://127.0.0.1:1"], "6 is not 1 to 5"),
        (["--gate-name", "gate.1"], "--gate-name: 'gate.1' is not a gate name"),
        (["--nats", "nats://127.0.0.1:1,,nats://127.0.0.1:2"], "--nats: empty URL"),
        (["--nats", "nats://127.0.0.1:1,"], "--nats: empty URL"),
        (
            ["--connectors-only", "--nats", "nats://127.0.0.1:1", "--cluster", "--gate-name", "g"],
            "--connectors-only runs no gate: drop --cluster, --gate-name",
        ),
        (
            ["--connectors-only", "--nats", "nats://127.0.0.1:1", "--no-connectors"],
            "drop --no-connectors",
        ),
        (
            ["--model-gateway", "0.0.0.0:8787"],
            "--model-gateway: 0.0.0.0 is not a loopback address",
        ),
    ],
)
def test_up_refuses_flags_that_cannot_work_in_one_line_before_starting_anything(
    argv: list[str], reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    code, out, err = run(["up", "--state-dir", str(state), *argv], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("smf-assurance: "), err
    assert reason in err
    assert not state.exists()


@pytest.mark.parametrize(
    ("flags", "cluster", "name"),
    [
        (["--cluster", "--gate-name", "gate-7", "--replicas", "5"], ClusterSettings(5), "gate-7"),
        (["--cluster"], ClusterSettings(replicas=3), names.DEFAULT_GATE_NAME),
        ([], None, names.DEFAULT_GATE_NAME),
    ],
    ids=["cluster-r5-named", "cluster-default", "single"],
)
def test_up_hands_the_cluster_flags_and_the_seed_list_to_the_gate(
    flags: list[str],
    cluster: ClusterSettings | None,
    name: str,
    tmp_path: Path,
    nats_server: EmbeddedNatsServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given: list[GateConfig] = []

    async def start_gate(options: GateConfig) -> Any:
        given.append(options)
        raise RuntimeError("stopped before the gate starts")

    monkeypatch.setattr("smf_assurance.ops.local.stack.start_gate", start_gate)
    seeds = f"nats://127.0.0.1:1, {nats_server.url}"  # up's probe: any live seed will do
    argv = ["up", "--state-dir", str(tmp_path / "s"), "--nats", seeds, "--no-connectors", *flags]
    code, _, err = run([*argv, "--log-level", "error"], capsys)
    assert code == 1
    assert (
        err.splitlines()[-1]
        == "smf-assurance: cannot start the gate: stopped before the gate starts"
    )
    (options,) = given
    assert options.cluster == cluster
    assert options.name == name
    assert options.servers == ("nats://127.0.0.1:1", nats_server.url)


def test_up_connectors_only_refuses_a_state_dir_the_gates_were_not_provisioned_with(
    tmp_path: Path, nats_server: EmbeddedNatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "connectors"
    code, _, err = run(
        ["up", "--connectors-only", "--nats", nats_server.url, "--state-dir", str(state)], capsys
    )
    assert code == 1
    assert err.count("\n") == 1
    assert "--connectors-only needs the gates' provisioning" in err
    assert "registry.json" in err
    assert "court-efiling.key" in err
    assert not (state / "registry.json").exists()
    assert not (state / "keys").exists()


async def test_up_connectors_only_stops_when_its_nats_connection_is_gone_for_good(
    tmp_path: Path, nats_server: EmbeddedNatsServer
) -> None:
    """nats-py stops reconnecting after a while; ``up`` must then fail, not idle."""
    client = await nats.connect(nats_server.url)
    await client.close()
    connectors = Connectors(state=StateDir(tmp_path), url=nats_server.url, connections=[client])
    reason = await asyncio.wait_for(serve_until_stopped(connectors, asyncio.Event()), 10)
    assert reason == "the connectors lost NATS for good; they stopped"


# --- the compose deployment, run on this machine -------------------------------------


class Localizer:
    """Maps the compose file's host names and state paths to this machine's."""

    def __init__(self, cluster: LocalNatsCluster, state_root: str, local_root: Path) -> None:
        self.urls = {f"nats://{node.name}:4222": node.url for node in cluster.nodes}
        self.state_root = state_root
        self.local_root = str(local_root)

    def arg(self, value: str) -> str:
        for compose_url, local_url in self.urls.items():
            value = value.replace(compose_url, local_url)
        if value.startswith(self.state_root):
            value = self.local_root + value[len(self.state_root) :]
        return value

    def argv(self, argv: list[str]) -> list[str]:
        mapped = [self.arg(value) for value in argv]
        assert "nats://nats-" not in " ".join(mapped), mapped
        return mapped


def cli(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "smf_assurance.ops.cli.main", *argv]


def wait_for_file(path: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{path} not written; log:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


def test_the_compose_services_run_here_on_the_local_cluster(
    compose: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """init, gate-1, gate-2 and connectors as compose runs them (hosts and paths
    mapped), on the cluster the compose config describes, with the TLS init made
    for it: the nodes start requiring TLS, the services (given the CA as compose
    gives it) become healthy by their own health checks, a proposal is decided by a
    gate and executed by the connectors, and each service stops cleanly on SIGTERM.

    The gates run as processes; the connectors run in this process (``up`` needs
    the main thread for its signal handlers), so a driver thread does the rest.
    """
    services = compose["services"]
    state_root = services["init"]["environment"]["SMF_STATE_ROOT"]
    cluster = LocalNatsCluster(tmp_path / "cluster")
    local = Localizer(cluster, state_root, tmp_path / "smf")
    venv_bin = str(Path(sys.executable).parent)
    ca = local.arg(services["gate-1"]["environment"][TLS_CA_ENV])
    env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}", TLS_CA_ENV: ca}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        # init writes the nodes' authorization and TLS includes (a CA of its own, the
        # nodes' certificate); compose starts the nodes after it, and so does this
        init = subprocess.run(
            ["sh", str(INIT_SCRIPT)],
            env={
                **os.environ,
                "PATH": env["PATH"],
                "SMF_STATE_ROOT": local.local_root,
                "SMF_NATS_AUTH_DIR": str(cluster.authorization_path.parent),
                "SMF_NATS_TLS_DIR": str(cluster.tls_dir),
            },
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert init.returncode == 0, init.stderr.decode()[-3000:]
        assert (cluster.tls_dir / "ca.pem").read_bytes() == Path(ca).read_bytes()
        assert not (cluster.tls_dir / "ca-key.pem").exists()  # the CA's key is off the nodes
        assert (tmp_path / "smf" / "seed" / "keys" / "bus-ca-key.pem").exists()
        # the console's and the model gateway's HTTPS: certificates init issued, where
        # their compose commands name them, each loading with its key
        for name in ("console", "model-gateway"):
            argv = local.argv(services[name]["command"])
            cert = Path(argv[argv.index("--tls-cert") + 1])
            key = Path(argv[argv.index("--tls-key") + 1])
            assert server_context(cert, key) is not None, name
        asyncio.run(cluster.start())
        monkeypatch.setenv(TLS_CA_ENV, ca)
        gate_keys = sorted(p.name for p in (tmp_path / "smf" / "gate-1" / "keys").iterdir())
        assert gate_keys == ["gate.key", "gate.nkey", "tenant-pseudonym.key"]
        seed_demo_documents(StateDir(tmp_path / "smf" / "connectors"))

        for name in ("gate-1", "gate-2"):
            argv = local.argv(services[name]["command"])
            log = tmp_path / f"{name}.log"
            with log.open("wb") as out:
                procs[name] = subprocess.Popen(
                    cli(argv), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            state = Path(argv[argv.index("--state-dir") + 1])
            wait_for_file(state / "nats.url", procs[name], log)

        def healthy_then_propose() -> tuple[Any, str]:
            for name in ("gate-1", "gate-2", "connectors"):
                test = services[name]["healthcheck"]["test"]
                smf = test[1] == "smf-assurance"
                health = subprocess.run(
                    cli(local.argv(test[2:])) if smf else local.argv(test[1:]),
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    timeout=60,
                    check=False,
                )
                assert health.returncode == 0, (name, health.stderr.decode()[-2000:])
            return asyncio.run(
                propose_the_allowed_deletion(cluster.seeds, StateDir(tmp_path / "smf" / "seed"))
            )

        connectors = local.argv(services["connectors"]["command"])
        (code, _, err), (verdict, report) = drive_up(
            connectors, capsys, tmp_path / "smf" / "connectors" / "nats.url", healthy_then_propose
        )
        assert code == 0, err
        assert verdict.outcome == "allow"
        assert report == "confirmed"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for name, proc in procs.items():
            try:
                codes[name] = proc.wait(WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes[name] = None
        asyncio.run(cluster.close())
    assert codes == {"gate-1": 0, "gate-2": 0}
    for name in ("gate-1", "gate-2", "connectors"):
        assert not (tmp_path / "smf" / name / "nats.url").exists()


async def propose_the_allowed_deletion(seeds: str, seed: StateDir) -> tuple[Any, str]:
    """The demo's allowed retention deletion, from the runtime the seed provisioned."""
    (action,) = [a for a in SCENARIOS if a.expected_outcome == "allow"]
    runtime_credential, operator_credential = (
        seed.existing_credential("runtime"),
        seed.existing_credential(OPERATOR),
    )
    assert runtime_credential is not None
    assert operator_credential is not None
    nc = await nats.connect(
        seeds.split(","),
        name="test-runtime",
        connect_timeout=2,
        **connect_options(runtime_credential),
    )
    observer = await nats.connect(seeds.split(","), **connect_options(operator_credential))
    try:
        watch = ReportWatch(load_registry(seed.registry).trusted("connector"))
        await observer.subscribe("smf.result.>", cb=watch.on_report)
        await observer.flush()
        key, _ = load_private_key(seed.key_path("runtime"))
        runtime = ProposalClient(nc, key, RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=seed.gate_keys())
        proposal = runtime.build(
            native_tool=action.native_tool,
            arguments=action.arguments,
            actor=action.actor,
            facts=action.facts,
            content=action.content,
            destination=action.destination,
        )
        verdict = await runtime.propose(proposal)
        report = await watch.wait_for(verdict.order_id) if verdict.order_id else "no order"
        return verdict, report or "no report"
    finally:
        await nc.close()
        await observer.close()
