"""The shadow release: a verified candidate a gate runs beside its active release (issue 25).

docs/RELEASES.md, "Shadow releases". A shadow is published to the
``SMF_RELEASES`` bucket under its own key (:data:`~smf_assurance.subjects.release.SHADOW_KEY`,
``release publish --shadow``) and withdrawn by deleting that key
(``release withdraw-shadow``). Every gate watches the key, so all gates run the
same shadow, as they converge on the same active release.

Invariants:

- A shadow is verified as the release it would become: with
  :meth:`~smf_assurance.core.release_trust.ReleaseTrust.verify_update` against the
  gate's trusted state (signature threshold, digests, sequence above the
  accepted one, prior hash equal to the accepted release, lease and issue time
  under the trusted clock, revocations, content), so a shadow that fails
  verification is refused with the very reason code any release gets
  (``release_bad_signature``, ``release_digest_mismatch``, ``release_rollback``,
  ``release_replayed``, ``release_expired``, ...), is kept in the watcher's
  refusals and told in ``smf.release.report``, and changes nothing: neither the
  trusted state, nor the active release, nor a shadow already running. It is
  verified under the watcher's lock, so never against a state that is moving.
- A shadow decides nothing. It never becomes the trusted state (it moves no
  rollback floor, no chain, no revocation); only the evaluate path's
  :class:`~smf_assurance.pipeline.followers.shadow.ShadowDesk` reads it, after each verdict.
- A verified shadow is persisted in the release-state file before it is used
  (:meth:`~smf_assurance.pipeline.stores.release_state.ReleaseStateStore.save_shadow`), so a
  restarted gate verifies the same bytes again and keeps running it, also when
  the bucket has lost the key; a delete marker on the key is an operator's
  withdrawal and is honoured, also one made while the gate was down.
- When the active release changes, the shadow is dropped at once: it was a
  candidate to replace the release now gone, so it can no longer chain
  (``release_chain_broken``), or it is the new active release (promoted).
- Its lease is judged at every use (:meth:`ShadowReleases.current`): once it has
  run out, nothing is evaluated under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import structlog
from nats.js.client import JetStreamContext
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from smf_assurance.core.release_trust import (
    BrokenReleaseChainError,
    NoVerifiedReleaseError,
    ReleaseTrust,
    VerifiedRelease,
    check_clock,
    check_lease,
)
from smf_assurance.pipeline.followers.releases import (
    INITIAL_SYNC_SECONDS,
    ReleaseWatcher,
    ensure_release_bucket,
    keep_watching,
)
from smf_assurance.pipeline.stores.release_state import StoredShadow, StoreUnavailable
from smf_assurance.subjects.release import (
    SHADOW_KEY,
    ReleaseCheckError,
    ReportedRelease,
    TrustRoot,
    UntrustedClockError,
)

log = structlog.get_logger(__name__)

STORED_ORIGIN: Final = "stored-shadow"
"""The origin named in a refusal of the persisted shadow at start."""


@dataclass(frozen=True, slots=True)
class ShadowRelease:
    """A verified shadow and the active release it runs beside."""

    release: VerifiedRelease
    beside_release_id: str
    """The active release's id: only decisions made under it are compared."""
    beside_manifest_hash: str
    origin: str
    loaded_at_ms: int

    def reported(self) -> ReportedRelease:
        manifest = self.release.manifest
        return ReportedRelease(
            release_id=manifest.release_id,
            sequence=manifest.sequence,
            manifest_hash=self.release.manifest_hash,
            lease_expires_at_ms=manifest.lease_expires_at_ms,
        )


