"""``swarm``'s options; ``smf_assurance.ops.cli.commands.swarm`` analyses and reviews."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from smf_assurance.ops.cli.output import positive_float
from smf_assurance.ops.cli.parsers import Handler

BASE_URL_ENV: Final = "SMF_SWARM_BASE_URL"
MODEL_ENV: Final = "SMF_SWARM_MODEL"
DEFAULT_MODEL: Final = "gpt-4o-mini"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("swarm", help="legal analysis that may cite only selected rules")
    swarm_sub = p.add_subparsers(dest="swarm_command", required=True, metavar="SUBCOMMAND")

    a = swarm_sub.add_parser("analyze", help="build a Swarm report for a question and facts")
    a.add_argument("--question", help="the question (default: the facts file's question)")
    a.add_argument("--facts", type=Path, required=True, help="matter facts JSON file")
    _source_arguments(a)
    a.add_argument("--at", help="evaluation time, RFC 3339 (default: the file's, else now)")
    a.add_argument(
        "--personas",
        choices=("offline", "openai"),
        default="offline",
        help="who answers: the built-in offline personas, or an OpenAI-compatible model",
    )
    a.add_argument("--base-url", help=f"OpenAI-compatible API root (default: ${BASE_URL_ENV})")
    a.add_argument("--model", help=f"model name (default: ${MODEL_ENV} or {DEFAULT_MODEL})")
    a.add_argument("--timeout", type=positive_float, default=30.0, help="seconds per model call")
    a.add_argument("--out", type=Path, help="also write the JSON report to this new file")
    a.add_argument("--json", action="store_true", help="print the report as canonical JSON")
    a.set_defaults(func=Handler("swarm", "run_analyze"))

    r = swarm_sub.add_parser("review", help="sign a semantic-faithfulness review of a report")
    r.add_argument("--report", type=Path, required=True, help="report JSON file")
    r.add_argument("--reviewer", required=True, help="reviewer id (the key file's principal)")
    r.add_argument("--key", type=Path, required=True, help="reviewer's private key file")
    r.add_argument(
        "--verdict",
        required=True,
        choices=("faithful", "not_faithful", "partially_faithful"),
        help="the reviewer's finding on the report's semantic faithfulness",
    )
    r.add_argument("--note", required=True, help="what was checked, and what was found")
    _source_arguments(r)
    r.add_argument("--out", type=Path, help="reviewed report (default: REPORT.reviewed.json)")
    r.add_argument("--json", action="store_true", help="print the reviewed report as JSON")
    r.set_defaults(func=Handler("swarm", "run_review"))


def _source_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--release", type=Path, metavar="DIR", help="signed release folder to verify and use"
    )
    source.add_argument(
        "--projection",
        type=Path,
        help="UNVERIFIED projection folder (default without --release: shipped scenarios)",
    )
    parser.add_argument("--trust-root", type=Path, help="trust root file (with --release)")
    parser.add_argument(
        "--state-dir", type=Path, help="also refuse a rollback of this gate state's release"
    )
