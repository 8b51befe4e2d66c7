"""The governed release, verified by the Hermes adapter itself.

ARCHITECTURE.md, "Governed releases": every consumer verifies a release
before use. The adapter reads the newest release from the ``SMF_RELEASES``
key-value bucket over its own NATS connection, at start-up and before every
attestation, and runs the checks of ``smf_assurance.subjects.release`` on it, the same
code the gate runs (``smf_assurance.core.release_trust`` calls it):

1. decode (bounded), a threshold of distinct keys of the operator's trust
   root (``SMF_RELEASE_TRUST_ROOT``), one canonical manifest, a lease that
   ends after issue (:func:`~smf_assurance.subjects.release.authenticate_release`);
2. every artifact matches its digest (mix-and-match);
3. issued no later, and leased longer, than the latest true time its clock
   allows within the skew bound (freeze);
4. a sequence floor kept in memory: within one process the release used
   never goes backwards, and one sequence names one release (rollback).

The floor moves only after every check passed. What this verifier does NOT do,
and the gate does: persist the floor across restarts, check the prior-hash
chain, accumulate revocations, and parse the projections. The gate's
attestation desk refuses a runtime whose verified release is not the gate's
own active release (``smf_assurance.pipeline.desks.attestation``), so a release the gate
refused for any of those reasons is refused for the runtime too.

The verified release id goes into the runtime attestation, and the gate keys
of its registry are the only keys whose verdicts the adapter reads
(``smf_assurance.subjects.verdicts``); the adapter uses nothing else of the release's
content for any decision of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from nats.aio.client import Client
from nats.js.client import KV_PRE_TEMPLATE, KV_STREAM_TEMPLATE
from nats.js.errors import Error as JetStreamError
from nats.js.errors import KeyDeletedError, KeyNotFoundError

from smf_assurance.subjects.bus_access import CLIENT_API
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.registry import RegistryError, decode_registry
from smf_assurance.subjects.release import (
    DEFAULT_MAX_SKEW_MS,
    RELEASE_BUCKET,
    RELEASE_KEY_PREFIX,
    MalformedReleaseError,
    ReleaseCheckError,
    SequenceFloor,
    TrustRoot,
    authenticate_release,
    check_issued_before,
    check_lease_in_force,
    check_release_digests,
    check_sequence_floor,
    release_keys_newest_first,
    trust_root_keys,
)

UNAVAILABLE: Final = "release_unavailable"
"""No release could be read from the bucket (no bucket, no key, no value)."""
MAX_KEYS_TRIED: Final = 64
"""Deleted keys skipped before giving up (fail closed) when looking for the newest."""


class ReleaseUnavailableError(Exception):
    """Nothing to verify: the bucket, a key or a value is missing."""

    reason_code: Final = UNAVAILABLE


@dataclass(frozen=True, slots=True)
class UsableRelease:
    """A release that passed every check of this verifier."""

    release_id: str
    sequence: int
    manifest_hash: str
    lease_expires_at_ms: int
    gate_keys: Mapping[str, VerifyKey]
    """The ``gate`` keys of the release's registry: the only keys whose verdicts the
    adapter reads (``smf_assurance.subjects.verdicts``)."""


class ReleaseVerifier:
    """The trust root, the clock and the in-memory sequence floor of one adapter."""

    def __init__(
        self,
        root: TrustRoot,
        clock: Callable[[], int] = wall_clock_ms,
        max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
    ) -> None:
        self._keys = trust_root_keys(root)
        self._threshold = root.threshold
        self._clock = clock
        self._skew = max_skew_ms
        self._lock = threading.Lock()
        self.floor: SequenceFloor | None = None

    def verify(self, data: bytes) -> UsableRelease:
        """Run every check on ``data``; raises a ``ReleaseCheckError`` naming the threat."""
        authenticated = authenticate_release(data, self._keys, self._threshold)
        manifest = authenticated.manifest
        check_release_digests(authenticated.bundle, manifest)
        latest = self._clock() + self._skew  # one clock reading for the time checks
        check_issued_before(manifest.issued_at_ms, latest)
        check_lease_in_force(manifest.lease_expires_at_ms, latest)
        try:
            registry = decode_registry(authenticated.bundle.registry, "release registry")
        except RegistryError as exc:
            raise MalformedReleaseError(str(exc)) from exc
        gate_keys = registry.trusted("gate")
        if not gate_keys:
            raise MalformedReleaseError("the release registry names no gate key")
        with self._lock:
            # check for a rollback within this process: the floor never moves back
            self.floor = check_sequence_floor(manifest, authenticated.manifest_hash, self.floor)
        return UsableRelease(
            release_id=manifest.release_id,
            sequence=manifest.sequence,
            manifest_hash=authenticated.manifest_hash,
            lease_expires_at_ms=manifest.lease_expires_at_ms,
            gate_keys=gate_keys,
        )


async def read_newest(nc: Client) -> bytes:
    """The value under the highest ``release.<sequence>`` key the bucket holds.

    The keys come from the bucket stream's subject list (deterministic, unlike a
    key watcher, which may signal "no keys" before it delivered them); a key
    whose value was deleted or purged is skipped, so what is read is the newest
    release present. The key is only a hint: the value is verified before use.
    Raises :class:`ReleaseUnavailableError` when there is nothing to read.
    """
    js = nc.jetstream(prefix=CLIENT_API)
    prefix = KV_PRE_TEMPLATE.format(bucket=RELEASE_BUCKET)
    try:
        info = await js.stream_info(
            KV_STREAM_TEMPLATE.format(bucket=RELEASE_BUCKET),
            subjects_filter=f"{prefix}{RELEASE_KEY_PREFIX}>",
        )
        keys = release_keys_newest_first(
            subject.removeprefix(prefix) for subject in (info.state.subjects or {})
        )
        kv = await js.key_value(RELEASE_BUCKET)
        for key in keys[:MAX_KEYS_TRIED]:
            try:
                entry = await kv.get(key)
            except (KeyDeletedError, KeyNotFoundError):
                continue  # deleted or purged: the next older key
            return entry.value or b""  # whatever is there is verified (an empty one fails)
    except JetStreamError as exc:  # no bucket, JetStream refused
        raise ReleaseUnavailableError(f"{type(exc).__name__}: {exc}") from exc
    raise ReleaseUnavailableError("the release bucket holds no release")


__all__ = [
    "UNAVAILABLE",
    "ReleaseCheckError",
    "ReleaseUnavailableError",
    "ReleaseVerifier",
    "UsableRelease",
    "read_newest",
]
