"""The command line as a user meets it: tables, --json, one-line failures, exit codes."""

from __future__ import annotations

import argparse
import io
import json
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from smf_assurance.approver.directory import load_directory
from smf_assurance.governance.projections import SCENARIO_CORPUS, SCENARIO_ENVELOPES, package_path
from smf_assurance.ops.cli.commands.demo import _swarm_row
from smf_assurance.ops.cli.main import build_parser, main
from smf_assurance.ops.local.stack import seed_demo_directory
from smf_assurance.ops.local.state import StateDir
from smf_tools import cli as tools_cli
from tests.support.cli import AT, subcommands
from tests.support.gate_wheel import GateWheel

SCENARIOS = package_path(SCENARIO_ENVELOPES)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def run_tool(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """One command of the team's ``python -m smf_tools``, in this process."""
    code = tools_cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_json_is_canonical_and_carries_the_required_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        ["eval", "--json", "--at", AT, str(SCENARIOS / "1-court-filing-approval.json")], capsys
    )
    assert code == 0
    decision = json.loads(out)
    for key in ("disposition", "reason_codes", "operation_hash", "decision_id", "rule_ids"):
        assert key in decision
    assert decision["disposition"] == "conditional"
    assert decision["requirements"] == {
        "approval_count": 1,
        "required_roles": ["licensed_attorney"],
        "ttl_seconds": 300,
        "exact_action_binding": True,
        "one_shot": True,
    }
    assert out == json.dumps(decision, sort_keys=True, separators=(",", ":")) + "\n"


def test_eval_prints_the_same_bytes_for_the_same_input(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["eval", "--json", "--at", AT, str(SCENARIOS / "2-legal-hold-deletion.json")]
    first = run(argv, capsys)[1]
    second = run(argv, capsys)[1]
    assert first == second
    later = run([*argv[:2], "--at", "2026-11-29T10:00:01Z", argv[-1]], capsys)[1]
    assert json.loads(later)["decision_id"] != json.loads(first)["decision_id"]


def test_eval_reads_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = (SCENARIOS / "3-tainted-egress.json").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out, _ = run(["eval", "--json", "--at", AT, "-"], capsys)
    assert code == 0
    assert json.loads(out)["reason_codes"][0] == "injection_tainted_egress"


def test_eval_table_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["eval", "--at", AT, str(SCENARIOS / "4-uncovered-consequential.json")], capsys
    )
    assert code == 0
    assert "disposition" in out
    assert "deny" in out
    assert "no_applicable_policy_for_consequential_operation" in out
    assert "2026-11-29T10:00:00Z" in out


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda e: e.update(capability="teleport"), "$.capability"),
        (lambda e: e["data"].update(classification=3), "$.data.classification"),
        (lambda e: e["effects"].update(surprise=True), "surprise"),
        (lambda e: e.pop("workflow"), "workflow"),
    ],
)
def test_invalid_envelope_exits_2_with_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: object, field: str
) -> None:
    envelope = json.loads((SCENARIOS / "1-court-filing-approval.json").read_text())
    mutate(envelope)  # type: ignore[operator]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(envelope))
    code, out, err = run(["eval", str(path)], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert field in err


def test_eval_rejects_a_timestamp_without_zone_and_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envelope = str(SCENARIOS / "1-court-filing-approval.json")
    assert run(["eval", "--at", "2026-11-29T10:00:00", envelope], capsys)[0] == 2
    assert run(["eval", "--at", "yesterday", envelope], capsys)[0] == 2
    code, _, err = run(["eval", str(tmp_path / "absent.json")], capsys)
    assert code == 2
    assert "cannot read" in err


def test_eval_with_a_missing_projection_fails_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["eval", "--projection", str(tmp_path), str(SCENARIOS / "1-court-filing-approval.json")],
        capsys,
    )
    assert code == 1
    assert err.startswith("smf-assurance: cannot load projection")
    assert err.count("\n") == 1


