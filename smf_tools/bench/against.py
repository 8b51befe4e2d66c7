"""``bench --against REF``: this checkout's allow beside an earlier commit's, in one run.

A budget such as "the allow's p50 and throughput regress by at most 5 %" compares two
versions of the gate's code; figures from separate sittings cannot show it, because on a
shared machine two sittings differ by more than that. So one command runs both:

1. the earlier commit is checked out with ``git worktree add --detach`` into a temporary
   folder (removed after); this checkout is the other side, as it is on disk;
2. the same driver (:mod:`smf_tools.bench.against_driver`) runs under each tree's code
   (``PYTHONPATH``, this interpreter, nothing installed) on a nats-server of its own,
   configured by one file written here from the running checkout's server settings
   (:func:`~smf_assurance.ops.local.bus_auth.render_open_config` and
   :data:`~smf_assurance.ops.local.natsserver.JETSTREAM_SETTINGS`), so the two trees
   differ only in their own code: the gate, its stages and stores, the runtime's client;
3. sittings alternate which tree runs first, mode by mode, so a busy moment of the
   machine falls on both alike; the figure of a series is the median of its sittings.

A side whose driver fails, or that ran another ``smf_assurance`` than its tree's, ends the
run with an error, never a figure.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Final

from smf_assurance.ops.cli.output import Progress
from smf_assurance.ops.local.bus_auth import render_open_config
from smf_assurance.ops.local.natsserver import JETSTREAM_SETTINGS
from smf_tools.bench.against_driver import MODES
from smf_tools.bench.bus import BenchError

ROOT: Final = Path(__file__).resolve().parents[2]
DRIVER: Final = Path(__file__).with_name("against_driver.py")
DEFAULT_ROUNDS: Final = 1000
DEFAULT_SITTINGS: Final = 4
BUDGET_PERCENT: Final = 5
"""How much worse than the earlier commit a series may be: p50 at most 5 % higher,
requests per second at most 5 % lower."""
DRIVER_TIMEOUT_S: Final = 600
GIT_TIMEOUT_S: Final = 120


@dataclass(frozen=True, slots=True)
class Row:
    """One series: each sitting's figure on both sides."""

    series: str
    unit: str
    higher_is_better: bool
    before: tuple[int, ...]
    after: tuple[int, ...]

    @property
    def before_median(self) -> float:
        return statistics.median(self.before)

    @property
    def after_median(self) -> float:
        return statistics.median(self.after)

    @property
    def change_percent(self) -> float:
        """After over before, in percent of before (positive: a larger figure)."""
        return (self.after_median / self.before_median - 1) * 100

    @property
    def within_budget(self) -> bool:
        """Decided on the exact medians (no rounding at the budget's edge)."""
        ratio = Fraction(self.after_median) / Fraction(self.before_median)
        if self.higher_is_better:
            return ratio >= 1 - Fraction(BUDGET_PERCENT, 100)
        return ratio <= 1 + Fraction(BUDGET_PERCENT, 100)


@dataclass(frozen=True, slots=True)
class AgainstResult:
    before: str
    """The earlier commit, whole."""
    after: str
    """This checkout's commit, whole, with ``+changes`` when its tracked files differ."""
    sittings: int
    rounds: int
    in_flight: int
    rows: tuple[Row, ...]


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=GIT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"git {args[0]}: no answer within {GIT_TIMEOUT_S} s") from None
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()
        raise BenchError(f"git {args[0]}: {reason[-1] if reason else done.returncode}")
    return done.stdout.strip()


def _side(
    tree: Path, config: Path, mode: str, rounds: int, in_flight: int, out: Path
) -> dict[str, int]:
    """The driver's figures under ``tree``'s code; an error names the side and its last line."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, str(DRIVER), str(config), mode, str(rounds), str(in_flight), str(out)]
    out.unlink(missing_ok=True)
    try:
        done = subprocess.run(
            argv,
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=DRIVER_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"{tree.name}, {mode}: not done within {DRIVER_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise BenchError(f"{tree.name}, {mode}: {lines[-1] if lines else done.returncode}")
    figures: dict[str, object] = json.loads(out.read_text(encoding="utf-8"))
    ran = figures.pop("code")
    if ran != str((tree / "smf_assurance").resolve()):
        raise BenchError(f"{tree.name}, {mode}: ran {ran}, not the tree's own code")
    return {key: int(value) for key, value in figures.items() if isinstance(value, int)}


def run(
    ref: str,
    rounds: int = DEFAULT_ROUNDS,
    in_flight: int = 64,
    sittings: int = DEFAULT_SITTINGS,
    progress: Progress | None = None,
) -> AgainstResult:
    """Both trees' allow, co-located and with the stages over the bus, ``sittings`` times."""
    if rounds < 1 or in_flight < 1 or sittings < 1:
        raise ValueError("rounds, in_flight and sittings must be at least 1")
    try:
        before = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except BenchError:
        raise BenchError(f"{ref!r} is not a commit of this repository") from None
    after = _git("rev-parse", "HEAD")
    if _git("status", "--porcelain", "--untracked-files=no"):
        after += "+changes"
    progress = progress or Progress("bench against", sittings * 2 * len(MODES))
    figures: dict[tuple[str, str], list[dict[str, int]]] = {}
    step = 0
    with tempfile.TemporaryDirectory(prefix="smf-bench-against-") as tmp:
        code = Path(tmp) / "before"
        config = Path(tmp) / "nats.conf"
        config.write_text(render_open_config() + JETSTREAM_SETTINGS, encoding="utf-8")
        _git("worktree", "add", "--detach", str(code), before)
        try:
            trees = {"before": code, "after": ROOT}
            for sitting in range(sittings):
                order = ("before", "after") if sitting % 2 == 0 else ("after", "before")
                for mode in MODES:
                    for side in order:
                        out = Path(tmp) / f"{side}.json"
                        found = _side(trees[side], config, mode, rounds, in_flight, out)
                        figures.setdefault((side, mode), []).append(found)
                        step += 1
                        progress.update(step)
        finally:
            _git("worktree", "remove", "--force", str(code))
            progress.close()
    rows = []
    for mode in MODES:
        for key, unit, higher in (("p50_ns", "p50 us", False), ("per_s", "req/s", True)):
            label = "p50" if key == "p50_ns" else f"throughput, {in_flight} in flight"
            scale = 1000 if key == "p50_ns" else 1
            rows.append(
                Row(
                    series=f"propose allow ({mode}) {label}",
                    unit=unit,
                    higher_is_better=higher,
                    before=tuple(f[key] // scale for f in figures[("before", mode)]),
                    after=tuple(f[key] // scale for f in figures[("after", mode)]),
                )
            )
    return AgainstResult(
        before=before,
        after=after,
        sittings=sittings,
        rounds=rounds,
        in_flight=in_flight,
        rows=tuple(rows),
    )
