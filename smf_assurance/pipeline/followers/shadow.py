"""The shadow desk: every decision evaluated again under the shadow release, after its
verdict, and each disagreement recorded (issue 25).

docs/RELEASES.md, "Shadow releases". The gate hands each decision it made (a
proposal's, an output close's) to :meth:`ShadowDesk.observe` once its verdict is
settled; the desk evaluates the same normalized envelope under the shadow's
policy set (``smf_assurance.core.shadow``, pure) and writes one ledger entry of kind
``shadow`` for each disagreement (identities and closed words only:
``smf_assurance.pipeline.stores.evidence.EvidenceWriter.for_shadow``).

Invariants:

- The hot path never waits on the shadow. :meth:`ShadowDesk.observe` is
  synchronous, O(1) and never raises: it puts the decision in a bounded queue and
  returns. The desk's worker takes it only after yielding once, so the verdict
  that was just answered is handed to the connection's writer first; the
  shadow's entries are written by a flusher of their own, never in a verdict's
  transaction.
- Bounded, so it cannot pile up. Under overload (the queue of decisions, or of
  entries waiting for the ledger, is full) a decision or an entry is dropped and
  counted (``dropped``), never waited for. A ledger outage loses the entries of
  that write (counted ``unrecorded``, logged), never retried and never turned into
  a denial: the shadow decides nothing.
- Entries wait up to :attr:`ShadowDesk.linger_s` and are written together, so
  the shadow adds one group commit per window, not one per decision, to the
  ledger the verdicts wait for. Each entry's time is when its decision was
  judged. A crash loses the entries of the window (documented, counted nowhere).
- A shadow's failure is the shadow's: an evaluation that raises is counted
  (``failed``) and logged by type; no decision, verdict or order changes.
- A decision made under another release than the one the shadow runs beside
  (a switch in between) is not compared (``skipped``), nor one made while the
  shadow is not in force.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final, Protocol

import structlog

from smf_assurance.core.decision import Decision
from smf_assurance.core.shadow import difference, shadow_decision
from smf_assurance.pipeline.followers.shadow_releases import ShadowRelease
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.pipeline.stores.ledger import EvidenceError
from smf_assurance.pipeline.stores.ledger_schema import EvidenceEntry
from smf_assurance.subjects.envelope import OperationEnvelope
from smf_assurance.subjects.release import ShadowCounts

log = structlog.get_logger(__name__)

MAX_QUEUED: Final = 4096
"""Decisions waiting for the shadow at most; more are dropped (and counted)."""
MAX_PENDING: Final = 4096
"""Disagreements waiting for the ledger at most; more are dropped (and counted)."""
LINGER_S: Final = 0.2
"""How long disagreements gather before they are written together."""


class ShadowSource(Protocol):
    """Where the desk reads the shadow
    (``smf_assurance.pipeline.followers.shadow_releases.ShadowReleases``)."""

    @property
    def active(self) -> ShadowRelease | None: ...

    def current(self) -> ShadowRelease | None: ...


@dataclass(frozen=True, slots=True)
class _Observed:
    envelope: OperationEnvelope
    decision: Decision
    tenant_id: str
    confined: bool = False


@dataclass(slots=True)
class _Counters:
    manifest_hash: str | None = None
    evaluated: int = 0
    disagreed: int = 0
    recorded: int = 0
    unrecorded: int = 0
    dropped: int = 0
    skipped: int = 0
    failed: int = 0

    def counts(self) -> ShadowCounts:
        return ShadowCounts(
            evaluated=self.evaluated,
            disagreed=self.disagreed,
            recorded=self.recorded,
            unrecorded=self.unrecorded,
            dropped=self.dropped,
            skipped=self.skipped,
            failed=self.failed,
        )


class ShadowDesk:
    """Evaluates decisions under the shadow after their verdicts; records disagreements."""

    def __init__(
        self,
        source: ShadowSource,
        evidence: EvidenceWriter,
        *,
        max_queued: int = MAX_QUEUED,
        max_pending: int = MAX_PENDING,
        linger_s: float = LINGER_S,
    ) -> None:
        if max_queued < 1 or max_pending < 1 or linger_s < 0:
            raise ValueError("the shadow's bounds must be positive and its linger not negative")
        self._source = source
        self._evidence = evidence
        self._queue: asyncio.Queue[_Observed] = asyncio.Queue(max_queued)
        self._pending: list[tuple[_Counters, EvidenceEntry]] = []
        self._max_pending = max_pending
        self.linger_s = linger_s
        self._counters = _Counters()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._writing = asyncio.Lock()

    # -- the hot path's one call ---------------------------------------------------------

    def observe(
        self,
        envelope: OperationEnvelope,
        decision: Decision,
        tenant_id: str,
        confined: bool = False,
    ) -> None:
        """Hand one decision to the shadow, after its verdict; never waits, never raises.
        ``confined``: as the enforced decision was made (the runtime's confinement)."""
        shadow = self._source.active
        if shadow is None:
            return
        try:
            self._queue.put_nowait(_Observed(envelope, decision, tenant_id, confined))
        except asyncio.QueueFull:
            self._count(shadow).dropped += 1

    # -- what an operator reads ----------------------------------------------------------

    def counts(self) -> ShadowCounts | None:
        """The counts of the shadow loaded now (None without one); they restart when
        another shadow is loaded."""
        shadow = self._source.active
        return None if shadow is None else self._count(shadow).counts()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._judge_forever()),
            asyncio.create_task(self._flush_forever()),
        ]

    async def settled(self) -> None:
        """Judge every decision queued and write every entry waiting (without waiting
        for the linger): at shutdown, and where a test reads the ledger."""
        if self._tasks:
            await self._queue.join()
        await self._write()

    async def close(self) -> None:
        await self.settled()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    # -- the worker ----------------------------------------------------------------------

    def _count(self, shadow: ShadowRelease) -> _Counters:
        manifest_hash = shadow.release.manifest_hash
        if self._counters.manifest_hash != manifest_hash:
            self._counters = _Counters(manifest_hash)
        return self._counters

    async def _judge_forever(self) -> None:
        while True:
            observed = await self._queue.get()
            try:
                # the verdict this decision answered leaves first (module docstring)
                await asyncio.sleep(0)
                self._judge(observed)
            finally:
                self._queue.task_done()

    def _judge(self, observed: _Observed) -> None:
        shadow = self._source.current()
        enforced = observed.decision
        if shadow is None:
            active = self._source.active
            if active is not None:
                self._count(active).skipped += 1
            return
        counters = self._count(shadow)
        if enforced.release_id != shadow.beside_release_id:
            counters.skipped += 1
            return
        try:
            judged = shadow_decision(
                observed.envelope, enforced, shadow.release.policy_set, confined=observed.confined
            )
            found = difference(enforced, judged)
            entry = None
            if found is not None:
                entry = self._evidence.for_shadow(
                    enforced,
                    judged,
                    found,
                    self._evidence.tenant_ref(observed.tenant_id),
                    observed.envelope.capability,
                )
        except Exception as exc:  # noqa: BLE001 - the shadow's failure is the shadow's
            counters.failed += 1
            log.error("shadow_evaluation_failed", error=type(exc).__name__)
            return
        counters.evaluated += 1
        if entry is None:
            return
        counters.disagreed += 1
        if len(self._pending) >= self._max_pending:
            counters.dropped += 1
            return
        self._pending.append((counters, entry))
        self._wake.set()

    async def _flush_forever(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.linger_s)
            self._wake.clear()
            await self._write()

    async def _write(self) -> None:
        """Write what waits, in one go (one group commit for all of them); one write at
        a time, so a caller that returns has seen everything before it written."""
        async with self._writing:
            batch, self._pending = self._pending, []
            if batch:
                await self._append(batch)

    async def _append(self, batch: list[tuple[_Counters, EvidenceEntry]]) -> None:
        results = await asyncio.gather(
            *(self._evidence.append(entry) for _, entry in batch), return_exceptions=True
        )
        failed = []
        for (counters, _), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                counters.unrecorded += 1
                failed.append(result)
            else:
                counters.recorded += 1
        if failed:
            unexpected = [r for r in failed if not isinstance(r, EvidenceError)]
            log.error(
                "shadow_entries_unrecorded",
                count=len(failed),
                error=type(unexpected[0] if unexpected else failed[0]).__name__,
            )


__all__ = ["LINGER_S", "MAX_PENDING", "MAX_QUEUED", "ShadowDesk", "ShadowSource"]
