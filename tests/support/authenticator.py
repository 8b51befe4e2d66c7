"""A software WebAuthn authenticator: a person's security key, which is outside our system.

It makes what a browser hands a relying party after ``navigator.credentials.create``
(a registration with ``none`` attestation) and ``navigator.credentials.get`` (an
assertion), in their JSON forms, from a real P-256 key (ES256, the algorithm every
platform authenticator offers). What it signs is built byte for byte as WebAuthn level
3 says ("Authenticator Data", "Client Data", "Verifying an Authentication
Assertion"), so the gate's verifier is exercised on the real format. The browser
tests use Chrome's own virtual authenticator instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import struct
from dataclasses import dataclass, field
from typing import Any

import cbor2
import msgspec
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from smf_assurance.subjects import dsse
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.dsse import b64encode
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.passkeys import (
    AssertionResponse,
    PasskeyAssertion,
    PasskeyDelegated,
    PasskeyRecord,
    PasskeySigned,
    SessionGrant,
    challenge_for,
    signed_request,
)

UP = 0x01
UV = 0x04
AT = 0x40
AAGUID = bytes(16)


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _cose_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    numbers = key.public_key().public_numbers()
    return cbor2.dumps(
        {1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")}
    )


@dataclass
class SoftAuthenticator:
    """One credential on one authenticator, for one relying party."""

    rp_id: str = "localhost"
    origin: str = "http://localhost:8765"
    credential_id: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    sign_count: int = 0

    @property
    def id(self) -> str:
        return b64url(self.credential_id)

    def _client_data(self, kind: str, challenge: bytes, origin: str | None) -> bytes:
        return json.dumps(
            {
                "type": kind,
                "challenge": b64url(challenge),
                "origin": origin or self.origin,
                "crossOrigin": False,
            },
            separators=(",", ":"),
        ).encode()

    def _auth_data(self, flags: int, rp_id: str | None, attested: bytes = b"") -> bytes:
        rp_hash = hashlib.sha256((rp_id or self.rp_id).encode()).digest()
        return rp_hash + bytes([flags]) + struct.pack(">I", self.sign_count) + attested

    def register(
        self, challenge: bytes, *, user_verified: bool = True, origin: str | None = None
    ) -> dict[str, Any]:
        """``RegistrationResponseJSON`` for a new credential, ``none`` attestation."""
        attested = (
            AAGUID
            + struct.pack(">H", len(self.credential_id))
            + self.credential_id
            + _cose_key(self.key)
        )
        flags = UP | AT | (UV if user_verified else 0)
        attestation = cbor2.dumps(
            {"fmt": "none", "attStmt": {}, "authData": self._auth_data(flags, None, attested)}
        )
        return {
            "id": self.id,
            "rawId": self.id,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(self._client_data("webauthn.create", challenge, origin)),
                "attestationObject": b64url(attestation),
                "transports": ["internal"],
            },
            "clientExtensionResults": {},
        }

    def record(self, principal: str, *, enrolled_at_ms: int = 0) -> PasskeyRecord:
        """The registry record an operator would enrol for this credential."""
        return PasskeyRecord(
            principal=principal,
            credential_id=self.id,
            public_key=b64url(_cose_key(self.key)),
            rp_id=self.rp_id,
            origins=(self.origin,),
            enrolled_at_ms=enrolled_at_ms,
        )

    def assertion(
        self,
        challenge: bytes,
        *,
        user_verified: bool = True,
        user_present: bool = True,
        origin: str | None = None,
        rp_id: str | None = None,
    ) -> PasskeyAssertion:
        """What ``navigator.credentials.get`` returns for ``challenge``."""
        self.sign_count += 1
        flags = (UP if user_present else 0) | (UV if user_verified else 0)
        auth_data = self._auth_data(flags, rp_id)
        client_data = self._client_data("webauthn.get", challenge, origin)
        signature = self.key.sign(
            auth_data + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256())
        )
        return PasskeyAssertion(
            id=self.id,
            raw_id=self.id,
            type="public-key",
            response=AssertionResponse(
                client_data_json=b64url(client_data),
                authenticator_data=b64url(auth_data),
                signature=b64url(signature),
            ),
        )

    def sign(self, payload_type: str, payload: bytes, **options: Any) -> bytes:
        """A passkey-signed request: the assertion over the payload's challenge."""
        assertion = self.assertion(challenge_for(payload_type, payload), **options)
        return signed_request(payload_type, payload, assertion)


def grant_payload(
    principal: str,
    session_key: SigningKey,
    *,
    issued_at_ms: int,
    expires_at_ms: int,
    nonce: str = "n" * 43,
) -> bytes:
    """A sign-in's :class:`SessionGrant` payload, for ``session_key``."""
    grant = SessionGrant(
        schema="smf.session-grant/1",
        principal=principal,
        session_key=b64encode(session_key.public_bytes),
        nonce=nonce,
        issued_at_ms=issued_at_ms,
        expires_at_ms=expires_at_ms,
    )
    return canonical_bytes(msgspec.to_builtins(grant))


def delegated_request(
    grant: bytes, session_key: SigningKey, payload_type: str, payload: bytes
) -> bytes:
    """A request signed by a session key, with the passkey-signed ``grant`` (the bytes
    :meth:`SoftAuthenticator.sign` made over a grant payload)."""
    envelope = dsse.sign(payload_type, payload, [session_key])
    return msgspec.json.encode(
        PasskeyDelegated(
            schema="smf.passkey-delegated/1",
            grant=msgspec.json.decode(grant, type=PasskeySigned),
            envelope=envelope,
        )
    )
