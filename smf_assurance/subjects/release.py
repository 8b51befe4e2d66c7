"""The governed release on the wire: manifest, bundle, trust root, bucket names.

ARCHITECTURE.md, "Governed releases": a release is two projections and the
key registry, described by a manifest that carries its sequence number, the
hash of the prior release, issue time, lease expiry and the digests of what it
describes, signed as a DSSE envelope by a threshold of the keys of a trust
root. Every consumer (gate, adapters, Swarm) verifies a release before using
it, so the contract lives here, in ``subjects/``, which imports nothing else of
ours.

The checks every consumer runs on a candidate by itself live here too, so an
adapter (which depends on ``subjects/`` only) runs the very same code as the
gate: decode and authenticate (:func:`authenticate_release`: a threshold of
distinct trust-root keys, then the one canonical manifest), the digests
(:func:`check_release_digests`), and the time checks against one clock
reading (:func:`check_issued_before`, :func:`check_lease_in_force`). A
consumer that keeps its floor in memory only (a runtime adapter) adds
:func:`check_sequence_floor`. The gate's persisted trusted state (rollback
across restarts, chaining, accumulated revocations, content) stays in
``smf_assurance.core.release_trust``, which calls these functions and lets their
errors through unchanged. The release errors are defined here, once: each names
the attack it stops and carries one stable reason code, and the gate's own
refusals are subclasses of :class:`ReleaseCheckError` (no translation table,
so an adapter and the gate cannot drift apart).

Invariants this module keeps:

- A release travels as ONE value (:class:`ReleaseBundle`: the envelope and the
  exact bytes of both projections and of the registry), so a consumer never
  sees half a release and a digest is always checked against the bytes it
  names (TUF specification, "Detailed client workflow" 5.5.2 and 5.6.2: the
  hashes stop a mix-and-match attack).
- The manifest's identity (:func:`manifest_hash`) is SHA-256 over the signed
  payload bytes, which are the canonical JSON of the manifest, so the prior
  release hash of the next manifest names exactly what was signed.
- A trust root lists each key once, under the id derived from the key, with a
  threshold it can meet (:func:`trust_root_keys`), so one key is never counted
  twice and a threshold is never unsatisfiable by construction.
- Decoding is bounded before any parsing (:data:`MAX_BUNDLE_BYTES`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar, Final, Literal

import msgspec

from smf_assurance.subjects import dsse
from smf_assurance.subjects.canonical import Identity, sha256_identity
from smf_assurance.subjects.dsse import Envelope
from smf_assurance.subjects.keys import (
    KeyFileError,
    PublicKeyRecord,
    SigningKey,
    VerifyKey,
    verify_key_from_record,
)
from smf_assurance.subjects.patterns import Millis

PAYLOAD_RELEASE_MANIFEST: Final = "application/vnd.smf.release-manifest+json;v=1"
"""DSSE payload type of a release manifest: a signature for anything else never counts."""

MANIFEST_SCHEMA: Final = "smf.release-manifest/1"
BUNDLE_SCHEMA: Final = "smf.release-bundle/1"
TRUST_ROOT_SCHEMA: Final = "smf.release-trust-root/1"

RELEASE_BUCKET: Final = "SMF_RELEASES"
"""The JetStream key-value bucket releases are published to; gates watch it."""
RELEASE_KEY_PREFIX: Final = "release."
SHADOW_KEY: Final = "shadow"
"""The ``SMF_RELEASES`` key of the shadow release (issue 25): one value, a bundle as
any release's, which every gate verifies as it verifies a release and runs beside
its active one without deciding anything with it; a delete of the key withdraws
it. It is outside ``release.>`` on purpose: nothing that looks for releases to use
(a gate's release watch, the Hermes adapter, ``release status``'s list) takes it
for one."""

MAX_BUNDLE_BYTES: Final = 900 * 1024
"""Bound on an encoded bundle, checked before parsing; below the NATS default
``max_payload`` of 1 MiB, so any bundle we accept can also be published."""
MAX_TRUST_ROOT_KEYS: Final = 16
MAX_REVOCATIONS: Final = 1024
DEFAULT_MAX_SKEW_MS: Final = 60_000
"""How far a consumer's clock may be from true time; every time check assumes the
worst within this bound (fail closed)."""
RELEASE_KEY_PATTERN: Final = re.compile(r"release\.\d{16}")

# ``\Z``, not ``$``: in Python ``$`` also matches before a trailing newline.
ReleaseId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,127}\Z")]
KeyId = Annotated[str, msgspec.Meta(pattern=r"^ed25519:[0-9a-f]{64}\Z")]
SequenceNumber = Annotated[int, msgspec.Meta(ge=1, le=2**53 - 1)]


class ReleaseCheckError(ValueError):
    """A release may not be used; the subclass names the threat, ``reason_code`` says it.

    The one release error hierarchy (STYLE.md, python-tuf: one named error per
    threat). The checks every consumer runs raise the classes below, and the
    gate's trusted state (``smf_assurance.core.release_trust``) raises the very same
    classes, adding subclasses only for the threats a persisted state alone can
    see (replay, a broken chain, revocation, unusable content, no release at
    all). So a runtime adapter and the gate name a refusal with one type and one
    reason code, and callers tell failures apart without parsing strings. The
    TypeScript twin (``smf_assurance/adapters/openclaw/src/contract/release.ts``) throws its
    ``ReleaseCheckError`` with the same reason codes.
    """

    reason_code: ClassVar[str] = "release_untrusted"


class MalformedReleaseError(ReleaseCheckError):
    """A bundle, envelope, manifest or trust root does not decode, or contradicts itself.

    Stops parser confusion: nothing undecodable or non-canonical is half-used
    (DSSE ``protocol.md``: "Reject if decoding fails").
    """

    reason_code = "release_malformed"


class BadReleaseSignatureError(ReleaseCheckError):
    """No trust-root key verifies the manifest, or it was signed for another purpose.

    TUF 5.4.2, "Check for an arbitrary software attack": a release not signed
    by the trust root is never used.
    """

    reason_code = "release_bad_signature"


class ReleaseBelowThresholdError(ReleaseCheckError):
    """Fewer distinct trust-root keys verified than the threshold.

    TUF 5.4.2 with thresholds of unique keys: one compromised key, or one key
    signing twice, cannot stand in for several.
    """

    reason_code = "release_below_threshold"


class ReleaseDigestMismatchError(ReleaseCheckError):
    """A projection or the registry is not the one the manifest names.

    TUF 5.5.2 and 5.6.2, "Check against ... hash": stops a mix-and-match
    attack that pairs a signed manifest with other artifacts.
    """

    reason_code = "release_digest_mismatch"


class UntrustedClockError(ReleaseCheckError):
    """The consumer's clock contradicts what it trusts, beyond the skew bound.

    Every consumer refuses a release issued after the latest true time its
    clock allows (the clock is behind or the manifest is dated ahead: the lease
    check cannot be trusted). The gate also refuses a clock reading earlier
    than a time it already observed, so a clock set back cannot revive an
    expired lease (freeze attack by clock rollback). Fail closed either way.
    """

    reason_code = "release_clock_untrusted"


class ExpiredReleaseError(ReleaseCheckError):
    """The lease has run out under the consumer's clock (worst case within the skew).

    TUF 5.4.4, "Check for a freeze attack": a release withheld from updates is
    usable only until its lease expires; after that the gate denies everything.
    """

    reason_code = "release_expired"


class ReleaseRollbackError(ReleaseCheckError):
    """The release is older than one this consumer already used, or forks it.

    TUF 5.4.3, "Check for a rollback attack": an older, validly signed release
    is refused, and one sequence names one release. A runtime adapter keeps its
    floor in memory (:func:`check_sequence_floor`); the gate persists it, so
    the refusal holds across restarts.
    """

    reason_code = "release_rollback"


class ReleaseDigests(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``sha256:<hex>`` of the exact bytes of each artifact the release carries."""

    enforcement: Identity
    analysis: Identity
    registry: Identity


