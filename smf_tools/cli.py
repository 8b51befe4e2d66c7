"""``python -m smf_tools``: the team's command line, from the checkout's root.

The commands that build and measure the product rather than run it: ``bench`` (the
benchmarks beside their baselines), ``candidate`` (one immutable release candidate and
its signed evidence), ``review`` (a reviewer's signed verdict on a candidate's claim) and
``repeat`` (one test run many times under CPU load, to find a flaky one).
A firm neither measures our build nor signs reviews of our candidates, so none of this
is in the wheel; ``make bench``, ``make evidence`` and ``make bypass`` run it.

It is made by the product's own command line machinery
(:func:`smf_assurance.ops.cli.main.main`), so the same rules hold: ``--help``, a table by
default, ``--json`` (``smf_tools/cli_json.py``, ``docs/TOOLS-JSON.md``), one line and a
non-zero status on failure, progress on stderr.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from types import ModuleType
from typing import Final

from smf_assurance.ops.cli import main as product
from smf_tools import PROG, repeat
from smf_tools.bench import command as bench
from smf_tools.candidate import command as candidate
from smf_tools.candidate import review_command as review

DESCRIPTION: Final = (
    "The SMF Assurance Gate team's tools: benchmarks, release candidates and their reviews "
    "(not in the wheel; run from the checkout's root)."
)
COMMANDS: Final[tuple[ModuleType, ...]] = (bench, candidate, review, repeat)


def build_parser() -> argparse.ArgumentParser:
    return product.build_parser(COMMANDS, PROG, DESCRIPTION)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one of the team's commands inside the product's error boundary."""
    return product.main(argv, commands=COMMANDS, prog=PROG, description=DESCRIPTION)
