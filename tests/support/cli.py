"""The fixtures, builders and constants of tests/cli/test_cli.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

__all__ = ["AT", "subcommands"]

AT = "2026-11-29T10:00:00Z"


def subcommands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str | None, argparse.ArgumentParser]]:
    """Every subcommand the parser knows, nested ones too, with the summary its
    parent lists it under: read from the parser, so a new command is covered."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                yield (*path, name), summaries.get(name), child
                yield from subcommands(child, (*path, name))
