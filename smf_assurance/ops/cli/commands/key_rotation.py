"""``keys rotate`` and ``keys retire``: a principal changes its key with nothing refused.

A rotation is two signed releases, with the switch between them
(docs/OPERATIONS.md, "Key rotation"):

1. ``keys rotate --id P --public-key NEW.pub.json`` adds NEW beside P's key,
   entitled to exactly what the old one is (``KeyRegistry`` refuses two keys of one
   principal that differ). Every receiver that follows the release in force
   (gates, runtimes' adapters, the model gateway) trusts both, so messages in
   flight signed with the old key still count while P switches.
2. P switches: the runtime, approver or model gateway restarts with the new key;
   gate replicas restart one at a time.
3. ``keys retire --id P --key-id OLD`` moves OLD to the registry's ``retired``
   list: trusted for nothing new, no bus credential, still a key the ledger's
   old checkpoints verify with (``KeyRegistry.evidence_keys``).

The bus credential either moves to the new key as it is (no ``--bus-user``: the
credential names the principal, so the old process stays connected until it
restarts) or is rotated with it (``--bus-user``: both connect until the old key is
retired, which drops the old credential). Both commands sign and publish as
``approver add`` does (``smf_assurance.ops.cli.commands.onboard``): all or nothing.
"""

from __future__ import annotations

import argparse
import asyncio

import msgspec

from smf_assurance.governance.releases import ask_gates
from smf_assurance.ops.cli.cli_json import KeyRetireJson, KeyRotateJson
from smf_assurance.ops.cli.commands.onboard import (
    authority_of,
    checked_bus_user,
    finish,
    read_public_record,
    refusals_in_one_line,
    sign_and_publish,
    state_of,
)
from smf_assurance.ops.local.bus import connect_bus, credential_for
from smf_assurance.ops.local.defaults import PUBLISHER
from smf_assurance.ops.local.onboarding import Changes, OnboardingError, read_registry, state_lock
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.keys import KeyFileError, load_private_key, verify_key_from_record
from smf_assurance.subjects.registry import RegistryEntry, RegistryFile
from smf_assurance.subjects.release import ReleaseReportRequest


def _active(registry: RegistryFile, principal: str) -> list[RegistryEntry]:
    return [e for e in registry.entries if e.key.principal == principal]


@refusals_in_one_line
def run_rotate(args: argparse.Namespace) -> int:
    state = state_of(args)
    record = read_public_record(args.public_key)
    if record.principal != args.principal:
        raise OnboardingError(
            f"--public-key {args.public_key} is {record.principal}'s, not {args.principal}'s"
        )
    user = None if args.bus_user is None else checked_bus_user(args.bus_user)
    with state_lock(state):
        registry = read_registry(state)
        active = _active(registry, args.principal)
        if not active:
            raise OnboardingError(f"no principal {args.principal} in the registry of {state.root}")
        if len(active) > 1:
            ids = ", ".join(e.key.key_id for e in active)
            raise OnboardingError(
                f"{args.principal} has two keys already ({ids}): retire one first (`keys retire`)"
            )
        for entry in (*registry.entries, *registry.retired):
            if entry.key.key_id == record.key_id:
                raise OnboardingError(
                    f"key {record.key_id} is already registered ({entry.key.principal})"
                )
            if user is not None and entry.nats_user == user:
                raise OnboardingError(f"bus user {user} is already {entry.key.principal}'s")
        old = active[0]
        authority = authority_of(state, args)
        if user is None:  # the credential moves to the new key as it is
            kept, new = msgspec.structs.replace(old, nats_user=None), old.nats_user
        else:
            kept, new = old, user
        added = msgspec.structs.replace(old, key=record, nats_user=new)
        entries = (*(kept if e is old else e for e in registry.entries), added)
        updated = msgspec.structs.replace(registry, entries=entries)
        outcome = sign_and_publish(state, args, authority, updated, Changes())
    value = KeyRotateJson(
        principal=args.principal,
        role=old.role,
        old_key_id=old.key.key_id,
        new_key_id=record.key_id,
        nats_user=new,
        policies_from=outcome.policies_from,
        release=outcome.json(),
    )
    rows = [
        ("principal", args.principal),
        ("role", old.role),
        ("old key (trusted until retired)", old.key.key_id),
        ("new key", record.key_id),
        ("bus user of the new key", new or "none"),
    ]

    def notes() -> list[str]:
        return [
            f"both keys are trusted now: switch {args.principal} to the new key, then "
            f"`smf-assurance keys retire --id {args.principal} --key-id {old.key.key_id}`"
        ]

    return finish(args, outcome, value, rows, notes)