def test_compile_then_eval_against_the_compiled_projection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "release"
    code, out, _ = run(
        [
            "compile",
            "--json",
            "--corpus",
            str(package_path(SCENARIO_CORPUS)),
            "--out",
            str(out_dir),
        ],
        capsys,
    )
    assert code == 0
    assert set(json.loads(out)["files"]) == {"enforcement.json", "analysis.json", "index.json"}
    code, out, _ = run(
        [
            "eval",
            "--json",
            "--at",
            AT,
            "--projection",
            str(out_dir),
            str(SCENARIOS / "2-legal-hold-deletion.json"),
        ],
        capsys,
    )
    assert code == 0
    assert json.loads(out)["disposition"] == "deny"


def test_compile_table_and_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["compile", "--corpus", str(package_path(SCENARIO_CORPUS)), "--out", str(tmp_path / "a")],
        capsys,
    )
    assert code == 0
    assert "enforcement.json" in out
    code, _, err = run(
        ["compile", "--corpus", str(tmp_path / "nope"), "--out", str(tmp_path / "b")], capsys
    )
    assert code == 1
    assert err.startswith("smf-assurance: compile failed")
    assert err.count("\n") == 1
    assert not (tmp_path / "b").exists()


def test_demo_runs_the_scenarios_over_the_bus_and_keeps_its_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    code, out, _ = run(["demo", "--json", "--state-dir", str(state)], capsys)
    assert code == 0
    report = json.loads(out)
    assert report["ok"] is True
    verdicts = {r["scenario"][0]: r for r in report["scenarios"]}
    assert sorted(verdicts) == ["1", "2", "3", "4", "5", "6"]
    assert all(r["as_expected"] for r in report["scenarios"])
    assert (verdicts["1"]["outcome"], verdicts["1"]["final_outcome"]) == ("held", "allow")
    assert verdicts["1"]["connector_report"] == "confirmed"
    assert verdicts["1"]["connector_id"] == "court-efiling"
    assert [verdicts[n]["order_id"] for n in "2345"] == [None] * 4
    assert verdicts["4"]["outcome"] == "report"
    assert verdicts["4"]["rule_backed"] >= 1
    assert verdicts["6"]["connector_report"] == "confirmed"
    # Machine values, not display strings: full ids and the gate's own words.
    for row in report["scenarios"]:
        assert row["outcome"] in {"allow", "deny", "held", "report"}
        for key in ("order_id", "evidence"):
            if row[key] is not None:
                assert len(row[key].removeprefix("sha256:")) == 64, (key, row[key])
    assert verdicts["6"]["order_id"] is not None
    assert verdicts["2"]["evidence"] is not None
    # Every piece of state is under --state-dir: the filing, the deletion, the stores.
    filings = list((state / "connectors" / "court-efiling" / "outbox").glob("*.json"))
    assert len(filings) == 1
    assert not (state / "connectors" / "dms" / "store" / "doc-1207").exists()
    assert (state / "connectors" / "dms" / "store" / "doc-4711").exists()
    for name in ("ledger.db", "approvals.db", "registry.json"):
        assert (state / name).exists()
    # the claims and the order book live in the ledger file
    assert not (state / "claims.db").exists()
    # The demo tenant's directory, so the console names the court, case and matter.
    written = state / "directory" / "tenant-acme.toml"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    shown = load_directory(state / "directory").shown(
        "tenant-acme", "matter-2026-0042", "sdny", "electronic_filing"
    )
    assert shown.destination.name == "U.S. District Court, Southern District of New York"
    assert shown.destination.caption == "Acme Corp. v. Globex Inc."
    assert shown.matter.name == "Acme v. Globex (discovery)"
    assert shown.matter.client == "Acme Corporation"


