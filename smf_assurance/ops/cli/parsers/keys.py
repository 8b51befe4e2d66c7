"""``keys``'s options; ``smf_assurance.ops.cli.commands.keys`` makes and reads the keys,
``smf_assurance.ops.cli.commands.key_rotation`` rotates and retires them."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler
from smf_assurance.ops.cli.parsers.onboard import add_release_arguments


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keys", help="make and inspect Ed25519 keys")
    actions = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")

    new = actions.add_parser(
        "new",
        help="make a key pair: a 0600 private key file and its public record",
        description="Write a new Ed25519 private key file (mode 0600, never over an "
        "existing file) and print its public record.",
    )
    new.add_argument("--id", required=True, dest="principal", help="principal the key belongs to")
    new.add_argument("--out", required=True, type=Path, help="private key file to create")
    new.add_argument("--json", action="store_true", help="print the public record as JSON")
    new.set_defaults(func=Handler("keys", "run_new"))

    public = actions.add_parser(
        "public",
        help="print the public record of a private key file",
        description="Print the public record of an existing private key file, e.g. "
        "for a roster or for `ledger verify --key`.",
    )
    public.add_argument("--key", required=True, type=Path, help="private key file")
    public.add_argument("--json", action="store_true", help="print the public record as JSON")
    public.set_defaults(func=Handler("keys", "run_public"))

    nkey = actions.add_parser(
        "nkey",
        help="make a bus credential: a 0600 nkey seed file and its public user key",
        description="Write a new NATS user nkey seed (mode 0600, never over an existing "
        "file) named PRINCIPAL.nkey, as `--credential` takes it, and print its public user "
        "key (U...), the one thing to hand over.",
    )
    nkey.add_argument(
        "--out", required=True, type=Path, help="seed file to create, named <principal>.nkey"
    )
    nkey.add_argument("--json", action="store_true", help="print the public user key as JSON")
    nkey.set_defaults(func=Handler("keys", "run_nkey"))

    rotate = actions.add_parser(
        "rotate",
        help="give a principal a second key in a new signed release (both count until "
        "`keys retire`)",
        description="Add a second key for PRINCIPAL (the same role, runtime, tenants and "
        "licensed roles as its key now) in the next release signed with the operator's "
        "release keys. Both keys are trusted until `keys retire` retires one, so whoever "
        "holds the principal switches to the new key with nothing refused meanwhile "
        "(docs/OPERATIONS.md, 'Key rotation'). Only the public half is taken: "
        "--public-key is `keys public --json` of the new key.",
    )
    rotate.add_argument(
        "--id", required=True, dest="principal", help="the principal whose key is rotated"
    )
    rotate.add_argument(
        "--public-key",
        required=True,
        type=Path,
        metavar="FILE",
        help="the new key's public record (smf.ed25519.public/1, from `keys public --json`)",
    )
    rotate.add_argument(
        "--bus-user",
        metavar="UXXX...",
        help="a new bus credential for the new key (from `keys nkey`); without it the new "
        "key takes over the principal's bus credential as it is",
    )
    add_release_arguments(rotate)
    rotate.set_defaults(func=Handler("key_rotation", "run_rotate"))

    retire = actions.add_parser(
        "retire",
        help="retire a principal's old key in a new signed release: it signs nothing more",
        description="Retire one of PRINCIPAL's two keys in the next release: no receiver "
        "trusts it for a new message and the bus drops its credential, while what it "
        "signed before (a gate's ledger checkpoints) still verifies. Refused for a "
        "principal's only key, and for a gate key a gate still signs with (asked on "
        "--nats; without it, this state's own gate key). A key that may have leaked is "
        "removed, not retired (`runtime remove`, `approver remove`).",
    )
    retire.add_argument(
        "--id", required=True, dest="principal", help="the principal whose old key is retired"
    )
    retire.add_argument(
        "--key-id", required=True, metavar="KEY_ID", help="the key to retire (ed25519:...)"
    )
    add_release_arguments(retire)
    retire.set_defaults(func=Handler("key_rotation", "run_retire"))
