"""The console's sign-in with a passkey (``smf_assurance.approver.console.access``), in process.

A real registry file re-read as the roster, the console's own ``Sessions`` with a frozen
clock, and ``tests.support.authenticator.SoftAuthenticator`` as the attorney's device. What
these tests prove: a session starts only with an enrolled passkey's assertion over a session
grant naming that passkey's principal and a fresh nonce of this console, used once; it ends
with the grant, if sooner than the console's own session; and it lives only while the roster
still enrols that credential for that person. The page and a browser's authenticator:
``tests/browser/test_passkey_browser.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from smf_assurance.approver.console.access import (
    PASSKEY_SESSION,
    LoginRefused,
    Roster,
    Sessions,
)
from smf_assurance.subjects import names
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.passkeys import PAYLOAD_SESSION_GRANT
from smf_assurance.subjects.registry import encode_registry, entry_for
from tests.support.authenticator import SoftAuthenticator, grant_payload
from tests.support.clocks import FrozenClock

pytestmark = pytest.mark.claim("approver-desk.passkey-signed-resolution")

ATTORNEY = "attorney-alex"
PARALEGAL = "paralegal-pat"
HOUR = 3_600_000


class Desk:
    """A roster file with the attorney's and the paralegal's passkeys, and the sessions."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = FrozenClock()
        self.sessions = Sessions(self.clock, challenge_ms=60_000, session_ms=8 * HOUR)
        self.attorney, self.paralegal = SoftAuthenticator(), SoftAuthenticator()
        self.entries = (
            entry_for(generate_signing_key(), ATTORNEY, "approver", tenants=("t",)),
            entry_for(generate_signing_key(), PARALEGAL, "approver", tenants=("t",)),
            entry_for(generate_signing_key(), "runtime", "runtime", runtime_id="r"),
        )
        self.write(self.attorney, self.paralegal)
        self.roster = Roster(path)

    def write(self, *devices: SoftAuthenticator) -> None:
        records = tuple(d.record(ATTORNEY if d is self.attorney else PARALEGAL) for d in devices)
        self.path.write_bytes(encode_registry(self.entries, (), records))

    def login(
        self,
        device: SoftAuthenticator,
        principal: str = ATTORNEY,
        *,
        nonce: str | None = None,
        hours: int = 1,
        grant_type: str = PAYLOAD_SESSION_GRANT,
    ) -> bytes:
        now = self.clock()
        payload = grant_payload(
            principal,
            generate_signing_key(),
            issued_at_ms=now,
            expires_at_ms=now + hours * HOUR,
            nonce=nonce or self.sessions.challenge()[0],
        )
        return device.sign(grant_type, payload)

    def refused(self, data: bytes) -> str:
        with pytest.raises(LoginRefused) as caught:
            self.sessions.login(data, self.roster)
        return caught.value.reason_code


@pytest.fixture
def desk(tmp_path: Path) -> Desk:
    return Desk(tmp_path / "registry.json")


def test_an_enrolled_passkey_signs_in_for_the_grant_and_the_nonce_only_once(desk: Desk) -> None:
    body = desk.login(desk.attorney)

    token, session, principal = desk.sessions.login(body, desk.roster)

    assert (principal.name, session.approver_id) == (ATTORNEY, ATTORNEY)
    assert session.key_id == PASSKEY_SESSION + desk.attorney.id
    assert session.expires_at_ms == desk.clock() + HOUR  # the grant's end, before 8 h
    assert desk.sessions.lookup(token) == session
    assert desk.roster.approver(session.key_id, ATTORNEY) == principal
    assert desk.refused(body) == "login_challenge_unknown_or_used"


def test_a_grant_longer_than_the_console_session_ends_with_the_session(desk: Desk) -> None:
    _, session, _ = desk.sessions.login(desk.login(desk.attorney, hours=12), desk.roster)
    assert session.expires_at_ms == desk.clock() + 8 * HOUR


@pytest.mark.parametrize(
    ("who", "options", "code"),
    [
        pytest.param("stranger", {}, "unknown_passkey", id="unenrolled"),
        pytest.param("paralegal", {}, "session_grant_mismatch", id="another-persons-passkey"),
        pytest.param("attorney", {"hours": 13}, "session_grant_expired", id="too-long"),
        pytest.param(
            "attorney",
            {"grant_type": names.PAYLOAD_RESOLUTION},
            "wrong_payload_type",
            id="not-a-grant",
        ),
        pytest.param(
            "attorney", {"nonce": "A" * 43}, "login_challenge_unknown_or_used", id="nonce"
        ),
    ],
)
def test_no_other_passkey_or_grant_signs_in_as_the_attorney(
    desk: Desk, who: str, options: dict[str, object], code: str
) -> None:
    device = {
        "stranger": SoftAuthenticator(),
        "paralegal": desk.paralegal,
        "attorney": desk.attorney,
    }[who]
    assert desk.refused(desk.login(device, **options)) == code  # type: ignore[arg-type]


def test_an_assertion_without_user_verification_does_not_sign_in(desk: Desk) -> None:
    now = desk.clock()
    payload = grant_payload(
        ATTORNEY,
        generate_signing_key(),
        issued_at_ms=now,
        expires_at_ms=now + HOUR,
        nonce=desk.sessions.challenge()[0],
    )
    body = desk.attorney.sign(PAYLOAD_SESSION_GRANT, payload, user_verified=False)
    assert desk.refused(body) == "passkey_user_not_verified"


def test_a_malformed_passkey_sign_in_is_refused_as_malformed(desk: Desk) -> None:
    assert desk.refused(b'{"schema":"smf.passkey-signed/1"}') == "malformed_login"


def test_a_passkey_session_ends_when_the_roster_no_longer_enrols_it(desk: Desk) -> None:
    _, session, _ = desk.sessions.login(desk.login(desk.attorney), desk.roster)
    assert desk.roster.approver(session.key_id, PARALEGAL) is None  # its person only

    desk.write(desk.paralegal)

    assert desk.roster.approver(session.key_id, ATTORNEY) is None
