"""Enrolling and removing an attorney's passkey from the operator's seat.

``approver passkey-add`` takes the registration an attorney's authenticator made
with the enrolment challenge (here ``tests.support.authenticator.SoftAuthenticator``,
a software security key); ``approver passkey-remove`` and ``approver remove`` take
passkeys out. Each change is the next release signed with the demo's release key,
as ``approver add`` makes it. What they promise is checked from the outside:

- a running gate adopts the release that enrols the passkey, and a request the
  authenticator signs then opens, as the gate opens a person's request, as the
  attorney's; the fingerprint printed is SHA-256 of the credential's raw id;
- a registration made for another principal, for another origin or without user
  verification, a name not on the roster, a credential already enrolled, a file
  that cannot be read and a bad origin are each refused in one line, with every
  byte of the state as it was;
- a passkey removed (one, all, or with its approver) is in neither the registry
  nor the release published next, and what it signs no longer opens.

Without a running gate the release goes to the state's inbox (``--no-wait``) and is
read from there, verified against the trust root as a gate verifies it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest

from smf_assurance.core.release_trust import ReleaseTrust, TrustedTime, VerifiedRelease
from smf_assurance.governance.releases import latest_in_inbox, load_trust_root
from smf_assurance.ops.cli.cli_json import (
    ApproverPasskeyAddJson,
    ApproverPasskeyRemoveJson,
    ApproverRemoveJson,
)
from smf_assurance.ops.local.stack import Stack
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.pipeline.desks.signed import open_request
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import ShowRequest
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.passkeys import enrolment_challenge
from smf_assurance.subjects.registry import KeyRegistry, load_registry
from smf_assurance.subjects.release import encode_bundle
from tests.support.authenticator import SoftAuthenticator
from tests.support.cli_ops import arun, run, stack, table_value

__all__ = ["stack"]

pytestmark = pytest.mark.claim("approver-desk.passkey-enrolment")

ALEX: Final = "attorney-alex"
PAT: Final = "paralegal-pat"
RP_ID: Final = "localhost"
ORIGIN: Final = "http://localhost:8765"
"""The software authenticator's relying party and origin: a console on this host."""


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    """A demo state (two approvers, the demo's release key) with no gate running."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    return state


def registration(
    folder: Path,
    authenticator: SoftAuthenticator,
    principal: str = ALEX,
    name: str = "registration.json",
    **options: Any,
) -> Path:
    """What the attorney's browser hands over after ``navigator.credentials.create``
    with the enrolment challenge for ``principal``."""
    path = folder / name
    made = authenticator.register(enrolment_challenge(principal, RP_ID), **options)
    path.write_text(json.dumps(made))
    return path


def release_args(state: StateDir) -> list[str]:
    return [
        *("--state-dir", str(state.root)),
        *("--release-key", str(state.key_path("release-signer"))),
    ]


def read_aloud(path: Path) -> str:
    """The fingerprint the attorney's page shows for the credential in ``path`` (one
    that holds none reads a fingerprint no credential has)."""
    try:
        raw_id = json.loads(path.read_text())["rawId"]
    except (OSError, ValueError, KeyError, TypeError):
        return "0000-0000-0000-0000"
    digest = hashlib.sha256(base64.urlsafe_b64decode(raw_id + "=" * (-len(raw_id) % 4)))
    text = digest.hexdigest()
    return "-".join(text[i : i + 4] for i in range(0, 16, 4))


def enrol(state: StateDir, path: Path, principal: str = ALEX, *extra: str) -> list[str]:
    return [
        *("approver", "passkey-add", "--id", principal, "--registration", str(path)),
        *("--fingerprint", read_aloud(path)),
        *("--origin", ORIGIN, *release_args(state), "--no-wait", *extra),
    ]


def enrolled(
    state: StateDir, folder: Path, capsys: pytest.CaptureFixture[str], principal: str = ALEX
) -> SoftAuthenticator:
    """A new authenticator of ``principal``'s, enrolled."""
    key = SoftAuthenticator()
    path = registration(folder, key, principal, name=f"{key.id}.json")
    code, _, err = run(enrol(state, path, principal), capsys)
    assert code == 0, err
    return key


def fingerprint(key: SoftAuthenticator) -> str:
    """What the attorney's side computes from its own credential's raw id."""
    digest = hashlib.sha256(key.credential_id).hexdigest()
    return "-".join(digest[i : i + 4] for i in range(0, 16, 4))


def published(state: StateDir) -> VerifiedRelease:
    """The newest release in the inbox, verified as a gate verifies it."""
    bundle = latest_in_inbox(state.release_inbox)
    assert bundle is not None
    trust = ReleaseTrust(load_trust_root(state.trust_root))
    return trust.verify_update(encode_bundle(bundle), TrustedTime(wall_clock_ms()))


def passkeys_of(registry: KeyRegistry) -> dict[str, str]:
    """Credential id -> the principal it signs as."""
    return {credential: principal for credential, (_, principal) in registry.passkeys.items()}


