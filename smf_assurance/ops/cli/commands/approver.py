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
``approver remove --id ID`` takes the entry out the same way; gates then
refuse its signatures and the bus its connection.
"""

from __future__ import annotations

import argparse
import re
from typing import Final

import msgspec

from smf_assurance.ops.cli.cli_json import ApproverAddJson, ApproverRemoveJson
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
from smf_assurance.subjects.names import SubjectError, token
from smf_assurance.subjects.registry import RegistryEntry

ROLE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")
"""A licensed role, in the words the policies' ``required_roles`` use."""


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
        updated = msgspec.structs.replace(registry, entries=kept)
        outcome = sign_and_publish(state, args, authority, updated, Changes())
    value = ApproverRemoveJson(
        principal=args.principal,
        key_ids=tuple(e.key.key_id for e in gone),
        policies_from=outcome.policies_from,
        release=outcome.json(),
    )
    rows = [
        ("approver", args.principal),
        ("key ids revoked", ", ".join(e.key.key_id for e in gone)),
    ]
    return finish(args, outcome, value, rows)
