"""Ed25519 keys, their identifiers and the files that hold them.

Runtime adapters, approvers, connectors and the gate each hold an Ed25519 key
(ARCHITECTURE.md, "Trust and identity on the bus"); receivers trust the public
keys named in the governed release. Invariants this module keeps:

- A key id is derived from the key itself (:func:`key_id_of`), never chosen.
  So one key has exactly one id and one id names exactly one key: a second
  key cannot claim an id already trusted, and one key cannot be listed under
  two ids to be counted twice toward a signature threshold (TUF
  specification, "File formats": a KEYID is a hash of the key; advisories
  GHSA-3633-5h82-39pq in go-tuf and GHSA-pwqf-9h7j-7mv8 in python-tuf show
  what goes wrong otherwise).
- Every key file is checked on load: its key id must match its public key,
  and its secret seed must derive that public key. A file edited by hand or
  assembled from two keys is refused with :class:`KeyFileError`, never
  half-used.
- Private key files are created with mode 0600 and never overwritten, so a
  second ``keygen`` cannot silently replace an identity the roster trusts.

File I/O lives here, not in ``ops/``, because adapters and approvers load
their own keys and may depend on ``subjects/`` only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec
import nacl.exceptions
import nacl.signing

KEY_ID_PREFIX: Final = "ed25519:"
PRIVATE_KEY_KIND: Final = "smf.ed25519.private/1"
PUBLIC_KEY_KIND: Final = "smf.ed25519.public/1"

PUBLIC_KEY_BYTES: Final = 32
SEED_BYTES: Final = 32
SIGNATURE_BYTES: Final = 64

MAX_KEY_FILE_BYTES: Final = 64 * 1024
"""A key file is a few hundred bytes; anything larger is not one of ours."""

PRIVATE_FILE_MODE: Final = 0o600

MAX_PRINCIPAL_LENGTH: Final = 256
Principal = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PRINCIPAL_LENGTH)]


class KeyFileError(Exception):
    """A key file or public key record is unreadable, inconsistent or refused."""


def key_id_of(verify_key_bytes: bytes) -> str:
    """Return ``ed25519:<sha256 hex>`` of the 32 raw public key bytes.

    The id is a hash of the key, so it cannot be claimed by any other key and
    a verifier can recompute it instead of trusting it.
    """
    if len(verify_key_bytes) != PUBLIC_KEY_BYTES:
        raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_BYTES} bytes")
    return KEY_ID_PREFIX + hashlib.sha256(verify_key_bytes).hexdigest()


@dataclass(frozen=True, eq=False)
class VerifyKey:
    """A trusted Ed25519 public key and its derived key id."""

    public_bytes: bytes
    key_id: str = field(init=False)
    _nacl_key: nacl.signing.VerifyKey = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_id", key_id_of(self.public_bytes))
        object.__setattr__(self, "_nacl_key", nacl.signing.VerifyKey(self.public_bytes))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VerifyKey) and other.public_bytes == self.public_bytes

    def __hash__(self) -> int:
        return hash(self.public_bytes)

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True when ``signature`` is this key's valid signature over ``message``.

        Only a wrong signature answers False; a signature that is not 64 bytes
        is a caller's error (``ValueError``), because the envelope decoder
        rejects it as malformed before it gets here.
        """
        if len(signature) != SIGNATURE_BYTES:
            raise ValueError(f"an Ed25519 signature is {SIGNATURE_BYTES} bytes")
        try:
            self._nacl_key.verify(message, signature)
        except nacl.exceptions.BadSignatureError:
            return False
        return True


@dataclass(frozen=True, eq=False)
class SigningKey:
    """An Ed25519 private key. Its repr names the key id, never the seed."""

    _nacl_key: nacl.signing.SigningKey = field(repr=False)
    verify_key: VerifyKey = field(init=False)

    def __post_init__(self) -> None:
        public = bytes(self._nacl_key.verify_key)
        object.__setattr__(self, "verify_key", VerifyKey(public))

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id!r})"

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        """Rebuild the key from its 32-byte secret seed (RFC 8032 section 5.1.5)."""
        if len(seed) != SEED_BYTES:
            raise ValueError(f"an Ed25519 seed is {SEED_BYTES} bytes")
        return cls(nacl.signing.SigningKey(seed))

    @property
    def key_id(self) -> str:
        return self.verify_key.key_id

    @property
    def public_bytes(self) -> bytes:
        return self.verify_key.public_bytes

    def seed(self) -> bytes:
        """The 32-byte secret seed; only :func:`write_private_key` needs it."""
        return bytes(self._nacl_key)

    def sign(self, message: bytes) -> bytes:
        """Return the 64-byte detached Ed25519 signature over ``message``."""
        return bytes(self._nacl_key.sign(message).signature)


