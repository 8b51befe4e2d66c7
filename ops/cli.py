"""``smf-assurance``: the command line.

Every subcommand has ``--help``, prints a readable table by default and
JSON with ``--json``, and on failure exits non-zero with one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ops.commands import (
    approvals,
    bench,
    bus,
    console,
    decide,
    demo,
    keys,
    ledger,
    model_gateway,
    release,
    swarm,
    up,
)
from ops.output import CommandError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smf-assurance",
        description="SMF Assurance Gate: deterministic decisions for AI-agent actions.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        decide,
        demo,
        bench,
        up,
        keys,
        approvals,
        ledger,
        swarm,
        release,
        console,
        bus,
        model_gateway,
    ):
        module.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except CommandError as exc:
        sys.stderr.write(f"smf-assurance: {exc}\n")
        return exc.code
    except KeyboardInterrupt:
        sys.stderr.write("smf-assurance: interrupted\n")
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
