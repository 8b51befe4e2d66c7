"""``keys``: make an Ed25519 key pair, or print the public record of one.

The private key file is written by
:func:`smf_assurance.subjects.keys.write_private_key`: mode 0600 and never over an existing
file, so a second ``keys new`` cannot silently replace an identity a roster
already trusts. What is printed is only the public record; with ``--json`` it
is exactly a ``smf.ed25519.public/1`` record, so it can be saved and handed to
a roster or to ``ledger verify --key`` as it is.

``keys nkey --out PRINCIPAL.nkey`` makes a principal's bus credential
where the principal is (an approver's machine): a 0600 NATS user nkey seed,
never over an existing file, and prints only its public user key, the one
thing ``approver add --bus-user`` needs.
"""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import msgspec

from smf_assurance.ops.cli.cli_json import BusUserJson, KeyRecordJson
from smf_assurance.ops.cli.output import emit, fail, first_line, table
from smf_assurance.ops.local.bus_auth import BusCredentialError, write_user_seed
from smf_assurance.ops.local.defaults import NKEY_SUFFIX
from smf_assurance.subjects.keys import (
    KeyFileError,
    PublicKeyRecord,
    generate_signing_key,
    load_private_key,
    public_record,
    write_private_key,
)
from smf_assurance.subjects.names import SubjectError, token


def _print_record(record: PublicKeyRecord, path: Path, as_json: bool) -> None:
    if as_json:
        emit(msgspec.convert(msgspec.to_builtins(record), type=KeyRecordJson))
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    table(
        ("field", "value"),
        [
            ("principal", record.principal),
            ("key id", record.key_id),
            ("public key", record.public_key),
            ("private key file", f"{path} (mode {mode:04o})"),
        ],
    )


def run_new(args: argparse.Namespace) -> int:
    path: Path = args.out
    key = generate_signing_key()
    try:
        write_private_key(path, key, args.principal)
    except KeyFileError as exc:
        fail(first_line(exc))
    except ValueError as exc:
        fail(f"--id: {exc}", 2)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}")
    _print_record(public_record(key, args.principal), path, args.json)
    return 0


def run_public(args: argparse.Namespace) -> int:
    try:
        key, principal = load_private_key(args.key)
    except KeyFileError as exc:
        fail(first_line(exc))
    _print_record(public_record(key, principal), args.key, args.json)
    return 0


def run_nkey(args: argparse.Namespace) -> int:
    path: Path = args.out
    if path.suffix != NKEY_SUFFIX:
        fail(f"--out: {path} must be named <principal>{NKEY_SUFFIX} (as --credential takes it)", 2)
    try:
        principal = token(path.stem)
    except SubjectError:
        fail(f"--out: {path.stem!r} is not a principal (letters, digits, - and _)", 2)
    try:
        user = write_user_seed(path)
    except BusCredentialError as exc:
        fail(first_line(exc))
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}")
    if args.json:
        emit(BusUserJson(principal=principal, nats_user=user, seed_file=str(path)))
    else:
        table(
            ("field", "value"),
            [
                ("principal", principal),
                ("bus user", user),
                ("seed file", f"{path} (mode 0600; never hand it over)"),
            ],
        )
    return 0
