"""The governed release on the wire: manifest, bundle, trust root, bucket names.

ARCHITECTURE.md, "Governed releases": a release is two projections and the
key registry, described by a manifest that carries its sequence number, the
hash of the prior release, issue time, lease expiry and the digests of what it
describes, signed as a DSSE envelope by a threshold of the keys of a trust
root. Every consumer (gate, adapters, Swarm) verifies a release before using
it, so the contract lives here, in ``subjects/``, which imports nothing else of
ours. The checks themselves are in ``pipeline.core.release_trust``.

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

from typing import Annotated, Final, Literal

import msgspec

from subjects.canonical import IDENTITY_PATTERN, sha256_identity
from subjects.dsse import Envelope
from subjects.keys import KeyFileError, PublicKeyRecord, VerifyKey, verify_key_from_record
from subjects.patterns import Millis

PAYLOAD_RELEASE_MANIFEST: Final = "application/vnd.smf.release-manifest+json;v=1"
"""DSSE payload type of a release manifest: a signature for anything else never counts."""

MANIFEST_SCHEMA: Final = "smf.release-manifest/1"
BUNDLE_SCHEMA: Final = "smf.release-bundle/1"
TRUST_ROOT_SCHEMA: Final = "smf.release-trust-root/1"

RELEASE_BUCKET: Final = "SMF_RELEASES"
"""The JetStream key-value bucket releases are published to; gates watch it."""
RELEASE_KEY_PREFIX: Final = "release."

MAX_BUNDLE_BYTES: Final = 900 * 1024
"""Bound on an encoded bundle, checked before parsing; below the NATS default
``max_payload`` of 1 MiB, so any bundle we accept can also be published."""
MAX_TRUST_ROOT_KEYS: Final = 16
MAX_REVOCATIONS: Final = 1024

# ``\Z``, not ``$``: in Python ``$`` also matches before a trailing newline.
ReleaseId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,127}\Z")]
Identity = Annotated[str, msgspec.Meta(pattern=IDENTITY_PATTERN)]
KeyId = Annotated[str, msgspec.Meta(pattern=r"^ed25519:[0-9a-f]{64}\Z")]
SequenceNumber = Annotated[int, msgspec.Meta(ge=1, le=2**53 - 1)]


class ReleaseFormatError(ValueError):
    """A bundle or trust root does not decode, or is inconsistent in itself."""


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
        raise ReleaseFormatError(f"release bundle is {len(data)} bytes, more than {max_size}")
    try:
        return msgspec.json.decode(data, type=ReleaseBundle)
    except msgspec.DecodeError as exc:
        raise ReleaseFormatError(f"not a release bundle: {exc}") from exc


def encode_trust_root(root: TrustRoot) -> bytes:
    return msgspec.json.encode(root)


def decode_trust_root(data: bytes) -> TrustRoot:
    """Decode a trust root and check it (:func:`trust_root_keys`)."""
    try:
        root = msgspec.json.decode(data, type=TrustRoot)
    except msgspec.DecodeError as exc:
        raise ReleaseFormatError(f"not a release trust root: {exc}") from exc
    trust_root_keys(root)
    return root


def trust_root_keys(root: TrustRoot) -> dict[str, VerifyKey]:
    """The trusted keys by derived id; refuses a root that could miscount.

    Each key id must be the id of its key (``subjects.keys``), no key may be
    listed twice, and the threshold must be reachable: TUF "Detailed client
    workflow", a threshold of *unique* keys.
    """
    keys: dict[str, VerifyKey] = {}
    for record in root.keys:
        try:
            key = verify_key_from_record(record)
        except KeyFileError as exc:
            raise ReleaseFormatError(f"trust root key {record.principal}: {exc}") from exc
        if key.key_id in keys:
            raise ReleaseFormatError(f"trust root lists key {key.key_id} twice")
        keys[key.key_id] = key
    if root.threshold > len(keys):
        raise ReleaseFormatError(
            f"trust root threshold {root.threshold} exceeds its {len(keys)} keys"
        )
    return keys