class Revocations(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Release-signing keys and releases that must never be trusted again.

    Consumers keep the union of every revocation they have accepted, so a
    later manifest cannot lift one by leaving it out.
    """

    key_ids: Annotated[tuple[KeyId, ...], msgspec.Meta(max_length=MAX_REVOCATIONS)] = ()
    release_ids: Annotated[tuple[ReleaseId, ...], msgspec.Meta(max_length=MAX_REVOCATIONS)] = ()


class ReleaseManifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a release is; the signed payload of its DSSE envelope.

    ``prior_release_hash`` is the :func:`manifest_hash` of the release this one
    replaces, or ``None`` for the first release of a chain. Times are unix
    milliseconds: a consumer uses the release only while its trusted clock is
    before ``lease_expires_at_ms`` (TUF "Check for a freeze attack").
    """

    schema: Literal["smf.release-manifest/1"]
    release_id: ReleaseId
    sequence: SequenceNumber
    prior_release_hash: Identity | None
    issued_at_ms: Millis
    lease_expires_at_ms: Millis
    recipe_id: Identity
    digests: ReleaseDigests
    revocations: Revocations = Revocations()


class ReleaseBundle(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A whole release as one value: what is published and what is persisted.

    The byte fields are base64 in JSON; they are the exact bytes the manifest
    digests name, never re-serialized.
    """

    schema: Literal["smf.release-bundle/1"]
    envelope: Envelope
    enforcement: bytes
    analysis: bytes
    registry: bytes


class TrustRoot(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The release-signing keys a consumer trusts, and how many must sign.

    Distributed out of band (TUF "Load trusted root metadata"); a release is
    trusted only when ``threshold`` distinct keys listed here signed it.
    """

    schema: Literal["smf.release-trust-root/1"]
    threshold: Annotated[int, msgspec.Meta(ge=1, le=MAX_TRUST_ROOT_KEYS)]
    keys: Annotated[tuple[PublicKeyRecord, ...], msgspec.Meta(max_length=MAX_TRUST_ROOT_KEYS)]


def manifest_hash(payload: bytes) -> str:
    """The identity of a release: SHA-256 over its signed manifest payload bytes."""
    return sha256_identity(payload)


def release_key(sequence: int) -> str:
    """The bucket key a release is published under (a hint; consumers verify).

    Zero-padded, so the keys of a bucket sort in sequence order.
    """
    if not 1 <= sequence <= 2**53 - 1:
        raise ValueError("a release sequence is a positive safe integer")
    return f"{RELEASE_KEY_PREFIX}{sequence:016d}"


def encode_bundle(bundle: ReleaseBundle) -> bytes:
    return msgspec.json.encode(bundle)


def decode_bundle(data: bytes, max_size: int = MAX_BUNDLE_BYTES) -> ReleaseBundle:
    """Decode a bundle, bounded by ``max_size`` before any parsing."""
    if len(data) > max_size:
        raise MalformedReleaseError(f"release bundle is {len(data)} bytes, more than {max_size}")
    try:
        return msgspec.json.decode(data, type=ReleaseBundle)
    except msgspec.DecodeError as exc:
        raise MalformedReleaseError(f"not a release bundle: {exc}") from exc


def encode_trust_root(root: TrustRoot) -> bytes:
    return msgspec.json.encode(root)


def decode_trust_root(data: bytes) -> TrustRoot:
    """Decode a trust root and check it (:func:`trust_root_keys`)."""
    try:
        root = msgspec.json.decode(data, type=TrustRoot)
    except msgspec.DecodeError as exc:
        raise MalformedReleaseError(f"not a release trust root: {exc}") from exc
    trust_root_keys(root)
    return root


def trust_root_keys(root: TrustRoot) -> dict[str, VerifyKey]:
    """The trusted keys by derived id; refuses a root that could miscount.

    Each key id must be the id of its key (``smf_assurance.subjects.keys``), no key may be
    listed twice, and the threshold must be reachable: TUF "Detailed client
    workflow", a threshold of *unique* keys.
    """
    keys: dict[str, VerifyKey] = {}
    for record in root.keys:
        try:
            key = verify_key_from_record(record)
        except KeyFileError as exc:
            raise MalformedReleaseError(f"trust root key {record.principal}: {exc}") from exc
        if key.key_id in keys:
            raise MalformedReleaseError(f"trust root lists key {key.key_id} twice")
        keys[key.key_id] = key
    if root.threshold > len(keys):
        raise MalformedReleaseError(
            f"trust root threshold {root.threshold} exceeds its {len(keys)} keys"
        )
    return keys


# -- the checks every consumer runs -------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthenticatedRelease:
    """A bundle whose manifest a threshold of trust-root keys signed (steps 1-4).

    The digests and the time are not checked yet: see :func:`check_release_digests`,
    :func:`check_issued_before` and :func:`check_lease_in_force`.
    """

    bundle: ReleaseBundle
    manifest: ReleaseManifest
    verified: dsse.Verified
    manifest_hash: str


def authenticate_release(
    data: bytes, keys: Mapping[str, VerifyKey], threshold: int
) -> AuthenticatedRelease:
    """Decode once (bounded), verify a threshold of distinct ``keys``, decode the
    verified payload once as a canonical manifest (DSSE ``protocol.md``,
    "Multi-signature Verification"), and refuse a lease ending before issue.

    ``keys`` are the trusted keys by id (:func:`trust_root_keys`).
    """
    bundle = decode_bundle(data)
    try:
        manifest, verified = dsse.open_struct(
            bundle.envelope, keys, ReleaseManifest, PAYLOAD_RELEASE_MANIFEST, threshold
        )
    except dsse.BelowThresholdError as exc:
        # check for a threshold attack: too few distinct trusted keys
        raise ReleaseBelowThresholdError(str(exc)) from exc
    except (
        dsse.UnknownSignerError,
        dsse.BadSignatureError,
        dsse.PayloadTypeMismatchError,
    ) as exc:
        # check for an arbitrary software attack: not signed by the trust root
        raise BadReleaseSignatureError(f"{type(exc).__name__}: {exc}") from exc
    except dsse.MalformedEnvelopeError as exc:
        raise MalformedReleaseError(str(exc)) from exc
    if manifest.lease_expires_at_ms <= manifest.issued_at_ms:
        # a signed contradiction: no instant at which this release is in force
        raise MalformedReleaseError("lease expires before the release is issued")
    return AuthenticatedRelease(bundle, manifest, verified, manifest_hash(verified.payload))


def check_release_digests(bundle: ReleaseBundle, manifest: ReleaseManifest) -> None:
    """TUF 5.5.2/5.6.2: check for a mix-and-match attack (every artifact, its digest)."""
    digests = manifest.digests
    for name, data, expected in (
        ("enforcement projection", bundle.enforcement, digests.enforcement),
        ("analysis projection", bundle.analysis, digests.analysis),
        ("registry", bundle.registry, digests.registry),
    ):
        if sha256_identity(data) != expected:
            raise ReleaseDigestMismatchError(f"{name} does not match the manifest digest")


def check_issued_before(issued_at_ms: int, latest_ms: int) -> None:
    """A release issued after ``latest_ms`` (clock reading + skew) means the clock
    cannot be trusted for the lease check."""
    if issued_at_ms > latest_ms:
        raise UntrustedClockError(
            f"release issued at {issued_at_ms}, after the clock's latest possible time {latest_ms}"
        )


def check_lease_in_force(lease_expires_at_ms: int, latest_ms: int) -> None:
    """TUF 5.4.4, "Check for a freeze attack", against the worst case in the skew:
    the lease must outlast ``latest_ms``, the latest true time the clock allows."""
    if latest_ms >= lease_expires_at_ms:
        raise ExpiredReleaseError(
            f"lease expired at {lease_expires_at_ms}; trusted time is up to {latest_ms}"
        )


@dataclass(frozen=True, slots=True)
class SequenceFloor:
    """The newest release an in-memory consumer has used: its sequence and hash."""

    sequence: int
    manifest_hash: str


def check_sequence_floor(
    manifest: ReleaseManifest, digest: str, floor: SequenceFloor | None
) -> SequenceFloor:
    """TUF 5.4.3, "Check for a rollback attack", for a floor kept in memory.

    Refuses a sequence below the floor, and another release under the floor's
    own sequence (a fork); the same release again is fine. Returns the floor
    to keep once the release is used (never lower than ``floor``).
    """
    if floor is not None:
        if manifest.sequence < floor.sequence:
            raise ReleaseRollbackError(
                f"sequence {manifest.sequence} is below the {floor.sequence} already used"
            )
        if manifest.sequence == floor.sequence and digest != floor.manifest_hash:
            raise ReleaseRollbackError(
                f"sequence {manifest.sequence} names another release than the one already used"
            )
    return SequenceFloor(manifest.sequence, digest)


# -- what a gate reports of its releases (issue 22) ---------------------------------

PAYLOAD_RELEASE_REPORT: Final = "application/vnd.smf.release-report+json;v=1"
"""DSSE payload type of a gate's :class:`ReleaseReport`."""
RELEASE_REPORT_SCHEMA: Final = "smf.release-report/1"
MAX_REPORTED_REFUSALS: Final = 32
MAX_REPORT_TEXT: Final = 300
"""Bound on a refusal's detail in a report: the reason code is the machine value;
the detail is a sentence for a person and never holds a payload."""

ReportText = Annotated[str, msgspec.Meta(max_length=MAX_REPORT_TEXT)]
ReleaseOutcome = Literal["adopted", "superseded", "refused", "pending", "unseen"]
"""What a gate did with one candidate: ``adopted`` (it is the gate's active
release), ``superseded`` (adopted, then replaced by a later release),
``refused`` (with a reason code; a ``retryable`` refusal such as
``release_chain_broken`` is tried again when the gate's state moves),
``pending`` (seen, not yet decided) or ``unseen``."""


class ReleaseReportRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``smf.release.report``: which candidate the asker wants news of, if any.

    ``origin`` is where the gate found it (``kv:<key>@<revision>`` for the
    bucket, as the publisher's ``create`` returned it); ``manifest_hash`` is
    what the publisher signed."""

    manifest_hash: Identity | None = None
    origin: ReportText | None = None


class ReportedRelease(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    release_id: ReleaseId
    sequence: SequenceNumber
    manifest_hash: Identity
    lease_expires_at_ms: Millis


class ReportedRefusal(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    origin: ReportText
    reason_code: ReportText
    detail: ReportText
    at_ms: Millis
    retryable: bool


Count = Annotated[int, msgspec.Meta(ge=0)]


class ShadowCounts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a gate did with its shadow release since that shadow was loaded (issue 25).

    The shadow never waits in the way of a verdict: each decision is handed to it
    after the verdict is answered, into a bounded queue, so under overload some are
    ``dropped`` (counted, never waited for)."""

    evaluated: Count
    """Decisions evaluated under the shadow."""
    disagreed: Count
    """Of those, the ones the shadow would have decided otherwise."""
    recorded: Count
    """Disagreements written to the ledger as ``shadow`` entries."""
    unrecorded: Count
    """Disagreements the ledger did not take (an outage): counted, not retried."""
    dropped: Count
    """Decisions or disagreements dropped because the shadow's queue was full."""
    skipped: Count
    """Decisions not evaluated: the shadow was not in force, or the decision was made
    under another release than the one the shadow runs beside."""
    failed: Count
    """Shadow evaluations that raised (logged by type): no effect on any verdict."""


class ReleaseReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A gate's own account of its releases, signed with its gate key.

    Issue 22: ``release publish`` said "published" for a release the gate then
    refused, visible only in the gate's log. The gate's refusals are now told
    to whoever may ask (publishers and operators, docs/BUS-PERMISSIONS.md),
    and a publisher counts an answer only when a gate key of the registry it
    trusts signed it. ``in_force`` is whether the gate decides anything now
    (a release whose lease ran out is ``active`` but not in force)."""

    schema: Literal["smf.release-report/1"]
    gate: ReportText
    at_ms: Millis
    active: ReportedRelease | None
    in_force: bool
    refusals: Annotated[tuple[ReportedRefusal, ...], msgspec.Meta(max_length=MAX_REPORTED_REFUSALS)]
    asked: ReleaseOutcome | None = None
    asked_refusal: ReportedRefusal | None = None
    shadow: ReportedRelease | msgspec.UnsetType = msgspec.UNSET
    """The shadow release the gate runs beside its active one (issue 25). Unset (left
    out of the encoding) when it runs none, so a report without a shadow has the
    bytes it had before the field existed (docs/SUBJECTS.md, "Additive optional
    fields")."""
    shadow_counts: ShadowCounts | msgspec.UnsetType = msgspec.UNSET
    """What the gate did with its shadow; unset without one."""


def sign_release_report(report: ReleaseReport, gate_key: SigningKey) -> bytes:
    return dsse.encode_envelope(dsse.sign_struct(PAYLOAD_RELEASE_REPORT, report, [gate_key]))


def open_release_report(data: bytes, gate_keys: Mapping[str, VerifyKey]) -> ReleaseReport:
    """The report, if a gate key of ``gate_keys`` signed it; raises
    :class:`~smf_assurance.subjects.dsse.SignatureError` otherwise (an unsigned or foreign
    answer never counts as an adoption)."""
    report, _ = dsse.open_struct(
        dsse.decode_envelope(data, MAX_BUNDLE_BYTES),
        gate_keys,
        ReleaseReport,
        PAYLOAD_RELEASE_REPORT,
    )
    return report


def release_keys_newest_first(keys: Iterable[str]) -> list[str]:
    """The bucket's release keys, highest sequence first; other keys are dropped.

    A key is only a hint: whatever is read under it is verified before use.
    """
    return sorted((key for key in keys if RELEASE_KEY_PATTERN.fullmatch(key)), reverse=True)