def test_the_demo_never_replaces_the_operators_own_directory_file(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    state.create()
    state.directory.mkdir(mode=0o700)
    own = state.directory / "tenant-acme.toml"
    own.write_text('schema = "smf.tenant-directory/1"\ntenant_id = "tenant-acme"\n')
    before = own.read_bytes()
    assert seed_demo_directory(state) is None
    assert own.read_bytes() == before
    own.unlink()
    assert seed_demo_directory(state) == own
    assert own.read_text().startswith("# The demo firm's tenant directory")


def test_demo_exits_non_zero_with_one_line_when_an_outcome_is_not_the_expected_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The allowed deletion's document is a folder in the state the demo is given
    (seeding leaves existing names alone), so the DMS connector reports it
    ``failed`` / ``not_found`` instead of ``confirmed``: that one scenario is not
    as expected, and the run says so on one line and exits 1."""
    state = tmp_path / "state"
    (state / "connectors" / "dms" / "store" / "doc-1207").mkdir(parents=True)
    state.chmod(0o700)  # a state folder others may enter is refused before any scenario
    code, out, err = run(["demo", "--json", "--state-dir", str(state)], capsys)
    assert code == 1
    assert err == "smf-assurance: a scenario did not reach its expected outcome\n"
    report = json.loads(out)
    assert report["ok"] is False
    unexpected = [r for r in report["scenarios"] if not r["as_expected"]]
    assert [(r["scenario"], r["outcome"], r["connector_report"]) for r in unexpected] == [
        ("6 retention deletion (allowed)", "allow", "failed")
    ]
    assert len(report["scenarios"]) == 6  # every other scenario still ran, as expected


def test_demo_table_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["demo"], capsys)
    assert code == 0
    assert "held -> allow" in out
    assert "legal_hold_blocks_deletion" in out


def test_bench_evaluator_prints_both_engines_and_the_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_tool(["bench", "--evaluator", "--rounds", "20"], capsys)
    assert code == 0
    assert "smf evaluator" in out
    assert "cedarpy" in out
    assert any(line.startswith("cedarpy p50 / smf p50") for line in out.splitlines())
    code, out, _ = run_tool(["bench", "--evaluator", "--rounds", "20", "--json"], capsys)
    figures = json.loads(out)
    assert {s["label"] for s in figures["evaluator"]} >= {"cedarpy is_authorized"}
    assert figures["cedar_over_smf_p50_x1000"] > 0
    targets = {t["measure"]: t for t in figures["targets"]}
    over = targets["cedarpy p50 / ours"]
    assert over["measured_x1000"] == figures["cedar_over_smf_p50_x1000"]
    assert over["met"] is (over["measured_x1000"] >= over["limit_x1000"] == 6000)
    p50 = next(s for s in figures["evaluator"] if s["label"] == "smf evaluator (hash given)")
    assert targets["p50 us"]["measured_x1000"] == p50["p50_ns"]


def test_bench_evaluator_growth_prints_each_size_beside_its_baselines_and_the_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every size has the indexed series, the linear scan and cedarpy; the
    growth target is computed from the printed figures and reported, rc 0 either way."""
    code, out, _ = run_tool(["bench", "--evaluator-growth", "--rounds", "3", "--json"], capsys)
    assert code == 0
    rows = json.loads(out)["evaluator_growth"]
    assert [r["extra_policies"] for r in rows] == [10, 100, 1000, 10000]
    assert all(r[k]["count"] == 12 for r in rows for k in ("indexed", "linear_scan", "cedarpy"))
    (target,) = json.loads(out)["targets"]
    ratio = rows[-1]["indexed"]["p50_ns"] / rows[0]["indexed"]["p50_ns"]
    assert abs(target["measured_x1000"] - ratio * 1000) <= 1
    assert target["met"] is (target["measured_x1000"] <= target["limit_x1000"] == 2000)
    code, out, _ = run_tool(["bench", "--evaluator-growth", "--rounds", "3"], capsys)
    assert code == 0
    assert "smf linear scan, +10000" in out
    assert "cedarpy, +10000" in out
    assert "p50 at +10,000 / p50 at +10" in out


LINES = (
    ("smf-assurance", build_parser, main),
    ("python -m smf_tools", tools_cli.build_parser, tools_cli.main),
)
"""The two command lines: the product's, in the wheel, and the team's, in ``smf_tools/``."""

GROUPS = {
    "smf-assurance": {
        "compile",
        "eval",
        "demo",
        "up",
        "keys",
        "approvals",
        "ledger",
        "backup",
        "restore",
        "explain",
        "swarm",
        "release",
        "console",
        "notify",
        "bus",
        "model-gateway",
        "runtime",
        "holds",
        "tls",
        "approver",
        "doctor",
        "completion",
    },
    "python -m smf_tools": {"bench", "candidate", "review", "repeat"},
}
"""What a firm runs, and what only the team runs (measuring our build, building and
reviewing release candidates of it): no command is on both."""


@pytest.mark.parametrize(("prog", "parser_of", "main_of"), LINES, ids=[p for p, _, _ in LINES])
def test_every_subcommand_has_help(
    prog: str,
    parser_of: Callable[[], argparse.ArgumentParser],
    main_of: Callable[[list[str]], int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each one is listed with a summary, answers ``--help`` with exit 0 and its own
    usage line, and every option it takes says what it is for."""
    found = list(subcommands(parser_of()))
    assert {path[0] for path, _, _ in found} == GROUPS[prog]
    for path, summary, child in found:
        command = " ".join(path)
        assert summary, f"{command} is listed without a summary"
        with pytest.raises(SystemExit) as exit_info:
            main_of([*path, "--help"])
        assert exit_info.value.code == 0, command
        out = capsys.readouterr().out
        assert out.startswith(f"usage: {prog} {command}"), out
        for action in child._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{command}: {action.option_strings or action.dest} has no help"
            for flag in action.option_strings:
                assert flag in out, (command, flag)


def test_a_team_tool_fails_in_one_line_named_by_its_own_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The team's command line keeps the product's error boundary: one line, named
    ``python -m smf_tools``, a non-zero status, no traceback; the product does not know
    the team's commands (a usage error, exit 2)."""
    argv = ["candidate", "status", "--candidate", str(tmp_path / "no"), "--reviews", str(tmp_path)]
    code, out, err = run_tool(argv, capsys)
    assert (code, out) == (1, "")
    assert err.startswith("python -m smf_tools: "), err
    assert err.count("\n") == 1, err
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--evaluator"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'bench'" in capsys.readouterr().err


def test_console_script_runs_as_a_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "smf_assurance.ops.cli.main", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert "smf-assurance" in result.stdout


@pytest.mark.claim("packaging.console-script")
@pytest.mark.slow
def test_built_wheel_installs_and_its_console_script_runs(gate_wheel: GateWheel) -> None:
    """The console script is never advertised without existing."""
    venv = gate_wheel.venv
    result = subprocess.run(
        [str(venv / "bin" / "smf-assurance"), "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "compile" in result.stdout
    assert "eval" in result.stdout
    shipped = subprocess.run(
        [str(venv / "bin" / "smf-assurance"), "demo", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert shipped.returncode == 0, shipped.stderr
    assert json.loads(shipped.stdout)["ok"] is True, shipped.stdout


async def test_demo_swarm_scenario_refuses_without_a_verified_release(nc: object) -> None:
    """Scenario 4 reads the analysis projection of the release the gate runs on;
    with no verified release it is refused, never run on unverified rules."""
    stack = SimpleNamespace(gate=SimpleNamespace(releases=None))
    row = await _swarm_row(nc, stack)  # type: ignore[arg-type]
    assert row.outcome == "refused"
    assert row.cells()[1] == "refused"
    assert row.reasons == ("no_verified_release",)
    assert row.as_expected is False
