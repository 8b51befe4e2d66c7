"""``bus``'s options; ``smf_assurance.ops.cli.commands.bus`` writes and follows the
authorization."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.output import positive_int
from smf_assurance.ops.cli.parsers import Handler
from smf_assurance.ops.local.defaults import LOG_LEVELS


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bus", help="the bus's authorization, generated from the registry")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    auth = actions.add_parser(
        "authorization",
        help="write the server's accounts for the registry",
        description="Write the nats-server include that lets exactly the registry's "
        "principals connect, each with its role's permissions (no anonymous client).",
    )
    auth.add_argument("--state-dir", type=Path, required=True, help="the provisioned state")
    auth.add_argument("--out", type=Path, required=True, help="the include file to write")
    auth.add_argument("--json", action="store_true", help="print JSON")
    auth.set_defaults(func=Handler("bus", "run_authorization"))

    perm = actions.add_parser(
        "permissions",
        help="list what each principal may publish and subscribe to",
        description="One row per principal and subject: what the generated authorization "
        "lets it publish, keeps it from publishing, and lets it subscribe to.",
    )
    perm.add_argument("--state-dir", type=Path, required=True, help="the provisioned state")
    perm.add_argument("--json", action="store_true", help="print JSON")
    perm.set_defaults(func=Handler("bus", "run_permissions"))

    fol = actions.add_parser(
        "follow",
        help="keep a cluster's authorization that of the release in force",
        description="Watch SMF_RELEASES, verify each release against the state's trust "
        "root, write the include from its registry and reload every node; runs until "
        "SIGINT or SIGTERM.",
    )
    fol.add_argument("--state-dir", type=Path, required=True, help="the provisioned state")
    fol.add_argument("--nats", metavar="URL[,URL...]", required=True, help="the cluster")
    fol.add_argument("--out", type=Path, required=True, help="the include file the nodes read")
    fol.add_argument("--servers", type=positive_int, help="how many nodes must confirm each reload")
    fol.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default: info")
    fol.set_defaults(func=Handler("bus", "run_follow"))
