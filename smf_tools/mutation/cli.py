"""The command line of ``make mutate``: score every module, list every survivor."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence

from smf_tools.mutation import record
from smf_tools.mutation.operators import mutants_of
from smf_tools.mutation.reviewed import EQUIVALENT
from smf_tools.mutation.runner import Run, run, selected
from smf_tools.mutation.targets import MIN_SCORE, POOL, TARGETS, Target


def report(targets: Sequence[Target], outcome: Run, elapsed: float) -> bool:
    """Print the score table and every survivor; True when the gate passes."""
    passed = not outcome.broken
    print(f"{'module':<24} {'file':<36} {'killed':>6} {'run':>5} {'score':>7} {'timeouts':>8}")
    all_killed = all_run = 0
    for target in targets:
        if target.name in outcome.broken:
            print(f"{target.name:<24} {target.relpath:<36} {'unmutated tests fail':>29}")
            continue
        mine = [r for r in outcome.results if r.mutant.target == target.name]
        if not mine:
            continue
        killed = sum(r.status in ("killed", "timeout") for r in mine)
        errors = sum(r.status == "error" for r in mine)
        passed = passed and not errors
        timeouts = sum(r.status == "timeout" for r in mine)
        score = 100.0 * killed / len(mine)
        passed = passed and score >= MIN_SCORE
        all_killed, all_run = all_killed + killed, all_run + len(mine)
        print(
            f"{target.name:<24} {target.relpath:<36} {killed:>6} {len(mine):>5} "
            f"{score:>6.1f}% {timeouts:>8}"
        )
    if all_run:
        print(f"{'total':<61} {all_killed:>6} {all_run:>5} {100.0 * all_killed / all_run:>6.1f}%")
    survivors = [r for r in outcome.results if r.status in ("survived", "uncovered", "error")]
    print(f"\nsurvivors: {len(survivors)}")
    for result in survivors:
        mutant = result.mutant
        reason = EQUIVALENT.get(mutant.key)
        passed = passed and reason is not None
        note = {
            "uncovered": " (no test was seen to run this line)",
            "error": " (pytest error)",
        }
        print(f"  {mutant.label()}{note.get(result.status, '')}")
        print(f"      {'reviewed, ' + reason if reason else 'NOT REVIEWED'}")
    print(f"\n{all_run} mutants in {elapsed / 60:.1f} min")
    return passed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m smf_tools.mutation",
        description="Mutation testing of the trust core (docs/MUTATION.md).",
    )
    names = [t.name for t in TARGETS]
    parser.add_argument("--module", action="append", choices=names, help="only this module")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument(
        "--match", action="append", default=[], help="only mutants whose label contains this"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="TESTS",
        help=f"derive the tests from these paths instead of {' '.join(POOL)} "
        "(a quicker look; not with --save)",
    )
    parser.add_argument(
        "--save",
        action="store_true",
        help="keep each module's figures in docs/mutation-runs.json and regenerate "
        "docs/MUTATION.md's table (not with --match: a selection is not a score)",
    )
    parser.add_argument(
        "--write-doc",
        action="store_true",
        help="regenerate docs/MUTATION.md's table from docs/mutation-runs.json, run nothing",
    )
    args = parser.parse_args(argv)
    if args.save and args.match:
        parser.error("--save scores whole modules; it cannot be used with --match")
    if args.save and args.pool:
        parser.error("--save scores against the whole pool; it cannot be used with --pool")
    if args.write_doc:
        record.write_page()
        return 0
    targets = [t for t in TARGETS if not args.module or t.name in args.module]
    if args.list:
        for target in targets:
            mutants = [m for m in mutants_of(target) if selected(m, args.match)]
            print(f"# {target.name} ({target.relpath}): {len(mutants)} mutants")
            for mutant in mutants:
                print(f"  {mutant.label()}")
        return 0
    # SIGTERM as SystemExit, so the workers and their runs are stopped on the way out.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        started = time.monotonic()
        commits = {t.name: record.commit_of(t) for t in targets} if args.save else {}
        outcome = run(targets, max(1, args.jobs), args.match, tuple(args.pool) or POOL)
        elapsed = time.monotonic() - started
        passed = report(targets, outcome, elapsed)
        if args.save:
            saved = [
                record.row_of(
                    target,
                    [
                        (r.status, r.mutant.label(), r.mutant.key)
                        for r in outcome.results
                        if r.mutant.target == target.name
                    ],
                    elapsed / 60,
                    commit=commits[target.name],
                )
                for target in targets
                if target.name in outcome.baselines
            ]
            record.save(saved)
            record.write_page()
        return 0 if passed else 1
    finally:
        signal.signal(signal.SIGTERM, previous)
