"""``console``'s options; ``smf_assurance.ops.cli.commands.console`` serves it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from smf_assurance.ops.cli.output import port_number
from smf_assurance.ops.cli.parsers import (
    Handler,
    add_bus_location,
    add_credential_argument,
    add_https_arguments,
)
from smf_assurance.ops.local.defaults import CONSOLE, LOG_LEVELS

DEFAULT_PORT: Final = 8765


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "console",
        help="serve the approvers' web console",
        description="Serve the approvers' web page: held actions of your tenants, live; what "
        "each would send, checked against its digest in your browser; allow-once or deny, "
        "signed in your browser with your own key. Runs until SIGINT or SIGTERM.",
    )
    add_bus_location(p)
    p.add_argument(
        "--registry",
        type=Path,
        metavar="FILE",
        help="the approver roster (default: registry.json in the state dir)",
    )
    p.add_argument(
        "--directory",
        type=Path,
        metavar="DIR",
        help="the tenant directory, one <tenant>.toml each (default: directory/ in the state dir)",
    )
    p.add_argument(
        "--pdf-renderer",
        metavar="DIR|fetch|off",
        default="fetch",
        help="where pdf.js's pinned files are, to draw a filing's pages in the page; "
        "'fetch' (default) gets them once from the npm registry into the per-user cache, "
        "and without them the browser's own PDF viewer is used; 'off' never draws pages",
    )
    add_credential_argument(p, CONSOLE)
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: 127.0.0.1)")
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"listen port (default: {DEFAULT_PORT})",
    )
    add_https_arguments(p)
    p.add_argument("--json", action="store_true", help="print the readiness line as JSON")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default: info")
    p.set_defaults(func=Handler("console", "run_console"))
