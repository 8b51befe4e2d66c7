"""``python -m smf_tools repeat``: a flaky test is found, and a series that ran nothing is
never green.

Each case runs the command for real on a small test file written to ``tmp_path``:
fresh ``pytest`` processes, real burner processes. Proves: every run is counted,
a test that fails one run in two is reported with the output of the run that
failed, kept where the command says; a node id that collects nothing ends the
command with a reason instead of "0 failed"; no burner outlives the command, passing
or failing. Does not prove that the default load reproduces any particular flake.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from smf_tools.cli import main

TESTS = """
from pathlib import Path

def test_passes():
    assert True

def test_fails_every_other_run():
    counter = Path(__file__).with_name("counter")
    runs = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(runs + 1))
    assert runs % 2 == 0, "the second run of two fails"
"""


@pytest.fixture
def tests_file(tmp_path: Path) -> Path:
    path = tmp_path / "subject" / "test_subject.py"
    path.parent.mkdir()
    path.write_text(TESTS)
    return path


def test_every_run_of_a_steady_test_passes_under_load(
    tests_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "repeat",
            f"{tests_file}::test_passes",
            "--runs",
            "2",
            "--burners",
            "1",
            "--logs",
            str(tmp_path / "logs"),
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["runs"] == 2
    assert report["passed"] == 2
    assert report["failed"] == 0
    assert report["burners"] == 1
    assert report["failures"] == []
    assert 0 < report["p50_ns"] <= report["max_ns"]
    assert list((tmp_path / "logs").iterdir()) == []  # nothing kept of a passing run
    assert multiprocessing.active_children() == []


def test_a_test_that_fails_one_run_in_two_is_reported_with_its_output(
    tests_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    code = main(
        [
            "repeat",
            f"{tests_file}::test_fails_every_other_run",
            "--runs",
            "2",
            "--burners",
            "0",
            "--logs",
            str(logs),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1
    assert err == f"python -m smf_tools: 1 of 2 runs failed; their output is in {logs}\n"
    log = logs / "run-002.log"
    assert f"run 2: exit 1, output in {log}" in out.splitlines()
    assert "the second run of two fails" in log.read_text()
    assert sorted(p.name for p in logs.iterdir()) == ["run-002.log"]
    assert (tests_file.parent / "counter").read_text() == "2"  # both runs ran the test


def test_a_file_that_collects_nothing_is_refused_not_green(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty" / "test_empty.py"
    empty.parent.mkdir()
    empty.write_text('"""No test here."""\n')
    code = main(["repeat", str(empty), "--burners", "2"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "collected no test: nothing would be repeated" in err
    assert multiprocessing.active_children() == []


def test_a_missing_file_is_refused_before_any_run_or_burner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    code = main(["repeat", str(tmp_path / "no_such_test.py"), "--logs", str(logs)])
    _, err = capsys.readouterr()
    assert code == 1
    assert "pytest cannot collect" in err
    assert "nothing would be repeated" in err
    assert multiprocessing.active_children() == []
    assert not logs.exists() or not any(logs.iterdir()), "no run was made"


@pytest.mark.parametrize("given", ["", "  ", "-k"])
def test_an_empty_test_id_or_an_option_is_a_usage_error_and_runs_nothing(
    given: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    with pytest.raises(SystemExit) as usage:
        main(["repeat", given, "--logs", str(logs)])
    _, err = capsys.readouterr()
    assert usage.value.code == 2, err
    assert multiprocessing.active_children() == []
    assert not logs.exists(), "nothing was started"
