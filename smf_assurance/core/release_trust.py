"""The trusted release: may this release replace the one in use? Pure: no I/O, no clock.

:class:`ReleaseTrust` holds the trusted state of one consumer: the trust root
(release-signing keys and threshold) and the last release it accepted
(persisted by ``smf_assurance.pipeline.stores.release_state``, so a restart cannot be rolled
back). It answers one question per candidate release, following the TUF
specification's "Detailed client workflow"
(https://theupdateframework.github.io/specification/latest/#detailed-client-workflow),
with the signed manifest in the role of timestamp and snapshot metadata and
the projections and registry in the role of targets. DSSE is the envelope
(https://github.com/secure-systems-lab/dsse, ``protocol.md``).

Invariants:

- Time is read once by the caller and passed in as :class:`TrustedTime`
  (TUF 5.1, "Record fixed update start time"), so every check of one
  verification sees the same instant and the checks are reproducible.
- The envelope is parsed once; after the signature check only the verified
  payload bytes are decoded, once (``protocol.md``, "To verify").
- Checks run in this order and each refusal raises the error named after the
  attack it stops (STYLE.md, python-tuf ``trusted_metadata_set``):

  ==  ===========================================  ============================
  1   envelope decodes (bounded)                   :class:`MalformedReleaseError`
  2   signatures by trust-root keys                :class:`BadReleaseSignatureError`
  3   a threshold of distinct keys                 :class:`ReleaseBelowThresholdError`
  4   verified payload is one canonical manifest   :class:`MalformedReleaseError`
  5   every digest matches its bytes               :class:`ReleaseDigestMismatchError`
  6   sequence strictly above the last accepted    :class:`ReleaseRollbackError`
  7   prior hash is the last accepted release      :class:`BrokenReleaseChainError`
  8   lease in force under the trusted clock       :class:`ExpiredReleaseError`,
                                                   :class:`UntrustedClockError`
  9   neither the release nor its signers revoked  :class:`RevokedReleaseError`
  10  authenticated content matches the manifest   :class:`ReleaseContentError`
  ==  ===========================================  ============================

- Steps 1-5 and the two time comparisons of step 8 are the checks every
  consumer runs on a candidate by itself; they and their errors are defined
  once, in ``smf_assurance.subjects.release`` (so the runtime adapters, which depend on
  ``subjects/`` only, run the same code and raise the same types), and this
  module lets those errors through unchanged. The refusals only a persisted
  trusted state can make (:class:`ReplayedReleaseError`,
  :class:`BrokenReleaseChainError`, :class:`RevokedReleaseError`,
  :class:`ReleaseContentError`, :class:`NoVerifiedReleaseError`) are
  subclasses of the shared :class:`~smf_assurance.subjects.release.ReleaseCheckError`, and
  the clock check against the persisted high-water mark raises the shared
  :class:`~smf_assurance.subjects.release.UntrustedClockError`.
- Nothing here changes the trusted state. A caller persists
  :meth:`VerifiedRelease.accepted_state` first and only then switches to the
  release, so a crash between the two can never leave a gate running a release
  its persisted state does not know.
- A consumer with no accepted release yet takes the first valid release
  without a chain check: the trust root is its anchor, as TUF's shipped root
  is. Every later release must chain to the one before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

from smf_assurance.core.predicates import PredicateError
from smf_assurance.core.projection import (
    AnalysisProjection,
    EnforcementProjection,
    PolicySet,
    ProjectionError,
    build_policy_set,
    decode_analysis,
    decode_enforcement,
    projection_bytes,
)
from smf_assurance.subjects import dsse
from smf_assurance.subjects import release as shared
from smf_assurance.subjects.canonical import CanonicalJSONError, canonical_bytes
from smf_assurance.subjects.registry import KeyRegistry, RegistryError, RegistryFile
from smf_assurance.subjects.release import (
    AuthenticatedRelease,
    ReleaseBundle,
    ReleaseCheckError,
    ReleaseDigestMismatchError,
    ReleaseManifest,
    ReleaseRollbackError,
    TrustRoot,
    UntrustedClockError,
    authenticate_release,
    check_issued_before,
    check_lease_in_force,
    check_release_digests,
    trust_root_keys,
)

DEFAULT_MAX_SKEW_MS: Final = shared.DEFAULT_MAX_SKEW_MS
"""How far the local clock may be from true time; every time check assumes the
worst within this bound (fail closed). One value for the gate and the adapters."""


class ReplayedReleaseError(ReleaseRollbackError):
    """The release IS the last accepted one, offered again: nothing to do.

    TUF 5.4.3.1: an equal version is discarded without switching. A gate-only
    refinement of the shared rollback error: only a persisted state knows which
    release was accepted last.
    """

    reason_code = "release_replayed"


class BrokenReleaseChainError(ReleaseCheckError):
    """The prior release hash is not the hash of the last accepted release.

    TUF 5.3.4/5.3.5, continuity from the trusted state: a release signed for
    another history (a fork, or a pre-signed release from a compromised key
    used out of order) is refused.
    """

    reason_code = "release_chain_broken"


class RevokedReleaseError(ReleaseCheckError):
    """The release id is revoked, or its threshold is met only with revoked keys.

    Revocations accumulate across accepted releases, so a release cannot
    un-revoke a compromised signing key, and a revoked release signed for a
    higher sequence (a fast-forward attack) is refused.
    """

    reason_code = "release_revoked"


class ReleaseContentError(ReleaseCheckError):
    """Authenticated bytes that are unusable: a projection or registry that does
    not decode canonically, names another release, or does not compile."""

    reason_code = "release_content_invalid"


class NoVerifiedReleaseError(ReleaseCheckError):
    """No verified release is in force: the gate denies everything (fail closed)."""

    reason_code = "no_verified_release"


@dataclass(frozen=True, slots=True)
class TrustedTime:
    """One reading of the local clock and how far it may be from true time."""

    now_ms: int
    max_skew_ms: int = DEFAULT_MAX_SKEW_MS

    def __post_init__(self) -> None:
        if self.max_skew_ms < 0:
            raise ValueError("clock skew bound must not be negative")

    @property
    def latest_ms(self) -> int:
        """The latest true time this reading allows."""
        return self.now_ms + self.max_skew_ms


@dataclass(frozen=True, slots=True)
class LastAccepted:
    """The persisted trusted state: the last release this consumer accepted."""

    release_id: str
    sequence: int
    manifest_hash: str
    issued_at_ms: int
    lease_expires_at_ms: int
    accepted_at_ms: int
    clock_high_water_ms: int
    """The latest clock reading known to have happened (never decreases)."""
    revoked_key_ids: frozenset[str] = frozenset()
    revoked_release_ids: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class VerifiedRelease:
    """A release that passed every check, with its content ready to use."""

    manifest: ReleaseManifest
    manifest_hash: str
    signer_key_ids: frozenset[str]
    policy_set: PolicySet
    registry: KeyRegistry
    analysis: AnalysisProjection
    bundle_bytes: bytes
    revoked_key_ids: frozenset[str]
    revoked_release_ids: frozenset[str]

    @property
    def release_id(self) -> str:
        return self.manifest.release_id

    @property
    def sequence(self) -> int:
        return self.manifest.sequence

    def accepted_state(self, time: TrustedTime, high_water_ms: int = 0) -> LastAccepted:
        """The state to persist when this release is accepted at ``time``."""
        return LastAccepted(
            release_id=self.manifest.release_id,
            sequence=self.manifest.sequence,
            manifest_hash=self.manifest_hash,
            issued_at_ms=self.manifest.issued_at_ms,
            lease_expires_at_ms=self.manifest.lease_expires_at_ms,
            accepted_at_ms=time.now_ms,
            clock_high_water_ms=max(high_water_ms, time.now_ms),
            revoked_key_ids=self.revoked_key_ids,
            revoked_release_ids=self.revoked_release_ids,
        )


def check_clock(issued_at_ms: int, high_water_ms: int, time: TrustedTime) -> None:
    """Refuse a clock that contradicts what is trusted (:class:`UntrustedClockError`)."""
    if time.latest_ms < high_water_ms:
        raise UntrustedClockError(
            f"clock reads {time.now_ms}, before the already observed {high_water_ms} "
            f"by more than the {time.max_skew_ms} ms skew bound"
        )
    check_issued_before(issued_at_ms, time.latest_ms)


def check_lease(lease_expires_at_ms: int, time: TrustedTime) -> None:
    """TUF 5.4.4, "Check for a freeze attack", against the worst case in the skew:
    the lease must outlast the latest true time this clock reading allows
    (``smf_assurance.subjects.release.check_lease_in_force``)."""
    check_lease_in_force(lease_expires_at_ms, time.latest_ms)


def check_in_force(last: LastAccepted, time: TrustedTime, high_water_ms: int = 0) -> None:
    """Is the accepted release still usable now? (clock, then lease)."""
    check_clock(last.issued_at_ms, max(last.clock_high_water_ms, high_water_ms), time)
    check_lease(last.lease_expires_at_ms, time)


class ReleaseTrust:
    """The trusted release state of one consumer: trust root + last accepted release.

    Immutable: a successful verification returns a :class:`VerifiedRelease`;
    the caller persists its state and builds the next ``ReleaseTrust`` from it.
    """

    def __init__(self, root: TrustRoot, last: LastAccepted | None = None) -> None:
        self._keys = trust_root_keys(root)
        self._threshold = root.threshold
        self.last = last

    # -- the two entry points -------------------------------------------------

    def verify_update(self, data: bytes, time: TrustedTime) -> VerifiedRelease:
        """Verify a candidate release that would replace the last accepted one."""
        authenticated = self._authenticate(data)
        bundle, manifest = authenticated.bundle, authenticated.manifest
        verified, digest = authenticated.verified, authenticated.manifest_hash
        self._check_digests(bundle, manifest)
        last = self.last
        if last is not None:
            self._check_rollback(manifest, digest, last)
            self._check_chain(manifest, last)
        high_water = 0 if last is None else last.clock_high_water_ms
        self._check_freeze(manifest, high_water, time)
        previous_keys = frozenset() if last is None else last.revoked_key_ids
        previous_releases = frozenset() if last is None else last.revoked_release_ids
        revoked_keys = previous_keys | frozenset(manifest.revocations.key_ids)
        revoked_releases = previous_releases | frozenset(manifest.revocations.release_ids)
        self._check_revoked(manifest, verified.key_ids, revoked_keys, revoked_releases)
        return self._content(
            bundle, manifest, digest, verified, data, revoked_keys, revoked_releases
        )

    def verify_stored(self, data: bytes, time: TrustedTime) -> VerifiedRelease:
        """Re-verify the persisted copy of the last accepted release (on start).

        Not a rollback or chain question (it IS the last accepted release), but
        the bytes must be exactly what was accepted, still signed by the current
        trust root, intact, in force and not revoked.
        """
        last = self.last
        if last is None:
            raise NoVerifiedReleaseError("no release has been accepted yet")
        authenticated = self._authenticate(data)
        bundle, manifest = authenticated.bundle, authenticated.manifest
        verified, digest = authenticated.verified, authenticated.manifest_hash
        self._check_digests(bundle, manifest)
        if digest != last.manifest_hash or manifest.sequence != last.sequence:
            # The stored copy and the persisted state disagree: mix-and-match of state.
            raise ReleaseDigestMismatchError(
                f"stored release {digest} is not the accepted release {last.manifest_hash}"
            )
        self._check_freeze(manifest, last.clock_high_water_ms, time)
        self._check_revoked(
            manifest, verified.key_ids, last.revoked_key_ids, last.revoked_release_ids
        )
        return self._content(
            bundle,
            manifest,
            digest,
            verified,
            data,
            last.revoked_key_ids,
            last.revoked_release_ids,
        )

    # -- the checks, in order -------------------------------------------------

    def _authenticate(self, data: bytes) -> AuthenticatedRelease:
        """Steps 1-4 (``smf_assurance.subjects.release.authenticate_release``): decode once, verify
        a threshold of distinct keys, decode the verified payload once (``protocol.md``,
        "Multi-signature Verification"); its errors are the shared ones."""
        return authenticate_release(data, self._keys, self._threshold)

    @staticmethod
    def _check_digests(bundle: ReleaseBundle, manifest: ReleaseManifest) -> None:
        """Step 5, TUF 5.5.2/5.6.2: check for a mix-and-match attack
        (``smf_assurance.subjects.release.check_release_digests``)."""
        check_release_digests(bundle, manifest)

    @staticmethod
    def _check_rollback(manifest: ReleaseManifest, digest: str, last: LastAccepted) -> None:
        """Step 6, TUF 5.4.3: check for a rollback (or replay) attack."""
        if digest == last.manifest_hash:
            raise ReplayedReleaseError(f"release {manifest.release_id} is already in use")
        if manifest.sequence <= last.sequence:
            raise ReleaseRollbackError(
                f"sequence {manifest.sequence} is not above the accepted {last.sequence}"
            )

    @staticmethod
    def _check_chain(manifest: ReleaseManifest, last: LastAccepted) -> None:
        """Step 7, TUF 5.3.4/5.3.5: continuity from the last trusted release."""
        if manifest.prior_release_hash != last.manifest_hash:
            raise BrokenReleaseChainError(
                f"prior release {manifest.prior_release_hash} is not the accepted "
                f"release {last.manifest_hash}"
            )

    @staticmethod
    def _check_freeze(manifest: ReleaseManifest, high_water_ms: int, time: TrustedTime) -> None:
        """Step 8, TUF 5.4.4: check for a freeze attack under the trusted clock."""
        check_clock(manifest.issued_at_ms, high_water_ms, time)
        check_lease(manifest.lease_expires_at_ms, time)

    def _check_revoked(
        self,
        manifest: ReleaseManifest,
        signers: frozenset[str],
        revoked_keys: frozenset[str],
        revoked_releases: frozenset[str],
    ) -> None:
        """Step 9: check for a revoked release, or a threshold met by revoked keys."""
        if manifest.release_id in revoked_releases:
            raise RevokedReleaseError(f"release {manifest.release_id} is revoked")
        valid = signers - revoked_keys
        if len(valid) < self._threshold:
            raise RevokedReleaseError(
                f"{len(signers) - len(valid)} of the signing keys are revoked; "
                f"{len(valid)} valid signers, threshold {self._threshold}"
            )

    @staticmethod
    def _content(
        bundle: ReleaseBundle,
        manifest: ReleaseManifest,
        digest: str,
        verified: dsse.Verified,
        data: bytes,
        revoked_keys: frozenset[str],
        revoked_releases: frozenset[str],
    ) -> VerifiedRelease:
        """Step 10: parse the authenticated artifacts and bind them to the manifest."""
        try:
            enforcement = decode_enforcement(bundle.enforcement)
            analysis = decode_analysis(bundle.analysis)
            registry_file = msgspec.json.decode(bundle.registry, type=RegistryFile)
            canonical = (
                projection_bytes(enforcement) == bundle.enforcement
                and projection_bytes(analysis) == bundle.analysis
                and canonical_bytes(msgspec.to_builtins(registry_file)) == bundle.registry
            )
            if not canonical:
                raise ReleaseContentError("an artifact is not in canonical form")
            _check_names(manifest, enforcement, analysis)
            policy_set = build_policy_set(enforcement)
            registry = KeyRegistry.from_file(registry_file)
        except (
            ProjectionError,
            PredicateError,
            RegistryError,
            CanonicalJSONError,
            msgspec.DecodeError,
        ) as exc:
            raise ReleaseContentError(str(exc)) from exc
        return VerifiedRelease(
            manifest=manifest,
            manifest_hash=digest,
            signer_key_ids=verified.key_ids,
            policy_set=policy_set,
            registry=registry,
            analysis=analysis,
            bundle_bytes=data,
            revoked_key_ids=revoked_keys,
            revoked_release_ids=revoked_releases,
        )


def _check_names(
    manifest: ReleaseManifest, enforcement: EnforcementProjection, analysis: AnalysisProjection
) -> None:
    """Both projections must name this release and recipe (signed inconsistency)."""
    for name, projection in (("enforcement", enforcement), ("analysis", analysis)):
        if (
            projection.release_id != manifest.release_id
            or projection.release_sequence != manifest.sequence
            or projection.recipe_id != manifest.recipe_id
        ):
            raise ReleaseContentError(
                f"{name} projection names release {projection.release_id} "
                f"#{projection.release_sequence}, not {manifest.release_id} #{manifest.sequence}"
            )
