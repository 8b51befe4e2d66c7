"""``notify``'s options; ``smf_assurance.ops.cli.commands.notify`` runs the notifier."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler, add_bus_location, add_credential_argument
from smf_assurance.ops.local.defaults import CONSOLE, LOG_LEVELS


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "notify",
        help="notify entitled approvers of pending approvals (e-mail, Slack, Teams)",
        description="Send every approver the roster entitles to resolve a pending approval "
        "one e-mail and one signed webhook (Slack or Teams format) with a link to the "
        "console and no content, and one reminder before it expires while it is still "
        "pending. Contacts, SMTP and webhook secrets per tenant come from --config (TOML). "
        "Runs until SIGINT or SIGTERM; a notifier outage never approves or denies anything.",
    )
    p.add_argument(
        "--config", type=Path, required=True, metavar="FILE", help="the notifier's TOML file"
    )
    add_bus_location(p)
    p.add_argument(
        "--registry",
        type=Path,
        metavar="FILE",
        help="the approver roster (default: registry.json in the state dir)",
    )
    add_credential_argument(p, CONSOLE)
    p.add_argument("--json", action="store_true", help="print the readiness line as JSON")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default: info")
    p.set_defaults(func=Handler("notify", "run_notify"))
