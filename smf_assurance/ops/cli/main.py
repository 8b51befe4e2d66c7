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

# The early handlers are in place before anything else is imported.
import argparse
import importlib
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Final

from smf_assurance.ops.cli.output import CommandError


def package_version() -> str:
    from importlib.metadata import (  # noqa: PLC0415 - only --version reads the metadata
        PackageNotFoundError,
        version,
    )

    try:
        return version(boundary.PROG)
    except PackageNotFoundError:
        return "unknown (not installed)"


@dataclass(frozen=True)
class Command:
    """A command group named without importing it: the module that adds its parsers
    and the top-level commands it adds, each with its one-line help.

    A command line imports only the parsers of the command it runs; ``--help`` and
    ``--version`` import none, so they answer at once. A parser module
    (``smf_assurance.ops.cli.parsers``) names its handlers without importing them: the
    command's module, which pulls in the bus client, the web server and the stores, is
    imported when the command runs, never for its ``--help``. ``whole_line`` marks a
    command that reads the whole parser tree (``completion``), which then has every
    parser module imported. ``tests/cli/test_cli_startup.py`` holds these help lines to
    the ones the modules give."""

    module: str
    commands: tuple[tuple[str, str], ...]
    whole_line: bool = False

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


def _group(name: str, *commands: tuple[str, str], whole_line: bool = False) -> Command:
    return Command(f"smf_assurance.ops.cli.parsers.{name}", commands, whole_line)


COMMANDS: Final[tuple[Command, ...]] = (
    _group(
        "decide",
        ("compile", "compile a corpus into enforcement and analysis projections"),
        ("eval", "decide one operation envelope offline"),
    ),
    _group("demo", ("demo", "run the four governed scenarios end to end over NATS")),
    _group("up", ("up", "run the gate (and the example connectors) until interrupted")),
    _group("keys", ("keys", "make and inspect Ed25519 keys")),
    _group("approvals", ("approvals", "list, inspect and resolve held actions")),
    _group("ledger", ("ledger", "verify and export the evidence ledger")),
    _group(
        "backup",
        ("backup", "copy a state folder's stores, keys and streams into one archive, online"),
        ("restore", "restore a state folder from a backup archive, then verify its ledger"),
    ),
    _group(
        "explain", ("explain", "explain a recorded decision: policies, layers, rules, requirements")
    ),
    _group("swarm", ("swarm", "legal analysis that may cite only selected rules")),
    _group("release", ("release", "build, verify, publish and inspect signed releases")),
    _group("console", ("console", "serve the approvers' web console")),
    _group(
        "notify",
        ("notify", "notify entitled approvers of pending approvals (e-mail, Slack, Teams)"),
    ),
    _group("bus", ("bus", "the bus's authorization, generated from the registry")),
    _group(
        "model_gateway",
        (
            "model-gateway",
            "the model endpoint runtimes are pointed at: serve, upstream, add-runtime, list, clear",
        ),
    ),
    _group(
        "runtime",
        ("runtime", "onboard or revoke a Hermes or OpenClaw runtime in a new signed release"),
    ),
    _group(
        "holds", ("holds", "the gate's legal holds: documents confined runtimes have read-only")
    ),
    _group(
        "tls",
        ("tls", "a local CA and the bus's certificate, for a cluster or clients on other hosts"),
    ),
    _group(
        "approver",
        ("approver", "put an approver on the roster, or take one off, in a new signed release"),
    ),
    _group(
        "doctor",
        (
            "doctor",
            "check a running deployment: bus, release, gate services, runtimes, connectors, "
            "ledger checkpoints, console, state folder modes",
        ),
    ),
    _group(
        "completion",
        ("completion", "print a shell completion script: bash, zsh or fish"),
        whole_line=True,
    ),
)
"""The product's command groups, in ``--help`` order: what a firm runs. The team's own
tools (benchmarks, release candidates and their reviews) have their command line in the
checkout's ``smf_tools/``, built by these same functions, and are not in the wheel."""

DESCRIPTION: Final = "SMF Assurance Gate: deterministic decisions for AI-agent actions."


Commands = Sequence[ModuleType | Command]
"""What a command line is made of: the product's :class:`Command` entries, or modules
with an ``add_parsers`` (the team's tools pass their modules)."""


class _VersionAction(argparse.Action):
    """``--version``: the installed version, looked up only when asked for, so
    ``--help`` and every command skip importing and reading the package metadata."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> None:
        sys.stdout.write(f"{parser.prog} {package_version()}\n")
        parser.exit()


def chosen_command(argv: Sequence[str]) -> str | None:
    """The top-level command ``argv`` runs: its first word that is not an option
    (the top level's options take no value)."""
    return next((token for token in argv if not token.startswith("-")), None)


def top_level_options(argv: Sequence[str]) -> list[str]:
    """The options given before the command (``--debug``, ``--version``)."""
    chosen = chosen_command(argv)
    return list(argv if chosen is None else argv[: list(argv).index(chosen)])


def build_parser(
    commands: Commands = COMMANDS,
    prog: str = boundary.PROG,
    description: str = DESCRIPTION,
    argv: Sequence[str] | None = None,
) -> argparse.ArgumentParser:
    """The parser of one command line: ``commands`` each add their subcommands
    (``add_parsers``), so every command line has the same ``--version``, ``--debug``
    and the same rules for its subcommands.

    With ``argv``, only the command group ``argv`` runs is imported and built in
    full; every other top-level command is its name and help line, which is all
    the top level's ``--help`` and a mistyped command's usage show. Without it
    (completion, the generated ``--json`` pages, the tests), every group is built."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="let an unexpected failure show its traceback instead of one line",
    )
    parser.set_defaults(parser=parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = None if argv is None else chosen_command(argv)
    whole = argv is None or any(
        isinstance(group, Command) and group.whole_line and chosen in dict(group.commands)
        for group in commands
    )
    for group in commands:
        if isinstance(group, ModuleType):
            group.add_parsers(sub)
        elif whole or chosen in dict(group.commands):
            group.load().add_parsers(sub)
        else:
            for name, summary in group.commands:
                sub.add_parser(name, help=summary)
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
    commands: Commands = COMMANDS,
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
        return _run(lambda: build_parser(commands, prog, description, tokens), tokens, signals)
    finally:
        if in_main_thread:
            for sig, handler in zip((signal.SIGINT, signal.SIGTERM), previous, strict=True):
                if handler is not None:
                    signal.signal(sig, handler)


def _run(
    build: Callable[[], argparse.ArgumentParser], tokens: list[str], signals: boundary.Signals
) -> int:
    """Build the parser, parse and run, all inside the boundary: a signal or a
    failure while the chosen command's module is imported and its parsers built
    ends as one line too."""
    prog = signals.prog
    debug = "--debug" in top_level_options(tokens)
    try:
        args = parse(build(), tokens)
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
