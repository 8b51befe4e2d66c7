"""``up``: run the gate (and the example connectors) until SIGINT or SIGTERM.

Issue 3, "Running it". What this command promises an operator:

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

Issue 11, a cluster deployment (docker-compose.yml, README "Running on a
cluster"): ``--nats`` takes the seeds of a NATS cluster, ``URL,URL,...``;
``--cluster`` runs the gate as one replica of several (``GateOptions.cluster``,
``--replicas`` copies of each stream and bucket), named by ``--gate-name``;
``--connectors-only`` runs the example connectors alone against the gates'
cluster. A combination that cannot work is refused with its reason before
anything starts, and without ``--nats`` the cluster flags are refused: the
embedded server is a single node.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import nats
import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError

from ops.cluster import nats_servers, seed_urls
from ops.gateway import ClusterSettings
from ops.logs import configure_logging
from ops.natsserver import EmbeddedNatsServer
from ops.output import emit_json, fail, say
from ops.stack import Connectors, Stack, start_connectors, start_stack
from ops.state import CONNECTORS, StateDir, default_state_dir, provision_demo
from pipeline.core.projection import ProjectionError
from pipeline.stores.ledger import EvidenceError
from subjects import names
from subjects.keys import KeyFileError

log = structlog.get_logger(__name__)

NATS_URL_FILE: Final = "nats.url"
"""Written by ``up`` once the gate serves, removed when it stops."""
LOCK_FILE: Final = "up.lock"
WATCH_SECONDS: Final = 0.5
"""How often ``up`` checks that its embedded nats-server is still alive."""
CONNECT_TIMEOUT_SECONDS: Final = 2.0
STOP_TIMEOUT_SECONDS: Final = 20.0
"""Stack.stop() waits up to 5 s for connectors to finish an order in hand."""
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
DEFAULT_REPLICAS: Final = 3
MAX_REPLICAS: Final = 5
"""JetStream keeps at most five copies of a stream."""
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "up",
        help="run the gate (and the example connectors) until interrupted",
        description="Run the gate until SIGINT or SIGTERM, then stop cleanly. "
        "Prints one readiness line once the gate serves.",
    )
    p.add_argument(
        "--state-dir", type=Path, help=f"keep all state here (default: {default_state_dir()})"
    )
    p.add_argument(
        "--nats",
        metavar="URL[,URL...]",
        help="use this NATS server instead of an embedded one; for a cluster, "
        "its seed URLs separated by commas",
    )
    p.add_argument("--no-connectors", action="store_true", help="do not run the example connectors")
    p.add_argument(
        "--bus-stages",
        action="store_true",
        help="call the stages over their NATS subjects (default: in-process)",
    )
    logs = p.add_mutually_exclusive_group()
    logs.add_argument(
        "--json-logs",
        dest="json_logs",
        action="store_true",
        help="log JSON lines on stderr (default when stderr is not a terminal)",
    )
    logs.add_argument(
        "--console-logs",
        dest="json_logs",
        action="store_false",
        help="log for a person at a terminal (default when stderr is one)",
    )
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default: info")
    p.add_argument("--json", action="store_true", help="print the readiness line as JSON")
    cluster = p.add_argument_group(
        "cluster deployment", "several gates on one NATS cluster (needs --nats)"
    )
    cluster.add_argument(
        "--cluster",
        action="store_true",
        help="run this gate as one replica of several: approvals and proposal claims in "
        "replicated JetStream KV buckets, every stream and bucket with --replicas copies",
    )
    cluster.add_argument(
        "--replicas",
        type=int,
        metavar="N",
        help=f"copies of each stream and bucket with --cluster, 1 to {MAX_REPLICAS} "
        f"(default: {DEFAULT_REPLICAS})",
    )
    cluster.add_argument(
        "--gate-name",
        metavar="NAME",
        help="this gate's name on the bus and in its checkpoint subject, distinct for each "
        f"replica (default: {names.DEFAULT_GATE_NAME})",
    )
    cluster.add_argument(
        "--connectors-only",
        action="store_true",
        help="run only the example connectors, against the gates on --nats; the state dir "
        "must hold the registry and connector keys the gates were provisioned with",
    )
    p.set_defaults(func=run_up, json_logs=None)


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
            )
            if given
        ]
        if clash:
            fail(f"--connectors-only runs no gate: drop {', '.join(clash)}", 2)
        if args.nats is None:
            fail("--connectors-only needs --nats: the gates' NATS cluster", 2)
    if args.cluster and args.nats is None:
        fail("--cluster needs --nats: the embedded nats-server is a single node", 2)


# --- finding the bus: shared with the approvals and ledger commands ----------


def nats_url_path(root: Path) -> Path:
    return root / NATS_URL_FILE


def bus_url(nats_url: str | None, state_dir: Path | None) -> str:
    """``--nats`` wins; else the URL a running ``up`` wrote into the state dir."""
    if nats_url:
        return nats_url
    path = nats_url_path(state_dir or default_state_dir())
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        fail(f"no NATS URL: pass --nats URL, or start `smf-assurance up` first (no {path})")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}")
    if not text:
        fail(f"no NATS URL in {path}")
    return text


async def _quiet(_exc: Exception) -> None:
    """nats-py's default error callback logs a traceback per failed attempt;
    a command reports its one line instead."""


async def connect_bus(url: str, name: str) -> Client:
    """One short connection attempt, no reconnect loop: a command fails fast.

    nats-py retries forever with ``allow_reconnect=False`` alone; a bounded
    ``max_reconnect_attempts`` is what makes an unreachable server an error.
    ``url`` may be a cluster's seeds, ``URL,URL,...``: any one that answers will do.
    """
    try:
        return await nats.connect(
            nats_servers(url),
            name=name,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            error_cb=_quiet,
        )
    except (OSError, NatsError, ValueError) as exc:
        fail(f"cannot connect to NATS at {url}: {first_line(exc)}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- up ------------------------------------------------------------------------


@contextlib.contextmanager
def _exclusive(state: StateDir) -> Iterator[None]:
    """Hold ``<state>/up.lock`` for the life of this process.

    ``flock`` is released by the kernel when the process dies, so a crashed
    ``up`` never leaves the directory locked; the embedded server does not
    inherit the descriptor (``close_fds``), so it cannot keep the lock either.
    """
    path = state.root / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fail(f"another `smf-assurance up` is running on {state.root}")
        yield
    finally:
        os.close(fd)


def _write_url(state: StateDir, url: str) -> None:
    """Atomic: a reader sees the whole URL or no file, never half a line."""
    target = nats_url_path(state.root)
    partial = target.with_name(f".{NATS_URL_FILE}.{os.getpid()}")
    partial.write_text(url + "\n", encoding="utf-8")
    partial.replace(target)


Running = Stack | Connectors
"""What ``up`` runs: the gate (with or without connectors), or connectors only."""


def _cluster_settings(args: argparse.Namespace) -> ClusterSettings | None:
    if not args.cluster:
        return None
    replicas: int = args.replicas if args.replicas is not None else DEFAULT_REPLICAS
    return ClusterSettings(replicas=replicas)


async def _start(state: StateDir, args: argparse.Namespace) -> Running:
    if args.nats:
        # The gate's own connection retries forever; check once that the
        # server is there, so a wrong URL is one line, not a silent hang.
        probe = await connect_bus(args.nats, "smf-up-probe")
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


def _embedded(running: Running) -> EmbeddedNatsServer | None:
    return running.server if isinstance(running, Stack) else None


def _announce(running: Running, args: argparse.Namespace) -> None:
    server = _embedded(running)
    server_pid = server.pid if server is not None else None
    connectors = [] if args.no_connectors else list(CONNECTORS)
    stages = "none" if args.connectors_only else "bus" if args.bus_stages else "co-located"
    if args.json:
        ready = {
            "ready": True,
            "nats_url": running.url,
            "state_dir": str(running.state.root),
            "nats_server_pid": server_pid,
            "connectors": connectors,
            "stages": stages,
        }
        settings = _cluster_settings(args)
        ready["gate_name"] = args.gate_name
        ready["cluster_replicas"] = settings.replicas if settings is not None else None
        emit_json(ready)
    else:
        where = f"nats-server pid {server_pid}" if server_pid is not None else "external NATS"
        settings = _cluster_settings(args)
        gate = f", gate {args.gate_name}" if args.gate_name else ""
        cluster = f", cluster R{settings.replicas}" if settings is not None else ""
        say(
            f"ready: {running.url} ({where}), state {running.state.root}, "
            f"stages {stages}{gate}{cluster}, connectors {', '.join(connectors) or 'none'}"
        )
    # stdout is block-buffered in a pipe: whoever waits for this line needs it now.
    sys.stdout.flush()


def _broken(running: Running) -> str | None:
    """Why what ``up`` runs can no longer serve, if it cannot."""
    server = _embedded(running)
    if server is not None and not server.running:
        return "the embedded nats-server exited; the gate stopped"
    if isinstance(running, Connectors) and (running.nc is None or running.nc.is_closed):
        # nats-py gives up reconnecting after a while; serving nothing silently is worse
        # than stopping, which a supervisor sees and restarts.
        return "the connectors lost NATS for good; they stopped"
    return None


async def _serve(running: Running, stop: asyncio.Event) -> str | None:
    """Wait for a stop signal; return why ``up`` must fail, if it must."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), WATCH_SECONDS)
        reason = _broken(running)
        if reason is not None:
            return reason
        if stop.is_set():
            return None


