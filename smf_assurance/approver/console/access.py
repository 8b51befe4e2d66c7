"""Who is asking, and what they may see: the roster, signed logins, sessions.

The console lists an approval only to an approver the roster lets resolve it
(:func:`entitled`, the gate's own rule). Who is asking is proven, not
claimed: a session starts only with a login signed by an approver key on the
roster over a fresh, single-use challenge (stops an impersonated login and a
replayed one). The roster file is re-read when it changes, and every call
re-checks that the session's key is still on it (a removed approver loses the
list at once); a roster that cannot be read lists nobody.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Final, Literal

import msgspec
import structlog

from smf_assurance.subjects import dsse, passkeys
from smf_assurance.subjects.registry import FollowedRegistry, KeyRegistry, Principal

log = structlog.get_logger(__name__)

LOGIN_PAYLOAD_TYPE: Final = "application/vnd.smf.console-login+json;v=1"
"""DSSE payload type of a console login; inside the PAE, so a login signature
can never be replayed as a show request or a resolution, nor the reverse."""
NONCE_PATTERN: Final = r"^[A-Za-z0-9_-]{43}\Z"
MAX_LOGIN_BYTES: Final = 16 * 1024
MAX_CHALLENGES: Final = 256
MAX_SESSIONS: Final = 256
PASSKEY_SESSION: Final = "passkey:"
"""A session's key id when a passkey signed its sign-in: this prefix, then the
credential id, which the roster must still enrol for the session to live."""


class ConsoleLogin(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An approver's signed login: proof of holding a roster key, over this console's nonce."""

    schema: Literal["smf.console-login/1"]
    approver_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    nonce: Annotated[str, msgspec.Meta(pattern=NONCE_PATTERN)]


def entitled(principal: Principal, tenant_id: str, required_roles: Iterable[str]) -> bool:
    """The gate's rule for who may resolve (and see) an approval, for listing only
    (the gate enforces it): the approval's tenant is one of the approver's, and
    they hold every required role."""
    return tenant_id in principal.entry.tenants and set(required_roles) <= set(
        principal.entry.licensed_roles
    )


class Roster(FollowedRegistry):
    """The approver roster file, re-read whenever it changes; unreadable lists nobody."""

    def refused(self, why: Literal["unreadable", "invalid"], detail: str | None) -> None:
        if why == "unreadable":
            log.warning("console_roster_unreadable", path=str(self.path))
        else:
            log.warning("console_roster_invalid", path=str(self.path), error=detail)

    def approver(self, key_id: str, approver_id: str) -> Principal | None:
        """The roster's approver for this key, if it is still there under this name; for
        a passkey's session, while the roster still enrols that credential for them."""
        registry = self.current()
        if key_id.startswith(PASSKEY_SESSION):
            enrolled = registry.passkeys.get(key_id.removeprefix(PASSKEY_SESSION))
            if enrolled is None or enrolled[1] != approver_id:
                return None
            return registry.person(approver_id)
        principal = registry.principal(key_id)
        if principal is None or principal.entry.role != "approver":
            return None
        return principal if principal.name == approver_id else None


# --- sessions: a signed login over a single-use challenge --------------------------


class LoginRefused(Exception):
    """A login was refused; ``reason_code`` says which check failed."""

    def __init__(self, reason_code: str) -> None:
        super().__init__(reason_code)
        self.reason_code = reason_code


@dataclass(frozen=True, slots=True)
class Session:
    approver_id: str
    key_id: str
    expires_at_ms: int


class Sessions:
    """Challenges and sessions, in memory: a restart signs everybody out."""

    def __init__(self, clock: Callable[[], int], challenge_ms: int, session_ms: int) -> None:
        self._clock = clock
        self._challenge_ms = challenge_ms
        self._session_ms = session_ms
        self._challenges: dict[str, int] = {}
        self._sessions: dict[str, Session] = {}

    def _prune(self, now: int) -> None:
        self._challenges = {n: t for n, t in self._challenges.items() if t > now}
        self._sessions = {k: s for k, s in self._sessions.items() if s.expires_at_ms > now}

    def challenge(self) -> tuple[str, int]:
        """A fresh nonce for one login; the oldest is dropped beyond ``MAX_CHALLENGES``."""
        now = self._clock()
        self._prune(now)
        while len(self._challenges) >= MAX_CHALLENGES:
            del self._challenges[next(iter(self._challenges))]
        nonce = secrets.token_urlsafe(32)
        self._challenges[nonce] = now + self._challenge_ms
        return nonce, now + self._challenge_ms

    def login(self, data: bytes, roster: Roster) -> tuple[str, Session, Principal]:
        """Verify a signed login against the roster's approver keys; start a session.

        The nonce is spent only by a login whose signature verified, and only
        once (stops a replayed login); the signer must be the approver it names
        (stops one approver signing in as another).
        """
        registry = roster.current()
        if passkeys.is_passkey_signed(data):
            return self._passkey_login(data, registry)
        try:
            envelope = dsse.decode_envelope(data, max_size=MAX_LOGIN_BYTES)
            login, verified = dsse.open_struct(
                envelope, registry.trusted("approver"), ConsoleLogin, LOGIN_PAYLOAD_TYPE
            )
        except dsse.SignatureError as exc:  # a payload that is no ConsoleLogin is malformed too
            raise LoginRefused(dsse.reason_code(exc, "malformed_login")) from exc
        signer = next(
            (
                registry.principals[k]
                for k in sorted(verified.key_ids)
                if registry.principals[k].name == login.approver_id
            ),
            None,
        )
        if signer is None:
            raise LoginRefused("approver_identity_mismatch")
        return self._start(login.nonce, signer, signer.verify_key.key_id, None)

    def _passkey_login(self, data: bytes, registry: KeyRegistry) -> tuple[str, Session, Principal]:
        """A sign-in by a passkey: its assertion over a session grant
        (:class:`~smf_assurance.subjects.passkeys.SessionGrant`) naming this console's
        nonce, by a credential the roster enrols for the principal the grant names. The
        session lasts no longer than the grant, which the gate checks on every read the
        page signs with the granted key."""
        try:
            signed = passkeys.decode_passkey_signed(data)
            grant, name = passkeys.open_grant(signed, registry.passkeys, self._clock())
        except dsse.SignatureError as exc:
            raise LoginRefused(dsse.reason_code(exc, "malformed_login")) from exc
        signer = registry.person(name)
        if signer is None:  # the registry enrols passkeys of approvers only
            raise LoginRefused("approver_identity_mismatch")
        key_id = PASSKEY_SESSION + signed.assertion.raw_id
        return self._start(grant.nonce, signer, key_id, grant.expires_at_ms)

    def _start(
        self, nonce: str, signer: Principal, key_id: str, until_ms: int | None
    ) -> tuple[str, Session, Principal]:
        """Spend the nonce (once, and only after the signature verified) and start a
        session for ``signer``, ending at ``until_ms`` if that comes first."""
        now = self._clock()
        self._prune(now)
        if self._challenges.pop(nonce, None) is None:
            raise LoginRefused("login_challenge_unknown_or_used")
        while len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        token = secrets.token_urlsafe(32)
        expires = now + self._session_ms
        session = Session(
            signer.name, key_id, expires if until_ms is None else min(expires, until_ms)
        )
        self._sessions[token] = session
        return token, session, signer

    def lookup(self, token: str | None) -> Session | None:
        session = self._sessions.get(token) if token else None
        if session is None or session.expires_at_ms <= self._clock():
            return None
        return session

    def end(self, token: str | None) -> None:
        if token:
            self._sessions.pop(token, None)
