"""``candidate build``: one commit, its suite's results, its artifacts, one signed matrix.

``python -m smf_tools candidate build``. In order, each step refusing
(:class:`BuildError`, one line) rather than writing a matrix it cannot stand by:

1. HEAD of a clean working tree (:func:`smf_tools.candidate.source.head_commit`):
   modified, staged, deleted or untracked-not-ignored files are named and refused.
2. A fresh clone at that SHA whose tree is the recorded one; the claims and
   their markers are read from the clone, never from the working tree.
3. Results: ``make test`` in the clone writing a JUnit report
   (``PYTEST_ADDOPTS=--junitxml=...``; any ``test`` target may instead write to
   ``$SMF_CANDIDATE_JUNIT``), or ``--junit FILE``; either way the report must
   name this SHA and tree (:mod:`smf_tools.candidate.junit`), and it is
   held to the whole suite: the build counts the tests the clone collects
   (``pytest --collect-only``, in the clone, never from the report) and refuses a
   report missing any of them, a report with any failed or errored test, and a
   ``make test`` that exits non-zero. A part of the suite, or a red one, proves
   nothing of the commit. What this does not prove: that a hand-edited report
   naming every collected test as passed was ever run; ``--junit`` trusts the
   report's producer as far as that, ``make test`` in the clone does not need to.
   The count is taken by this interpreter with the clone as its first import path, and
   every module of ours (``smf_assurance``, ``smf_tools``, ``tests``) the collection
   imported must have come from the clone: a package found elsewhere first (this
   checkout's editable install, a ``sys.path`` a conftest changed) would count and mark
   another commit's tests. The matrix records how many it checked.
4. Artifacts: ``make dist`` in the clone when the commit has that target, each
   file of ``dist/`` recorded by sha256 and copied out; without the target (or
   with ``--no-dist``) the packaging rows stay open.
5. The matrix (:mod:`smf_tools.candidate.matrix`) as JSON, Markdown and a
   DSSE envelope signed by the release key, all naming the SHA.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from smf_assurance.subjects.keys import SigningKey
from smf_tools.candidate.claims import (
    CLAIMS_FILE,
    ClaimsError,
    claimed_tests,
    load_claims,
    undeclared,
)
from smf_tools.candidate.junit import JUnitError, Outcome, case_of, read_results
from smf_tools.candidate.matrix import (
    SCHEMA,
    Artifact,
    Candidate,
    DistState,
    SuiteRun,
    encode_candidate,
    markdown,
    row_of,
    runtime_pins,
    sign_candidate,
)
from smf_tools.candidate.source import Commit, SourceError, clone_at, head_commit

JUNIT_ENV: Final = "SMF_CANDIDATE_JUNIT"
"""Where a ``make test`` run from ``candidate build`` must leave its JUnit report."""

SUITE_TIMEOUT_S: Final = 3 * 3600.0
"""Bounds a hung suite (the whole ``make test`` takes minutes); past it, no candidate."""

DIST_TIMEOUT_S: Final = 3600.0

COLLECT_TIMEOUT_S: Final = 900.0
"""Bounds ``pytest --collect-only`` in the clone (seconds for the whole suite)."""

FILES: Final = {
    "json": "candidate.json",
    "markdown": "candidate.md",
    "dsse": "candidate.dsse.json",
    "junit": "junit.xml",
}
"""What ``--out`` receives, besides ``artifacts/`` and the ``make`` logs."""


class BuildError(Exception):
    """No candidate: the message says why, in one line."""


def build_candidate(
    repo: Path,
    key: SigningKey,
    out: Path,
    *,
    junit: Path | None = None,
    dist: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[Candidate, dict[str, Path]]:
    """Build, sign and write the candidate of ``repo``'s HEAD; return it and the files.
    A refusal leaves ``out`` as it found it, but for the logs of a ``make`` that ran."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BuildError(f"{out} exists and is not an empty folder")
    try:
        commit = head_commit(repo)
    except SourceError as exc:
        raise BuildError(str(exc)) from exc
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _build(repo, commit, key, out, junit, dist, progress)
    except BaseException:
        for name in (FILES["junit"], "artifacts"):
            shutil.rmtree(out / name, ignore_errors=True)
            (out / name).unlink(missing_ok=True)
        if created and not any(out.iterdir()):
            out.rmdir()
        raise


