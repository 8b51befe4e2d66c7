"""The bypass matrix as one suite: the runner behind ``make bypass``.

The runner is run through its ``main`` (``make bypass`` runs it as ``python -m
smf_tools.candidate.bypass``; a bad cases file is tried that way too),
with a real pytest child writing JUnit XML, on small case files: one pointing
at a quick existing test of this repository, and one over a scratch project
whose tests pass, fail, skip and are parametrized. Each row is read from the printed table.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from smf_tools.candidate.bypass import CASES_FILE, BypassError, existing, load_cases, main

pytestmark = pytest.mark.claim("bypass-matrix.one-row-per-case")

ROOT = Path(__file__).resolve().parents[2]
QUICK = (
    "tests/unit/test_normalize.py"
    "::test_an_unknown_tool_or_adapter_is_capability_unknown_with_a_note"
)
ISSUE_CASES = (
    "unknown tools",
    "missing facts",
    "mapper exceptions",
    "dynamic tools",
    "signature failures",
    "rollback",
    "revocation",
    "expiry",
    "changed approvals",
    "replay",
    "restart",
    "direct output",
    "streaming",
    "gateway delivery",
    "cron",
    "delegation",
    "background work",
    "adapter absence",
    "evidence-store outage",
)
"""The cases of the bypass matrix."""


def case(surface: str, name: str, *tests: str) -> str:
    listed = ", ".join(f'"{t}"' for t in tests)
    return (
        f'[[case]]\nsurface = "{surface}"\ncase = "{name}"\nexpected = "denied"\n'
        f"tests = [{listed}]\n"
    )


def bypass(
    root: Path, cases: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, list[str]], str]:
    """Exit status, the table's rows by case (cells read by the header's columns), and
    the last line."""
    capsys.readouterr()
    code = main(["--root", str(root), "--cases", str(cases)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["surface", "case", "expected", "observed", "tests"]
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]
    cells = [
        [line[a : (b if n < len(spans) - 1 else None)].strip() for n, (a, b) in enumerate(spans)]
        for line in lines[2:-1]
    ]
    return code, {row[1]: row for row in cells}, lines[-1]


def test_a_real_test_is_a_passed_row_and_an_absent_one_a_missing_row_that_fails_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "cases.toml"
    cases.write_text(
        case("gate", "real", QUICK)
        + case("gate", "absent", "tests/unit/test_normalize.py::test_no_such_test_exists")
        + case("gate", "untested")
        + case("gate", "no-file", "tests/test_no_such_file.py::test_x")
    )
    code, rows, last = bypass(ROOT, cases, capsys)
    assert code == 1
    assert rows["real"][3:] == ["passed", QUICK]
    assert rows["absent"][3:] == [
        "missing",
        "tests/unit/test_normalize.py::test_no_such_test_exists (missing)",
    ]
    assert rows["untested"][3:] == ["missing", "(no test named)"]
    assert rows["no-file"][3:] == ["missing", "tests/test_no_such_file.py::test_x (missing)"]
    assert last == "1 of 4 cases passed"


def test_only_passed_rows_exit_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = tmp_path / "cases.toml"
    cases.write_text(case("gate", "real", QUICK))
    code, rows, last = bypass(ROOT, cases, capsys)
    assert (code, last) == (0, "1 of 1 cases passed")
    assert rows["real"] == ["gate", "real", "denied", "passed", QUICK]


def test_failed_skipped_and_parametrized_tests_are_observed_as_the_run_showed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_tiny.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert False\n"
        "@pytest.mark.skip(reason='no runtime')\n"
        "def test_skipped(): pass\n"
        "@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_param(n): assert n == 1\n"
        "class TestC:\n"
        "    def test_m(self): pass\n"
    )
    cases = tmp_path / "cases.toml"
    tiny = "tests/test_tiny.py::"
    cases.write_text(
        case("s", "ok", f"{tiny}test_ok", f"{tiny}TestC::test_m")
        + case("s", "bad", f"{tiny}test_ok", f"{tiny}test_bad")
        + case("s", "skip", f"{tiny}test_skipped")
        + case("s", "param-all", f"{tiny}test_param")
        + case("s", "param-one", f"{tiny}test_param[1]")
    )
    code, rows, last = bypass(tmp_path, cases, capsys)
    observed = {name: row[3] for name, row in rows.items()}
    assert observed == {
        "ok": "passed",
        "bad": "failed",
        "skip": "skipped",
        "param-all": "failed",
        "param-one": "passed",
    }
    assert code == 1
    assert last == "2 of 5 cases passed"


def test_the_declared_matrix_names_every_case_of_the_issue_with_existing_tests() -> None:
    cases = load_cases(ROOT / CASES_FILE)
    assert {c.case for c in cases} >= set(ISSUE_CASES)
    named = [t for c in cases for t in c.tests]
    assert all(c.tests for c in cases)
    assert set(named) == existing(ROOT, named), "a named test does not exist"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (case("s", "c", QUICK) * 2, "declared twice"),
        (case("s", "c", QUICK).replace('expected = "denied"', 'expected = " "'), "expected"),
        (case("s", "c", QUICK) + "extra = 1\n", "extra"),
        ("[[case]\n", "cases.toml"),
    ],
)
def test_a_bad_cases_file_is_refused(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "cases.toml"
    path.write_text(text)
    with pytest.raises(BypassError, match=says):
        load_cases(path)
    done = subprocess.run(
        (sys.executable, "-m", "smf_tools.candidate.bypass", "--cases", str(path)),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_a_missing_cases_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BypassError, match="cannot read"):
        load_cases(tmp_path / "absent.toml")
