"""Signing by a key the caller never holds: a confined runtime asks its launcher to sign.

A runtime confined by ``smf-assurance runtime run`` has no key file in its
view (docs/CONFINEMENT.md): its launcher keeps the runtime's Ed25519 key
outside the sandbox and serves signatures over a unix socket bound into it
(``SMF_SIGNER_SOCKET``). The adapter signs with a :class:`RemoteSigner`
exactly where it signed with its :class:`~smf_assurance.subjects.keys.SigningKey`
(:class:`Signer` is what both offer), so a proposal, an attestation, an
instance proof or an output close is the same DSSE envelope confined or not.

The wire: one JSON object per line each way on one stream connection.
``{"op": "identity"}`` answers ``{"principal", "key_id", "public_key"}``;
``{"op": "sign", "message": <base64>}`` answers ``{"signature": <base64>}``;
a refusal answers ``{"error": <reason code>}``. The signer side signs only a
DSSE pre-authentication encoding (:func:`parse_pae`) of a payload type the
runtime role signs (:data:`RUNTIME_PAYLOAD_TYPES`) whose payload names the
runtime's own id, so the socket is no general-purpose signing oracle: no
approval resolution, order, other principal's report or release can be signed
through it.

What it does not stop: any process inside the sandbox can ask for those kinds
of signature, as the adapter does, for as long as the sandbox runs. What
it does stop: the key leaving, or outliving, the sandbox.

Every failure is a :class:`SignerError` with a reason code; the caller fails
closed (the adapter blocks the call it was signing for). Each signature is
verified here against the public key the identity answer named, so a signer
that answers with garbage is refused, not forwarded.
"""

from __future__ import annotations

import base64
import binascii
import json
import socket
import threading
from typing import Final, Protocol

from smf_assurance.subjects import names
from smf_assurance.subjects.keys import PUBLIC_KEY_BYTES, SIGNATURE_BYTES, VerifyKey, key_id_of

SIGNER_SOCKET_ENV: Final = "SMF_SIGNER_SOCKET"
"""The environment variable naming the signer socket inside a sandbox."""
MAX_LINE_BYTES: Final = 256 * 1024
"""A request or an answer is one line of at most this many bytes (a proposal is a few KiB)."""
TIMEOUT_S: Final = 5.0

RUNTIME_PAYLOAD_TYPES: Final[dict[str, str]] = {
    names.PAYLOAD_PROPOSAL: "runtime_id",
    names.PAYLOAD_ATTESTATION: "runtime_id",
    names.PAYLOAD_INSTANCE_PROOF: "runtime_id",
    names.PAYLOAD_OUTPUT_CLOSE: "runtime_id",
    names.PAYLOAD_REPORT: "connector_id",
}
"""What a runtime's adapter signs, and the field of each payload that names the runtime:
proposals, attestations, instance proofs, output closes, and the execution reports the
OpenClaw plugin sends on its own ``smf.result.<runtime_id>`` for a call it ran. Nothing
else is signed for a confined runtime."""

SIGNER_UNAVAILABLE: Final = "signer_unavailable"
SIGNER_REFUSED: Final = "signer_refused"
SIGNER_INVALID: Final = "signer_invalid_answer"


class SignerError(Exception):
    """Signing did not happen; ``reason_code`` says why (never a byte of a key)."""

    def __init__(self, reason_code: str, detail: str = "") -> None:
        super().__init__(f"{reason_code}: {detail}" if detail else reason_code)
        self.reason_code = reason_code


class Signer(Protocol):
    """What a signer offers: its key id, its public half, and a detached signature.

    :class:`~smf_assurance.subjects.keys.SigningKey` (the key in this process) and
    :class:`RemoteSigner` (the key in the launcher) both are one."""

    @property
    def key_id(self) -> str: ...

    @property
    def public_bytes(self) -> bytes: ...

    @property
    def verify_key(self) -> VerifyKey: ...

    def sign(self, message: bytes) -> bytes: ...


