"""``bench --cli``: how long the command line takes to answer, beside bare Python.

Each sample is a fresh process, timed from its start to its exit (a command's
first output comes at or before its exit, so these are upper bounds on it):

- baselines: ``python -c pass`` (the interpreter alone) and ``python -c "import
  nats"`` (what any command that talks to the bus must import at least);
- ``smf-assurance --help`` and ``--version``, which import no command module;
- ``smf-assurance COMMAND --help`` for each top-level command: that command's
  parsers built (``smf_assurance.ops.cli.parsers``), what every run of it pays
  before its first line; a run also imports the command's module, which ``--help``
  does not;
- ``eval`` of a scenario envelope, a command doing its work offline: its module
  imported, and the decision made and printed.

Rounds interleave the series, so a busy moment of the machine falls on all of
them alike. Targets (issue's wording): ``--help`` and ``--version`` p50 at most
300 ms; every command's p50 at most 600 ms. Figures only: nothing here is asserted
in a test (``tests/cli/test_cli_startup.py`` holds the mechanism: what ``--help``
leaves unimported).
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Final

from smf_assurance.governance.projections import SCENARIO_ENVELOPES, package_path
from smf_assurance.ops.cli.main import COMMANDS
from smf_tools.bench.stats import Summary, summarize

DEFAULT_ROUNDS: Final = 7
"""Processes per series: a start costs a tenth of a second or more."""
HELP_MS: Final = 300.0
COMMAND_MS: Final = 600.0
CLI: Final = (sys.executable, "-m", "smf_assurance.ops.cli.main")
AT: Final = "2026-11-29T10:00:00Z"


class StartupBenchError(Exception):
    """A series' command did not exit as it should."""


@dataclass(frozen=True, slots=True)
class StartupResult:
    baselines: tuple[Summary, ...]
    top: tuple[Summary, ...]
    """``--help`` and ``--version``."""
    commands: tuple[Summary, ...]
    """Each top-level command's ``--help``, then ``eval`` of a scenario."""

    def slowest_command(self) -> Summary:
        return max(self.commands, key=lambda s: s.p50_us)


def series() -> list[tuple[str, tuple[str, ...], str]]:
    """Each series' label, argv and the kind it counts as (baseline, top, command)."""
    envelope = package_path(SCENARIO_ENVELOPES) / "1-court-filing-approval.json"
    found: list[tuple[str, tuple[str, ...], str]] = [
        ("python -c pass", (sys.executable, "-c", "pass"), "baseline"),
        ('python -c "import nats"', (sys.executable, "-c", "import nats"), "baseline"),
        ("smf-assurance --help", (*CLI, "--help"), "top"),
        ("smf-assurance --version", (*CLI, "--version"), "top"),
    ]
    for group in COMMANDS:
        for name, _ in group.commands:
            found.append((f"{name} --help", (*CLI, name, "--help"), "command"))
    found.append(("eval (a scenario)", (*CLI, "eval", "--at", AT, str(envelope)), "command"))
    return found


def _once(argv: tuple[str, ...]) -> int:
    start = time.perf_counter_ns()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    took = time.perf_counter_ns() - start
    if done.returncode != 0:
        raise StartupBenchError(f"{' '.join(argv[1:])} exited {done.returncode}")
    return took


def run(rounds: int = DEFAULT_ROUNDS) -> StartupResult:
    chosen = series()
    samples: dict[str, list[int]] = {label: [] for label, _, _ in chosen}
    for argv in {a for _, a, _ in chosen}:  # warm the file cache and the .pyc files once
        _once(argv)
    for _ in range(rounds):
        for label, argv, _ in chosen:
            samples[label].append(_once(argv))
    kinds: dict[str, list[Summary]] = {"baseline": [], "top": [], "command": []}
    for label, _, kind in chosen:
        kinds[kind].append(summarize(label, samples[label]))
    return StartupResult(tuple(kinds["baseline"]), tuple(kinds["top"]), tuple(kinds["command"]))
