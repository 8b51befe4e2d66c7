"""``runtime``'s options; ``smf_assurance.ops.cli.commands.runtime`` onboards and revokes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final, get_args

from smf_assurance.ops.cli.parsers import Handler
from smf_assurance.ops.cli.parsers.confine import DEFAULT_GATEWAY_URL
from smf_assurance.ops.cli.parsers.confine import add_parsers as add_confine_parsers
from smf_assurance.ops.cli.parsers.onboard import add_release_arguments
from smf_assurance.ops.runtimes.snippets import Kind

DEFAULT_DESTINATION: Final = "cli:operator"
DEFAULT_MATTER: Final = "general"
DEFAULT_DOMAIN: Final = "legal"
SURFACES: Final = ("direct_reply", "stream", "gateway_delivery", "cron", "background")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "runtime",
        help="onboard or revoke a Hermes or OpenClaw runtime in a new signed release",
        description="Onboard a runtime (keys, bus credential, model-gateway token, registry "
        "entry, attestation requirement, configuration snippet) or revoke one, each in the "
        "next release signed with the operator's release keys.",
    )
    actions = p.add_subparsers(dest="runtime_command", required=True, metavar="ACTION")

    add = actions.add_parser(
        "add",
        help="onboard a runtime: its keys, registry entry and configuration, in a new release",
        description="Make the runtime's key, bus credential and model-gateway token (0600 "
        "files, never printed), add it to the registry with its attestation requirement and "
        "gateway profile, sign and publish the next release, and write the configuration "
        "snippet its adapter needs. Nothing is written when anything is refused.",
    )
    add.add_argument("--kind", required=True, choices=sorted(get_args(Kind)), help="its runtime")
    add.add_argument(
        "--id", required=True, dest="runtime_id", help="its runtime id (and principal)"
    )
    add.add_argument("--tenant", required=True, help="the tenant it works for")
    who = add.add_argument_group(
        "for whom it works (its model-gateway profile and its adapter's context)"
    )
    who.add_argument("--actor-id", help="the person it acts for (default: the runtime id)")
    who.add_argument(
        "--actor-role",
        action="append",
        default=[],
        metavar="ROLE",
        help="a role of that person, repeatable (default: none)",
    )
    who.add_argument("--organization", help="the organization (default: the tenant id)")
    who.add_argument("--matter", default=DEFAULT_MATTER, help="the matter (default: %(default)s)")
    who.add_argument("--domain", default=DEFAULT_DOMAIN, help="the domain (default: %(default)s)")
    who.add_argument(
        "--governing-law",
        action="append",
        default=[],
        metavar="CODE",
        help="a governing law, e.g. US-NY, repeatable (default: none)",
    )
    who.add_argument(
        "--facts",
        type=Path,
        metavar="FILE",
        help="JSON file: the DataFacts of its replies (default: every fact unknown, which "
        "policies treat as the worst case)",
    )
    where = add.add_argument_group("where its replies go (the output gate decides for that)")
    where.add_argument(
        "--destination",
        default=DEFAULT_DESTINATION,
        help="the reply destination's address (default: %(default)s)",
    )
    where.add_argument(
        "--locality",
        default="internal",
        choices=("internal", "external"),
        help="whether it is inside the firm (default: %(default)s)",
    )
    where.add_argument(
        "--surface",
        default="direct_reply",
        choices=SURFACES,
        help="the surface its replies are delivered on (default: %(default)s)",
    )
    conf = add.add_argument_group("its configuration snippet")
    conf.add_argument(
        "--gateway-url",
        default=DEFAULT_GATEWAY_URL,
        help="the model gateway's base URL it is pointed at (default: %(default)s)",
    )
    conf.add_argument(
        "--bus-url",
        help="the bus it connects to (default: --nats, else the URL a running `up` wrote, "
        "else nats://127.0.0.1:4222)",
    )
    conf.add_argument(
        "--model", help="the model id it asks the gateway for (default: its own setting)"
    )
    conf.add_argument(
        "--snippet",
        type=Path,
        metavar="FILE",
        help="where to write the snippet, a new file (default: STATE/runtimes/ID.hermes.sh "
        "or ID.openclaw.json)",
    )
    add_release_arguments(add)
    add.set_defaults(func=Handler("runtime", "run_add"))

    remove = actions.add_parser(
        "remove",
        help="revoke a runtime in a new release (its files are left and named)",
        description="Remove the runtime's registry entries, attestation requirement and "
        "model-gateway profile in the next release signed with the operator's release keys. "
        "Gates refuse its proposals (unknown_signer) and the bus its connection once they "
        "adopt it; its key files are left where they are and named.",
    )
    remove.add_argument("--id", required=True, dest="runtime_id", help="the runtime id to revoke")
    add_release_arguments(remove)
    remove.set_defaults(func=Handler("runtime", "run_remove"))
    add_confine_parsers(actions)
