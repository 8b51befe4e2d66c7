"""``keys``'s options; ``smf_assurance.ops.cli.commands.keys`` makes and reads the keys."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler


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