def signer(key: SoftAuthenticator, principal: str, registry: KeyRegistry) -> str:
    """Whom a show request ``key`` signed opens as, the way the gate opens a person's
    request; raises :class:`StageRefusal` when it does not open."""
    request = ShowRequest(
        schema="smf.approval-show/1",
        approval_id="sha256:" + "ab" * 32,
        resolver_id=principal,
        requested_at_ms=wall_clock_ms(),
    )
    signed = key.sign(names.PAYLOAD_SHOW_REQUEST, canonical_bytes(msgspec.to_builtins(request)))
    opened, signers = open_request(
        signed,
        registry,
        ShowRequest,
        names.PAYLOAD_SHOW_REQUEST,
        malformed="malformed_resolution",
        person="request",
    )
    assert opened == request
    (who,) = signers
    return who.name


def refused_as_unknown(key: SoftAuthenticator, principal: str, registry: KeyRegistry) -> None:
    with pytest.raises(StageRefusal) as refusal:
        signer(key, principal, registry)
    assert refusal.value.reason_code == "unknown_passkey"


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


# --- enrolment ----------------------------------------------------------------------------------


async def test_an_enrolled_passkey_signs_as_its_attorney_once_the_gate_adopts_the_release(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = stack.state
    key = SoftAuthenticator()
    path = registration(tmp_path, key)
    assert not load_registry(state.registry).passkeys
    argv = [
        *("approver", "passkey-add", "--id", ALEX, "--registration", str(path)),
        *("--fingerprint", fingerprint(key).upper()),  # as read over the phone
        *("--origin", ORIGIN, "--label", "YubiKey 5C", *release_args(state), "--json"),
    ]
    code, out, err = await arun(argv, capsys)
    assert code == 0, err
    added = msgspec.json.decode(out, type=ApproverPasskeyAddJson)
    assert (added.principal, added.credential_id, added.fingerprint) == (
        ALEX,
        key.id,
        fingerprint(key),
    )
    assert (added.rp_id, added.origins, added.label) == (RP_ID, (ORIGIN,), "YubiKey 5C")
    (gate,) = added.release.gates
    assert gate.outcome == "adopted"
    assert stack.gate.releases is not None
    active = stack.gate.releases.active
    assert active is not None
    assert active.release_id == added.release.release_id
    assert passkeys_of(active.registry) == {key.id: ALEX}

    registry = load_registry(state.registry)
    ((record, _),) = registry.passkeys.values()
    assert (record.principal, record.credential_id, record.rp_id, record.origins) == (
        ALEX,
        key.id,
        RP_ID,
        (ORIGIN,),
    )
    assert (record.label, record.enrolled_at_ms) == ("YubiKey 5C", added.enrolled_at_ms)
    assert signer(key, ALEX, registry) == ALEX
    assert signer(key, ALEX, active.registry) == ALEX
    refused_as_unknown(SoftAuthenticator(), ALEX, registry)  # a key nobody enrolled


def test_the_table_names_the_credential_and_its_fingerprint(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = SoftAuthenticator()
    code, out, err = run(enrol(state, registration(tmp_path, key)), capsys)
    assert code == 0, err
    assert table_value(out, "approver") == ALEX
    assert table_value(out, "credential id") == key.id
    assert table_value(out, "fingerprint") == fingerprint(key)
    assert table_value(out, "relying party") == RP_ID
    assert table_value(out, "origins") == ORIGIN
    assert table_value(out, "label") == "-"
    assert passkeys_of(load_registry(state.registry)) == {key.id: ALEX}
    assert passkeys_of(published(state).registry) == {key.id: ALEX}


# --- refusals -----------------------------------------------------------------------------------


def test_a_registration_that_does_not_fit_is_refused_in_one_line_and_changes_nothing(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = SoftAuthenticator()
    for_pat = registration(tmp_path, key, PAT, name="for-pat.json")
    elsewhere = registration(tmp_path, key, name="elsewhere.json", origin="https://evil.example")
    unverified = registration(tmp_path, key, name="unverified.json", user_verified=False)
    for_operator = registration(tmp_path, key, "operator", name="for-operator.json")
    good = registration(tmp_path, key)
    another = registration(tmp_path, SoftAuthenticator(), name="another.json")
    absent = tmp_path / "absent.json"
    does_not_verify = "the registration does not verify"
    refusals = [
        (
            enrol(state, for_pat),
            f"--registration {for_pat}: {does_not_verify}: "
            "Client data challenge was not expected challenge",
        ),
        (
            enrol(state, elsewhere),
            f"--registration {elsewhere}: {does_not_verify}: Unexpected client data origin "
            f"\"https://evil.example\", expected one of ['{ORIGIN}']",
        ),
        (
            enrol(state, unverified),
            f"--registration {unverified}: {does_not_verify}: User verification is required "
            "but user was not verified during attestation",
        ),
        (
            enrol(state, for_operator, "operator"),
            f"no approver operator in the registry of {state.root}",
        ),
        (enrol(state, good, "nobody"), f"no approver nobody in the registry of {state.root}"),
        (
            enrol(state, absent),
            f"--registration: cannot read {absent}: No such file or directory",
        ),
        (
            enrol(state, state.registry),
            f"--registration {state.registry}: not a registration (InvalidJSONStructure)",
        ),
        (
            enrol(state, good, ALEX, "--origin", "http://console.example"),
            "--origin: passkey origin 'http://console.example' is neither https nor localhost",
        ),
        (
            enrol(state, good, ALEX, "--rp-id", "firm.example"),
            f"--origin: passkey origin '{ORIGIN}' is not within rp_id 'firm.example'",
        ),
        (
            enrol(state, good, ALEX, "--label", "x" * 65),
            "--label: 1 to 64 printable characters",
        ),
        (
            enrol(state, good, ALEX, "--fingerprint", read_aloud(another)),
            f"--registration {good}: its credential's fingerprint is {fingerprint(key)}, "
            f"not {read_aloud(another)}: not the passkey {ALEX} made; nothing is enrolled",
        ),
        (
            enrol(state, good, ALEX, "--fingerprint", "ab12"),
            "--fingerprint: 'ab12' is not xxxx-xxxx-xxxx-xxxx (hex)",
        ),
    ]
    before = snapshot(state.root)
    for argv, line in refusals:
        code, out, err = run(argv, capsys)
        assert (code, out, err) == (1, "", f"smf-assurance: {line}\n"), argv
        assert snapshot(state.root) == before, argv
    code, _, err = run(enrol(state, good), capsys)  # the same file, with what it was made for
    assert code == 0, err


def test_a_credential_is_enrolled_once_for_anyone(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = enrolled(state, tmp_path, capsys)
    before = snapshot(state.root)
    again = registration(tmp_path, key, name="again.json")
    as_pat = registration(tmp_path, key, PAT, name="as-pat.json")
    for argv in (enrol(state, again), enrol(state, as_pat, PAT)):
        code, out, err = run(argv, capsys)
        line = f"smf-assurance: passkey {key.id} is already enrolled ({ALEX})\n"
        assert (code, out, err) == (1, "", line), argv
        assert snapshot(state.root) == before, argv
    assert passkeys_of(load_registry(state.registry)) == {key.id: ALEX}


# --- removal ------------------------------------------------------------------------------------


def test_passkey_remove_takes_out_one_credential_then_all_of_them(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = enrolled(state, tmp_path, capsys), enrolled(state, tmp_path, capsys)
    pats = enrolled(state, tmp_path, capsys, PAT)
    remove = ["approver", "passkey-remove", "--id", ALEX, *release_args(state), "--no-wait"]

    code, out, err = run([*remove, "--credential-id", first.id, "--json"], capsys)
    assert code == 0, err
    removed = msgspec.json.decode(out, type=ApproverPasskeyRemoveJson)
    assert (removed.principal, removed.credential_ids) == (ALEX, (first.id,))
    assert removed.release.release_id == published(state).release_id
    for registry in (load_registry(state.registry), published(state).registry):
        assert passkeys_of(registry) == {second.id: ALEX, pats.id: PAT}
        refused_as_unknown(first, ALEX, registry)
        assert signer(second, ALEX, registry) == ALEX

    code, out, err = run(remove, capsys)
    assert code == 0, err
    assert table_value(out, "passkey removed") == f"{second.id} (no label)"
    for registry in (load_registry(state.registry), published(state).registry):
        assert passkeys_of(registry) == {pats.id: PAT}
        refused_as_unknown(second, ALEX, registry)
        assert signer(pats, PAT, registry) == PAT

    before = snapshot(state.root)
    for argv, line in [
        (remove, f"no passkey of {ALEX} in the registry of {state.root}"),
        (
            [*remove, "--credential-id", pats.id],
            f"no passkey {pats.id} of {ALEX} in the registry of {state.root}",
        ),
    ]:
        code, out, err = run(argv, capsys)
        assert (code, out, err) == (1, "", f"smf-assurance: {line}\n"), argv
        assert snapshot(state.root) == before, argv


def test_approver_remove_takes_its_passkeys_with_it(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alexs = [enrolled(state, tmp_path, capsys) for _ in range(2)]
    pats = enrolled(state, tmp_path, capsys, PAT)
    remove = ["approver", "remove", *release_args(state), "--no-wait"]

    code, out, err = run([*remove, "--id", ALEX, "--json"], capsys)
    assert code == 0, err
    removed = msgspec.json.decode(out, type=ApproverRemoveJson)
    assert (removed.principal, removed.passkeys_removed) == (ALEX, 2)
    assert removed.release.release_id == published(state).release_id
    for registry in (load_registry(state.registry), published(state).registry):
        assert passkeys_of(registry) == {pats.id: PAT}
        for key in alexs:
            refused_as_unknown(key, ALEX, registry)
    # what an older `approver remove --json` printed still decodes, as none removed
    older = {k: v for k, v in json.loads(out).items() if k != "passkeys_removed"}
    assert msgspec.json.decode(json.dumps(older), type=ApproverRemoveJson).passkeys_removed == 0

    code, out, err = run([*remove, "--id", PAT], capsys)
    assert code == 0, err
    assert table_value(out, "passkeys removed") == "1"
    for registry in (load_registry(state.registry), published(state).registry):
        assert registry.passkeys == {}
