"""``up``: run the gate (and the example connectors) until SIGINT or SIGTERM.

What this command promises an operator:

- One state directory holds everything (``--state-dir``, else the per-user
  default); a new one is provisioned with the demo keys and registry, an
  existing one is used as it is, so an edited registry is never overwritten.
- One ``up`` per state directory: the stores are single-writer (the ledger
  refuses to extend a chain someone else wrote to), so a second ``up`` on the
  same directory fails at once instead of corrupting the first one's work.
- Ready means serving: the readiness line is printed (and flushed) only after
  the gate answers on the bus, and ``<state>/nats.url`` is written then, so the
  approver and ledger commands find the bus without being told.
- A clean stop on SIGINT or SIGTERM: the ledger tail is signed as a checkpoint
  while the bus is still up (so it is anchored outside the file), the stack
  stops, the embedded nats-server is stopped and never left running, and
  ``nats.url`` is removed. If the embedded server dies underneath the gate,
  ``up`` stops and exits non-zero rather than serving nothing.

A cluster deployment (docker-compose.yml, README "Running on a
cluster"): ``--nats`` takes the seeds of a NATS cluster, ``URL,URL,...``;
``--cluster`` runs the gate as one replica of several (``GateConfig.cluster``,
``--replicas`` copies of each stream and bucket), named by ``--gate-name``;
``--connectors-only`` runs the example connectors alone against the gates'
cluster. A combination that cannot work is refused with its reason before
anything starts, and without ``--nats`` the cluster flags are refused: the
embedded server is a single node.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import structlog
from nats.errors import Error as NatsError

from smf_assurance.approver.notify.config import NotifyConfig
from smf_assurance.core.projection import ProjectionError
from smf_assurance.ops.cli.cli_json import Stages, UpJson
from smf_assurance.ops.cli.commands import model_gateway, notify
from smf_assurance.ops.cli.output import emit, fail, first_line, say
from smf_assurance.ops.cli.parsers.up import DEFAULT_REPLICAS, MAX_REPLICAS
from smf_assurance.ops.local.bus import connect_bus, nats_url_path, write_url
from smf_assurance.ops.local.cluster import seed_urls
from smf_assurance.ops.local.defaults import default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.notices import NoticesError, notice_content_tenants
from smf_assurance.ops.local.signals import stop_on_signals
from smf_assurance.ops.local.stack import start_connectors, start_stack
from smf_assurance.ops.local.state import CONNECTORS, StateDir, private_files, provision_demo
from smf_assurance.ops.local.supervisor import (
    Running,
    embedded,
    exclusive,
    serve_until_stopped,
    shutdown,
)
from smf_assurance.pipeline.assembly import ClusterSettings
from smf_assurance.pipeline.stores.ledger import EvidenceError
from smf_assurance.subjects import names
from smf_assurance.subjects.hosts import is_loopback
from smf_assurance.subjects.keys import KeyFileError

log = structlog.get_logger(__name__)


def check_flags(args: argparse.Namespace) -> None:
    """Refuse, with the reason, a combination of ``up`` flags that cannot work.

    Also writes ``--nats`` back without blanks around its commas, as the
    ``nats.url`` file will carry it.
    """
    if args.nats is not None:
        try:
            args.nats = ",".join(seed_urls(args.nats))
        except ValueError as exc:
            fail(f"--nats: {exc}", 2)
    if args.replicas is not None and not args.cluster:
        fail("--replicas applies to --cluster only", 2)
    if args.replicas is not None and not 1 <= args.replicas <= MAX_REPLICAS:
        fail(f"--replicas: {args.replicas} is not 1 to {MAX_REPLICAS}", 2)
    if args.gate_name is not None:
        try:
            names.token(args.gate_name)  # it names the gate's checkpoint subject
        except names.SubjectError:
            fail(
                f"--gate-name: {args.gate_name!r} is not a gate name (no '.', '*', '>', blanks)", 2
            )
    if args.connectors_only:
        clash = [
            flag
            for flag, given in (
                ("--cluster", args.cluster),
                ("--gate-name", args.gate_name is not None),
                ("--no-connectors", args.no_connectors),
                ("--bus-stages", args.bus_stages),
                ("--model-gateway", args.model_gateway is not None),
                ("--notify", args.notify is not None),
            )
            if given
        ]
        if clash:
            fail(f"--connectors-only runs no gate: drop {', '.join(clash)}", 2)
        if args.nats is None:
            fail("--connectors-only needs --nats: the gates' NATS cluster", 2)
    if args.cluster and args.nats is None:
        fail("--cluster needs --nats: the embedded nats-server is a single node", 2)
    if args.model_gateway is not None:
        host, _ = model_gateway.parse_listen(args.model_gateway)
        if not is_loopback(host):
            # plain HTTP stays on loopback: HTTPS is `model-gateway serve --tls-cert ...`
            fail(
                f"--model-gateway: {host} is not a loopback address; beside the gate the "
                "model gateway serves plain HTTP, so only on loopback (serve it with "
                "`model-gateway serve --tls-cert FILE --tls-key FILE` beyond it)",
                2,
            )


# --- up ------------------------------------------------------------------------


def _cluster_settings(args: argparse.Namespace) -> ClusterSettings | None:
    if not args.cluster:
        return None
    replicas: int = args.replicas if args.replicas is not None else DEFAULT_REPLICAS
    return ClusterSettings(replicas=replicas)


async def _start(state: StateDir, args: argparse.Namespace) -> Running:
    if args.nats:
        # The gate's own connection retries forever; check once that the
        # server is there, so a wrong URL is one line, not a silent hang.
        who = CONNECTORS[0] if args.connectors_only else "gate"
        probe = await connect_bus(args.nats, "smf-up-probe", state.existing_credential(who))
        await probe.close()
    try:
        if args.connectors_only:
            return await start_connectors(state, args.nats)
        return await start_stack(
            state,
            nats_url=args.nats,
            with_connectors=not args.no_connectors,
            co_located=not args.bus_stages,
            gate_name=args.gate_name,
            cluster=_cluster_settings(args),
        )
    except (
        RuntimeError,
        ValueError,
        OSError,
        EvidenceError,
        KeyFileError,
        ProjectionError,
        NatsError,
        TimeoutError,
    ) as exc:
        what = "the connectors" if args.connectors_only else "the gate"
        fail(f"cannot start {what}: {first_line(exc)}")


def _announce(running: Running, args: argparse.Namespace, gateway_url: str | None) -> None:
    server = embedded(running)
    server_pid = server.pid if server is not None else None
    connectors = [] if args.no_connectors else list(CONNECTORS)
    stages: Stages = "none" if args.connectors_only else "bus" if args.bus_stages else "co-located"
    if args.json:
        settings = _cluster_settings(args)
        emit(
            UpJson(
                ready=True,
                nats_url=running.url,
                state_dir=str(running.state.root),
                nats_server_pid=server_pid,
                connectors=tuple(connectors),
                stages=stages,
                model_gateway_url=gateway_url,
                gate_name=args.gate_name,
                cluster_replicas=settings.replicas if settings is not None else None,
                notify_config=str(args.notify) if args.notify is not None else None,
            )
        )
    else:
        where = f"nats-server pid {server_pid}" if server_pid is not None else "external NATS"
        settings = _cluster_settings(args)
        gate = f", gate {args.gate_name}" if args.gate_name else ""
        cluster = f", cluster R{settings.replicas}" if settings is not None else ""
        model = f", model gateway {gateway_url}" if gateway_url is not None else ""
        notifier = f", notifier {args.notify}" if args.notify is not None else ""
        say(
            f"ready: {running.url} ({where}), state {running.state.root}, "
            f"stages {stages}{gate}{cluster}, connectors {', '.join(connectors) or 'none'}"
            f"{model}{notifier}"
        )
    # stdout is block-buffered in a pipe: whoever waits for this line needs it now.
    sys.stdout.flush()


async def _up(
    state: StateDir, args: argparse.Namespace, notify_config: NotifyConfig | None
) -> None:
    with stop_on_signals() as stop:
        running = await _start(state, args)
        gateway = None
        notifier = None
        try:
            if args.model_gateway is not None:
                gateway = await model_gateway.start_beside(state, running.url, args.model_gateway)
            if notify_config is not None:
                notifier = await notify.start_beside(state, running.url, notify_config)
            write_url(state.root, running.url)
            log.info("up_ready", nats=running.url, state_dir=str(state.root))
            _announce(running, args, gateway.url if gateway is not None else None)
            reason = await serve_until_stopped(running, stop)
        finally:
            nats_url_path(state.root).unlink(missing_ok=True)
            if notifier is not None:
                await notifier.close()
            if gateway is not None:
                await gateway.close()
            stopped = await shutdown(running)
        reason = reason or stopped
    log.info("up_stopped", reason=reason)
    if reason is not None:
        fail(reason)


def _check_connector_state(state: StateDir) -> None:
    """Connectors alone must not provision: new keys would be unknown to the gates.

    Their reports are verified against the registry the gates run on, and the
    orders they take are signed with a gate key that registry names.
    """
    needed = (state.registry, *(state.key_path(c) for c in CONNECTORS))
    missing = [path for path in needed if not path.exists()]
    if missing:
        fail(
            f"--connectors-only needs the gates' provisioning in {state.root}: "
            f"missing {', '.join(str(path) for path in missing)}"
        )


def run_up(args: argparse.Namespace) -> int:
    check_flags(args)
    json_logs: bool = args.json_logs if args.json_logs is not None else not sys.stderr.isatty()
    configure_logging(json=json_logs, level=args.log_level)
    notify_config = notify.read_config(args.notify) if args.notify is not None else None
    state = StateDir(args.state_dir or default_state_dir())
    try:
        notice_content_tenants(state.root)  # read again by the gate; refused before anything
    except NoticesError as exc:
        fail(str(exc))
    private_files()
    try:
        state.create()
    except OSError as exc:
        fail(f"cannot create state dir {state.root}: {exc.strerror}")
    with exclusive(state):
        if args.connectors_only:
            _check_connector_state(state)
        elif not state.registry.exists():
            provision_demo(state)
            log.info("state_provisioned", state_dir=str(state.root))
        if notify_config is not None:
            notify.check_roster(notify_config, state.registry)
        asyncio.run(_up(state, args, notify_config))
    return 0
