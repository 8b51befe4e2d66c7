"""``holds``'s options; ``smf_assurance.ops.cli.commands.holds`` changes them."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler
from smf_assurance.ops.local.defaults import default_state_dir


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "holds",
        help="the gate's legal holds: documents confined runtimes have read-only",
        description="The gate's legal-hold list. A confined runtime's launcher asks it at "
        "start and every second; a change stops every confined runtime (start it again).",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--state-dir", type=Path, help=f"the gate's state (default: {default_state_dir()})"
        )
        q.add_argument("--nats", metavar="URL[,URL...]", help="the gate's bus (default: up's)")
        q.add_argument("--json", action="store_true", help="print JSON")

    q = actions.add_parser("add", help="hold documents (absolute paths)")
    q.add_argument("paths", nargs="+", metavar="PATH", help="an absolute path to hold")
    common(q)
    q.set_defaults(func=Handler("holds", "run_add"))
    q = actions.add_parser("remove", help="lift holds (absolute paths)")
    q.add_argument("paths", nargs="+", metavar="PATH", help="an absolute path held")
    common(q)
    q.set_defaults(func=Handler("holds", "run_remove"))
    q = actions.add_parser("list", help="the documents held and the list's revision")
    common(q)
    q.set_defaults(func=Handler("holds", "run_list"))
