"""``python -m smf_tools bench --against REF``: both trees' own code, measured alike.

The command runs for real, with tiny rounds, against the commit before the bus-deputy
wave (``180b2aa``, the baseline its budget names): a temporary worktree of it, the driver
under each tree's code on nats-servers of their own. No timing assertions (a shared
two-core machine times nothing reliably); what is checked is that each side ran its own
tree's ``smf_assurance`` (the driver reports the path it imported), that every sitting's
figure is there for both sides and the printed ratio and verdict are the ones computed
from them, that nothing is left behind (worktree, temporary folder, process), that a
wrong verdict ends a side's run without figures, and that a name which is not a commit is
refused in one line.
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import subprocess
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any, Final

import pytest

from smf_assurance.ops.local.bus_auth import render_open_config
from smf_assurance.ops.local.natsserver import JETSTREAM_SETTINGS
from smf_assurance.subjects.messages import DataFacts
from smf_tools.bench import against, against_driver
from smf_tools.bench.against import ROOT, AgainstResult, Row
from smf_tools.bench.bus import BenchError
from smf_tools.bench.command import print_against
from smf_tools.cli import main
from tests.support.processes import children

BASELINE: Final = "180b2aa"
"""The commit before the bus-deputy wave: its layout differs (``ops/`` unsorted)."""


def _worktrees() -> str:
    return subprocess.run(
        ["git", "worktree", "list", "--porcelain"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _sha(ref: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", ref], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "nats.conf"
    config.write_text(render_open_config() + JETSTREAM_SETTINGS, encoding="utf-8")
    return config


@pytest.mark.claim("performance-budgets.same-run-comparison")
def test_each_side_runs_its_own_tree_and_every_sitting_is_reported(tmp_path: Path) -> None:
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{BASELINE}^{{commit}}"], cwd=ROOT, check=False
    )
    if known.returncode != 0:
        pytest.skip(f"this clone lacks {BASELINE} (shallow?): nothing to compare against")
    worktrees, processes = _worktrees(), children()
    out = io.StringIO()
    argv = ["bench", "--against", BASELINE, "--rounds", "4", "--sittings", "2"]
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr(tempfile, "tempdir", str(tmp_path))
        assert main([*argv, "--in-flight", "2", "--json"]) == 0
    found: dict[str, Any] = json.loads(out.getvalue())["against"]

    assert found["before"] == _sha(BASELINE)
    assert found["after"].removesuffix("+changes") == _sha("HEAD")
    assert (found["sittings"], found["rounds"], found["in_flight"]) == (2, 4, 2)
    assert [row["series"] for row in found["rows"]] == [
        "propose allow (co-located) p50",
        "propose allow (co-located) throughput, 2 in flight",
        "propose allow (bus stages) p50",
        "propose allow (bus stages) throughput, 2 in flight",
    ]
    for row in found["rows"]:
        assert len(row["before"]) == len(row["after"]) == 2
        assert all(figure > 0 for figure in (*row["before"], *row["after"]))
        ratio = Fraction(statistics.median(row["after"])) / Fraction(
            statistics.median(row["before"])
        )
        assert row["after_over_before_x1000"] == round(float(ratio) * 1000)
        worse = ratio - 1 if row["unit"] == "p50 us" else 1 - ratio
        assert row["within_budget"] is (worse * 100 <= found["budget_percent"])
    assert _worktrees() == worktrees, "the bench left its worktree"
    assert not list(tmp_path.glob("smf-bench-against-*")), "the bench left its folder"
    assert children() <= processes, "the bench left a process running"


@pytest.mark.claim("performance-budgets.same-run-comparison")
def test_a_side_that_imports_another_tree_is_refused(tmp_path: Path) -> None:
    """A tree without its own ``smf_assurance`` falls back to the installed one: the
    comparer must refuse those figures, not report them as the tree's."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BenchError, match=r"^empty, co-located: ran .*, not the tree's own code$"):
        against._side(empty, _config(tmp_path), "co-located", 1, 1, tmp_path / "out.json")


