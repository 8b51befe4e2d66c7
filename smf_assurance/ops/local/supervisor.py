"""How ``up`` keeps what it runs: one process per state directory, watched, stopped cleanly.

- One ``up`` per state directory (``exclusive``): the stores are
  single-writer, so a second ``up`` on the same directory fails at once
  instead of corrupting the first one's work.
- Watched (``serve_until_stopped``): if the embedded nats-server dies under
  the gate, or the connectors lose NATS for good, ``up`` stops and exits
  non-zero rather than serving nothing.
- Stopped by SIGINT or SIGTERM (``stop_on_signals`` in ``ops/local/signals.py``, for
  every long-running command: ``up``, ``console``, ``notify``, the model gateway, the
  bus follower).
- Stopped cleanly and in bounded time (``shutdown``): the ledger tail is
  signed as a checkpoint while the bus is still up, then the stack stops;
  whatever hangs, the embedded server is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Iterator
from typing import Final

import structlog
from nats.errors import Error as NatsError

from smf_assurance.ops.cli.output import fail, first_line
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import Connectors, Stack
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.ledger import EvidenceError
from smf_assurance.subjects.clock import wall_clock_ms

log = structlog.get_logger(__name__)


LOCK_FILE: Final = "up.lock"
WATCH_SECONDS: Final = 0.5
"""How often ``up`` checks that what it runs can still serve."""
STOP_TIMEOUT_SECONDS: Final = 20.0
"""Stack.stop() waits up to 5 s for connectors to finish an order in hand."""

Running = Stack | Connectors
"""What ``up`` runs: the gate (with or without connectors), or connectors only."""


@contextlib.contextmanager
def exclusive(state: StateDir) -> Iterator[None]:
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


def embedded(running: Running) -> EmbeddedNatsServer | None:
    return running.server if isinstance(running, Stack) else None


def broken(running: Running) -> str | None:
    """Why what ``up`` runs can no longer serve, if it cannot."""
    server = embedded(running)
    if server is not None and not server.running:
        return "the embedded nats-server exited; the gate stopped"
    if isinstance(running, Connectors) and not running.connected:
        # nats-py gives up reconnecting after a while; serving nothing silently is worse
        # than stopping, which a supervisor sees and restarts.
        return "the connectors lost NATS for good; they stopped"
    return None


async def serve_until_stopped(running: Running, stop: asyncio.Event) -> str | None:
    """Wait for a stop signal; return why ``up`` must fail, if it must."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), WATCH_SECONDS)
        reason = broken(running)
        if reason is not None:
            return reason
        if stop.is_set():
            return None


async def shutdown(running: Running) -> str | None:
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
            await stack.gate.ledger.checkpoint(wall_clock_ms())
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
