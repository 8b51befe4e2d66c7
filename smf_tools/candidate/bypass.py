"""The bypass matrix as one suite: ``make bypass``.

Every bypass case the docs name (unknown tools, missing facts, mapper
exceptions, ... evidence-store outage) is declared once in ``docs/bypass.toml``
with its surface, the outcome the product promises, and the node ids of the
existing tests that prove it. This runner runs exactly those tests in one
pytest run (``--junitxml``), then prints one row per case: surface, case,
expected, observed, tests. Observed is what the run showed, the worst of the
case's tests: ``failed``, ``missing`` (no test named, a named test that does
not exist in the source, or one the run did not report), ``skipped``, or
``passed``. A case with no test is a ``missing`` row, printed, never dropped;
the exit status is 0 only when every row passed.

``python -m smf_tools.candidate.bypass [--cases FILE] [--root DIR]``;
pytest's own output goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.ops.cli.output import say, table
from smf_tools.candidate.claims import test_node_ids

CASES_FILE: Final = Path("docs") / "bypass.toml"
Observed = Literal["passed", "skipped", "missing", "failed"]
_WORST: Final[tuple[Observed, ...]] = ("failed", "missing", "skipped", "passed")

_PROGRESS_FD: Final = 2
"""pytest's own lines go to our stderr's descriptor: they are the progress, and stdout
stays the table."""

Text = Annotated[str, msgspec.Meta(min_length=1, pattern=r"\S")]


class BypassError(Exception):
    """The cases file cannot be read or is not what it must be."""


class Case(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One bypass case: where it is tried, what must happen, and the tests that show it."""

    surface: Text
    case: Text
    expected: Text
    tests: tuple[str, ...] = ()


class _File(msgspec.Struct, forbid_unknown_fields=True):
    case: tuple[Case, ...]


@dataclass(frozen=True, slots=True)
class Row:
    case: Case
    observed: Observed
    each: tuple[tuple[str, Observed], ...]
    """Every named test and what the run showed for it."""


def load_cases(path: Path) -> tuple[Case, ...]:
    """The declared cases; refuses an empty field and a case declared twice."""
    try:
        cases = msgspec.convert(tomllib.loads(path.read_text(encoding="utf-8")), _File).case
    except OSError as exc:
        raise BypassError(f"cannot read {path}: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise BypassError(f"{path}: {exc}") from exc
    seen: set[tuple[str, str]] = set()
    for case in cases:
        if (case.surface, case.case) in seen:
            raise BypassError(f"{path}: {case.surface} / {case.case} is declared twice")
        seen.add((case.surface, case.case))
    return cases


def _base(node_id: str) -> str:
    """A node id without its parameters: ``t.py::test_x[a]`` -> ``t.py::test_x``."""
    return node_id.split("[", 1)[0]


def existing(root: Path, node_ids: Iterable[str]) -> set[str]:
    """The node ids whose test function exists in the source under ``root``."""
    defined: dict[str, set[str]] = {}
    found: set[str] = set()
    for node_id in node_ids:
        module = node_id.split("::", 1)[0]
        if module not in defined:
            defined[module] = set(test_node_ids(root, module))
        if _base(node_id) in defined[module]:
            found.add(node_id)
    return found


def _junit_key(node_id: str) -> tuple[str, str]:
    """(classname, name) as pytest's JUnit XML reports the test ``node_id``."""
    module, *rest = node_id.split("::")
    classname = ".".join([module.removesuffix(".py").replace("/", "."), *rest[:-1]])
    return classname, rest[-1] if rest else ""


def read_junit(path: Path) -> dict[tuple[str, str], Observed]:
    """(classname, name) -> outcome of each test case the run reported."""
    try:
        tree = ET.parse(path)  # noqa: S314 - our own pytest child wrote it, in our temp dir
    except (OSError, ET.ParseError):
        return {}
    outcomes: dict[tuple[str, str], Observed] = {}
    for testcase in tree.iter("testcase"):
        tags = {child.tag for child in testcase}
        outcome: Observed = (
            "failed"
            if tags & {"failure", "error"}
            else "skipped"
            if "skipped" in tags
            else "passed"
        )
        key = (testcase.get("classname", ""), testcase.get("name", ""))
        previous = outcomes.get(key, "passed")
        outcomes[key] = min(previous, outcome, key=_WORST.index)
    return outcomes


def observe(
    node_id: str, present: set[str], outcomes: Mapping[tuple[str, str], Observed]
) -> Observed:
    """What the run showed for one named test; every parametrized case of a node id
    named without parameters counts."""
    if node_id not in present:
        return "missing"
    classname, name = _junit_key(node_id)
    seen = [
        outcome
        for (cls, test), outcome in outcomes.items()
        if cls == classname and (test == name or ("[" not in name and test.startswith(name + "[")))
    ]
    if not seen:
        return "missing"
    return min(seen, key=_WORST.index)


def judge(
    cases: Sequence[Case], present: set[str], outcomes: Mapping[tuple[str, str], Observed]
) -> list[Row]:
    rows: list[Row] = []
    for case in cases:
        each = tuple((n, observe(n, present, outcomes)) for n in case.tests)
        worst: Observed = min((o for _, o in each), key=_WORST.index, default="missing")
        rows.append(Row(case, worst, each))
    return rows


def run(root: Path, cases: Sequence[Case], junit: Path) -> list[Row]:
    """Run every existing test the cases name, once, in one pytest process; judge each case."""
    named = list(dict.fromkeys(node_id for case in cases for node_id in case.tests))
    present = existing(root, named)
    if present:
        subprocess.run(
            (
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "--no-cov",
                f"--junitxml={junit}",
                *[n for n in named if n in present],
            ),
            cwd=root,
            stdout=_PROGRESS_FD,
            check=False,
        )
    return judge(cases, present, read_junit(junit))


def print_rows(rows: Sequence[Row]) -> None:
    """One row per case, in the order the cases file declares them."""
    table(
        ("surface", "case", "expected", "observed", "tests"),
        [
            (
                row.case.surface,
                row.case.case,
                row.case.expected,
                row.observed,
                ", ".join(n if o == "passed" else f"{n} ({o})" for n, o in row.each)
                or "(no test named)",
            )
            for row in rows
        ],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m smf_tools.candidate.bypass",
        description="Run every declared bypass case's tests; one row per case.",
    )
    parser.add_argument("--root", type=Path, default=Path("."), help="project root (default: .)")
    parser.add_argument("--cases", type=Path, help=f"cases file (default: ROOT/{CASES_FILE})")
    args = parser.parse_args(argv)
    try:
        cases = load_cases(args.cases or args.root / CASES_FILE)
    except BypassError as exc:
        sys.stderr.write(f"bypass: {exc}\n")
        return 2
    with tempfile.TemporaryDirectory(prefix="smf-bypass-") as folder:
        rows = run(args.root.resolve(), cases, Path(folder) / "junit.xml")
    print_rows(rows)
    failing = [row for row in rows if row.observed != "passed"]
    say(f"{len(rows) - len(failing)} of {len(rows)} cases passed")
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
