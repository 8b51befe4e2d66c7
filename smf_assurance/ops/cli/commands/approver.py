"""``approver``: put an approver on the roster, or take one off.

The approver's keys are made where the approver is, and only public halves
travel: ``smf-assurance keys new --id ID --out ID.key`` and
``smf-assurance keys public --key ID.key --json > ID.pub.json`` (the signing
key), ``smf-assurance keys nkey --out ID.nkey`` (the bus credential; it prints
the public user ``U...``). The operator then runs

    smf-assurance approver add --id ID --role licensed_attorney --tenant T \\
        --public-key ID.pub.json --bus-user U... --release-key FILE

which adds the registry entry (role ``approver``, its tenants and licensed
roles, its bus user) in the next release signed with the operator's release
keys and published as ``release publish`` does. A file holding a private key
is refused: the operator's seat never holds an approver's secret.
``approver remove --id ID`` takes the entry out the same way, with its passkeys;
gates then refuse its signatures and the bus its connection.

A passkey (``smf_assurance.subjects.passkeys``) is enrolled the same way:
the approver's browser registers a credential with the enrolment challenge for
its principal and relying party, the registration file reaches the operator, and

    smf-assurance approver passkey-add --id ID --registration FILE \\
        --origin https://console.example --release-key FILE

verifies it and puts its record in the next release. The challenge is no secret,
so anyone may make a registration that verifies for ID: ``--fingerprint`` is the
credential's fingerprint (:func:`~smf_assurance.subjects.passkeys.credential_fingerprint`)
as the approver reads it to the operator from their own console page, on a call the
operator places, and a registration whose credential has another is refused before
anything is written or published. ``approver passkey-remove`` removes one of ID's
passkeys, or all of them.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import msgspec

from smf_assurance.ops.cli.cli_json import (
    ApproverAddJson,
    ApproverPasskeyAddJson,
    ApproverPasskeyRemoveJson,
    ApproverRemoveJson,
)
from smf_assurance.ops.cli.commands.onboard import (
    authority_of,
    checked_bus_user,
    finish,
    read_public_record,
    refusals_in_one_line,
    sign_and_publish,
    state_of,
)
from smf_assurance.ops.local.onboarding import Changes, OnboardingError, read_registry, state_lock
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.names import SubjectError, token
from smf_assurance.subjects.passkeys import (
    MAX_ORIGINS,
    PasskeyRecordError,
    check_origin,
    credential_fingerprint,
    record_from_registration,
)
from smf_assurance.subjects.registry import RegistryEntry, RegistryFile

ROLE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")
"""A licensed role, in the words the policies' ``required_roles`` use."""
RP_ID: Final = re.compile(r"[a-z0-9.-]{1,253}")
"""A relying party id as a passkey record spells it: a domain, lower case."""
MAX_REGISTRATION_BYTES: Final = 64 * 1024
MAX_LABEL: Final = 64
FINGERPRINT: Final = re.compile(r"[0-9a-f]{4}(?:-[0-9a-f]{4}){3}")


def _tenants(given: list[str]) -> tuple[str, ...]:
    for tenant in given:
        try:
            token(tenant)  # it names the pending subject the approver may read
        except SubjectError:
            raise OnboardingError(f"--tenant: {tenant!r} is not a tenant id") from None
    return tuple(dict.fromkeys(given))


def _roles(given: list[str]) -> tuple[str, ...]:
    for role in given:
        if not ROLE.fullmatch(role):
            raise OnboardingError(f"--role: {role!r} is not a role (a-z, 0-9, _)")
    return tuple(dict.fromkeys(given))


def _fingerprint(given: str) -> str:
    """The fingerprint as the approver read it, in the one spelling the command compares."""
    spelled = given.strip().lower().replace(" ", "")
    if not FINGERPRINT.fullmatch(spelled):
        raise OnboardingError(f"--fingerprint: {given!r} is not xxxx-xxxx-xxxx-xxxx (hex)")
    return spelled


def _approver_named(registry: RegistryFile, principal: str, state: str) -> None:
    if not any(e.role == "approver" and e.key.principal == principal for e in registry.entries):
        raise OnboardingError(f"no approver {principal} in the registry of {state}")