def _build(
    repo: Path,
    commit: Commit,
    key: SigningKey,
    out: Path,
    junit: Path | None,
    dist: bool,
    progress: Callable[[str], None],
) -> tuple[Candidate, dict[str, Path]]:
    with tempfile.TemporaryDirectory(prefix="smf-candidate-") as scratch:
        progress(f"cloning {commit.sha}")
        try:
            clone = clone_at(repo, commit, Path(scratch) / "clone")
        except SourceError as exc:
            raise BuildError(str(exc)) from exc
        report = out / FILES["junit"]
        if junit:  # refused at once when it names another commit, before anything slow
            results = _results(junit, commit)
            shutil.copyfile(junit, report)
        try:
            claims = load_claims(clone / CLAIMS_FILE)
            marked = claimed_tests(clone)
        except (ClaimsError, OSError, SyntaxError) as exc:
            raise BuildError(f"claims at {commit.sha}: {exc}") from exc
        typos = undeclared(claims, marked)
        if typos:
            raise BuildError(f"test markers name undeclared claims: {', '.join(typos)}")
        progress("counting the tests the clone collects")
        collected = _collected(clone)
        exit_status: int | None = None
        if not junit:
            exit_status = _run_suite(clone, report, out, progress)
            results = _results(report, commit)
        totals = _whole_suite(results, collected.nodes, commit)
        dist_state, artifacts = _dist(clone, out, progress) if dist else ("skipped", ())
        pins = runtime_pins(clone)
        candidate = Candidate(
            schema=SCHEMA,
            sha=commit.sha,
            tree=commit.tree,
            suite=SuiteRun(
                source="clone" if junit is None else "file",
                junit_sha256=_sha256(report),
                exit_status=exit_status,
                collected=len(collected.nodes),
                modules_from_clone=collected.modules,
                **totals,
            ),
            dist=dist_state,
            artifacts=artifacts,
            runtimes=pins,
            claims=tuple(
                row_of(c, commit.sha, marked.get(c.id, ()), results, pins, dist_state)
                for c in claims
            ),
        )
    written = {
        "json": out / FILES["json"],
        "markdown": out / FILES["markdown"],
        "dsse": out / FILES["dsse"],
        "junit": report,
    }
    written["json"].write_bytes(encode_candidate(candidate))
    written["markdown"].write_text(markdown(candidate), encoding="utf-8")
    written["dsse"].write_bytes(sign_candidate(candidate, key))
    return candidate, written


def _results(report: Path, commit: Commit) -> dict[tuple[str, str], list[Outcome]]:
    try:
        return read_results(report, commit)
    except JUnitError as exc:
        raise BuildError(str(exc)) from exc


OURS: Final = ("smf_assurance", "smf_tools", "tests")
"""The top-level packages whose modules a collection in the clone must import from it."""

ORIGIN_MARK: Final = "smf-candidate-origin"

COLLECT_PROGRAM: Final = f"""
import os, sys, pytest
status = pytest.main(sys.argv[1:])
root = os.path.realpath(os.getcwd()) + os.sep
ours = [m for n, m in sorted(sys.modules.items()) if n.split(".")[0] in {OURS!r}]
files = [getattr(m, "__file__", None) for m in ours]
outside = [f for f in files if f and not os.path.realpath(f).startswith(root)]
print({ORIGIN_MARK!r}, sum(bool(f) for f in files), *outside[:1], sep="\\t")
sys.exit(status)
"""
"""``pytest --collect-only`` in process, then where its imports of ours came from: one
line, the count of our modules the collection imported and the first one found outside
the clone, if any."""


@dataclass(frozen=True)
class Collected:
    """The clone's node ids and how many of our modules their collection imported, each
    from the clone."""

    nodes: frozenset[str]
    modules: int


