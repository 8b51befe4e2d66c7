"""Runtime stops (issue 16, item 3): in force at once, kept across a restart, lifted
only by a clear that is in the ledger.

A runtime whose model request carried a tool result no proposal decided is stopped
(``smf_assurance.pipeline.desks.tool_calls``): the gateway's admission and its proposals are
refused (``AttestationDesk.stop``) until an operator clears it. Invariants this
module keeps:

- **In force at once, durable before it is told.** :meth:`RuntimeStops.stop` stops
  the runtime in memory before its first await, then writes the stop to the store
  (``smf_assurance.pipeline.stores.tool_calls``) and returns only when the write is done. A write
  that fails leaves the runtime stopped in memory (fail closed) and is reported
  (``runtime_stop_store_unavailable``); only a restart then forgets that one stop.
- **Loaded before serving.** :meth:`RuntimeStops.load` puts every stored stop in
  force; the composition root calls it before the gate answers ``smf.propose``,
  ``smf.gateway.admit`` or ``smf.gateway.calls``. A stop that does not decode is
  refused by the store, so the gate does not start on it (never read as "not
  stopped").
- **A clear is evidence, or nothing.** :meth:`RuntimeStops.clear` writes one ledger
  entry (a transition of the stop's own refusal: its ids, the tenant pseudonym,
  ``runtime_stop_cleared``; never anything raw) and removes the stored stop; on one
  machine both commit in ONE transaction (``clear_beside``). Only then is the stop
  lifted in memory. A clear whose entry cannot be written lifts nothing
  (``evidence_store_unavailable``); nor does one whose stop cannot be read or
  removed (``runtime_stop_store_unavailable``; the failed removal is recorded too,
  ``runtime_stop_clear_failed``, best effort).
- **A newer stop survives a clear.** Stops' writes and clears run one at a time
  (one lock); a clear removes only the stop it read and lifts the runtime only if
  no stop of it was made meanwhile (``runtime_stopped_again``), here or, on a
  cluster, at another replica (the KV clear is conditional on the revision).

On a cluster (``smf_assurance.pipeline.followers.replica_sync``) a stop is told to the other
replicas after it is stored, and a clear after it is done; a replica that hears of
a clear lifts its own copy only when the store holds no stop of that runtime.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import structlog

from smf_assurance.pipeline.desks.attestation import AttestationDesk
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.pipeline.stores.ledger import Beside, EvidenceError
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.pipeline.stores.tool_calls import Stop, StopReason, ToolCallStore
from smf_assurance.subjects.model_gateway import GatewayCleared

log = structlog.get_logger(__name__)

CLEARED: Final = "runtime_stop_cleared"
CLEAR_FAILED: Final = "runtime_stop_clear_failed"
STORE_UNAVAILABLE: Final = "runtime_stop_store_unavailable"
STOPPED_AGAIN: Final = "runtime_stopped_again"
EVIDENCE_UNAVAILABLE: Final = "evidence_store_unavailable"


@dataclass
class RuntimeStops:
    """The stops of one gate: in memory (the attestation desk refuses by them) and in
    the store, kept in step."""

    store: ToolCallStore
    attestation: AttestationDesk
    evidence: EvidenceWriter
    release_id: Callable[[], str | None]
    clear_beside: Callable[[Stop], Beside] | None = None
    """Where the store lives in the ledger file (one machine): the removal as a write
    in the transaction of the clear's evidence entry. ``None`` (KV): entry, then
    removal."""
    share_stop: Callable[[Stop], Awaitable[None]] | None = None
    share_clear: Callable[[str], Awaitable[None]] | None = None
    """On a cluster: tell the other replicas (``smf_assurance.pipeline.followers.replica_sync``)."""
    _standing: dict[str, Stop] = field(default_factory=dict, init=False)
    _writing: Counter[str] = field(default_factory=Counter, init=False)
    """Runtimes with a stop in force here whose write has not finished yet."""
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    def _hold(self, stop: Stop) -> None:
        self._standing[stop.runtime_id] = stop
        self.attestation.stop(stop.runtime_id, stop.reason)

    def _lift(self, runtime_id: str) -> None:
        if self._standing.pop(runtime_id, None) is not None:
            self.attestation.clear(runtime_id)

    def standing(self, runtime_id: str) -> Stop | None:
        return self._standing.get(runtime_id)

    async def load(self) -> int:
        """Put every stored stop in force (before the gate serves); raises
        :class:`StoreUnavailable` when the store cannot list them all."""
        async with self._lock:  # after a clear another replica told meanwhile, not before
            stops = await self.store.stops()
            for stop in stops.values():
                self._hold(stop)
        return len(stops)

    async def stop(self, stop: Stop) -> bool:
        """Stop the runtime now, then store it; whether the store has it."""
        runtime_id = stop.runtime_id
        self._hold(stop)
        self._writing[runtime_id] += 1
        try:
            async with self._lock:
                stored = await self._store(stop)
        finally:
            self._writing[runtime_id] -= 1
            if not self._writing[runtime_id]:
                del self._writing[runtime_id]
        if self.share_stop is not None:
            await _tell(self.share_stop(stop), "stop")
        return stored

    async def stop_recorded(
        self,
        runtime_id: str,
        tenant_id: str,
        subject: dict[str, str],
        reasons: tuple[str, ...],
        reason: StopReason,
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Stop the runtime for ``reason`` and record it: one refusal entry naming
        ``subject`` (ids only) with ``reasons``; the entry's reason codes (and
        ``runtime_stop_store_unavailable`` when the stop was not stored) and its
        evidence. Stopped and stored before the evidence: a crash between them leaves
        a stop without its entry (fails closed), never an entry without its stop."""
        entry = self.evidence.for_refusal(
            subject, self.evidence.tenant_ref(tenant_id), self.release_id(), reasons
        )
        stop = Stop(
            runtime_id=runtime_id,
            reason=reason,
            operation_hash=entry.operation_hash,
            decision_id=entry.decision_id,
            tenant_ref=entry.tenant_ref,
            stopped_at=entry.at,
        )
        stored = await self.stop(stop)
        recorded_reasons, recorded = await self.evidence.record_refusal(entry)
        if not stored:
            recorded_reasons = (*recorded_reasons, STORE_UNAVAILABLE)
        log.warning("runtime_stopped", runtime_id=runtime_id, reason=reason)
        return recorded_reasons, recorded

    async def _store(self, stop: Stop) -> bool:
        try:
            await self.store.stop(stop)
        except StoreUnavailable as exc:
            # in force in memory all the same: only a restart forgets it
            log.error(
                "runtime_stop_not_stored", runtime_id=stop.runtime_id, error=type(exc).__name__
            )
            return False
        return True

    async def clear(self, runtime_id: str) -> GatewayCleared:
        """An operator's clear: recorded and removed, then lifted; or nothing changes."""
        async with self._lock:
            answer = await self._clear(runtime_id)
        if answer.was_stopped and not answer.stopped and self.share_clear is not None:
            await _tell(self.share_clear(runtime_id), "clear")
        log.warning(
            "runtime_stop_cleared" if not answer.reason_codes else "runtime_stop_not_cleared",
            runtime_id=runtime_id,
            was_stopped=answer.was_stopped,
            stopped=answer.stopped,
            reasons=list(answer.reason_codes),
        )
        return answer

    async def _clear(self, runtime_id: str) -> GatewayCleared:
        in_memory = self._standing.get(runtime_id)
        try:
            stored = await self.store.stop_of(runtime_id)
        except StoreUnavailable:
            # unreadable (an outage, or a stop that does not decode): nothing lifted
            return _answer(runtime_id, in_memory is not None, (STORE_UNAVAILABLE,))
        target = stored if stored is not None else in_memory
        if target is None:
            return _answer(runtime_id, False)
        entry = self.evidence.for_stop(target, self.release_id(), (CLEARED,))
        removed: bool | StoreUnavailable
        try:
            if self.clear_beside is not None:
                receipt, removed = await self.evidence.append_beside(
                    entry, self.clear_beside(target)
                )
            else:
                receipt = await self.evidence.append(entry)
                removed = await self._remove(target)
        except EvidenceError:
            log.error("evidence_unavailable_for_clear", runtime_id=runtime_id)
            return _answer(runtime_id, True, (EVIDENCE_UNAVAILABLE,))
        except StoreUnavailable:
            return _answer(runtime_id, True, (STORE_UNAVAILABLE,))
        recorded = (receipt.entry_hash,)
        if isinstance(removed, StoreUnavailable):
            await self._record_failed(target)
            return _answer(runtime_id, True, (CLEAR_FAILED, STORE_UNAVAILABLE), recorded)
        current = self._standing.get(runtime_id)
        if not removed or runtime_id in self._writing or current not in (None, target):
            return _answer(runtime_id, True, (STOPPED_AGAIN,), recorded)
        self._lift(runtime_id)
        return _answer(runtime_id, True, (), recorded)

    async def _remove(self, stop: Stop) -> bool | StoreUnavailable:
        try:
            return await self.store.clear(stop)
        except StoreUnavailable as exc:
            return exc

    async def _record_failed(self, stop: Stop) -> None:
        """The clear's entry is written but the stop still stands: say so, best effort."""
        log.error("runtime_stop_clear_not_stored", runtime_id=stop.runtime_id)
        failed = self.evidence.for_stop(stop, self.release_id(), (CLEAR_FAILED, STORE_UNAVAILABLE))
        try:
            await self.evidence.append(failed)
        except EvidenceError:
            log.error("evidence_unavailable_for_clear", runtime_id=stop.runtime_id)

    # -- what other replicas tell (``smf_assurance.pipeline.followers.replica_sync``)
    # -------------------

    def adopt_stop(self, stop: Stop) -> None:
        """A stop another replica made and stored: in force here too."""
        self._hold(stop)

    async def adopt_clear(self, runtime_id: str) -> None:
        """Another replica cleared ``runtime_id``: lifted here only when the store holds
        no stop of it and none is being written here; a stop it holds is put in force
        instead. An unreadable store lifts nothing (fail closed)."""
        async with self._lock:
            try:
                stored = await self.store.stop_of(runtime_id)
            except StoreUnavailable as exc:
                log.error("runtime_stop_clear_not_adopted", error=type(exc).__name__)
                return
            if stored is not None:
                self._hold(stored)
            elif runtime_id not in self._writing:
                self._lift(runtime_id)


async def _tell(telling: Awaitable[None], kind: str) -> None:
    """Tell the other replicas, or log why not: the stop or clear stands here and in the
    shared store either way. A running replica that did not hear a stop serves the
    runtime until it restarts and reads the store (the one gap this leaves open);
    one that did not hear a clear keeps refusing it (fails closed)."""
    try:
        await telling
    except Exception as exc:  # noqa: BLE001 - a failed publish is logged by type, never fatal
        log.error("replica_sync_not_sent", kind=kind, error=type(exc).__name__)


def _answer(
    runtime_id: str,
    was_stopped: bool,
    reasons: tuple[str, ...] = (),
    evidence: tuple[str, ...] = (),
) -> GatewayCleared:
    """The operator's answer: still stopped whenever it was and the clear did not end it."""
    return GatewayCleared(
        schema="smf.gateway-cleared/1",
        runtime_id=runtime_id,
        was_stopped=was_stopped,
        stopped=was_stopped and bool(reasons),
        reason_codes=reasons,
        evidence=evidence,
    )
