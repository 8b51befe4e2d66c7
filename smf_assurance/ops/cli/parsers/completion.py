"""``completion``'s options; ``smf_assurance.ops.cli.commands.completion`` writes the script."""

from __future__ import annotations

import argparse

from smf_assurance.ops.cli.parsers import Handler

SHELLS = ("bash", "zsh", "fish")
PROG = "smf-assurance"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script: bash, zsh or fish",
        description="Print a completion script for the shell; for example "
        f"`source <({PROG} completion bash)`, or save its output where your shell "
        "loads completions from.",
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(func=Handler("completion", "run_completion"))
