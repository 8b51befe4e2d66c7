"""The figures of ``make mutate`` as measured, and docs/MUTATION.md's table made from them.

A score in the documentation is evidence only while it is the score of the code
as it is. ``--save`` keeps each measured module's row in :data:`RUNS_FILE`
(killed, run, timeouts, survivors, the commit it was measured at, and a
fingerprint of what was measured: the module's source, its target, and for a
derived target the pool and budget its tests were chosen by) and regenerates the
section of docs/MUTATION.md between :data:`BEGIN` and :data:`END` from that file.
``tests/tools/test_mutation_tool.py`` fails when the page differs from the file,
and when a row's fingerprint is not the module's now: a module changed since its
figures must be measured again (``make mutate MUTATE_ARGS="--module NAME --save"``),
not shown with old ones.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from smf_tools.mutation.reviewed import EQUIVALENT
from smf_tools.mutation.targets import BUDGET_S, MIN_SCORE, POOL, ROOT, TARGETS, Target

RUNS_FILE: Final = ROOT / "docs" / "mutation-runs.json"
PAGE: Final = ROOT / "docs" / "MUTATION.md"
BEGIN: Final = "<!-- mutation-run:begin -->"
END: Final = "<!-- mutation-run:end -->"


class MutationPageError(Exception):
    """The page has no single pair of markers to generate between."""


@dataclass(frozen=True, slots=True)
class Row:
    """One module's figures from one run of it."""

    module: str
    file: str
    killed: int
    run: int
    timeouts: int
    survivors: tuple[tuple[str, tuple[str, ...]], ...]
    """Every survivor: its label and its :attr:`Mutant.key` (reviewed or not is read
    from ``reviewed.py`` when the table is made, so a review needs no new run)."""
    commit: str
    """``git rev-parse --short HEAD`` when the run started, ``+local`` when the module's
    file or a test file it could run differed from it."""
    measured_at: str
    minutes: float
    fingerprint: str

    @property
    def score(self) -> float:
        return 100.0 * self.killed / self.run if self.run else 0.0

    @property
    def unreviewed(self) -> int:
        return sum(_key(key) not in EQUIVALENT for _, key in self.survivors)


def _key(key: Sequence[str]) -> tuple[str, str, str, str, str]:
    first, second, third, fourth, fifth = key
    return (first, second, third, fourth, fifth)


def fingerprint(target: Target, root: Path = ROOT) -> str:
    """What a module's figures are figures of: its source and its target (tests, scope)."""
    digest = hashlib.sha256()
    digest.update((root / target.relpath).read_bytes())
    described: list[object] = [
        target.name,
        target.module,
        target.tests,
        target.scope,
        target.pytest_args,
    ]
    if target.derived:
        described += [POOL, BUDGET_S]
    digest.update(json.dumps(described).encode())
    return "sha256:" + digest.hexdigest()


def _git(*args: str, root: Path = ROOT) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit_of(target: Target, root: Path = ROOT) -> str:
    """The commit the module was measured at (``+local`` when its file or a test file
    it could run differed from that commit)."""
    head = _git("rev-parse", "--short=12", "HEAD", root=root) or "unknown"
    # A derived target's tests use tests/support and the conftest files too: any change
    # under tests/ is one.
    tests = ("tests",) if target.derived else (test.partition("::")[0] for test in target.tests)
    files = {target.relpath, *tests}
    changed = _git("status", "--porcelain", "--", *sorted(files), root=root)
    return head + ("+local" if changed else "")


def row_of(
    target: Target,
    statuses: Sequence[tuple[str, str, tuple[str, str, str, str, str]]],
    minutes: float,
    root: Path = ROOT,
    commit: str | None = None,
) -> Row:
    """The row of one module from its mutants' (status, label, key); ``commit`` as
    :func:`commit_of` said when the run started (now, when not given)."""
    killed = sum(status in ("killed", "timeout") for status, _, _ in statuses)
    return Row(
        module=target.name,
        file=target.relpath,
        killed=killed,
        run=len(statuses),
        timeouts=sum(status == "timeout" for status, _, _ in statuses),
        survivors=tuple(
            (label, key)
            for status, label, key in statuses
            if status in ("survived", "uncovered", "error")
        ),
        commit=commit or commit_of(target, root),
        measured_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        minutes=round(minutes, 1),
        fingerprint=fingerprint(target, root),
    )


def load(path: Path = RUNS_FILE) -> dict[str, Row]:
    """The saved rows by module name (none when the file does not exist)."""
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {
        name: Row(
            **{
                **fields,
                "survivors": tuple((label, tuple(key)) for label, key in fields["survivors"]),
            }
        )
        for name, fields in raw.items()
    }


def save(
    rows: Iterable[Row], path: Path = RUNS_FILE, targets: Sequence[Target] = TARGETS
) -> dict[str, Row]:
    """Keep ``rows`` in ``path``, replacing each module's earlier row, in the order of
    ``targets`` (a module no longer among them is dropped); the result."""
    kept = load(path)
    kept.update((row.module, row) for row in rows)
    ordered = {t.name: kept[t.name] for t in targets if t.name in kept}
    path.write_text(json.dumps({k: asdict(v) for k, v in ordered.items()}, indent=2) + "\n")
    return ordered


def section(rows: Mapping[str, Row], targets: Sequence[Target] = TARGETS) -> str:
    """The generated "Latest run" table: one row per measured module, each with the
    commit it was measured at; the modules without figures named."""
    lines = [
        BEGIN,
        "<!-- Generated from docs/mutation-runs.json by `make mutate MUTATE_ARGS=--write-doc`",
        "     (each module measured with `--module NAME --save`); edit neither by hand. -->",
        "",
        "Each row is one module's last run saved with `--save`, at the commit it names;",
        "the total is the sum of the rows, not one run.",
        "",
        "| module | file | killed | run | score | timeouts | unreviewed | commit | measured |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    killed = run = 0
    for target in targets:
        row = rows.get(target.name)
        if row is None:
            continue
        killed, run = killed + row.killed, run + row.run
        flag = "" if row.score >= MIN_SCORE else " (below 90 %)"
        lines.append(
            f"| `{row.module}` | `{row.file}` | {row.killed} | {row.run} | "
            f"{row.score:.1f} %{flag} | {row.timeouts} | {row.unreviewed} | "
            f"`{row.commit}` | {row.measured_at} ({row.minutes} min) |"
        )
    if run:
        lines.append(f"| total (sum) | | {killed} | {run} | {100.0 * killed / run:.1f} % | | | | |")
    missing = [f"`{t.name}`" for t in targets if t.name not in rows]
    lines.append("")
    lines.append(
        "Not measured since they last changed: " + ", ".join(missing) + "."
        if missing
        else "Every module of the scope is measured."
    )
    survivors = [survivor for row in rows.values() for survivor in row.survivors]
    lines += [
        "",
        f"Survivors of these runs ({len(survivors)}; the reasons are in",
        "`smf_tools/mutation/reviewed.py`):",
        "",
        "```",
    ]
    for label, key in survivors:
        lines.append(f"{label}{'' if _key(key) in EQUIVALENT else '  NOT REVIEWED'}")
    lines += ["```", END]
    return "\n".join(lines)


def render(page: str, generated: str) -> str:
    """``page`` with the text between its markers (markers included) replaced."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise MutationPageError(f"the page needs exactly one {BEGIN} ... {END} pair")
    head, rest = page.split(BEGIN)
    return head + generated + rest.split(END)[1]


def write_page(path: Path = PAGE, runs: Path = RUNS_FILE) -> None:
    path.write_text(render(path.read_text(), section(load(runs))))
