"""``candidate``: one immutable candidate of the product and what holds for it.

- ``candidate build``: refuses a dirty tree naming its files (and one whose tracked
  files git is told not to compare); records the commit's SHA and tree; takes the
  suite's results from ``make test`` in a fresh clone (or a ``--junit`` report bound
  to that SHA and tree), refusing a report that misses a test the clone collects or
  holds a failure; builds ``make dist`` there when the
  commit has it; writes the matrix as JSON, Markdown and a DSSE envelope signed by a
  release key (``smf_tools.candidate.build``).
- ``candidate status``: which signed reviews hold for a candidate's commit
  (``smf_tools.candidate.status``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from smf_assurance.ops.cli.output import emit, fail, say, table
from smf_assurance.subjects.keys import KeyFileError, load_private_key
from smf_tools.candidate.build import BuildError, build_candidate
from smf_tools.candidate.status import add_status_parser
from smf_tools.cli_json import CandidateBuildJson, CandidateClaimJson, CandidateSuiteJson


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "candidate", help="one immutable candidate: its signed evidence matrix and its reviews"
    )
    actions = p.add_subparsers(dest="candidate_command", required=True, metavar="SUBCOMMAND")

    build = actions.add_parser(
        "build",
        help="test and build one clean commit and write its signed claim matrix",
        description="Refuse a working tree that differs from HEAD (naming the files) or "
        "hides changes (assume-unchanged or skip-worktree files); clone HEAD; count the tests "
        "it collects; run `make test` there with a JUnit report, or read --junit (it must name "
        "this SHA and tree); refuse a report missing any collected test, with any failure or "
        "error, or a make test exiting non-zero; run `make dist` there when the commit has it; "
        "write candidate.json, candidate.md and candidate.dsse.json (signed by --key) into "
        "--out. A claim whose tests are skipped or absent is open, never green.",
    )
    build.add_argument(
        "--repo", type=Path, default=Path("."), help="the git repository (default: here)"
    )
    build.add_argument("--key", type=Path, required=True, help="release-signing private key")
    build.add_argument("--out", type=Path, required=True, help="folder to write (new or empty)")
    build.add_argument(
        "--junit",
        type=Path,
        help="a JUnit report of exactly this commit (its smf.candidate.sha and .tree "
        "properties), instead of running make test",
    )
    build.add_argument(
        "--no-dist",
        action="store_true",
        help="do not run make dist: the packaging claims stay open",
    )
    build.add_argument("--json", action="store_true", help="print the result as JSON")
    build.set_defaults(func=run_build)
    add_status_parser(actions)


def _progress(text: str) -> None:
    """Progress on stderr, on a terminal only: a refusal stays one line for scripts."""
    if sys.stderr.isatty():
        sys.stderr.write(f"candidate build: {text}\n")


def _first(reasons: tuple[str, ...]) -> str:
    """A row's reasons in a table cell: the first, and how many more (all are in the
    files and in --json)."""
    if len(reasons) > 1:
        return f"{reasons[0]} (+{len(reasons) - 1} more)"
    return reasons[0] if reasons else "-"


def run_build(args: argparse.Namespace) -> int:
    try:
        key, _ = load_private_key(args.key)
    except KeyFileError as exc:
        fail(f"{args.key}: {exc}", 2)
    try:
        candidate, files = build_candidate(
            args.repo,
            key,
            args.out,
            junit=args.junit,
            dist=not args.no_dist,
            progress=_progress,
        )
    except BuildError as exc:
        fail(f"candidate build refused: {exc}")
    green = sum(row.state == "green" for row in candidate.claims)
    if args.json:
        emit(
            CandidateBuildJson(
                schema=candidate.schema,
                sha=candidate.sha,
                tree=candidate.tree,
                signed_by=key.key_id,
                dist=candidate.dist,
                artifacts={a.name: a.sha256 for a in candidate.artifacts},
                runtimes=candidate.runtimes,
                suite=CandidateSuiteJson(
                    collected=candidate.suite.collected,
                    ran=candidate.suite.ran,
                    passed=candidate.suite.passed,
                    failed=candidate.suite.failed,
                    errors=candidate.suite.errors,
                    skipped=candidate.suite.skipped,
                ),
                green=green,
                open=len(candidate.claims) - green,
                claims=tuple(
                    CandidateClaimJson(
                        id=row.id,
                        family=row.family,
                        state=row.state,
                        tests=len(row.tests),
                        open_because=row.open_because,
                    )
                    for row in candidate.claims
                ),
                files={name: str(path) for name, path in files.items()},
            )
        )
        return 0
    table(
        ("claim", "state", "tests", "open because"),
        [(row.id, row.state, len(row.tests), _first(row.open_because)) for row in candidate.claims],
    )
    say(
        f"candidate {candidate.sha}: {green} green, {len(candidate.claims) - green} open; "
        f"dist {candidate.dist}; signed by {key.key_id}; written to {args.out}"
    )
    return 0
