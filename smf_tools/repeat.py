"""``repeat``: one test run many times in fresh processes, with the machine kept busy.

A test that fails one run in twenty is a failing test; a single green run says
nothing about it. CI runs on a loaded two-core machine, where a fixed sleep, a
port taken twice or a consumer asked before it is reachable shows up; a quiet
workstation hides them. So each run is a fresh ``pytest`` process (no state
carried from one run to the next: its own temporary folders, ports and server),
while ``--burners`` processes spin on the CPUs (default: two per core, the load
under which the flakes of a fresh-machine ``make test`` were seen).

Every run must have run at least one test: a node id that collects nothing is a
failure, never a green series (a check that checked nothing is not "ok"). The
output of each failed run is kept, and named, for whoever looks into it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from smf_assurance.ops.cli.output import (
    Progress,
    emit,
    fail,
    non_negative_int,
    positive_int,
    say,
    table,
)
from smf_tools.cli_json import RepeatFailureJson, RepeatJson

DEFAULT_RUNS: Final = 20
NO_TESTS_COLLECTED: Final = 5
"""pytest's exit status when the node ids collected nothing."""
PYTEST: Final = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-cov")


@dataclass(frozen=True, slots=True)
class Run:
    number: int
    status: int
    took_ns: int
    log: Path | None
    """The run's output, kept when it failed."""


def test_id(text: str) -> str:
    """An argparse ``type`` for a test to repeat: a file, folder or node id. An empty
    one is refused: pytest takes ``""`` as the working folder and would repeat the
    whole suite; so is one that starts with ``-``, an option rather than a test."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty test id (pytest would run the whole suite)")
    if text.startswith("-"):
        raise argparse.ArgumentTypeError(f"{text!r} is an option, not a test id")
    return text


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "repeat",
        help="run tests many times in fresh processes under CPU load, to find a flaky one",
    )
    p.add_argument(
        "tests", nargs="+", type=test_id, help="pytest node ids or files, as pytest takes them"
    )
    p.add_argument(
        "--runs", type=positive_int, default=DEFAULT_RUNS, help=f"runs (default {DEFAULT_RUNS})"
    )
    p.add_argument(
        "--burners",
        type=non_negative_int,
        default=None,
        help="processes spinning on the CPUs meanwhile (default: two per core; 0 for none)",
    )
    p.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="folder for the output of failed runs (default: a new temporary folder)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_repeat)


def _spin() -> None:  # pragma: no cover - runs in a burner process, ended by SIGTERM
    while True:
        pass


@contextmanager
def burning(count: int) -> Iterator[None]:
    """``count`` processes spinning until the block ends, however it ends."""
    context = multiprocessing.get_context("spawn")
    burners = [context.Process(target=_spin, daemon=True) for _ in range(count)]
    try:
        for burner in burners:
            burner.start()
        yield
    finally:
        for burner in burners:
            if burner.is_alive():
                burner.terminate()
        for burner in burners:
            burner.join()


def check_collects(tests: Sequence[str]) -> None:
    """Refuse, before any burner starts, tests that pytest cannot collect (a missing
    file, a usage error) or that collect nothing: each run would fail, or pass having
    run nothing, and the series would say nothing about the test."""
    done = subprocess.run(
        (*PYTEST, "--collect-only", *tests),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    named = " ".join(tests)
    if done.returncode == NO_TESTS_COLLECTED:
        fail(f"{named} collected no test: nothing would be repeated")
    if done.returncode != 0:
        fail(f"pytest cannot collect {named} (exit {done.returncode}): nothing would be repeated")


def once(number: int, tests: Sequence[str], logs: Path) -> Run:
    """One fresh ``pytest`` process over ``tests``; its output kept when it failed."""
    start = time.perf_counter_ns()
    done = subprocess.run(
        (*PYTEST, *tests), stdin=subprocess.DEVNULL, capture_output=True, check=False
    )
    took = time.perf_counter_ns() - start
    log = None
    if done.returncode != 0:
        log = logs / f"run-{number:03d}.log"
        log.write_bytes(done.stdout + done.stderr)
    return Run(number, done.returncode, took, log)


def run_repeat(args: argparse.Namespace) -> int:
    burners = 2 * (os.cpu_count() or 1) if args.burners is None else args.burners
    logs: Path = args.logs or Path(tempfile.mkdtemp(prefix="smf-repeat-"))
    try:
        logs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--logs: cannot create {logs}: {exc.strerror}")
    check_collects(args.tests)
    progress = Progress("runs", args.runs)
    runs: list[Run] = []
    with burning(burners):
        for number in range(1, args.runs + 1):
            runs.append(once(number, args.tests, logs))
            progress.update(number)
    progress.close()
    failed = [r for r in runs if r.status != 0]
    p50_ns = int(statistics.median(r.took_ns for r in runs))
    max_ns = max(r.took_ns for r in runs)
    if args.json:
        emit(
            RepeatJson(
                runs=len(runs),
                passed=len(runs) - len(failed),
                failed=len(failed),
                burners=burners,
                p50_ns=p50_ns,
                max_ns=max_ns,
                failures=tuple(
                    RepeatFailureJson(run=r.number, status=r.status, log=str(r.log)) for r in failed
                ),
            )
        )
    else:
        table(
            ["runs", "passed", "failed", "burners", "p50 s", "max s"],
            [
                [
                    len(runs),
                    len(runs) - len(failed),
                    len(failed),
                    burners,
                    f"{p50_ns / 1e9:.1f}",
                    f"{max_ns / 1e9:.1f}",
                ]
            ],
        )
        for run in failed:
            say(f"run {run.number}: exit {run.status}, output in {run.log}")
    if failed:
        fail(f"{len(failed)} of {len(runs)} runs failed; their output is in {logs}")
    return 0
