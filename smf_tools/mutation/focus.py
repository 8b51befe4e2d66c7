"""Which test files each target of ``make mutate`` runs: derived from coverage (issue 40).

``python -m smf_tools.mutation --derive`` runs the pool (:data:`POOL`: every test file
of ``tests/unit`` and ``tests/bus``) once, under coverage with one context per test,
and for each target keeps, for every mutant it can make, the cheapest pool file
whose tests run the mutant's lines (cheapest: the least time in the tests of that
file that run any line of the target). A target whose mutants include a
dataclass's or Struct's ``frozen=`` flag also gets :data:`FROZEN_CONTRACT`: a
class statement runs at import, so coverage cannot say which test depends on it,
and that file is the one that asserts every verified value type is frozen. The
result is written to ``focus.json`` with the commit it was measured at, and
``targets.py`` reads it: no target names its tests by hand.

Per mutant, the runner still picks from these files only the tests that run its
line, fastest first (``Baseline.tests_for``). Not in the pool: ``tests/cli`` and
``tests/runtimes`` (their tests drive whole processes and real runtimes; a line
only they run is reported ``uncovered`` when a mutant of it survives).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from coverage import CoverageData

from smf_tools.mutation.operators import Mutant, mutants_of
from smf_tools.mutation.targets import FOCUS_FILE, FOCUS_SCHEMA, ROOT, Target

POOL: Final = ("tests/unit", "tests/bus")
FROZEN_CONTRACT: Final = "tests/unit/test_frozen_contract.py"


class FocusError(RuntimeError):
    """The pool does not run green."""


def _file_of(context: str) -> str:
    """``tests/bus/test_x.py::test_f[1]|run`` -> ``tests/bus/test_x.py``."""
    return context.partition("|")[0].partition("::")[0]


def _test_of(context: str) -> str:
    return context.partition("|")[0]


def choose(
    mutants: Sequence[Mutant],
    contexts_by_line: Mapping[int, Sequence[str]],
    seconds: Mapping[str, float],
) -> list[str]:
    """The cheapest covering file of every mutant (see the module docstring)."""
    lines = {line for m in mutants for line in range(m.line, m.end_line + 1)}
    cost: dict[str, float] = {}
    counted: set[str] = set()
    for line in lines:
        for context in contexts_by_line.get(line, ()):
            test = _test_of(context)
            if test and test not in counted:
                counted.add(test)
                cost[_file_of(context)] = cost.get(_file_of(context), 0.0) + seconds.get(test, 0.0)
    chosen: set[str] = set()
    for mutant in mutants:
        files = {
            _file_of(c)
            for line in range(mutant.line, mutant.end_line + 1)
            for c in contexts_by_line.get(line, ())
            if _test_of(c)
        }
        if files:
            chosen.add(min(files, key=lambda f: (cost[f], f)))
        if "frozen=" in mutant.original:
            chosen.add(FROZEN_CONTRACT)
    return sorted(chosen)


def junit_seconds(junit: Path) -> dict[str, float]:
    """Each test's time by node id, from pytest's JUnit report (xdist-safe)."""
    seconds: dict[str, float] = {}
    for case in ET.parse(junit).iter("testcase"):  # noqa: S314 - pytest's own report
        classname, name = case.get("classname", ""), case.get("name", "")
        module, _, cls = classname.partition(".test_")
        path = f"{module.replace('.', '/')}/test_{cls.split('.')[0]}.py"
        inner = cls.split(".")[1:]
        node = "::".join([path, *inner, name])
        seconds[node] = float(case.get("time", "0") or 0)
    return seconds


def derive(targets: Sequence[Target], workdir: Path, jobs: int) -> dict[str, list[str]]:
    """Run the pool once under per-test coverage and choose each target's files."""
    chosen_targets = list(targets)
    data_file = workdir / "focus.coverage"
    junit = workdir / "focus.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        str(jobs),
        "--dist",
        "loadfile",
        *(f"--cov={module}" for module in sorted({t.module for t in chosen_targets})),
        "--cov-context=test",
        "--cov-report=",
        f"--junitxml={junit}",
        *POOL,
    ]
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**_clean_env(), "COVERAGE_FILE": str(data_file)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise FocusError(f"the pool does not pass unmutated:\n{tail}")
    data = CoverageData(basename=str(data_file))
    data.read()
    seconds = junit_seconds(junit)
    found: dict[str, list[str]] = {}
    for target in chosen_targets:
        contexts = data.contexts_by_lineno(str(target.path))
        found[target.name] = choose(mutants_of(target), contexts, seconds)
    _write(found, time.monotonic() - started)
    return found


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("SMF_MUTANT_MODULE", "SMF_MUTANT_SOURCE", "SMF_MUTANT_ORIGIN"):
        env.pop(name, None)
    return env


def _write(found: Mapping[str, Sequence[str]], seconds: float) -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    document = {
        "schema": FOCUS_SCHEMA,
        "commit": commit,
        "pool": list(POOL),
        "minutes": round(seconds / 60, 1),
        "targets": {name: list(files) for name, files in sorted(found.items())},
    }
    FOCUS_FILE.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
