"""``doctor``'s options; ``smf_assurance.ops.cli.commands.doctor`` runs the checks."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.output import positive_int
from smf_assurance.ops.cli.parsers import Handler, add_credential_argument
from smf_assurance.ops.doctor.kinds import DEFAULT_CHECKPOINT_AGE_S, DEFAULT_LEASE_WARN_HOURS
from smf_assurance.ops.local.defaults import OPERATOR, default_state_dir


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "doctor",
        help="check a running deployment: bus, release, gate services, runtimes, "
        "connectors, ledger checkpoints, console, state folder modes",
        description="Check a running deployment from the operator's seat and print what "
        "to fix; exit 1 when any check failed. Every answer a gate gives counts only when "
        "a gate key of the state's registry signed it. Any file or folder of the state "
        "directory others may read or enter is a failure naming it.",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        help=f"the operator's state: registry, trust root, keys (default: {default_state_dir()})",
    )
    p.add_argument("--nats", metavar="URL", help="the bus (default: the URL `up` wrote)")
    add_credential_argument(p, OPERATOR)
    p.add_argument(
        "--trust-root",
        type=Path,
        metavar="FILE",
        help="verify the gates' release against it (default: the state's, when it has one)",
    )
    p.add_argument(
        "--console",
        metavar="URL",
        help="the approvers' console to check, if any: its GET URL/healthz must answer 200",
    )
    p.add_argument(
        "--directory",
        type=Path,
        metavar="DIR",
        help="the tenant directory the console reads (default: directory/ in the state dir)",
    )
    p.add_argument(
        "--lease-warn-hours",
        type=positive_int,
        default=DEFAULT_LEASE_WARN_HOURS,
        help="warn when a release's lease ends sooner (default: %(default)s)",
    )
    p.add_argument(
        "--checkpoint-age",
        type=positive_int,
        default=DEFAULT_CHECKPOINT_AGE_S,
        metavar="SECONDS",
        help="warn when ledger entries are unanchored longer (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=Handler("doctor", "run_doctor"))
