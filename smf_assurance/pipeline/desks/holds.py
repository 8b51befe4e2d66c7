"""``smf.holds``: the gate tells a runtime's launcher which documents are under legal hold.

The launcher mounts them read-only in the runtime's sandbox (docs/CONFINEMENT.md, "Legal
holds"). The answer is read from the bucket at each request, so it is the list as the
operator last set it; a bucket that cannot be read, or holds what is not a hold list,
is answered ``ok: false`` with its reason code and no path, which the launcher takes
as a refusal to start (or to go on): never as an empty list.

:class:`HoldsMirror` is the same list for the gate's own decisions: a path equal to or
under a held one is held whatever the adapter said (``GateHolds`` in
``smf_assurance.core.normalize``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final

import msgspec
import structlog
from nats.js.kv import KeyValue

from smf_assurance.core.normalize import GateHolds
from smf_assurance.pipeline.stores.holds import HoldsInvalid, HoldsUnavailable, read_holds
from smf_assurance.subjects.clock import MonotonicClock, monotonic_s
from smf_assurance.subjects.holds import (
    HOLDS_INVALID,
    HOLDS_UNAVAILABLE,
    HoldsAnswer,
    HoldsRequest,
)

log = structlog.get_logger(__name__)

SCHEMA: Final = "smf.holds-answer/1"
REFRESH_SECONDS: Final = 1.0
"""How often the gate reads its hold list for its own decisions."""
STALE_SECONDS: Final = 5.0
"""How long after its last good read the mirror still counts: the launcher's own bound
for a gate that stops answering (docs/CONFINEMENT.md)."""


def _refused(reason: str) -> bytes:
    return msgspec.json.encode(HoldsAnswer(SCHEMA, False, 0, (), reason))


@dataclass
class HoldsDesk:
    """Answers ``smf.holds`` from the hold bucket the gate opened at its start."""

    bucket: KeyValue

    async def handle(self, data: bytes) -> bytes:
        try:
            msgspec.json.decode(data or b"{}", type=HoldsRequest)
        except msgspec.DecodeError:
            return _refused("malformed_request")
        try:
            held, revision = await read_holds(self.bucket)
        except HoldsUnavailable:
            log.warning("holds_refused", reason=HOLDS_UNAVAILABLE)
            return _refused(HOLDS_UNAVAILABLE)
        except HoldsInvalid:
            log.error("holds_refused", reason=HOLDS_INVALID)
            return _refused(HOLDS_INVALID)
        return msgspec.json.encode(HoldsAnswer(SCHEMA, True, revision, held.paths))


@dataclass
class HoldsMirror:
    """The hold list in memory, for the decision path (which must do no I/O).

    Read from the bucket every :data:`REFRESH_SECONDS` (:meth:`run`), not watched: each
    good read proves the bucket is readable now, where a watch's silence cannot tell
    "no change" from a bucket deleted or a stream gone, and a hold added is decided on
    within about a second either way. The cost is one KV get a second per gate, off
    the decision path. :meth:`view` is fresh only within :data:`STALE_SECONDS` of the
    last good read (a monotonic clock: a stopped or frozen decision clock must not
    keep a mirror fresh); a list that is not a hold list makes it stale at once.
    Fail closed: a stale view refuses document writes and deletes (``GateHolds``)."""

    bucket: KeyValue
    stale_after: float = STALE_SECONDS
    monotonic: MonotonicClock = monotonic_s
    revision: int = 0
    """The bucket revision of the list last read (0: none yet)."""
    _paths: frozenset[str] = field(default_factory=frozenset)
    _read_at: float | None = None

    async def refresh(self) -> bool:
        """Read the list once; False (the view ages, or is stale at once for a list
        that is not one) when it could not be read."""
        try:
            held, revision = await read_holds(self.bucket)
        except HoldsUnavailable:
            log.warning("holds_mirror_unread", reason=HOLDS_UNAVAILABLE)
            return False
        except HoldsInvalid:
            log.error("holds_mirror_unread", reason=HOLDS_INVALID)
            self._read_at = None
            return False
        self._paths, self.revision = frozenset(held.paths), revision
        self._read_at = self.monotonic()
        return True

    def view(self) -> GateHolds:
        read_at = self._read_at
        fresh = read_at is not None and self.monotonic() - read_at <= self.stale_after
        return GateHolds(self._paths, fresh)

    async def run(self, every: float = REFRESH_SECONDS) -> None:
        """Refresh every ``every`` seconds until cancelled; a failure is logged by type
        and the view goes stale by itself."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.refresh()
            except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
                log.error("holds_mirror_failed", error=type(exc).__name__)
            # a cancel nats-py turned into a timeout (and refresh into "unread") still ends it
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
