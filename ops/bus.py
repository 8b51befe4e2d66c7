"""Finding and reaching the bus from the command line.

``up`` writes ``<state>/nats.url`` once its gate serves and removes it when
it stops; every other command takes ``--nats`` or reads that file
(``bus_url``), and connects once with a deadline (``connect_bus``): an
unreachable server is a one-line refusal, never a hang or a retry loop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError

from ops.cluster import nats_servers
from ops.output import fail, first_line
from ops.state import default_state_dir

NATS_URL_FILE: Final = "nats.url"
"""Written by ``up`` once the gate serves, removed when it stops."""
CONNECT_TIMEOUT_SECONDS: Final = 2.0


def nats_url_path(root: Path) -> Path:
    return root / NATS_URL_FILE


def write_url(root: Path, url: str) -> None:
    """Atomic: a reader sees the whole URL or no file, never half a line."""
    target = nats_url_path(root)
    partial = target.with_name(f".{NATS_URL_FILE}.{os.getpid()}")
    partial.write_text(url + "\n", encoding="utf-8")
    partial.replace(target)


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
