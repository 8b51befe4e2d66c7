"""The launcher's confinement attestation: it tells the gate that its runtime runs confined.

``runtime run`` holds a key of its own, the runtime's launcher's (registry role
``launcher``, principal ``profile.launcher_principal``, written by ``runtime add``), and a
bus credential that may publish ``smf.confinement`` and nothing else. Neither is in the
sandbox's view. While the sandbox runs, :class:`Attester` says so
(``smf_assurance.subjects.confinement``):

- once the sandbox is built (the relay said ready), then every
  :data:`REATTEST_EVERY_MS`, with the profile digest of the plan it started
  (``runtime run --plan`` prints the same digest);
- each time the runtime's adapter has its start-up attestation signed through the
  launcher's signer, naming a new process: the launcher's attestation naming it is
  answered by the gate (or the wait ends, after :data:`ACK_TIMEOUT_S`) BEFORE the
  adapter gets its signature back, so the gate holds the process as confined before
  the process can attest or propose;
- ``ended`` when the sandbox has ended.

Nothing here can start or stop the runtime: an attestation that cannot be sent is
logged (reason codes only) and the runtime runs on, confined; the gate then holds it
as not confined, which is the side that fails closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from collections import deque
from collections.abc import Callable
from typing import Final

import msgspec
import nats
import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.ops.local.cluster import nats_servers
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import BusCredential, connect_options
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.confinement import (
    CONFINEMENT_SCHEMA,
    MAX_INSTANCES,
    REATTEST_EVERY_MS,
    ConfinementAck,
    ConfinementAttestation,
    ConfinementState,
    sign_confinement,
)
from smf_assurance.subjects.keys import SigningKey

log = structlog.get_logger(__name__)

ACK_TIMEOUT_S: Final = 2.0
CONNECT_TIMEOUT_S: Final = 2.0
INSTANCE_PATTERN: Final = re.compile(r"\Ai-[0-9a-f]{32}\Z")
TRANSPORT: Final = frozenset({"bus_unreachable", "no_gate_answer", "malformed_ack"})


class Attester:
    """One sandbox's confinement attestations, sent on the launcher's own connection."""

    def __init__(
        self,
        key: SigningKey,
        credential: BusCredential,
        nats_url: str,
        runtime_id: str,
        profile_digest: str,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._key = key
        self._credential = credential
        self._url = nats_url
        self.runtime_id = runtime_id
        self.profile_digest = profile_digest
        self._clock = clock
        self.instances: deque[str] = deque(maxlen=MAX_INSTANCES)
        self._nc: Client | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.accepted = 0
        self.refused: dict[str, int] = {}
        self._ended = False

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._every())

    async def launched(self, instance_id: str) -> None:
        """The signer is about to sign an attestation naming ``instance_id``: say it runs
        here, and wait (bounded) for the gate's answer. Not an instance id: ignored."""
        if not INSTANCE_PATTERN.fullmatch(instance_id):
            return
        if instance_id in self.instances:
            return
        self.instances.append(instance_id)
        await self.attest("running")

    async def end(self) -> None:
        """The sandbox has ended: say so, once, and close the connection."""
        if self._ended:
            return
        self._ended = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.attest("ended")
        if self._nc is not None:
            with contextlib.suppress(NatsError, OSError):
                await self._nc.close()
            self._nc = None

    async def _every(self) -> None:
        while True:
            await self.attest("running")
            await asyncio.sleep(REATTEST_EVERY_MS / 1000)

    async def _connection(self) -> Client | None:
        if self._nc is not None and self._nc.is_connected:
            return self._nc
        if self._nc is not None:
            with contextlib.suppress(NatsError, OSError):
                await self._nc.close()
            self._nc = None
        try:
            self._nc = await nats.connect(
                nats_servers(self._url),
                name=f"smf-launcher-{self.runtime_id}",
                allow_reconnect=False,
                max_reconnect_attempts=1,
                connect_timeout=CONNECT_TIMEOUT_S,
                error_cb=_quiet,
                **connect_options(self._credential),
            )
        except (OSError, NatsError, ValueError) as exc:
            self._refuse("bus_unreachable", type(exc).__name__)
            return None
        return self._nc

    async def attest(self, state: ConfinementState) -> ConfinementAck | None:
        """Sign and send one attestation; the gate's ack, or None (logged)."""
        async with self._lock:
            attestation = ConfinementAttestation(
                schema=CONFINEMENT_SCHEMA,
                attestation_id="ca-" + secrets.token_hex(16),
                runtime_id=self.runtime_id,
                profile_digest=self.profile_digest,
                instances=tuple(self.instances),
                state=state,
                issued_at_ms=self._clock(),
            )
            nc = await self._connection()
            if nc is None:
                return None
            try:
                reply = await nc.request(
                    names.CONFINEMENT, sign_confinement(attestation, self._key), ACK_TIMEOUT_S
                )
                ack = msgspec.json.decode(reply.data, type=ConfinementAck)
            except (NatsError, TimeoutError, OSError) as exc:
                self._refuse("no_gate_answer", type(exc).__name__)
                return None
            except msgspec.DecodeError:
                self._refuse("malformed_ack", "")
                return None
            if ack.accepted:
                self.accepted += 1
            else:
                for reason in ack.reason_codes:
                    self._refuse(reason, "")
            return ack

    def _refuse(self, reason: str, error: str) -> None:
        """Counted and logged: a gate's refusal as a warning (the launcher's key or the
        registry is wrong: the operator must know), a bus or gate that does not answer at
        info (``doctor`` shows the runtime "not confined" either way)."""
        self.refused[reason] = self.refused.get(reason, 0) + 1
        report = log.info if reason in TRANSPORT else log.warning
        report("confinement_not_attested", runtime_id=self.runtime_id, reason=reason, error=error)


async def _quiet(_exc: Exception) -> None:
    """nats-py logs a traceback per failed attempt; the launcher logs one reason code."""