class ShadowReleases:
    """The one shadow release of a gate, and how it is loaded, kept and dropped."""

    def __init__(
        self,
        watcher: ReleaseWatcher,
        root: TrustRoot,
        clock: Callable[[], int],
    ) -> None:
        ReleaseTrust(root)  # refuse an unusable trust root now
        self._watcher = watcher
        self._root = root
        self._clock = clock
        self._shadow: ShadowRelease | None = None
        self._not_in_force_logged = False
        self._tasks: list[asyncio.Task[None]] = []
        self._clearing: set[asyncio.Task[None]] = set()

    # -- what the shadow desk reads ----------------------------------------------------

    @property
    def active(self) -> ShadowRelease | None:
        """The shadow loaded (even if its lease has run out), or None: one reference."""
        return self._shadow

    def current(self) -> ShadowRelease | None:
        """The shadow to evaluate one decision under, or None when there is none or it
        is not in force (its lease ran out, or the clock contradicts what is trusted:
        TUF 5.4.4, as for the active release; logged once)."""
        shadow = self._shadow
        if shadow is None:
            return None
        manifest = shadow.release.manifest
        time = self._watcher.trusted_time()
        try:
            check_clock(manifest.issued_at_ms, self._watcher.high_water_ms, time)
            check_lease(manifest.lease_expires_at_ms, time)
        except ReleaseCheckError as exc:
            if not self._not_in_force_logged:
                self._not_in_force_logged = True
                log.warning(
                    "shadow_not_in_force",
                    release_id=shadow.release.release_id,
                    reason=exc.reason_code,
                )
            return None
        return shadow

    def reported(self) -> ReportedRelease | None:
        shadow = self._shadow
        return None if shadow is None else shadow.reported()

    # -- lifecycle -----------------------------------------------------------------------

    async def start(
        self,
        js: JetStreamContext | None = None,
        *,
        replicas: int = 1,
        initial_sync_seconds: float = INITIAL_SYNC_SECONDS,
    ) -> None:
        """Load the persisted shadow, then follow the bucket's shadow key; returns once
        the key's current value (or its delete marker) was considered."""
        await self.load_stored()
        if js is None:
            return
        kv = await ensure_release_bucket(js, replicas)
        ready = asyncio.Event()
        self._tasks.append(asyncio.create_task(self._follow(kv, ready)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ready.wait(), initial_sync_seconds)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._clearing:
            await asyncio.gather(*self._clearing, return_exceptions=True)

    async def load_stored(self) -> ShadowRelease | None:
        """Verify the persisted shadow again against the trusted state (a restart)."""
        store = self._watcher.store
        try:
            stored = await store.load_shadow()
        except StoreUnavailable:
            log.warning("release_state_unavailable", action="load_shadow")
            return None
        if stored is None:
            return None
        async with self._watcher.lock:
            try:
                release = self._verify(stored.bundle)
            except ReleaseCheckError as exc:
                self._watcher.refuse(STORED_ORIGIN, exc)
                if not isinstance(exc, UntrustedClockError):
                    # expired, tampered, or no longer chaining: it never becomes usable
                    await self._clear_stored(stored.manifest_hash)
                return None
            return self._hold(release, stored.origin, stored.loaded_at_ms)

    # -- candidates and withdrawals ------------------------------------------------------

    async def offer(self, origin: str, data: bytes) -> ShadowRelease | None:
        """Verify ``data`` as a shadow; persist it, then run it. A refused candidate
        changes nothing (module docstring)."""
        async with self._watcher.lock:
            shadow = self._shadow
            if shadow is not None and shadow.release.bundle_bytes == data:
                return shadow  # the same shadow again (a watch's redelivery, a restart)
            try:
                release = self._verify(data)
            except ReleaseCheckError as exc:
                self._watcher.refuse(origin, exc)
                return None
            last = self._watcher.last_accepted
            assert last is not None  # _verify refused otherwise
            loaded_at = self._clock()
            try:
                await self._watcher.store.save_shadow(
                    StoredShadow(
                        release_id=release.release_id,
                        sequence=release.sequence,
                        manifest_hash=release.manifest_hash,
                        beside_manifest_hash=last.manifest_hash,
                        origin=origin,
                        loaded_at_ms=loaded_at,
                        bundle=data,
                    )
                )
            except StoreUnavailable:
                # not persisted, not used: a restart must not forget what runs
                log.warning("release_state_unavailable", origin=origin, action="save_shadow")
                return None
            return self._hold(release, origin, loaded_at)

    async def withdraw(self, origin: str) -> bool:
        """The operator withdrew the shadow (a delete of the key): stop running it and
        forget it. Returns whether one was running or stored."""
        async with self._watcher.lock:
            shadow, self._shadow = self._shadow, None
            try:
                cleared = await self._watcher.store.clear_shadow()
            except StoreUnavailable:
                log.warning("release_state_unavailable", origin=origin, action="clear_shadow")
                cleared = False
        if shadow is not None or cleared:
            log.info(
                "shadow_withdrawn",
                origin=origin,
                release_id=None if shadow is None else shadow.release.release_id,
            )
        return shadow is not None or cleared

    def on_active_switch(self, release: VerifiedRelease) -> None:
        """The active release changed: the shadow stops at once (module docstring).

        Called in the watcher's switch, before the next evaluation reads the new
        release, so no decision of the new release is ever compared with a shadow
        of the old one."""
        shadow = self._shadow
        if shadow is None or shadow.beside_manifest_hash == release.manifest_hash:
            return
        self._shadow = None
        if shadow.release.manifest_hash == release.manifest_hash:
            log.info("shadow_promoted", release_id=release.release_id)
        else:
            self._watcher.refuse(
                shadow.origin,
                BrokenReleaseChainError(
                    f"shadow {shadow.release.release_id} chains to "
                    f"{shadow.beside_manifest_hash}, and the active release is now "
                    f"{release.manifest_hash}"
                ),
            )
        task = asyncio.ensure_future(self._clear_stored(shadow.release.manifest_hash))
        self._clearing.add(task)
        task.add_done_callback(self._clearing.discard)

    # -- internals -------------------------------------------------------------------------

    def _verify(self, data: bytes) -> VerifiedRelease:
        """Every check of a release that would replace the accepted one, with the
        clock read once (TUF 5.1) and judged against the observed high-water mark."""
        last = self._watcher.last_accepted
        if last is None or self._watcher.active is None:
            raise NoVerifiedReleaseError("a shadow runs beside an active release; there is none")
        high_water = max(last.clock_high_water_ms, self._watcher.high_water_ms)
        trusted = dataclasses.replace(last, clock_high_water_ms=high_water)
        return ReleaseTrust(self._root, trusted).verify_update(data, self._watcher.trusted_time())

    def _hold(self, release: VerifiedRelease, origin: str, loaded_at_ms: int) -> ShadowRelease:
        active = self._watcher.active
        assert active is not None  # _verify refused otherwise
        shadow = ShadowRelease(
            release=release,
            beside_release_id=active.release_id,
            beside_manifest_hash=active.manifest_hash,
            origin=origin,
            loaded_at_ms=loaded_at_ms,
        )
        self._shadow = shadow
        self._not_in_force_logged = False
        log.info(
            "shadow_loaded",
            release_id=release.release_id,
            sequence=release.sequence,
            manifest_hash=release.manifest_hash,
            beside=active.release_id,
            origin=origin,
            lease_expires_at_ms=release.manifest.lease_expires_at_ms,
        )
        return shadow

    async def _clear_stored(self, manifest_hash: str) -> None:
        try:
            await self._watcher.store.clear_shadow(manifest_hash)
        except StoreUnavailable:
            log.warning("release_state_unavailable", action="clear_shadow")

    async def _follow(self, kv: KeyValue, ready: asyncio.Event) -> None:
        """Watch the shadow key; reconnect the watch if it fails."""
        await keep_watching(lambda: self._watch(kv, ready), ready, "shadow_watch_failed")

    async def _watch(self, kv: KeyValue, ready: asyncio.Event) -> None:
        watcher = await kv.watch(SHADOW_KEY)
        try:
            async for entry in watcher:
                if entry is None:  # the key's current value (or marker) was delivered
                    ready.set()
                    continue
                origin = f"kv:{entry.key}@{entry.revision}"
                if entry.operation in (KV_DEL, KV_PURGE) or entry.value is None:
                    await self.withdraw(origin)
                else:
                    await self.offer(origin, entry.value)
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()  # type: ignore[no-untyped-call]


__all__ = ["STORED_ORIGIN", "ShadowRelease", "ShadowReleases"]