async def _shutdown(running: Running) -> str | None:
    """Stop what ``up`` runs; see ``_shutdown_stack`` for the gate."""
    if isinstance(running, Stack):
        return await _shutdown_stack(running)
    try:
        await asyncio.wait_for(running.stop(), STOP_TIMEOUT_SECONDS)
    except TimeoutError:
        return f"the connectors did not stop within {STOP_TIMEOUT_SECONDS:.0f} s"
    except (NatsError, OSError, RuntimeError) as exc:
        return f"the connectors did not stop cleanly: {first_line(exc)}"
    return None


async def _shutdown_stack(stack: Stack) -> str | None:
    """Anchor the ledger tail outside the file, then stop everything.

    The checkpoint is signed while the bus is still up: entries after the last
    published checkpoint are otherwise only as safe as the file's permissions.
    Stopping is bounded: whatever hangs, the embedded server is stopped.
    Returns why the stop was not clean, if it was not.
    """
    if stack.server is None or stack.server.running:
        try:
            await stack.gate.ledger.checkpoint(time.time_ns() // 1_000_000)
        except EvidenceError:
            log.error("shutdown_checkpoint_failed")
    reason = None
    try:
        await asyncio.wait_for(stack.stop(), STOP_TIMEOUT_SECONDS)
    except TimeoutError:
        reason = f"the gate did not stop within {STOP_TIMEOUT_SECONDS:.0f} s"
    except (NatsError, OSError, RuntimeError) as exc:
        reason = f"the gate did not stop cleanly: {first_line(exc)}"
    if reason is not None:
        log.error("stack_stop_incomplete", reason=reason)
        if stack.server is not None:
            stack.server.stop()
    return reason


async def _up(state: StateDir, args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        running = await _start(state, args)
        try:
            _write_url(state, running.url)
            log.info("up_ready", nats=running.url, state_dir=str(state.root))
            _announce(running, args)
            reason = await _serve(running, stop)
        finally:
            nats_url_path(state.root).unlink(missing_ok=True)
            stopped = await _shutdown(running)
        reason = reason or stopped
    finally:
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)
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
    state = StateDir(args.state_dir or default_state_dir())
    try:
        state.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create state dir {state.root}: {exc.strerror}")
    with _exclusive(state):
        if args.connectors_only:
            _check_connector_state(state)
        elif not state.registry.exists():
            provision_demo(state)
            log.info("state_provisioned", state_dir=str(state.root))
        asyncio.run(_up(state, args))
    return 0
