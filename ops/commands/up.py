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

from ops.logs import configure_logging
from ops.output import emit_json, fail, say
from ops.stack import Stack, start_stack
from ops.state import CONNECTORS, StateDir, default_state_dir, provision_demo
from pipeline.core.projection import ProjectionError
from pipeline.stores.ledger import EvidenceError
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
    p.add_argument("--nats", metavar="URL", help="use this NATS server instead of an embedded one")
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
    p.set_defaults(func=run_up, json_logs=None)


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
    """
    try:
        return await nats.connect(
            url,
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


async def _start(state: StateDir, args: argparse.Namespace) -> Stack:
    if args.nats:
        # The gate's own connection retries forever; check once that the
        # server is there, so a wrong URL is one line, not a silent hang.
        probe = await connect_bus(args.nats, "smf-up-probe")
        await probe.close()
    try:
        return await start_stack(
            state,
            nats_url=args.nats,
            with_connectors=not args.no_connectors,
            co_located=not args.bus_stages,
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
        fail(f"cannot start the gate: {first_line(exc)}")


def _announce(stack: Stack, args: argparse.Namespace) -> None:
    server_pid = stack.server.pid if stack.server is not None else None
    connectors = [] if args.no_connectors else list(CONNECTORS)
    stages = "bus" if args.bus_stages else "co-located"
    if args.json:
        emit_json(
            {
                "ready": True,
                "nats_url": stack.url,
                "state_dir": str(stack.state.root),
                "nats_server_pid": server_pid,
                "connectors": connectors,
                "stages": stages,
            }
        )
    else:
        server = f"nats-server pid {server_pid}" if server_pid is not None else "external NATS"
        say(
            f"ready: {stack.url} ({server}), state {stack.state.root}, "
            f"stages {stages}, connectors {', '.join(connectors) or 'none'}"
        )
    # stdout is block-buffered in a pipe: whoever waits for this line needs it now.
    sys.stdout.flush()


async def _serve(stack: Stack, stop: asyncio.Event) -> str | None:
    """Wait for a stop signal; return why ``up`` must fail, if it must."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), WATCH_SECONDS)
        if stack.server is not None and not stack.server.running:
            return "the embedded nats-server exited; the gate stopped"
        if stop.is_set():
            return None


async def _shutdown(stack: Stack) -> str | None:
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
        stack = await _start(state, args)
        try:
            _write_url(state, stack.url)
            log.info("up_ready", nats=stack.url, state_dir=str(state.root))
            _announce(stack, args)
            reason = await _serve(stack, stop)
        finally:
            nats_url_path(state.root).unlink(missing_ok=True)
            stopped = await _shutdown(stack)
        reason = reason or stopped
    finally:
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)
    log.info("up_stopped", reason=reason)
    if reason is not None:
        fail(reason)


def run_up(args: argparse.Namespace) -> int:
    json_logs: bool = args.json_logs if args.json_logs is not None else not sys.stderr.isatty()
    configure_logging(json=json_logs, level=args.log_level)
    state = StateDir(args.state_dir or default_state_dir())
    try:
        state.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create state dir {state.root}: {exc.strerror}")
    with _exclusive(state):
        if not state.registry.exists():
            provision_demo(state)
            log.info("state_provisioned", state_dir=str(state.root))
        asyncio.run(_up(state, args))
    return 0
