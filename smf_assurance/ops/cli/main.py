"""``smf-assurance``: the command line.

Every subcommand has ``--help``, prints a readable table by default and
JSON with ``--json``, and on failure exits non-zero with one line on stderr.
``main`` is the one error boundary (``smf_assurance.ops.cli.boundary``): no failure,
signal or broken pipe reaches the user as a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

from smf_assurance.ops.cli import boundary

if __name__ == "__main__" or Path(sys.argv[0]).name == boundary.PROG:
    boundary.install_early_handlers()

# The early handlers are in place before the heavy imports below.
import argparse
import signal
import threading
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Final

from smf_assurance.ops.cli.commands import (
    approvals,
    approver,
    bus,
    completion,
    console,
    decide,
    demo,
    doctor,
    explain,
    holds,
    keys,
    ledger,
    model_gateway,
    notify,
    release,
    runtime,
    swarm,
    up,
)
from smf_assurance.ops.cli.output import CommandError


def package_version() -> str:
    try:
        return version(boundary.PROG)
    except PackageNotFoundError:
        return "unknown (not installed)"


COMMANDS: Final[tuple[ModuleType, ...]] = (
    decide,
    demo,
    up,
    keys,
    approvals,
    ledger,
    explain,
    swarm,
    release,
    console,
    notify,
    bus,
    model_gateway,
    runtime,
    holds,
    approver,
    doctor,
    completion,
)
"""The product's command groups, in ``--help`` order: what a firm runs. The team's own
tools (benchmarks, release candidates and their reviews) have their command line in the
checkout's ``tools/``, built by these same functions, and are not in the wheel."""

DESCRIPTION: Final = "SMF Assurance Gate: deterministic decisions for AI-agent actions."


def build_parser(
    commands: Sequence[ModuleType] = COMMANDS,
    prog: str = boundary.PROG,
    description: str = DESCRIPTION,
) -> argparse.ArgumentParser:
    """The parser of one command line: ``commands`` each add their subcommands
    (``add_parsers``), so every command line has the same ``--version``, ``--debug``
    and the same rules for its subcommands."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {package_version()}",
        help="print the version and exit",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="let an unexpected failure show its traceback instead of one line",
    )
    parser.set_defaults(parser=parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in commands:
        module.add_parsers(sub)
    return parser


def chosen_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The deepest subcommand ``argv`` names: its usage is the one a mistake in
    its options should print (``eval --jsn`` prints ``eval``'s usage, not the top level's)."""
    current = parser
    for token in argv:
        groups = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if groups and token in groups[0].choices:
            current = groups[0].choices[token]
    return current


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    args, extra = parser.parse_known_args(argv)
    if extra:
        chosen_parser(parser, argv).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(
    argv: Sequence[str] | None = None,
    *,
    commands: Sequence[ModuleType] = COMMANDS,
    prog: str = boundary.PROG,
    description: str = DESCRIPTION,
) -> int:
    """Run one command of the command line made of ``commands`` inside the error
    boundary; return its exit status."""
    tokens = list(sys.argv[1:] if argv is None else argv)
    signals = boundary.Signals(prog)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    if in_main_thread:
        signals.install()
    boundary.ensure_stdout()
    try:
        return _run(build_parser(commands, prog, description), tokens, signals)
    finally:
        if in_main_thread:
            for sig, handler in zip((signal.SIGINT, signal.SIGTERM), previous, strict=True):
                if handler is not None:
                    signal.signal(sig, handler)


def _run(parser: argparse.ArgumentParser, tokens: list[str], signals: boundary.Signals) -> int:
    prog = signals.prog
    debug = False
    try:
        args = parse(parser, tokens)
        debug = bool(args.debug)
        code: int = args.func(args)
        sys.stdout.flush()
    except CommandError as exc:
        boundary.one_line(str(exc), prog)
        return exc.code
    except KeyboardInterrupt:
        return signals.stopped()
    except BrokenPipeError:
        return boundary.quiet_broken_pipe()
    except Exception as exc:
        if debug:
            raise
        boundary.one_line(boundary.describe(exc), prog)
        return boundary.EXIT_FAILURE
    return code


if __name__ == "__main__":
    raise SystemExit(main())
