"""The release watcher: fetch, verify, persist, switch; and deny when no release is in force.

ARCHITECTURE.md, "Governed releases". A gate holds at
most one verified release. Candidates come from the JetStream key-value
bucket ``SMF_RELEASES`` (every gate watches it, so all converge) and from the
state directory's inbox folder. Each candidate goes through
:class:`~smf_assurance.core.release_trust.ReleaseTrust` (the pure checks), then
its state is persisted (:mod:`smf_assurance.pipeline.stores.release_state`), and only then
does the watcher switch.

Invariants:

- The switch is one reference assignment of a fully built
  :class:`~smf_assurance.core.release_trust.VerifiedRelease`. The evaluate stage
  reads that reference once per evaluation (:meth:`ReleaseWatcher.current`),
  so a proposal is evaluated entirely under one release, never a half-loaded
  one, and its Decision names that release.
- Unverified policy never runs: a refused candidate changes nothing. The gate
  keeps the last good release while its lease holds; once the lease has run
  out under the trusted clock, :meth:`~ReleaseWatcher.current` raises
  :class:`~smf_assurance.subjects.release.ExpiredReleaseError`, and with no
  release at all :class:`~smf_assurance.core.release_trust.NoVerifiedReleaseError`,
  so every evaluation is denied with that reason code (fail closed).
- Every refusal is logged (``release_refused``, with the reason code naming the
  threat) and kept in :attr:`ReleaseWatcher.refusals`; :meth:`ReleaseWatcher.report`
  tells them, and the active release, to publishers (``smf.release.report``).
- Candidates are tried in bucket-key order and retried when the trusted state
  moves, so releases published out of order still chain; a refusal that can
  never turn into an acceptance (bad signature, rollback, ...) is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import structlog
from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from smf_assurance.core.projection import PolicySet
from smf_assurance.core.release_trust import (
    DEFAULT_MAX_SKEW_MS,
    BrokenReleaseChainError,
    LastAccepted,
    NoVerifiedReleaseError,
    ReleaseTrust,
    ReplayedReleaseError,
    TrustedTime,
    VerifiedRelease,
    check_clock,
    check_lease,
)
from smf_assurance.pipeline.stores.release_state import (
    ReleaseStateStore,
    StaleReleaseStateError,
    StoreUnavailable,
)
from smf_assurance.subjects.canonical import sha256_identity
from smf_assurance.subjects.clock import Clock
from smf_assurance.subjects.release import (
    MAX_BUNDLE_BYTES,
    MAX_REPORT_TEXT,
    MAX_REPORTED_REFUSALS,
    RELEASE_BUCKET,
    RELEASE_KEY_PREFIX,
    RELEASE_REPORT_SCHEMA,
    ExpiredReleaseError,
    ReleaseCheckError,
    ReleaseOutcome,
    ReleaseReport,
    ReleaseReportRequest,
    ReleaseRollbackError,
    ReportedRefusal,
    ReportedRelease,
    TrustRoot,
    UntrustedClockError,
)

log = structlog.get_logger(__name__)

_HINTED_SEQUENCE: Final = re.compile(r"release\.(\d{16})")
RETRYABLE: Final = (BrokenReleaseChainError, UntrustedClockError)
"""Refusals that a later state or a corrected clock can turn into an acceptance."""
MAX_REFUSALS_KEPT: Final = 256
MAX_FINAL_REMEMBERED: Final = 4096
DEFAULT_TICK_SECONDS: Final = 5.0
INITIAL_SYNC_SECONDS: Final = 5.0


def release_bucket_config(replicas: int = 1) -> KeyValueConfig:
    """One value per release sequence, file storage, bounded values; on a cluster,
    ``replicas`` copies (R3), so a release survives the loss of a node."""
    return KeyValueConfig(
        bucket=RELEASE_BUCKET,
        description="SMF governed releases (signed bundles); every gate watches it",
        history=1,
        max_value_size=MAX_BUNDLE_BYTES,
        storage=StorageType.FILE,
        replicas=replicas,
    )


async def ensure_release_bucket(js: JetStreamContext, replicas: int = 1) -> KeyValue:
    """Open the release bucket, creating it with :func:`release_bucket_config` if absent."""
    try:
        return await js.key_value(RELEASE_BUCKET)
    except BucketNotFoundError:
        return await js.create_key_value(config=release_bucket_config(replicas))


async def keep_watching(
    watch: Callable[[], Awaitable[None]], ready: asyncio.Event, failed: str
) -> None:
    """Run ``watch`` until cancelled, starting it again a second after it fails (logged
    as ``failed``); ``ready`` is set on a failure, so a start waiting for the first
    values is not held up by a watch that cannot run."""
    while True:
        try:
            await watch()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(failed)
            ready.set()
            await asyncio.sleep(1.0)


class Refusal:
    """One refused candidate: where it came from, which threat it was, and whether
    a later state may still turn it into an acceptance (:data:`RETRYABLE`)."""

    __slots__ = ("at_ms", "detail", "origin", "reason_code", "retryable")

    def __init__(
        self, origin: str, reason_code: str, detail: str, at_ms: int, *, retryable: bool = False
    ) -> None:
        self.origin = origin
        self.reason_code = reason_code
        self.detail = detail
        self.at_ms = at_ms
        self.retryable = retryable

    def reported(self) -> ReportedRefusal:
        return ReportedRefusal(
            origin=_bounded(self.origin),
            reason_code=_bounded(self.reason_code),
            detail=_bounded(self.detail),
            at_ms=self.at_ms,
            retryable=self.retryable,
        )

    def __repr__(self) -> str:
        return f"Refusal({self.origin!r}, {self.reason_code!r})"


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_REPORT_TEXT else text[: MAX_REPORT_TEXT - 3] + "..."


class ReleaseWatcher:
    """The one verified release a gate uses, and how it changes."""

    def __init__(
        self,
        root: TrustRoot,
        store: ReleaseStateStore,
        clock: Clock,
        *,
        max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
        inbox: Path | None = None,
        on_switch: Callable[[VerifiedRelease], None] | None = None,
    ) -> None:
        ReleaseTrust(root)  # refuse an unusable trust root now, not at the first release
        self._root = root
        self._store = store
        self._clock = clock
        self._skew = max_skew_ms
        self._inbox = inbox
        self.on_switch = on_switch
        self._active: VerifiedRelease | None = None
        self._unavailable: tuple[type[ReleaseCheckError], str] = (
            NoVerifiedReleaseError,
            "no verified release has been accepted",
        )
        self._last: LastAccepted | None = None
        self._high_water = 0
        self._persisted_high_water = 0
        self._pending: dict[str, bytes] = {}
        self._skip: dict[str, str | None] = {}
        self._final: set[str] = set()
        self._adopted: set[str] = set()
        """Manifest hashes this gate has switched to since it started (bounded)."""
        self._logged: set[tuple[str, str]] = set()
        self._expiry_logged = False
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self.refusals: deque[Refusal] = deque(maxlen=MAX_REFUSALS_KEPT)

    @classmethod
    async def open(
        cls,
        root: TrustRoot,
        state_path: Path,
        clock: Clock,
        *,
        max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
        inbox: Path | None = None,
        on_switch: Callable[[VerifiedRelease], None] | None = None,
    ) -> ReleaseWatcher:
        """Open the persisted state at ``state_path`` and build a watcher on it."""
        store = await ReleaseStateStore.open(state_path)
        try:
            return cls(
                root, store, clock, max_skew_ms=max_skew_ms, inbox=inbox, on_switch=on_switch
            )
        except BaseException:
            await store.close()
            raise

    # -- what the gate reads --------------------------------------------------

    @property
    def active(self) -> VerifiedRelease | None:
        """The release in use (even if its lease has run out), or ``None``."""
        return self._active

    @property
    def last_accepted(self) -> LastAccepted | None:
        return self._last

    @property
    def store(self) -> ReleaseStateStore:
        """The persisted state, which the shadow release is kept in too."""
        return self._store

    @property
    def lock(self) -> asyncio.Lock:
        """Held while a candidate is verified against the trusted state and accepted:
        a shadow candidate is verified under it too, so never against a state that
        is moving (``smf_assurance.pipeline.followers.shadow_releases``)."""
        return self._lock

    def trusted_time(self) -> TrustedTime:
        """One clock reading, judged against the clock's observed high-water mark
        as every check of this watcher judges it."""
        return self._time()

    @property
    def high_water_ms(self) -> int:
        """The latest clock reading known to have happened (never decreases)."""
        return self._high_water

    def refuse(self, origin: str, exc: ReleaseCheckError, *, retryable: bool = False) -> None:
        """Keep and log a refusal of a candidate from ``origin`` (a shadow candidate's
        too, so ``smf.release.report`` tells a publisher why, as for any release).
        Nothing here tries such a candidate again, so it is not ``retryable`` unless
        the caller says so."""
        self._refuse(origin, exc, retryable=retryable)

    def current(self) -> PolicySet:
        """The policy set to evaluate ONE proposal with, or a refusal naming why not.

        Reads the active release once and the clock once. Raises
        :class:`NoVerifiedReleaseError`, :class:`ExpiredReleaseError` (TUF 5.4.4,
        the lease has run out) or :class:`UntrustedClockError`; the evaluate
        stage turns each into a denial with its reason code.
        """
        release = self._active
        if release is None:
            kind, detail = self._unavailable
            raise kind(detail)
        time = TrustedTime(self._clock(), self._skew)
        try:
            check_clock(release.manifest.issued_at_ms, self._high_water, time)
            check_lease(release.manifest.lease_expires_at_ms, time)
        except ReleaseCheckError as exc:
            if not self._expiry_logged:
                self._expiry_logged = True
                log.error(
                    "release_not_in_force",
                    release_id=release.release_id,
                    sequence=release.sequence,
                    reason=exc.reason_code,
                    detail=str(exc),
                )
            raise
        self._high_water = max(self._high_water, time.now_ms)
        return release.policy_set

    def report(self, gate: str, request: ReleaseReportRequest) -> ReleaseReport:
        """What this gate did with its candidates, for ``smf.release.report``.

        ``asked`` answers the request's candidate: ``adopted`` only when the
        active release is exactly the manifest asked about, ``superseded`` when
        this gate used it and has since switched on; otherwise the newest refusal
        of that origin, or ``pending``/``unseen``. Nothing here is raw:
        ids, reason codes and the refusals' one-line details."""
        release = self._active
        try:
            self.current()
            in_force = True
        except ReleaseCheckError:
            in_force = False
        active = (
            None
            if release is None
            else ReportedRelease(
                release_id=release.release_id,
                sequence=release.sequence,
                manifest_hash=release.manifest_hash,
                lease_expires_at_ms=release.manifest.lease_expires_at_ms,
            )
        )
        asked: ReleaseOutcome | None = None
        asked_refusal: ReportedRefusal | None = None
        if request.manifest_hash is not None or request.origin is not None:
            asked = "unseen"
            newest = next((r for r in reversed(self.refusals) if r.origin == request.origin), None)
            if release is not None and release.manifest_hash == request.manifest_hash:
                asked = "adopted"
            elif request.manifest_hash in self._adopted:
                asked = "superseded"
            elif newest is not None:
                asked, asked_refusal = "refused", newest.reported()
            elif request.origin in self._pending:
                asked = "pending"
        recent = list(self.refusals)[-MAX_REPORTED_REFUSALS:]
        return ReleaseReport(
            schema=RELEASE_REPORT_SCHEMA,
            gate=_bounded(gate),
            at_ms=self._clock(),
            active=active,
            in_force=in_force,
            refusals=tuple(r.reported() for r in recent),
            asked=asked,
            asked_refusal=asked_refusal,
        )

    # -- lifecycle ----------------------------------------------------------------

    async def start(
        self,
        js: JetStreamContext | None = None,
        *,
        tick_seconds: float = DEFAULT_TICK_SECONDS,
        initial_sync_seconds: float = INITIAL_SYNC_SECONDS,
        replicas: int = 1,
    ) -> None:
        """Load the persisted release, take what the inbox and the bucket hold, then
        keep watching. Returns once the bucket's current values were considered
        (or ``initial_sync_seconds`` passed), so a starting gate has converged."""
        await self.load_stored()
        await self.scan_inbox()
        if js is not None:
            kv = await ensure_release_bucket(js, replicas)
            ready = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._follow(kv, ready)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), initial_sync_seconds)
        self._tasks.append(asyncio.create_task(self._ticker(tick_seconds)))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self._store.close()

    async def load_stored(self) -> VerifiedRelease | None:
        """Re-verify the persisted release (it keeps the rollback floor even if refused)."""
        stored = await self._store.load()
        if stored is None:
            return None
        self._last = stored.state
        self._high_water = max(self._high_water, stored.state.clock_high_water_ms)
        self._persisted_high_water = stored.state.clock_high_water_ms
        try:
            release = ReleaseTrust(self._root, stored.state).verify_stored(
                stored.bundle, self._time()
            )
        except ReleaseCheckError as exc:
            self._refuse("stored", exc)
            self._active = None  # the persisted state names a release we cannot use
            kind = type(exc) if isinstance(exc, ExpiredReleaseError | UntrustedClockError) else None
            self._unavailable = (kind or NoVerifiedReleaseError, f"stored release refused: {exc}")
            return None
        self._switch(release)
        return release

    # -- candidates -----------------------------------------------------------

    async def offer(self, origin: str, data: bytes) -> None:
        """Consider one candidate release (``origin`` names where it came from)."""
        if origin in self._final:
            return
        self._pending[origin] = data
        await self.drain()

    async def drain(self) -> None:
        """Try pending candidates in origin order until none can be accepted."""
        async with self._lock:
            while await self._apply_one():
                pass

    async def scan_inbox(self) -> None:
        """Offer every bundle file in the inbox folder (``release publish --state-dir``)."""
        folder = self._inbox
        if folder is None or not folder.is_dir():
            return
        for path in sorted(folder.glob("*.json")):
            try:
                size = path.stat().st_size
                data = b"" if size > MAX_BUNDLE_BYTES else await asyncio.to_thread(path.read_bytes)
            except OSError as exc:
                log.warning("release_inbox_unreadable", path=str(path), error=exc.strerror)
                continue
            origin = f"inbox:{path.name}#{sha256_identity(data)[7:23]}"
            if origin not in self._final:
                self._pending[origin] = data
        await self.drain()

    async def tick(self) -> None:
        """Periodic work: retry what may now pass, rescan the inbox, persist the clock."""
        self._skip.clear()
        await self.scan_inbox()
        if self._last is not None and self._high_water > self._persisted_high_water:
            try:
                self._persisted_high_water = await self._store.observe_time(self._high_water)
            except StoreUnavailable:
                log.warning("release_state_unavailable", action="observe_time")

    # -- internals ------------------------------------------------------------

    def _time(self) -> TrustedTime:
        return TrustedTime(self._clock(), self._skew)

    def _tag(self) -> str | None:
        return None if self._last is None else self._last.manifest_hash

    async def _apply_one(self) -> bool:
        tag = self._tag()
        for origin in sorted(self._pending):
            if origin in self._skip and self._skip[origin] == tag:
                continue
            data = self._pending[origin]
            try:
                await self._accept(data)
            except ReleaseCheckError as exc:
                self._refuse(origin, exc)
                if isinstance(exc, RETRYABLE):
                    self._skip[origin] = tag
                else:
                    self._settle(origin)
                continue
            except StaleReleaseStateError:
                # Another writer moved the persisted state: adopt it, then retry.
                await self.load_stored()
                return True
            except StoreUnavailable:
                log.warning("release_state_unavailable", origin=origin, action="accept")
                self._skip[origin] = tag
                continue
            self._pending.pop(origin, None)
            self._skip.pop(origin, None)
            return True
        return False

    async def _accept(self, data: bytes) -> VerifiedRelease:
        time = self._time()  # the one clock reading of this verification (TUF 5.1)
        last = self._last
        release = ReleaseTrust(self._root, last).verify_update(data, time)
        state = release.accepted_state(time, self._high_water)
        await self._store.accept(
            state, data, replacing=None if last is None else last.manifest_hash
        )
        self._last = state
        self._high_water = max(self._high_water, state.clock_high_water_ms)
        self._persisted_high_water = state.clock_high_water_ms
        self._switch(release)
        return release

    def _switch(self, release: VerifiedRelease) -> None:
        """The switch: one reference; the next evaluation reads the new release."""
        previous = self._active
        if self.on_switch is not None:
            self.on_switch(release)
        self._active = release
        if len(self._adopted) >= MAX_FINAL_REMEMBERED:
            self._adopted.clear()
        self._adopted.add(release.manifest_hash)
        self._expiry_logged = False
        log.info(
            "release_switched",
            release_id=release.release_id,
            sequence=release.sequence,
            manifest_hash=release.manifest_hash,
            previous=None if previous is None else previous.release_id,
            signers=len(release.signer_key_ids),
            lease_expires_at_ms=release.manifest.lease_expires_at_ms,
        )

    def _is_history(self, origin: str) -> bool:
        """Whether ``origin`` names a sequence at or below the accepted one (a hint only:
        it chooses a log level, never whether a release is used)."""
        hint = _HINTED_SEQUENCE.search(origin)
        last = self._last
        return hint is not None and last is not None and int(hint.group(1)) <= last.sequence

    def _settle(self, origin: str) -> None:
        self._pending.pop(origin, None)
        self._skip.pop(origin, None)
        if len(self._final) >= MAX_FINAL_REMEMBERED:
            self._final.clear()
        self._final.add(origin)

    def _refuse(
        self, origin: str, exc: ReleaseCheckError, *, retryable: bool | None = None
    ) -> None:
        self.refusals.append(
            Refusal(
                origin,
                exc.reason_code,
                str(exc),
                self._clock(),
                retryable=isinstance(exc, RETRYABLE) if retryable is None else retryable,
            )
        )
        key = (origin, exc.reason_code)
        if key in self._logged:
            return
        self._logged.add(key)
        if len(self._logged) > MAX_FINAL_REMEMBERED:
            self._logged.clear()
        if isinstance(exc, ReplayedReleaseError):
            log.debug("release_already_current", origin=origin)
            return
        if isinstance(exc, ReleaseRollbackError) and self._is_history(origin):
            # An older release where it was published (bucket key or inbox name of its
            # own sequence) is history, not an attack; the refusal is kept all the same.
            log.debug("release_superseded", origin=origin, detail=str(exc))
            return
        log.warning(
            "release_refused",
            origin=origin,
            reason=exc.reason_code,
            threat=type(exc).__name__,
            detail=str(exc),
            current=None if self._active is None else self._active.release_id,
        )

    async def _follow(self, kv: KeyValue, ready: asyncio.Event) -> None:
        """Watch the bucket; reconnect the watch if it fails."""
        await keep_watching(lambda: self._watch(kv, ready), ready, "release_watch_failed")

    async def _watch(self, kv: KeyValue, ready: asyncio.Event) -> None:
        watcher = await kv.watch(f"{RELEASE_KEY_PREFIX}>")
        initial = True
        try:
            async for entry in watcher:
                if entry is None:
                    initial = False
                    await self.drain()
                    ready.set()
                    continue
                if entry.operation in (KV_DEL, KV_PURGE) or entry.value is None:
                    continue
                origin = f"kv:{entry.key}@{entry.revision}"
                if origin in self._final:
                    continue
                self._pending[origin] = entry.value
                if not initial:
                    await self.drain()
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def _ticker(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.tick()
            except Exception:
                log.exception("release_tick_failed")


__all__ = [
    "Refusal",
    "ReleaseWatcher",
    "ensure_release_bucket",
    "keep_watching",
    "release_bucket_config",
]
