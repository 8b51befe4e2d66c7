"""``ledger``'s options; ``smf_assurance.ops.cli.commands.ledger`` verifies and exports."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler, add_bus_location, add_credential_argument
from smf_assurance.ops.local.defaults import OPERATOR, default_state_dir
from smf_assurance.subjects import names


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ledger", help="verify and export the evidence ledger")
    actions = p.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")

    verify = actions.add_parser(
        "verify",
        help="check the hash chain and the signed checkpoints; name the first bad entry",
        description="Check every entry's hash, the chain, and every signed checkpoint. "
        "Exits 1 with one line naming the first bad seq and the reason.",
    )
    verify.add_argument("--db", required=True, type=Path, help="ledger file (ledger.db)")
    source = verify.add_mutually_exclusive_group()
    source.add_argument(
        "--nats", metavar="URL", help="read checkpoints from the SMF_LEDGER_CHECKPOINTS stream"
    )
    source.add_argument(
        "--checkpoints", type=Path, help="read checkpoints from a file (one envelope per line)"
    )
    _gate_argument(verify)
    add_credential_argument(verify, OPERATOR)
    trust = verify.add_mutually_exclusive_group()
    trust.add_argument(
        "--key", type=Path, help="trusted gate key: a public key record or a registry file"
    )
    trust.add_argument(
        "--state-dir",
        type=Path,
        help=f"trust the gate keys of this state dir's registry (default: {default_state_dir()})",
    )
    verify.add_argument("--json", action="store_true", help="print JSON")
    verify.set_defaults(func=Handler("ledger", "run_verify"))

    export = actions.add_parser(
        "export",
        help="write every entry as one JSON line, for auditors",
        description="Write every entry in seq order as one canonical JSON line with its "
        "hash, so an auditor can recompute the chain from the lines alone.",
    )
    export.add_argument("--db", required=True, type=Path, help="ledger file (ledger.db)")
    export.add_argument("--format", choices=("jsonl",), default="jsonl", help="default: jsonl")
    export.add_argument("--out", type=Path, help="file to create (default: stdout)")
    export.set_defaults(func=Handler("ledger", "run_export"))

    checkpoints = actions.add_parser(
        "checkpoints",
        help="copy the signed checkpoints from the bus into a file",
        description="Write every envelope on the SMF_LEDGER_CHECKPOINTS stream, one per "
        "line, for `ledger verify --checkpoints` away from the bus.",
    )
    add_bus_location(checkpoints)
    checkpoints.add_argument("--out", type=Path, help="file to create (default: stdout)")
    _gate_argument(checkpoints)
    add_credential_argument(checkpoints, OPERATOR)
    checkpoints.set_defaults(func=Handler("ledger", "run_checkpoints"))


def _gate_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gate",
        default=names.DEFAULT_GATE_NAME,
        metavar="NAME",
        help="the gate whose checkpoints to read (`up --gate-name`; "
        f"default: {names.DEFAULT_GATE_NAME})",
    )
