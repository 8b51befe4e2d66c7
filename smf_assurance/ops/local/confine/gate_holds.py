"""The gate's legal-hold list, as the launcher asks it (``smf_assurance.subjects.holds``).

The launcher asks ``smf.holds`` with the runtime's bus credential (it holds the seed;
the sandbox never sees it) before it builds the sandbox, and every second while the
sandbox runs, on one connection of its own. Polling rather than a change notification:
a runtime's account imports no stream from the gate for this, and a poll proves at
each second that the gate still answers, which a notification that never comes cannot
(a gate that stopped answering looks the same as a list that did not change).

Fail closed: no answer within :data:`ASK_TIMEOUT_S`, an answer that does not decode, or
the gate's own refusal (``holds_unavailable``, ``holds_invalid``) is a
:class:`GateHoldsError`: before the start the runtime does not start; during the run,
no good answer for :data:`UNREACHABLE_AFTER_S` ends it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from typing import Final

import msgspec
import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.ops.local.cluster import nats_servers
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import inbox_prefix
from smf_assurance.subjects.holds import HoldPathError, HoldsAnswer, HoldsRequest, hold_path

ASK_TIMEOUT_S: Final = 2.0
CONNECT_TIMEOUT_S: Final = 2.0
UNREACHABLE_AFTER_S: Final = 5.0
"""How long the gate may fail to answer during a run before the run ends: one slow
answer on a loaded machine is not an outage; five seconds of none is."""


class GateHoldsError(Exception):
    """The gate's hold list could not be had: one line, why."""


class GateHolds:
    """One launcher's questions to the gate, on a connection as the runtime."""

    def __init__(self, nats_url: str, principal: str, seed: bytes, runtime_id: str) -> None:
        self._url = nats_url
        self._principal = principal
        self._seed = seed
        self.runtime_id = runtime_id
        self._nc: Client | None = None

    async def _connection(self) -> Client:
        if self._nc is not None and self._nc.is_connected:
            return self._nc
        await self.close()
        try:
            self._nc = await nats.connect(
                nats_servers(self._url),
                name=f"smf-launcher-holds-{self.runtime_id}",
                allow_reconnect=False,
                max_reconnect_attempts=1,
                connect_timeout=CONNECT_TIMEOUT_S,
                error_cb=_quiet,
                nkeys_seed_str=self._seed.decode("ascii"),
                inbox_prefix=inbox_prefix(self._principal),
            )
        except (OSError, NatsError, ValueError) as exc:
            raise GateHoldsError(
                f"cannot reach the bus at {self._url}: {type(exc).__name__}"
            ) from exc
        return self._nc

    async def ask(self) -> tuple[str, ...]:
        """The gate's list now, each path checked again here (the sandbox mounts them)."""
        nc = await self._connection()
        try:
            reply = await nc.request(
                names.HOLDS, msgspec.json.encode(HoldsRequest()), ASK_TIMEOUT_S
            )
            answer = msgspec.json.decode(reply.data, type=HoldsAnswer)
        except (NatsError, TimeoutError, OSError) as exc:
            raise GateHoldsError(
                f"no gate answered {names.HOLDS} within {ASK_TIMEOUT_S:g} s ({type(exc).__name__})"
            ) from exc
        except msgspec.DecodeError as exc:
            raise GateHoldsError(f"the gate's answer on {names.HOLDS} is malformed") from exc
        if not answer.ok:
            raise GateHoldsError(f"the gate refused its hold list: {answer.reason}")
        try:
            return tuple(hold_path(p) for p in answer.paths)
        except HoldPathError as exc:
            raise GateHoldsError(f"the gate's hold list names a bad path: {exc}") from exc

    async def close(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(NatsError, OSError):
                await self._nc.close()
            self._nc = None


async def _ask_once(holds: GateHolds) -> tuple[str, ...]:
    try:
        return await holds.ask()
    finally:
        await holds.close()


def ask_before_start(
    nats_url: str, principal: str, seed: bytes, runtime_id: str
) -> tuple[str, ...]:
    """One question, from synchronous code (``prepare``), whether or not an event loop
    runs in this thread: on a thread of its own."""
    holds = GateHolds(nats_url, principal, seed, runtime_id)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _ask_once(holds)).result()


async def _quiet(_exc: Exception) -> None:
    """nats-py logs a traceback per failed attempt; the launcher says one line."""