def _collected(clone: Path) -> Collected:
    """The node ids of every test the clone collects, asked of pytest in the clone: the
    count a report is held to comes from the commit, not from the report, and from the
    commit's own code (refused when a module of ours was imported from elsewhere)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", JUNIT_ENV)}
    argv = [sys.executable, "-c", COLLECT_PROGRAM, "--collect-only", "-q", "-o", "addopts="]
    argv += ["-p", "no:cacheprovider", "-p", "no:warnings"]
    try:
        done = subprocess.run(
            argv,
            cwd=clone,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=COLLECT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"pytest --collect-only did not finish: {type(exc).__name__}") from exc
    listed = done.stdout.split("\n\n", 1)[0].splitlines()
    nodes = frozenset(line for line in listed if "::" in line)
    if done.returncode != 0 or not nodes:
        raise BuildError(
            f"pytest --collect-only exited {done.returncode} with {len(nodes)} tests in the "
            "clone: no count of the whole suite to hold the report to"
        )
    origin = [line for line in done.stdout.splitlines() if line.startswith(ORIGIN_MARK)]
    fields = origin[-1].split("\t") if origin else []
    if len(fields) < 2 or not fields[1].isdigit():
        raise BuildError("pytest --collect-only in the clone did not say where it imported from")
    if len(fields) > 2:
        raise BuildError(
            f"the clone's collection imported {fields[2]}, not from the clone: its count "
            "would be another checkout's"
        )
    return Collected(nodes=nodes, modules=int(fields[1]))


def _whole_suite(
    results: dict[tuple[str, str], list[Outcome]], collected: frozenset[str], commit: Commit
) -> dict[str, int]:
    """The report's totals, after refusing one that misses a test the commit collects or
    holds a failed or errored case (a failing teardown included)."""
    missing = sorted(node for node in collected if case_of(node) not in results)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise BuildError(
            f"the JUnit report ran {len(collected) - len(missing)} of the {len(collected)} "
            f"tests {commit.sha} collects (missing {missing[0]}{more}): a partial run "
            "proves nothing of the rest"
        )
    worst = {case: _worst(outcomes) for case, outcomes in results.items()}
    red = sorted(
        ".".join(case) for case, outcome in worst.items() if outcome in ("failed", "error")
    )
    if red:
        more = f" and {len(red) - 1} more" if len(red) > 1 else ""
        raise BuildError(
            f"the JUnit report has {len(red)} failed or errored test(s) at {commit.sha} "
            f"({red[0]}{more}): no candidate from a red suite"
        )
    counts = list(worst.values())
    return {
        "ran": len(counts),
        "passed": counts.count("passed"),
        "failed": 0,
        "errors": 0,
        "skipped": counts.count("skipped"),
    }


def _worst(outcomes: list[Outcome]) -> Outcome:
    for outcome in ("error", "failed", "skipped"):
        if outcome in outcomes:
            return outcome
    return "passed"


def _run_suite(clone: Path, report: Path, out: Path, progress: Callable[[str], None]) -> int:
    """``make test`` in the clone; its exit status (a failing suite still reports)."""
    progress("running make test in the clone (minutes)")
    env = dict(os.environ)
    env[JUNIT_ENV] = str(report.resolve())
    env["PYTEST_ADDOPTS"] = f"{env.get('PYTEST_ADDOPTS', '')} --junitxml={report.resolve()}"
    status = _make(clone, "test", out / "make-test.log", env, SUITE_TIMEOUT_S)
    if not report.is_file():
        raise BuildError(
            f"make test exited {status} and wrote no JUnit report (see {out / 'make-test.log'})"
        )
    if status != 0:
        raise BuildError(f"make test exited {status} (see {out / 'make-test.log'})")
    return status


def _dist(
    clone: Path, out: Path, progress: Callable[[str], None]
) -> tuple[DistState, tuple[Artifact, ...]]:
    """``make dist`` when the commit has the target; refuses a failed or empty build."""
    probe = subprocess.run(
        ["make", "-n", "dist"], cwd=clone, capture_output=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        return "no-target", ()
    progress("running make dist in the clone")
    log = out / "make-dist.log"
    status = _make(clone, "dist", log, dict(os.environ), DIST_TIMEOUT_S)
    if status != 0:
        raise BuildError(f"make dist exited {status} (see {log})")
    built = sorted(p for p in (clone / "dist").glob("*") if p.is_file())
    if not built:
        raise BuildError("make dist left nothing in dist/")
    (out / "artifacts").mkdir()
    artifacts = []
    for path in built:
        shutil.copyfile(path, out / "artifacts" / path.name)
        artifacts.append(Artifact(name=path.name, sha256=_sha256(path), size=path.stat().st_size))
    return "built", tuple(artifacts)


def _make(clone: Path, target: str, log: Path, env: dict[str, str], timeout: float) -> int:
    with log.open("wb") as handle:
        try:
            done = subprocess.run(
                ["make", target],
                cwd=clone,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"make {target} did not finish: {type(exc).__name__}") from exc
    return done.returncode


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()
