"""DSSE envelopes with Ed25519 signatures: the one signed format on the bus.

Proposals, approval resolutions, execute orders, execution reports, release
manifests and ledger checkpoints are all carried as a DSSE JSON envelope
(https://github.com/secure-systems-lab/dsse, ``envelope.md``) whose
signatures cover ``PAE(payloadType, payload)`` (``protocol.md``, "Signature
Definition"). Verification follows ``protocol.md`` "Multi-signature
Verification" and keeps these invariants:

- The payload type is authenticated: it is inside the PAE, so a message
  signed for one purpose cannot be replayed as another.
- Each trusted key counts at most once toward the threshold, however many
  signatures name it, and trusted key ids must be the ids derived from their
  keys, so one key cannot hide under two ids (TUF specification, "Detailed
  client workflow": a threshold of *unique* keys).
- ``keyid`` is an unauthenticated hint (``protocol.md``: it "MUST NOT be used
  for security decisions"). It only selects which trusted key to try; a
  signature counts only when that key verifies it.
- :class:`Verified` carries the exact bytes that were verified. Callers decode
  those bytes, once, and never go back to the envelope (``protocol.md``, "To
  verify": parse SERIALIZED_BODY only after the signature check).

Every refusal raises a subclass of :class:`SignatureError` named after the
attack it stops, so the gate maps each to its own reason code.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Annotated, ClassVar, Final, TypeVar

import msgspec

from smf_assurance.subjects.canonical import CanonicalJSONError, canonical_bytes
from smf_assurance.subjects.keys import SIGNATURE_BYTES, VerifyKey
from smf_assurance.subjects.signer import Signer

MAX_ENVELOPE_BYTES: Final = 1024 * 1024
"""Default bound on an encoded envelope, checked before any parsing."""

MAX_SIGNATURES: Final = 32
"""Bound on signatures per envelope, so one message cannot demand unbounded
signature checks; the largest threshold we configure is far below it."""

_PAE_PREFIX: Final = b"DSSEv1"
_URL_SAFE_TO_STANDARD: Final = str.maketrans("-_", "+/")

T = TypeVar("T", bound=msgspec.Struct)


class SignatureError(Exception):
    """A signed message was refused; the subclass names the attack, and its
    ``reason_code`` the code every endpoint records the refusal under (see
    :func:`reason_code` for the one a message names itself)."""

    reason_code: ClassVar[str] = "bad_signature"


class MalformedEnvelopeError(SignatureError):
    """The envelope does not decode (``protocol.md``: "Reject if decoding fails").

    Stops parser-confusion and malleability attacks: bad JSON, unknown fields,
    invalid or non-canonical base64, signatures that are not 64 bytes.
    """

    reason_code: ClassVar[str] = "malformed"


class EnvelopeTooLargeError(MalformedEnvelopeError):
    """The encoded envelope exceeds the size bound: stops memory and CPU
    exhaustion by an oversized message, before any parsing."""


class MalformedPayloadError(MalformedEnvelopeError):
    """The verified payload does not decode as the expected type, or is not in
    canonical form (``protocol.md``: "Parse SERIALIZED_BODY according to
    PAYLOAD_TYPE. Reject if the parsing fails"). Stops two parsers reading two
    values from the same signed bytes (duplicate keys, other orderings)."""


class PayloadTypeMismatchError(SignatureError):
    """A trusted signer signed this payload, but for another purpose.

    Stops a type-confusion replay, e.g. a signed approval resolution presented
    as an execute order (``protocol.md``: "Reject if PAYLOAD_TYPE is not a
    supported type"). Checked after the signatures, as the protocol orders it,
    so this error always means an authenticated message in the wrong place.
    """

    reason_code: ClassVar[str] = "wrong_payload_type"


class BadSignatureError(SignatureError):
    """Signatures name trusted keys but none of them verifies.

    Stops forgery and tampering: any change to the payload, the payload type
    or a signature lands here.
    """


class BelowThresholdError(SignatureError):
    """Some trusted keys verified, but fewer distinct keys than the threshold.

    Stops a threshold attack: one compromised key, or one key signing twice,
    cannot stand in for several (TUF "Check for an arbitrary software attack").
    """


class UnknownSignerError(SignatureError):
    """No signature names a trusted key: the signer is not in the roster.

    Stops an outsider's self-signed message and a message stripped of its
    signatures from being taken as authorized.
    """

    reason_code: ClassVar[str] = "unknown_signer"


def reason_code(exc: SignatureError, malformed: str, too_large: str = "") -> str:
    """The reason code a refused signed message is recorded under: the error's own,
    except that a malformed message is named by what it should have been
    (``malformed_proposal``, ``malformed_order``, ...) and an oversized one by
    ``too_large`` where the endpoint tells the two apart."""
    if too_large and isinstance(exc, EnvelopeTooLargeError):
        return too_large
    if isinstance(exc, MalformedEnvelopeError):
        return malformed
    return exc.reason_code


class Signature(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One DSSE signature: ``sig`` is base64 of the 64-byte Ed25519 signature.

    ``keyid`` is required, though ``envelope.md`` lets it be omitted: every
    signer on our bus sets it, and it lets the verifier try exactly one key per
    signature instead of every trusted key.
    """

    keyid: Annotated[str, msgspec.Meta(min_length=1)]
    sig: str


class Envelope(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    rename={"payload_type": "payloadType"},
):
    """The DSSE JSON envelope, with the spec's field names on the wire."""

    payload: str
    payload_type: Annotated[str, msgspec.Meta(min_length=1)]
    signatures: tuple[Signature, ...]


class Verified(msgspec.Struct, frozen=True):
    """What verification proved: these bytes, of this type, by these keys."""

    payload_type: str
    payload: bytes
    key_ids: frozenset[str]


def _pae(payload_type: bytes, payload: bytes) -> bytes:
    return b" ".join(
        (
            _PAE_PREFIX,
            str(len(payload_type)).encode("ascii"),
            payload_type,
            str(len(payload)).encode("ascii"),
            payload,
        )
    )


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE Pre-Authentication Encoding (``protocol.md``, "Functions").

    ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` with lengths in
    ASCII decimal byte counts. The explicit lengths make the encoding
    injective, so no (type, body) pair can be reframed as another.
    """
    return _pae(payload_type.encode("utf-8"), payload)


def b64encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def b64decode(text: str, what: str) -> bytes:
    """Decode standard or URL-safe base64, which ``protocol.md`` says verifiers
    MUST accept, and require the canonical form (RFC 4648 section 3.5:
    padding present, pad bits zero) so that one signature has one spelling."""
    uses_url_safe = "-" in text or "_" in text
    if uses_url_safe and ("+" in text or "/" in text):
        raise MalformedEnvelopeError(f"{what} mixes standard and URL-safe base64")
    standard = text.translate(_URL_SAFE_TO_STANDARD) if uses_url_safe else text
    try:
        raw = base64.b64decode(standard, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedEnvelopeError(f"{what} is not valid base64") from exc
    if b64encode(raw) != standard:
        raise MalformedEnvelopeError(f"{what} is not canonical base64")
    return raw


class DecodedEnvelope(msgspec.Struct, frozen=True):
    """An envelope whose base64 fields were checked and decoded, once.

    What :func:`decode_envelope` returns and :func:`verify` consumes, so the
    bytes checked at the edge are the bytes verified, and nothing is decoded
    twice. ``envelope`` is the wire form, for callers that keep or re-send it.
    """

    envelope: Envelope
    payload_type_bytes: bytes
    raw_payload: bytes
    raw_signatures: tuple[tuple[str, bytes], ...]

    @property
    def payload_type(self) -> str:
        return self.envelope.payload_type


def _decode(envelope: Envelope) -> DecodedEnvelope:
    if len(envelope.signatures) > MAX_SIGNATURES:
        raise MalformedEnvelopeError(
            f"{len(envelope.signatures)} signatures, more than {MAX_SIGNATURES}"
        )
    try:
        payload_type = envelope.payload_type.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MalformedEnvelopeError("payloadType is not valid UTF-8 text") from exc
    payload = b64decode(envelope.payload, "payload")
    signatures: list[tuple[str, bytes]] = []
    for index, signature in enumerate(envelope.signatures):
        raw = b64decode(signature.sig, f"signatures[{index}].sig")
        if len(raw) != SIGNATURE_BYTES:
            raise MalformedEnvelopeError(
                f"signatures[{index}].sig is {len(raw)} bytes, not {SIGNATURE_BYTES}"
            )
        signatures.append((signature.keyid, raw))
    return DecodedEnvelope(
        envelope=envelope,
        payload_type_bytes=payload_type,
        raw_payload=payload,
        raw_signatures=tuple(signatures),
    )


def sign(payload_type: str, payload: bytes, signers: Sequence[Signer]) -> Envelope:
    """Sign ``PAE(payload_type, payload)`` with each signer (``protocol.md``, "To sign")."""
    if not payload_type:
        raise ValueError("payload_type must not be empty")
    if not signers:
        raise ValueError("at least one signer is required")
    if len(signers) > MAX_SIGNATURES:
        raise ValueError(f"at most {MAX_SIGNATURES} signers")
    key_ids = [signer.key_id for signer in signers]
    if len(set(key_ids)) != len(key_ids):
        raise ValueError("the same key is listed twice among the signers")
    message = pae(payload_type, payload)
    return Envelope(
        payload=b64encode(payload),
        payload_type=payload_type,
        signatures=tuple(
            Signature(keyid=signer.key_id, sig=b64encode(signer.sign(message)))
            for signer in signers
        ),
    )


def encode_envelope(envelope: Envelope) -> bytes:
    """The envelope as DSSE JSON bytes."""
    return msgspec.json.encode(envelope)


def decode_envelope(data: bytes, max_size: int = MAX_ENVELOPE_BYTES) -> DecodedEnvelope:
    """Decode DSSE JSON bytes, bounded by ``max_size``, and check and decode every
    base64 field, so a malformed envelope is refused here rather than half-used;
    returns what it decoded, for :func:`verify`."""
    if len(data) > max_size:
        raise EnvelopeTooLargeError(f"envelope is {len(data)} bytes, more than {max_size}")
    try:
        envelope = msgspec.json.decode(data, type=Envelope)
    except RecursionError as exc:
        raise MalformedEnvelopeError("not a DSSE envelope: nested too deep") from exc
    except msgspec.DecodeError as exc:
        raise MalformedEnvelopeError(f"not a DSSE envelope: {exc}") from exc
    return _decode(envelope)


def _check_trusted(trusted: Mapping[str, VerifyKey]) -> None:
    for key_id, key in trusted.items():
        if key_id != key.key_id:
            raise ValueError(
                f"trusted key listed as {key_id!r} but its id is {key.key_id!r}; "
                "a key under a second id would count twice toward a threshold"
            )


def verify(
    envelope: Envelope | DecodedEnvelope,
    trusted: Mapping[str, VerifyKey],
    threshold: int = 1,
    expected_payload_type: str | None = None,
) -> Verified:
    """Verify ``envelope`` against ``threshold`` distinct ``trusted`` keys.

    ``protocol.md``, "Multi-signature Verification", in its order: decode,
    verify each signature against the key its keyid selects, count distinct
    accepted keys against the threshold, then check the payload type. An
    unsatisfiable threshold (more than the trusted keys) is not a caller error
    but a refusal, so a short roster denies instead of crashing the gate.
    """
    if threshold < 1:
        raise ValueError("threshold must be at least 1")
    _check_trusted(trusted)
    decoded = envelope if isinstance(envelope, DecodedEnvelope) else _decode(envelope)
    message = _pae(decoded.payload_type_bytes, decoded.raw_payload)
    accepted: set[str] = set()
    claimed_trusted = False
    for key_id, signature in decoded.raw_signatures:
        key = trusted.get(key_id)
        if key is None:
            continue
        claimed_trusted = True
        if key_id not in accepted and key.verify(message, signature):
            accepted.add(key_id)
    if not claimed_trusted:
        raise UnknownSignerError("no signature is from a trusted key")
    if not accepted:
        raise BadSignatureError("no signature from a trusted key verifies")
    if len(accepted) < threshold:
        raise BelowThresholdError(
            f"{len(accepted)} distinct trusted keys verified, threshold is {threshold}"
        )
    if expected_payload_type is not None and decoded.payload_type != expected_payload_type:
        raise PayloadTypeMismatchError(
            f"payloadType {decoded.payload_type!r}, expected {expected_payload_type!r}"
        )
    return Verified(
        payload_type=decoded.payload_type,
        payload=decoded.raw_payload,
        key_ids=frozenset(accepted),
    )


def sign_struct(payload_type: str, value: msgspec.Struct, signers: Sequence[Signer]) -> Envelope:
    """Sign the canonical JSON bytes of ``value`` (ARCHITECTURE.md, "Canonical
    bytes"), so the signed bytes are the bytes every identity is computed over."""
    return sign(payload_type, canonical_bytes(msgspec.to_builtins(value)), signers)


def open_struct(
    envelope: Envelope | DecodedEnvelope,
    trusted: Mapping[str, VerifyKey],
    type_: type[T],
    payload_type: str,
    threshold: int = 1,
) -> tuple[T, Verified]:
    """Verify, then decode the verified bytes as ``type_``: one decode, at the edge.

    The payload must also be the canonical form of the value it decodes to,
    as :func:`sign_struct` produces it. Otherwise JSON with a duplicate key,
    which msgspec reads as its last value and other parsers may not, or any
    other spelling, could carry a different value than its identity says.
    """
    verified = verify(envelope, trusted, threshold, payload_type)
    return decode_verified(verified, type_), verified


def decode_verified(verified: Verified, type_: type[T]) -> T:
    """Decode verified bytes as ``type_``, which they must spell canonically.

    One decode, at the edge, for every signature kind that yields a :class:`Verified`
    (a DSSE envelope here, a passkey assertion in
    :mod:`smf_assurance.subjects.passkeys`).
    """
    try:
        value = msgspec.json.decode(verified.payload, type=type_)
        canonical = canonical_bytes(msgspec.to_builtins(value))
    except RecursionError as exc:
        # Nesting deeper than the decoder's stack: refused like any malformed
        # payload, never left to escape as an internal error.
        raise MalformedPayloadError(
            f"verified payload nests too deep for a {type_.__name__}"
        ) from exc
    except (msgspec.DecodeError, CanonicalJSONError) as exc:
        raise MalformedPayloadError(
            f"verified payload is not a valid {type_.__name__}: {exc}"
        ) from exc
    if canonical != verified.payload:
        raise MalformedPayloadError(f"verified payload is not the canonical {type_.__name__}")
    return value