def generate_signing_key() -> SigningKey:
    """A fresh key from the operating system's CSPRNG (libsodium)."""
    return SigningKey(nacl.signing.SigningKey.generate())


class PrivateKeyFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """On-disk form of a private key: ``kind`` versions the format."""

    kind: Literal["smf.ed25519.private/1"]
    key_id: str
    principal: Principal
    public_key: str
    secret_seed: str


class PublicKeyRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A public key as named in rosters and registries of the governed release."""

    kind: Literal["smf.ed25519.public/1"]
    key_id: str
    principal: Principal
    public_key: str


def _b64encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _b64decode(text: str, what: str, length: int) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KeyFileError(f"{what} is not valid base64") from exc
    if len(raw) != length:
        raise KeyFileError(f"{what} is {len(raw)} bytes, expected {length}")
    return raw


def _check_principal(principal: str) -> None:
    if not 1 <= len(principal) <= MAX_PRINCIPAL_LENGTH:
        raise ValueError(f"principal must be 1 to {MAX_PRINCIPAL_LENGTH} characters")


def _verify_key_checked(key_id: str, public_key: str) -> VerifyKey:
    key = VerifyKey(_b64decode(public_key, "public_key", PUBLIC_KEY_BYTES))
    if key.key_id != key_id:
        raise KeyFileError(
            f"key_id {key_id!r} does not match the public key (derived {key.key_id!r})"
        )
    return key


def public_record(key: SigningKey | VerifyKey, principal: str) -> PublicKeyRecord:
    """The public record of ``key`` for ``principal``, to publish in a roster."""
    _check_principal(principal)
    return PublicKeyRecord(
        kind=PUBLIC_KEY_KIND,
        key_id=key.key_id,
        principal=principal,
        public_key=_b64encode(key.public_bytes),
    )


def verify_key_from_record(record: PublicKeyRecord) -> VerifyKey:
    """The verify key of a public record, after checking its key id is its own."""
    return _verify_key_checked(record.key_id, record.public_key)


def private_key_document(key: SigningKey, principal: str) -> bytes:
    """The bytes :func:`write_private_key` writes (without its newline), for a writer
    that creates the file itself (``smf_assurance.ops.local.onboarding``: all files of a change or
    none)."""
    _check_principal(principal)
    return msgspec.json.encode(
        PrivateKeyFile(
            kind=PRIVATE_KEY_KIND,
            key_id=key.key_id,
            principal=principal,
            public_key=_b64encode(key.public_bytes),
            secret_seed=_b64encode(key.seed()),
        )
    )


def write_private_key(path: str | os.PathLike[str], key: SigningKey, principal: str) -> None:
    """Create a 0600 private key file at ``path``; refuse if anything is there.

    ``O_CREAT | O_EXCL`` makes the refusal atomic and also refuses a symlink
    planted at ``path``; ``fchmod`` pins the mode whatever the umask.
    """
    document = private_key_document(key, principal)
    target = Path(path)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError as exc:
        raise KeyFileError(f"refusing to overwrite existing key file {target}") from exc
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(document + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def load_private_key(path: str | os.PathLike[str]) -> tuple[SigningKey, str]:
    """Load and check a private key file; return the key and its principal."""
    target = Path(path)
    try:
        with target.open("rb") as handle:
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {target}: {exc.strerror}") from exc
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"key file {target} is larger than {MAX_KEY_FILE_BYTES} bytes")
    try:
        document = msgspec.json.decode(data, type=PrivateKeyFile)
    except msgspec.DecodeError as exc:
        raise KeyFileError(f"key file {target} is not a {PRIVATE_KEY_KIND} file: {exc}") from exc
    public = _verify_key_checked(document.key_id, document.public_key)
    key = SigningKey.from_seed(_b64decode(document.secret_seed, "secret_seed", SEED_BYTES))
    if key.verify_key != public:
        raise KeyFileError(f"key file {target}: secret_seed does not derive public_key")
    return key, document.principal
