"""``release diff``'s options; ``smf_assurance.ops.cli.commands.release_diff`` compares."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler


def add_diff_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    diff = actions.add_parser(
        "diff",
        help="what changes between two releases: rules, policies, requirements, decisions",
        description="Rules, policies and model providers added, removed or changed from OLD "
        "to NEW, and each policy's requirement changes (approvals, roles, TTL, binding, "
        "one shot) with its layer. With --state-dir, also the recorded decisions that would "
        "change: the ledger's shadow entries written while NEW ran as the shadow beside OLD, "
        "counted by from -> to disposition, capability, rule, policy, layer and tenant "
        "pseudonym, with example decision ids (--shadow: the state's accepted release and "
        "the shadow its gate keeps). Exits 0 whether or not anything changed.",
    )
    diff.add_argument(
        "old", type=Path, nargs="?", metavar="OLD_DIR", help="the release folder before"
    )
    diff.add_argument(
        "new", type=Path, nargs="?", metavar="NEW_DIR", help="the release folder after"
    )
    diff.add_argument("--from", dest="from_dir", type=Path, metavar="OLD_DIR", help="as OLD_DIR")
    diff.add_argument("--to", dest="to_dir", type=Path, metavar="NEW_DIR", help="as NEW_DIR")
    diff.add_argument(
        "--shadow",
        action="store_true",
        help="compare the --state-dir's accepted release with the shadow its gate keeps",
    )
    diff.add_argument(
        "--state-dir",
        type=Path,
        help="read recorded traffic from this state's ledger (its trust root authenticates "
        "both releases)",
    )
    diff.add_argument("--since", help="recorded traffic from this RFC 3339 time on")
    diff.add_argument("--until", help="recorded traffic before this RFC 3339 time")
    diff.add_argument(
        "--chart", type=Path, metavar="FILE.svg", help="write changed decisions per rule as SVG"
    )
    diff.add_argument(
        "--trust-root",
        type=Path,
        help="authenticate both folders with it first (signatures, digests; not the lease)",
    )
    diff.add_argument("--json", action="store_true", help="print JSON")
    diff.set_defaults(func=Handler("release_diff", "run_diff"))