@refusals_in_one_line
def run_retire(args: argparse.Namespace) -> int:
    state = state_of(args)
    with state_lock(state):
        registry = read_registry(state)
        if any(e.key.key_id == args.key_id for e in registry.retired):
            raise OnboardingError(f"key {args.key_id} is retired already")
        target = next((e for e in registry.entries if e.key.key_id == args.key_id), None)
        if target is None:
            raise OnboardingError(f"no key {args.key_id} in the registry of {state.root}")
        if target.key.principal != args.principal:
            raise OnboardingError(
                f"key {args.key_id} is {target.key.principal}'s, not {args.principal}'s"
            )
        others = [e for e in _active(registry, args.principal) if e is not target]
        if not others:
            raise OnboardingError(
                f"{args.key_id} is {args.principal}'s only key: give it a new one first "
                "(`keys rotate`), or take the principal off (`runtime remove`, `approver remove`)"
            )
        if target.nats_user is not None and all(e.nats_user is None for e in others):
            raise OnboardingError(
                f"{args.key_id} holds {args.principal}'s only bus credential: rotate with "
                "--bus-user, or the principal would be cut off the bus"
            )
        if target.role == "gate":
            _refuse_a_gate_still_signing(state, args, target)
        authority = authority_of(state, args)
        entries = tuple(e for e in registry.entries if e is not target)
        retired = (*registry.retired, msgspec.structs.replace(target, nats_user=None))
        updated = msgspec.structs.replace(registry, entries=entries, retired=retired)
        outcome = sign_and_publish(state, args, authority, updated, Changes())
    active_ids = tuple(e.key.key_id for e in others)
    value = KeyRetireJson(
        principal=args.principal,
        retired_key_id=args.key_id,
        active_key_ids=active_ids,
        policies_from=outcome.policies_from,
        release=outcome.json(),
    )
    rows = [
        ("principal", args.principal),
        ("retired key (signs nothing more)", args.key_id),
        ("keys in use", ", ".join(active_ids)),
    ]
    return finish(args, outcome, value, rows)


def _refuse_a_gate_still_signing(
    state: StateDir, args: argparse.Namespace, target: RegistryEntry
) -> None:
    """A gate that still signs with the key would have every verdict refused from the
    release on: all its runtimes denied. Without ``--nats`` the gate is this state's
    own (its ``keys/gate.key``); with it, any gate whose release report the key
    signs (a report verified with that key alone is a gate signing with it)."""
    if not args.nats:
        path = state.key_path("gate")
        if not path.exists():
            return  # this state runs no gate of its own
        try:
            own, _ = load_private_key(path)
        except KeyFileError as exc:  # unchecked is not unsigned: refuse
            raise OnboardingError(
                f"cannot tell whether this state's gate still signs with {target.key.key_id}: {exc}"
            ) from exc
        if own.key_id == target.key.key_id:
            raise OnboardingError(
                f"this state's gate still signs with {target.key.key_id} ({path}): "
                "restart it with its new key first"
            )
        return
    key = verify_key_from_record(target.key)
    credential = credential_for(args.credential, state.root, PUBLISHER)

    async def signing() -> list[str]:
        nc = await connect_bus(args.nats, "smf-keys-retire", credential)
        try:
            answers = await ask_gates(nc, ReleaseReportRequest(), {key.key_id: key})
        finally:
            await nc.close()
        return sorted(answers.reports)

    gates = asyncio.run(signing())
    if gates:
        raise OnboardingError(
            f"gate {', '.join(gates)} still signs with {target.key.key_id}: restart it with "
            "its new key first"
        )
