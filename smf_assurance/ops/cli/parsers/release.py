"""``release``'s options; ``smf_assurance.ops.cli.commands.release`` builds, verifies,
publishes and reads releases."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.governance.lease import DEFAULT_LEASE_HOURS
from smf_assurance.ops.cli.output import positive_float, positive_int
from smf_assurance.ops.cli.parsers import (
    DEFAULT_ADOPTION_WAIT_SECONDS,
    Handler,
    add_credential_argument,
)
from smf_assurance.ops.cli.parsers.release_diff import add_diff_parser
from smf_assurance.ops.local.defaults import PUBLISHER


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("release", help="build, verify, publish and inspect signed releases")
    actions = p.add_subparsers(dest="release_command", required=True, metavar="ACTION")

    build = actions.add_parser("build", help="compile a corpus and sign a release")
    build.add_argument("--corpus", type=Path, required=True, help="corpus folder")
    build.add_argument(
        "--key", type=Path, action="append", required=True, help="release-signing private key"
    )
    build.add_argument("--out", type=Path, required=True, help="release folder (new or empty)")
    build.add_argument(
        "--registry", type=Path, help="registry file (default: CORPUS/registry.json)"
    )
    build.add_argument(
        "--lease-hours", type=positive_int, default=DEFAULT_LEASE_HOURS, help="default: 168"
    )
    build.add_argument("--prior", type=Path, help="the release folder this one replaces")
    build.add_argument(
        "--sequence", type=positive_int, help="default: the prior's + 1, or the corpus's"
    )
    build.add_argument("--release-id", help="default: the corpus's release id")
    build.add_argument("--revoke-key", action="append", default=[], help="revoke a signing key id")
    build.add_argument("--revoke-release", action="append", default=[], help="revoke a release id")
    build.add_argument("--json", action="store_true", help="print JSON")
    build.set_defaults(func=Handler("release", "run_build"))

    verify = actions.add_parser("verify", help="verify a release folder as a gate would")
    verify.add_argument("folder", type=Path, help="release folder")
    verify.add_argument("--trust-root", type=Path, required=True, help="trust root file")
    verify.add_argument("--state-dir", type=Path, help="check against this state's last release")
    verify.add_argument("--at", help="judge the lease at this RFC 3339 time (default: now)")
    verify.add_argument("--json", action="store_true", help="print JSON")
    verify.set_defaults(func=Handler("release", "run_verify"))

    publish = actions.add_parser("publish", help="publish a release to gates")
    publish.add_argument("folder", type=Path, help="release folder")
    where = publish.add_mutually_exclusive_group(required=True)
    where.add_argument("--nats", metavar="URL", help="publish to the SMF_RELEASES bucket")
    where.add_argument("--state-dir", type=Path, help="publish to this state directory's inbox")
    publish.add_argument("--trust-root", type=Path, help="verify against it before publishing")
    add_wait_arguments(
        publish,
        "how long to wait for the gates to adopt or refuse it",
        "publish without asking the gates what they did",
    )
    publish.add_argument(
        "--shadow",
        action="store_true",
        help="publish as the shadow (bus only): gates verify it and run it beside the "
        "active release, recording where it would decide otherwise; it decides nothing",
    )
    add_credential_argument(publish, PUBLISHER)
    publish.add_argument("--json", action="store_true", help="print JSON")
    publish.set_defaults(func=Handler("release", "run_publish"))

    status = actions.add_parser("status", help="show published or accepted releases")
    where = status.add_mutually_exclusive_group(required=True)
    where.add_argument("--nats", metavar="URL", help="list the SMF_RELEASES bucket")
    where.add_argument("--state-dir", type=Path, help="show this state's accepted release")
    add_credential_argument(status, PUBLISHER)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=Handler("release", "run_status"))

    root = actions.add_parser("trust-root", help="write a trust root file")
    root.add_argument(
        "--key", type=Path, action="append", required=True, help="private key or public record"
    )
    root.add_argument(
        "--threshold", type=positive_int, default=1, help="distinct signers (default: 1)"
    )
    root.add_argument("--out", type=Path, required=True, help="trust root file to create")
    root.add_argument("--json", action="store_true", help="print JSON")
    root.set_defaults(func=Handler("release", "run_trust_root"))

    add_withdraw_parser(actions)
    add_diff_parser(actions)


def add_wait_arguments(parser: argparse.ArgumentParser, wait: str, no_wait: str) -> None:
    """``--wait SECONDS`` and ``--no-wait``: how long a command asks the gates for their
    signed word after it changed the bucket, or that it does not ask."""
    parser.add_argument(
        "--wait",
        type=positive_float,
        default=DEFAULT_ADOPTION_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"{wait} (default %(default)s)",
    )
    parser.add_argument("--no-wait", action="store_true", help=no_wait)


def add_withdraw_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    withdraw = actions.add_parser(
        "withdraw-shadow",
        help="withdraw the shadow release: every gate stops running it",
        description="Delete the shadow key of the SMF_RELEASES bucket (a delete marker "
        "every gate honours, also one that was down), then ask the gates until none "
        "runs a shadow. Exits 1 when a gate still runs one, or no gate answered.",
    )
    withdraw.add_argument("--nats", metavar="URL", required=True, help="the bus")
    add_wait_arguments(
        withdraw,
        "how long to wait for the gates to stop it",
        "withdraw without asking the gates",
    )
    add_credential_argument(withdraw, PUBLISHER)
    withdraw.add_argument("--json", action="store_true", help="print JSON")
    withdraw.set_defaults(func=Handler("release", "run_withdraw_shadow"))
