"""``explain``'s options; ``smf_assurance.ops.cli.commands.explain`` explains."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler
from smf_assurance.ops.local.defaults import default_state_dir


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "explain",
        help="explain a recorded decision: policies, layers, rules, requirements",
        description="Explain a decision the ledger holds, under the release that made it: "
        "which policies applied and from which layer, the rule each rests on (title, "
        "statement, citation), which requirement came from which layer, and for a "
        "safety-floor denial why the operation was consequential. Read-only.",
    )
    p.add_argument("decision_id", metavar="DECISION_ID", help="the decision id (sha256:...)")
    p.add_argument(
        "--state-dir",
        type=Path,
        help=f"the state whose ledger and releases to read (default: {default_state_dir()})",
    )
    p.add_argument("--db", type=Path, help="ledger file (default: STATE/ledger.db)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=Handler("explain", "run_explain"))