def parse_pae(message: bytes) -> tuple[str, bytes]:
    """``(payload_type, payload)`` of a DSSE pre-authentication encoding
    (``"DSSEv1" SP LEN SP type SP LEN SP body``); ``ValueError`` for anything else,
    including a length that does not match or bytes after the body."""
    prefix = b"DSSEv1 "
    if not message.startswith(prefix):
        raise ValueError("not a DSSE pre-authentication encoding")
    rest = message[len(prefix) :]
    parts: list[bytes] = []
    for _ in range(2):
        length_text, sep, rest = rest.partition(b" ")
        if not sep or not length_text.isdigit() or len(length_text) > 9:
            raise ValueError("bad DSSE length field")
        length = int(length_text)
        if length_text != str(length).encode() or len(rest) < length:
            raise ValueError("bad DSSE length field")
        parts.append(rest[:length])
        rest = rest[length:]
        if len(parts) == 1:
            if not rest.startswith(b" "):
                raise ValueError("bad DSSE separator")
            rest = rest[1:]
    if rest:
        raise ValueError("bytes after the DSSE body")
    try:
        payload_type = parts[0].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("payload type is not UTF-8") from exc
    return payload_type, parts[1]


def _b64(text: object, what: str, length: int | None = None) -> bytes:
    if not isinstance(text, str):
        raise SignerError(SIGNER_INVALID, f"{what} is not text")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SignerError(SIGNER_INVALID, f"{what} is not base64") from exc
    if length is not None and len(raw) != length:
        raise SignerError(SIGNER_INVALID, f"{what} is {len(raw)} bytes")
    return raw


class RemoteSigner:
    """The runtime's key, held by its launcher and reached over ``path``.

    The identity is asked once, when built (:meth:`connect`); each :meth:`sign` is
    one request on a connection kept open and made anew after a failure. Safe to call
    from several threads (one request at a time)."""

    def __init__(self, path: str, principal: str, verify_key: VerifyKey) -> None:
        self.path = path
        self.principal = principal
        self._verify_key = verify_key
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._buffer = b""

    def __repr__(self) -> str:
        return f"RemoteSigner(key_id={self.key_id!r}, path={self.path!r})"

    @classmethod
    def connect(cls, path: str) -> RemoteSigner:
        """Ask the signer at ``path`` who it signs as; :class:`SignerError` when it
        cannot be reached or its answer is not a consistent public key."""
        probe = cls(path, "", VerifyKey(bytes(PUBLIC_KEY_BYTES)))
        answer = probe._ask({"op": "identity"})
        probe.close()
        principal = answer.get("principal")
        key_id = answer.get("key_id")
        public = _b64(answer.get("public_key"), "public_key", PUBLIC_KEY_BYTES)
        if not isinstance(principal, str) or not principal or key_id != key_id_of(public):
            raise SignerError(SIGNER_INVALID, "the identity answer is not consistent")
        return cls(path, principal, VerifyKey(public))

    @property
    def key_id(self) -> str:
        return self._verify_key.key_id

    @property
    def public_bytes(self) -> bytes:
        return self._verify_key.public_bytes

    @property
    def verify_key(self) -> VerifyKey:
        return self._verify_key

    def sign(self, message: bytes) -> bytes:
        """The launcher's signature over ``message``, checked against the key."""
        answer = self._ask({"op": "sign", "message": base64.b64encode(message).decode()})
        signature = _b64(answer.get("signature"), "signature", SIGNATURE_BYTES)
        if not self._verify_key.verify(message, signature):
            raise SignerError(SIGNER_INVALID, "the signature does not verify")
        return signature

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._buffer = b""

    def _ask(self, request: dict[str, str]) -> dict[str, object]:
        line = json.dumps(request).encode() + b"\n"
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    self._sock.settimeout(TIMEOUT_S)
                    self._sock.connect(self.path)
                self._sock.sendall(line)
                answer = self._read_line()
            except OSError as exc:
                self._drop()
                raise SignerError(SIGNER_UNAVAILABLE, type(exc).__name__) from exc
        try:
            decoded = json.loads(answer)
        except ValueError as exc:
            raise SignerError(SIGNER_INVALID, "the answer is not JSON") from exc
        if not isinstance(decoded, dict):
            raise SignerError(SIGNER_INVALID, "the answer is not an object")
        error = decoded.get("error")
        if error is not None:
            raise SignerError(SIGNER_REFUSED, str(error)[:64])
        return decoded

    def _read_line(self) -> bytes:
        assert self._sock is not None
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise OSError("answer too long")
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("the signer closed the connection")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line