def test_a_side_that_does_not_finish_in_time_is_an_error_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(against, "DRIVER_TIMEOUT_S", 0.2)
    (tmp_path / "after").mkdir()
    with pytest.raises(BenchError, match=r"^after, co-located: not done within 0.2 s$"):
        against._side(
            tmp_path / "after", _config(tmp_path), "co-located", 1, 1, tmp_path / "out.json"
        )


def test_the_driver_reports_figures_of_allows_and_the_code_it_ran(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert against_driver.main([str(_config(tmp_path)), "co-located", "3", "2", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["code"] == str((ROOT / "smf_assurance").resolve())
    assert figures["p50_ns"] > 0
    assert figures["per_s"] > 0


@pytest.mark.claim("performance-budgets.same-run-comparison")
def test_a_request_not_allowed_ends_the_drivers_run_without_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under legal hold the floor denies the deletion: no figure may come of it."""
    monkeypatch.setattr(
        against_driver,
        "FACTS",
        DataFacts(classification="internal", injection_taint="clear", legal_hold=True),
    )
    out = tmp_path / "out.json"
    with pytest.raises(against_driver.DriverError, match=r"^deny \["):
        against_driver.main([str(_config(tmp_path)), "bus stages", "2", "1", str(out)])
    assert not out.exists()


@pytest.mark.claim("performance-budgets.same-run-comparison")
def test_an_order_stream_without_exactly_the_connectors_durables_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both trees are measured with the demo connectors' durables on the order stream;
    a tree that leaves another set there (here: the gate made one more than the driver
    expects) is an error, not a figure measured on other terms."""
    monkeypatch.setattr(against_driver, "CONNECTORS", ("dms",))
    out = tmp_path / "out.json"
    with pytest.raises(against_driver.DriverError, match=r"order stream's consumers are \["):
        against_driver.main([str(_config(tmp_path)), "co-located", "2", "1", str(out)])
    assert not out.exists()


def test_a_name_that_is_not_a_commit_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    worktrees = _worktrees()
    assert main(["bench", "--against", "no-such-ref-anywhere"]) != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        "python -m smf_tools: bench --against: 'no-such-ref-anywhere' is not a commit of "
        "this repository"
    ]
    assert _worktrees() == worktrees


@pytest.mark.parametrize(
    ("unit", "higher", "before", "after", "within"),
    [
        ("p50 us", False, (1000, 1000, 1000), (1050, 1040, 2000), True),
        ("p50 us", False, (1000, 900, 1100), (1060, 1051, 1000), False),
        ("req/s", True, (1000, 1000), (950, 950), True),
        ("req/s", True, (1000, 1000), (949, 949), False),
        ("req/s", True, (1000,), (2000,), True),
    ],
)
def test_a_series_is_within_budget_by_its_medians_and_its_direction(
    unit: str, higher: bool, before: tuple[int, ...], after: tuple[int, ...], within: bool
) -> None:
    row = Row("s", unit, higher, before, after)
    assert row.within_budget is within


@pytest.mark.claim("performance-budgets.same-run-comparison")
def test_the_table_shows_every_sitting_the_medians_and_the_verdict() -> None:
    result = AgainstResult(
        before="a" * 40,
        after="b" * 40 + "+changes",
        sittings=3,
        rounds=10,
        in_flight=4,
        rows=(
            Row("propose allow (co-located) p50", "p50 us", False, (2000, 2100, 1900), (2200,) * 3),
            Row("propose allow (co-located) throughput", "req/s", True, (1000,) * 3, (990,) * 3),
        ),
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_against(result)
    text = out.getvalue()
    assert f"before: {'a' * 40}\n" in text
    assert f"after:  {'b' * 40}+changes\n" in text
    assert "3 sittings, alternated; 10 sequential allows per p50, 16 at 4 in flight" in text
    p50, throughput = text.splitlines()[-2:]
    assert "2,000 / 2,100 / 1,900" in p50
    assert "2,000 -> 2,200" in p50
    assert "+10.0 %" in p50
    assert p50.endswith("over 5 %")
    assert "1,000 -> 990" in throughput
    assert "-1.0 %" in throughput
    assert throughput.endswith("within 5 %")