@refusals_in_one_line
def run_add(args: argparse.Namespace) -> int:
    state = state_of(args)
    record = read_public_record(args.public_key)
    if record.principal != args.principal:
        raise OnboardingError(
            f"--public-key {args.public_key} is {record.principal}'s, not {args.principal}'s"
        )
    try:
        token(args.principal)  # it names its inbox on the bus, _INBOX.<principal>
    except SubjectError:
        raise OnboardingError(f"--id: {args.principal!r} cannot name an inbox on the bus") from None
    user = checked_bus_user(args.bus_user)
    tenants, roles = _tenants(args.tenant), _roles(args.role)
    with state_lock(state):
        registry = read_registry(state)
        for entry in registry.entries:
            if entry.key.principal == args.principal:
                raise OnboardingError(f"principal {args.principal} is already in the registry")
            if entry.key.key_id == record.key_id:
                raise OnboardingError(
                    f"key {record.key_id} is already registered ({entry.key.principal})"
                )
            if entry.nats_user == user:
                raise OnboardingError(f"bus user {user} is already {entry.key.principal}'s")
        authority = authority_of(state, args)
        entry = RegistryEntry(
            key=record, role="approver", tenants=tenants, licensed_roles=roles, nats_user=user
        )
        updated = msgspec.structs.replace(registry, entries=(*registry.entries, entry))
        outcome = sign_and_publish(state, args, authority, updated, Changes())
    value = ApproverAddJson(
        principal=args.principal,
        key_id=record.key_id,
        licensed_roles=roles,
        tenants=tenants,
        nats_user=user,
        policies_from=outcome.policies_from,
        release=outcome.json(),
    )
    rows = [
        ("approver", args.principal),
        ("key id", record.key_id),
        ("licensed roles", ", ".join(roles)),
        ("tenants", ", ".join(tenants)),
        ("bus user", user),
    ]
    return finish(args, outcome, value, rows)


@refusals_in_one_line
def run_remove(args: argparse.Namespace) -> int:
    state = state_of(args)
    with state_lock(state):
        registry = read_registry(state)
        gone = tuple(
            e
            for e in registry.entries
            if e.role == "approver" and e.key.principal == args.principal
        )
        if not gone:
            raise OnboardingError(f"no approver {args.principal} in the registry of {state.root}")
        authority = authority_of(state, args)
        kept = tuple(e for e in registry.entries if e not in gone)
        # a passkey of someone off the roster would make every reader refuse the registry
        passkeys = tuple(p for p in registry.passkeys if p.principal != args.principal)
        updated = msgspec.structs.replace(registry, entries=kept, passkeys=passkeys)
        outcome = sign_and_publish(state, args, authority, updated, Changes())
    dropped = len(registry.passkeys) - len(passkeys)
    value = ApproverRemoveJson(
        principal=args.principal,
        key_ids=tuple(e.key.key_id for e in gone),
        policies_from=outcome.policies_from,
        release=outcome.json(),
        passkeys_removed=dropped,
    )
    rows = [
        ("approver", args.principal),
        ("key ids revoked", ", ".join(e.key.key_id for e in gone)),
        ("passkeys removed", dropped),
    ]
    return finish(args, outcome, value, rows)


def _domain(rp_id: str) -> str:
    if not RP_ID.fullmatch(rp_id):
        raise OnboardingError(f"relying party {rp_id!r} is not a domain (a-z, 0-9, '.', '-')")
    try:
        ipaddress.ip_address(rp_id)
    except ValueError:
        return rp_id
    raise OnboardingError(f"relying party {rp_id!r} is an address: pass a domain (--rp-id)")


def _origins(given: list[str], rp_id: str | None) -> tuple[tuple[str, ...], str]:
    """The origins and the relying party (by default the first origin's host), checked
    as the gate checks a record's: the relying party a domain, never an address; each
    origin https, or http on localhost, on that domain."""
    origins = tuple(dict.fromkeys(given))
    if len(origins) > MAX_ORIGINS:
        raise OnboardingError(f"--origin: at most {MAX_ORIGINS} origins")
    if rp_id is not None:
        _domain(rp_id)
    else:
        try:
            rp_id = urlsplit(origins[0]).hostname or ""
        except ValueError:
            rp_id = ""  # check_origin names the origin
    for origin in origins:
        try:
            check_origin(origin, rp_id)
        except PasskeyRecordError as exc:
            raise OnboardingError(f"--origin: {exc}") from None
    return origins, _domain(rp_id)


