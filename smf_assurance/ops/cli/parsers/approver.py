"""``approver``'s options; ``smf_assurance.ops.cli.commands.approver`` changes the roster."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler
from smf_assurance.ops.cli.parsers.onboard import add_release_arguments


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "approver",
        help="put an approver on the roster, or take one off, in a new signed release",
        description="Add an approver from its public record and public bus user (its keys "
        "are made where it is), or remove one, or enrol or remove its passkeys, each in "
        "the next release signed with the operator's release keys.",
    )
    actions = p.add_subparsers(dest="approver_command", required=True, metavar="ACTION")

    add = actions.add_parser(
        "add",
        help="add an approver from its public key record and bus user",
        description="Add an approver (role approver, its tenants, licensed roles and bus "
        "user) in the next release. Only public halves are taken: --public-key is the "
        "output of `keys public --json`, --bus-user the output of `keys nkey`.",
    )
    add.add_argument("--id", required=True, dest="principal", help="the approver's principal")
    add.add_argument(
        "--role",
        required=True,
        action="append",
        metavar="ROLE",
        help="a licensed role it holds, e.g. licensed_attorney or paralegal; repeatable",
    )
    add.add_argument(
        "--tenant",
        required=True,
        action="append",
        help="a tenant it approves for; repeatable",
    )
    add.add_argument(
        "--public-key",
        required=True,
        type=Path,
        metavar="FILE",
        help="its public key record (smf.ed25519.public/1, from `keys public --json`)",
    )
    add.add_argument(
        "--bus-user",
        required=True,
        metavar="UXXX...",
        help="its bus credential's public user key (from `keys nkey`)",
    )
    add_release_arguments(add)
    add.set_defaults(func=Handler("approver", "run_add"))

    remove = actions.add_parser(
        "remove",
        help="take an approver off the roster in a new release",
        description="Remove the approver's registry entries and passkeys in the next release "
        "signed with the operator's release keys; gates then refuse its resolutions and the "
        "bus its connection.",
    )
    remove.add_argument("--id", required=True, dest="principal", help="the approver's principal")
    add_release_arguments(remove)
    remove.set_defaults(func=Handler("approver", "run_remove"))

    passkey_add = actions.add_parser(
        "passkey-add",
        help="enrol an approver's passkey (a WebAuthn credential) in a new release",
        description="Enrol the passkey an approver's browser registered with the enrolment "
        "challenge for its principal and relying party, in the next release. The "
        "registration must verify (that principal, relying party and origin, the user "
        "verified) and its credential have the fingerprint the approver read you.",
    )
    passkey_add.add_argument(
        "--id", required=True, dest="principal", help="the approver's principal"
    )
    passkey_add.add_argument(
        "--registration",
        required=True,
        type=Path,
        metavar="FILE",
        help="the registration its browser returned (RegistrationResponseJSON)",
    )
    passkey_add.add_argument(
        "--fingerprint",
        required=True,
        metavar="XXXX-XXXX-XXXX-XXXX",
        help="the fingerprint the approver reads you from their console page, on a call "
        "you place: a registration whose credential has another is refused, nothing "
        "written",
    )
    passkey_add.add_argument(
        "--origin",
        required=True,
        action="append",
        metavar="ORIGIN",
        help="an origin it may sign from, scheme://host[:port] (https, or http on "
        "localhost); repeatable",
    )
    passkey_add.add_argument(
        "--rp-id",
        metavar="RPID",
        help="the relying party id, a domain the origins are on (default: the first origin's host)",
    )
    passkey_add.add_argument(
        "--label", metavar="TEXT", help="a name for it, e.g. the device (up to 64 characters)"
    )
    add_release_arguments(passkey_add)
    passkey_add.set_defaults(func=Handler("approver", "run_passkey_add"))

    passkey_remove = actions.add_parser(
        "passkey-remove",
        help="remove an approver's passkeys in a new release",
        description="Remove one enrolled passkey of the approver (--credential-id), or all of "
        "them, in the next release; gates then refuse what they sign.",
    )
    passkey_remove.add_argument(
        "--id", required=True, dest="principal", help="the approver's principal"
    )
    passkey_remove.add_argument(
        "--credential-id",
        metavar="ID",
        help="the passkey's credential id, to remove only it (default: every passkey of "
        "the approver)",
    )
    add_release_arguments(passkey_remove)
    passkey_remove.set_defaults(func=Handler("approver", "run_passkey_remove"))
