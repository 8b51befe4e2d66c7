"""What a ``doctor`` check is, and what every check is asked against.

``smf_assurance.ops.doctor.run`` runs the checks; this module holds what they share, so the checks
of the gates' own answers (``smf_assurance.ops.doctor.gates``) and the others stay apart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.ops.doctor.kinds import (
    DEFAULT_CHECKPOINT_AGE_S,
    DEFAULT_LEASE_WARN_HOURS,
    Kind,
    Status,
)
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.registry import KeyRegistry
from smf_assurance.subjects.release import TrustRoot

CONNECT_TIMEOUT_S: Final = 2.0
ANSWER_WINDOW_S: Final = 1.0
"""How long each question to every gate gathers answers."""
BOUND_SAMPLES: Final = 6
BOUND_INTERVAL_S: Final = 0.2
"""A connector fetches with a short timeout and asks again at once: sampled over a
second, a running one has a pull request waiting in at least one sample."""
HOUR_MS: Final = 3_600_000


@dataclass(frozen=True, slots=True)
class Check:
    """One row: what was checked, what was found, and what to do about it.

    ``age_ms`` is how old what was found is (an attestation, a checkpoint, the wait
    of unanchored ledger entries); ``remaining_ms`` a release's lease left."""

    kind: Kind
    subject: str | None
    status: Status
    detail: str
    fix: str | None = None
    age_ms: int | None = None
    remaining_ms: int | None = None


@dataclass(frozen=True)
class Settings:
    """What doctor checks, and against what."""

    url: str
    credential: BusCredential | None
    registry: KeyRegistry
    """The roster: the gate keys answers must be signed by, the runtimes and
    connectors to expect."""
    trust_root: TrustRoot | None
    state: StateDir | None
    console: str | None
    clock: Callable[[], int]
    directory: Path | None = None
    """The tenant directory the console reads; ``None``: none is kept."""
    lease_warn_ms: int = DEFAULT_LEASE_WARN_HOURS * HOUR_MS
    checkpoint_age_ms: int = DEFAULT_CHECKPOINT_AGE_S * 1000
    window: float = ANSWER_WINDOW_S


def say_age(ms: int) -> str:
    """A duration for people: seconds, minutes, hours or days, whichever reads best."""
    seconds = max(0, ms) // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172_800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86_400} d"


async def gather(nc: Client, subject: str, payload: bytes, window: float) -> list[bytes]:
    """Every answer to one request within ``window`` seconds."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    answers: list[bytes] = []
    loop = asyncio.get_running_loop()
    try:
        await nc.publish(subject, payload, reply=inbox)
        deadline = loop.time() + window
        while (left := deadline - loop.time()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except TimeoutError:
                break
            answers.append(msg.data)
    finally:
        with contextlib.suppress(NatsError):
            await sub.unsubscribe()
    return answers