def _label(given: str | None) -> str | None:
    if given is not None and not (0 < len(given) <= MAX_LABEL and given.isprintable()):
        raise OnboardingError(f"--label: 1 to {MAX_LABEL} printable characters")
    return given


def _read_registration(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_REGISTRATION_BYTES + 1)
    except OSError as exc:
        raise OnboardingError(f"--registration: cannot read {path}: {exc.strerror}") from exc
    if len(data) > MAX_REGISTRATION_BYTES:
        raise OnboardingError(f"--registration {path} is not a registration (too large)")
    return data


@refusals_in_one_line
def run_passkey_add(args: argparse.Namespace) -> int:
    state = state_of(args)
    origins, rp_id = _origins(args.origin, args.rp_id)
    label = _label(args.label)
    registration = _read_registration(args.registration)
    expected = _fingerprint(args.fingerprint)
    with state_lock(state):
        registry = read_registry(state)
        _approver_named(registry, args.principal, str(state.root))
        try:
            record = record_from_registration(
                registration,
                principal=args.principal,
                rp_id=rp_id,
                origins=origins,
                enrolled_at_ms=wall_clock_ms(),
                label=label,
            )
        except PasskeyRecordError as exc:
            raise OnboardingError(f"--registration {args.registration}: {exc}") from None
        fingerprint = credential_fingerprint(record.credential_id)
        if fingerprint != expected:
            raise OnboardingError(
                f"--registration {args.registration}: its credential's fingerprint is "
                f"{fingerprint}, not {expected}: not the passkey {args.principal} made; "
                "nothing is enrolled"
            )
        for enrolled in registry.passkeys:
            if enrolled.credential_id == record.credential_id:
                raise OnboardingError(
                    f"passkey {record.credential_id} is already enrolled ({enrolled.principal})"
                )
        authority = authority_of(state, args)
        updated = msgspec.structs.replace(registry, passkeys=(*registry.passkeys, record))
        outcome = sign_and_publish(state, args, authority, updated, Changes())
    value = ApproverPasskeyAddJson(
        principal=args.principal,
        credential_id=record.credential_id,
        fingerprint=fingerprint,
        rp_id=rp_id,
        origins=origins,
        label=label,
        enrolled_at_ms=record.enrolled_at_ms,
        policies_from=outcome.policies_from,
        release=outcome.json(),
    )
    rows = [
        ("approver", args.principal),
        ("credential id", record.credential_id),
        ("fingerprint", fingerprint),
        ("relying party", rp_id),
        ("origins", ", ".join(origins)),
        ("label", label or "-"),
    ]
    return finish(args, outcome, value, rows)


@refusals_in_one_line
def run_passkey_remove(args: argparse.Namespace) -> int:
    state = state_of(args)
    with state_lock(state):
        registry = read_registry(state)
        gone = tuple(
            p
            for p in registry.passkeys
            if p.principal == args.principal
            and (args.credential_id is None or p.credential_id == args.credential_id)
        )
        if not gone:
            which = "" if args.credential_id is None else f" {args.credential_id}"
            raise OnboardingError(
                f"no passkey{which} of {args.principal} in the registry of {state.root}"
            )
        authority = authority_of(state, args)
        kept = tuple(p for p in registry.passkeys if p not in gone)
        updated = msgspec.structs.replace(registry, passkeys=kept)
        outcome = sign_and_publish(state, args, authority, updated, Changes())
    value = ApproverPasskeyRemoveJson(
        principal=args.principal,
        credential_ids=tuple(p.credential_id for p in gone),
        policies_from=outcome.policies_from,
        release=outcome.json(),
    )
    rows = [
        ("approver", args.principal),
        *(("passkey removed", f"{p.credential_id} ({p.label or 'no label'})") for p in gone),
    ]
    return finish(args, outcome, value, rows)
