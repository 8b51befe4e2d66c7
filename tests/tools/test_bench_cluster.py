"""``python -m smf_tools bench --cluster``: the figures are there and agree.

The command runs for real, with tiny rounds: a three-node cluster from
``deploy/nats/``, two ``up --cluster`` processes, SQLite and KV R3 claims.
No timing assertions (a shared two-core machine times nothing reliably); what
is checked is that every series has its sample count, that each ratio is the
one computed from the figures printed beside it, that the placement is the
one the benchmark describes (client and replicas on three different nodes),
that both replicas served and together served every proposal, that a wrong
verdict fails the run with its reason instead of printing figures, and that
no run, passing or failing, leaves a process or a temporary directory behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
from pathlib import Path
from typing import Any, Final

import pytest

from smf_tools.bench import cluster
from smf_tools.bench.cluster import CLAIM_KV, CLAIM_SQLITE, ratio_x1000
from smf_tools.cli import main
from tests.support.processes import children

ROUNDS = 6
IN_FLIGHT = 2


def run_bench(args: list[str], tmp: Path) -> str:
    """The command's stdout; it must leave no process and no temporary directory."""
    before = children()
    out = io.StringIO()
    argv = ["bench", "--cluster", "--rounds", str(ROUNDS), "--in-flight", str(IN_FLIGHT), *args]
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr(tempfile, "tempdir", str(tmp))
        assert main(argv) == 0
    assert children() <= before, "the bench left a process running"
    assert not list(tmp.glob("smf-bench-cluster-*")), "the bench left its temporary directory"
    return out.getvalue()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One JSON run shared by the tests that read it (each run starts a cluster)."""
    parsed: dict[str, Any] = json.loads(run_bench(["--json"], tmp_path_factory.mktemp("json")))
    return parsed


def test_only_the_cluster_series_run_and_every_series_has_its_samples(
    report: dict[str, Any],
) -> None:
    assert set(report) == {"machine", "cluster"}
    figures = report["cluster"]
    assert (figures["rounds"], figures["in_flight"], figures["nodes"]) == (ROUNDS, IN_FLIGHT, 3)
    requests = figures["requests"]
    assert requests == max(ROUNDS, 4 * IN_FLIGHT)
    assert [row["label"] for row in figures["claim"]] == [CLAIM_SQLITE, CLAIM_KV]
    for row in figures["claim"]:
        assert row["count"] == ROUNDS
        assert 0 < row["p50_ns"] <= row["p95_ns"] <= row["p99_ns"]
    rates = figures["throughput"]
    assert [(r["label"], r["replicas"]) for r in rates] == [
        ("echo", 0),
        ("allow, 1 replica", 1),
        ("allow, 2 replicas", 2),
    ]
    for row in rates:
        assert (row["requests"], row["in_flight"]) == (requests, IN_FLIGHT)
        assert row["elapsed_us"] > 0


@pytest.mark.claim("performance-budgets.honest-figures")
def test_every_ratio_is_computed_from_the_printed_figures(report: dict[str, Any]) -> None:
    figures = report["cluster"]
    sqlite, kv = figures["claim"]
    assert figures["claim_kv_over_sqlite_p50_x1000"] == ratio_x1000(kv["p50_ns"], sqlite["p50_ns"])
    assert figures["claim_kv_over_sqlite_p99_x1000"] == ratio_x1000(kv["p99_ns"], sqlite["p99_ns"])
    echo, one, two = figures["throughput"]
    for row in (echo, one, two):
        per_second = row["requests"] * 1_000_000 / row["elapsed_us"]
        assert abs(row["requests_per_s"] - per_second) <= 0.5
        assert row["over_echo_x1000"] == ratio_x1000(
            row["requests"] * echo["elapsed_us"], echo["requests"] * row["elapsed_us"]
        )
    assert figures["two_over_one_replica_x1000"] == ratio_x1000(
        two["requests"] * one["elapsed_us"], one["requests"] * two["elapsed_us"]
    )


def test_both_replicas_served_and_every_proposal_was_served_once(
    report: dict[str, Any],
) -> None:
    figures = report["cluster"]
    echo, one, two = figures["throughput"]
    assert echo["served"] == []
    assert one["served"] == [{"gate": "gate-1", "requests": one["requests"]}]
    assert [s["gate"] for s in two["served"]] == ["gate-1", "gate-2"]
    assert all(s["requests"] > 0 for s in two["served"])
    assert sum(s["requests"] for s in two["served"]) == two["requests"]


def test_client_and_replicas_run_on_three_different_nodes(report: dict[str, Any]) -> None:
    figures = report["cluster"]
    placement = {row["connection"]: row["node"] for row in figures["placement"]}
    assert placement == {
        "smf-bench-cluster-client": "nats-3",
        "gate-1": "nats-1",
        "gate-2": "nats-2",
    }
    assert {row["stream"] for row in figures["leaders"]} == {
        "KV_smf_bench_approvals",
        "SMF_BENCH_APPROVAL_CONTENT",
    }
    assert {row["node"] for row in figures["leaders"]} <= {"nats-1", "nats-2", "nats-3"}


PRINTED_RATIO_SLACK: Final = 0.0005 + 0.005 + 1e-9
"""A ratio is rounded twice before it is printed: to thousandths (``ratio_x1000``),
then to two decimals; each rounding moves it by at most half its unit."""


def within(printed: float, numerator: float, denominator: float, *, half_unit: float) -> bool:
    """Whether a ratio printed to two decimals is ``numerator / denominator`` for some
    values the printed columns round to (each within ``half_unit``). A fixed tolerance
    fails when the machine is slow: 18 and 7 req/s may be 17.6 and 6.96 (2.53, not 2.57)."""
    low = (numerator - half_unit) / (denominator + half_unit)
    high = (numerator + half_unit) / (denominator - half_unit)
    return low - PRINTED_RATIO_SLACK <= printed <= high + PRINTED_RATIO_SLACK


def test_within_allows_both_roundings_and_no_more() -> None:
    # 1.2345 is 1.235 in thousandths (half up), printed 1.24: 0.0055 from the truth
    assert within(1.24, 1.2345, 1.0, half_unit=0.0)
    assert not within(1.25, 1.2345, 1.0, half_unit=0.0)
    assert within(2.53, 18, 7, half_unit=0.5)
    assert not within(2.9, 18, 7, half_unit=0.5)


def test_the_table_shows_each_series_and_ratios_from_its_own_columns(tmp_path: Path) -> None:
    out = run_bench([], tmp_path)
    p50 = {}
    for label in (CLAIM_SQLITE, CLAIM_KV):
        row = next(line for line in out.splitlines() if line.startswith(label))
        samples, median = row[len(label) :].split()[:2]
        assert int(samples) == ROUNDS
        p50[label] = float(median)
    claim = re.search(r"claim kv / claim sqlite: p50 ([0-9.]+)x", out)
    assert claim is not None
    assert within(float(claim.group(1)), p50[CLAIM_KV], p50[CLAIM_SQLITE], half_unit=0.005)
    per_second = {}
    for label in ("echo", "allow, 1 replica", "allow, 2 replicas"):
        row = next(line for line in out.splitlines() if line.startswith(label + " "))
        per_second[label] = int(row[len(label) :].split()[1])
    scale = re.search(r"two replicas / one replica: ([0-9.]+)x", out)
    assert scale is not None
    # The ratio comes from the elapsed times; the req/s column is rounded to integers.
    two, one = per_second["allow, 2 replicas"], per_second["allow, 1 replica"]
    assert within(float(scale.group(1)), two, one, half_unit=0.5)
    assert "gate-1 on nats-1, gate-2 on nats-2" in out


def test_ratios_are_thousandths_rounded_half_up_in_integers() -> None:
    assert ratio_x1000(1, 3) == 333
    assert ratio_x1000(2, 3) == 667
    assert ratio_x1000(1, 2000) == 1  # 0.5 thousandths rounds up
    assert ratio_x1000(3, 1) == 3000
    with pytest.raises(ValueError, match="positive denominator"):
        ratio_x1000(1, 0)


@pytest.mark.claim("performance-budgets.honest-figures")
def test_a_wrong_verdict_fails_the_run_instead_of_printing_a_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without the seed's registry, `up` provisions its own, which does not know the
    # bench's runtime key: every proposal is denied as from an unknown signer. (The
    # gate keeps its bus credential, so the cluster still lets it in.)
    monkeypatch.setattr(cluster, "GATE_FILES", ("keys/gate.key", "keys/gate.nkey"))
    before = children()
    with monkeypatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(tmp_path))
        code = main(["bench", "--cluster", "--rounds", "2", "--in-flight", "1", "--json"])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert "allow, 1 replica" in captured.err
    assert "were not allowed, e.g. deny ['unknown_signer']" in captured.err
    assert children() <= before
    assert not list(tmp_path.glob("smf-bench-cluster-*"))
