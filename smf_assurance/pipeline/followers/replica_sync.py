"""What gate replicas tell each other (issue 16, on a cluster, issue 11).

Attestations, the tool-call ids of decided proposals, and stops live in each
gate's memory (``smf_assurance.pipeline.desks.attestation``,
``smf_assurance.pipeline.desks.tool_calls``).
On a cluster, a runtime's attestation reaches one replica (a queue group) and
its proposals and the model gateway's questions reach any replica. Without
this module, a runtime attested at one replica is refused at another
(``runtime_attestation_missing``). A tool call decided at one replica is also
reported ungated at another, which stops an honest runtime. So every replica
publishes what it learns on ``smf.gate.sync.<kind>``, and every other
replica applies it:

- ``attest``: the runtime's signed attestation, as received. Each replica
  verifies and judges it itself (``AttestationDesk.adopt``); nothing is taken
  on the word of another replica.
- ``confine``: a launcher's signed confinement attestation, as received; verified
  again by each replica (``ConfinementDesk.adopt``).
- ``call``: a ``(runtime_id, tool_call_id)`` the publisher noted from a
  verified proposal. It is published before that proposal's verdict is
  answered, so it reaches every replica long before the tool's result can
  come back.
- ``stop``: a runtime stopped for an ungated tool result, with its stop record
  (ids only), published once the stop is stored, so it is in force at every
  replica at once.
- ``clear``: an operator's clear, published once it is recorded and done. A
  replica that hears it reads the shared store (``smf_assurance.pipeline.stores.tool_calls_kv``)
  and lifts its own copy only when no stop of that runtime stands there
  (``RuntimeStops.adopt_clear``): a stop made meanwhile elsewhere is never lifted
  by a clear of an older one.

Only gate principals may publish or read these subjects
(``smf_assurance.subjects.bus_access``). Each message also carries the gate's stage MAC
(``smf_assurance.pipeline.service.StageAuth``), so a message without it is ignored, as are
a replica's own messages. What this does not give: an order between the kinds,
or a message to a replica that was not running when it was sent. A replica
that (re)starts loads every stop and note from the shared KV store before it
serves (``smf_assurance.pipeline.assembly``), so it misses only what was noted in memory but
not stored (a failed write, which fails closed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

import msgspec
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from smf_assurance.pipeline.desks.attestation import AttestationDesk
from smf_assurance.pipeline.desks.confinement import ConfinementDesk
from smf_assurance.pipeline.desks.runtime_stops import RuntimeStops
from smf_assurance.pipeline.desks.tool_calls import DecidedCalls
from smf_assurance.pipeline.service import STAGE_MAC_HEADER, StageAuth
from smf_assurance.pipeline.stores.tool_calls import Stop
from smf_assurance.subjects import names

log = structlog.get_logger(__name__)

ORIGIN_HEADER: Final = "Smf-Origin"
Kind = Literal["attest", "confine", "call", "stop", "clear"]


class _RuntimeCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    runtime_id: str
    tool_call_id: str = ""


@dataclass
class ReplicaSync:
    nc: Client
    auth: StageAuth
    origin: str
    """This gate's name: its own messages come back to it and are skipped."""
    attestation: AttestationDesk
    calls: DecidedCalls
    stops: RuntimeStops
    confinement: ConfinementDesk | None = None
    _sub: Subscription | None = field(default=None, init=False)

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(f"{names.GATE_SYNC_PREFIX}.>", cb=self._on_message)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    # -- telling the others ------------------------------------------------------

    async def _publish(self, kind: Kind, data: bytes) -> None:
        subject = f"{names.GATE_SYNC_PREFIX}.{kind}"
        headers = {
            ORIGIN_HEADER: self.origin,
            STAGE_MAC_HEADER: self.auth.request_tag(subject, data),
        }
        await self.nc.publish(subject, data, headers=headers)

    async def attested(self, signed: bytes) -> None:
        await self._publish("attest", signed)

    async def confined(self, signed: bytes) -> None:
        await self._publish("confine", signed)

    async def noted(self, runtime_id: str, tool_call_id: str) -> None:
        await self._publish("call", msgspec.json.encode(_RuntimeCall(runtime_id, tool_call_id)))

    async def stopped(self, stop: Stop) -> None:
        await self._publish("stop", msgspec.json.encode(stop))

    async def cleared(self, runtime_id: str) -> None:
        await self._publish("clear", msgspec.json.encode(_RuntimeCall(runtime_id)))

    # -- hearing them --------------------------------------------------------------

    async def _on_message(self, msg: Msg) -> None:
        headers = msg.headers or {}
        if headers.get(ORIGIN_HEADER) == self.origin:
            return
        if not StageAuth.matches(
            self.auth.request_tag(msg.subject, msg.data), headers.get(STAGE_MAC_HEADER)
        ):
            log.warning("replica_sync_unauthenticated", subject=msg.subject)
            return
        kind = msg.subject.rpartition(".")[2]
        try:
            if kind == "attest":
                await self.attestation.adopt(msg.data)
                return
            if kind == "confine":
                if self.confinement is not None:
                    await self.confinement.adopt(msg.data)
                return
            if kind == "stop":
                self.stops.adopt_stop(msgspec.json.decode(msg.data, type=Stop))
                return
            said = msgspec.json.decode(msg.data, type=_RuntimeCall)
        except Exception as exc:  # noqa: BLE001 - a bad message is dropped, logged by type
            log.warning("replica_sync_refused", kind=kind, error=type(exc).__name__)
            return
        if kind == "call" and said.tool_call_id:
            self.calls.add(said.runtime_id, said.tool_call_id)
        elif kind == "clear":
            await self.stops.adopt_clear(said.runtime_id)
