"""``demo``'s options; ``smf_assurance.ops.cli.commands.demo`` runs it."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="run the four governed scenarios end to end over NATS")
    p.add_argument("--state-dir", type=Path, help="keep all state here (default: a temp dir)")
    p.add_argument("--nats", help="use this NATS server instead of an embedded one")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=Handler("demo", "run_demo"))
