"""The options of every command that signs and publishes a new release (``runtime``,
``approver``); ``smf_assurance.ops.cli.commands.onboard`` makes the release."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.governance.lease import DEFAULT_LEASE_HOURS
from smf_assurance.ops.cli.output import positive_float, positive_int
from smf_assurance.ops.cli.parsers import DEFAULT_ADOPTION_WAIT_SECONDS, add_credential_argument
from smf_assurance.ops.local.defaults import PUBLISHER, default_state_dir


def add_release_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of every command that signs and publishes the next release."""
    parser.add_argument(
        "--state-dir",
        type=Path,
        help=f"the gate's state: its registry, trust root and releases (default: "
        f"{default_state_dir()})",
    )
    parser.add_argument(
        "--release-key",
        type=Path,
        action="append",
        required=True,
        metavar="FILE",
        help="a release-signing private key the trust root names; repeat until its "
        "threshold is met (never the demo's own re-signing)",
    )
    parser.add_argument(
        "--trust-root",
        type=Path,
        metavar="FILE",
        help="the trust root the gates verify against (default: the state's "
        "release-trust-root.json)",
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        metavar="DIR",
        help="compile this corpus for the new release's policies (default: carry the "
        "prior release's policies forward unchanged)",
    )
    parser.add_argument(
        "--prior",
        type=Path,
        metavar="DIR",
        help="the release folder the new one replaces (default: the state's accepted "
        "release or the newest in its inbox, whichever is later)",
    )
    parser.add_argument(
        "--lease-hours",
        type=positive_int,
        default=DEFAULT_LEASE_HOURS,
        help=f"the new release's lease (default: {DEFAULT_LEASE_HOURS})",
    )
    parser.add_argument(
        "--nats",
        metavar="URL",
        help="publish to the SMF_RELEASES bucket of this bus (default: into the state's "
        "inbox, as `release publish --state-dir` does)",
    )
    add_credential_argument(parser, PUBLISHER)
    parser.add_argument(
        "--wait",
        type=positive_float,
        default=DEFAULT_ADOPTION_WAIT_SECONDS,
        metavar="SECONDS",
        help="how long to wait for the gates to adopt or refuse it (default %(default)s)",
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="publish without asking the gates what they did"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
