"""``compile`` and ``eval``'s options; ``smf_assurance.ops.cli.commands.decide`` runs them."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler
from smf_assurance.ops.cli.parsers.eval_many import add_arguments as add_eval_many_arguments


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("compile", help="compile a corpus into enforcement and analysis projections")
    p.add_argument("--corpus", type=Path, required=True, help="corpus folder (release.json, ...)")
    p.add_argument("--out", type=Path, required=True, help="output folder (new or empty)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=Handler("decide", "run_compile"))

    p = sub.add_parser("eval", help="decide one operation envelope offline")
    p.add_argument("envelope", help="envelope JSON file, or - for stdin")
    p.add_argument("--projection", type=Path, help="projection folder (default: shipped scenarios)")
    p.add_argument("--at", help="evaluation time, RFC 3339 (default: now)")
    p.add_argument("--json", action="store_true", help="print the Decision as canonical JSON")
    add_eval_many_arguments(p)
    p.set_defaults(func=Handler("decide", "run_eval"))
