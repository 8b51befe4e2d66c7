"""``eval``'s options for many envelopes, explanations and a second release;
``smf_assurance.ops.cli.commands.eval_many`` decides them."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jsonl", action="store_true", help="the envelope file holds one envelope per line"
    )
    parser.add_argument(
        "--explain", action="store_true", help="explain each decision as `explain` does"
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="RELEASE_DIR",
        help="also decide under this release folder and show what changes",
    )
    parser.add_argument(
        "--trust-root", type=Path, help="trust root the --against release is verified with"
    )
