"""``candidate build``: one clean commit, its tests' results, one signed matrix.

Every case runs on a real git repository: the project itself, copied into a
temporary folder and committed there (its working tree as it is, so the
claims and markers under test are this checkout's), with synthetic JUnit
reports carrying the properties the suite's conftest hook writes; and, for
``make test`` and ``make dist`` run from the clone, a tiny project of its own
whose Makefile writes its report and its artifact the same way.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

import pytest

from smf_assurance.ops.runtimes.hermes_env import HERMES_VERSION
from smf_assurance.ops.runtimes.provision import OPENCLAW_PIN
from smf_assurance.subjects.dsse import (
    BadSignatureError,
    PayloadTypeMismatchError,
    UnknownSignerError,
    encode_envelope,
    sign,
)
from smf_assurance.subjects.keys import SigningKey, generate_signing_key, write_private_key
from smf_assurance.subjects.release import PAYLOAD_RELEASE_MANIFEST
from smf_tools.candidate.claims import CLAIMS_FILE, claimed_tests, load_claims
from smf_tools.candidate.junit import (
    SHA_PROPERTY,
    TREE_PROPERTY,
    JUnitError,
    identity_properties,
    read_results,
)
from smf_tools.candidate.matrix import (
    NOT_REVIEWED,
    Candidate,
    SuiteRun,
    decode_candidate,
    encode_candidate,
    open_candidate,
    sign_candidate,
)
from smf_tools.candidate.reviews import load_candidate
from smf_tools.candidate.source import Commit, head_commit
from smf_tools.cli import main
from tests.support.candidate import commit_all, fake_project, git

ROOT = Path(__file__).resolve().parents[2]


def write_junit(
    path: Path,
    cases: Mapping[str, str],
    sha: str | None,
    tree: str | None,
) -> Path:
    """A JUnit report as pytest writes it: node ``tests/test_x.py::C::test_y`` becomes
    classname ``tests.test_x.C``, name ``test_y``; outcome passed, failed, error or skipped."""
    props = "".join(
        f"<property name={quoteattr(name)} value={quoteattr(value)}/>"
        for name, value in ((SHA_PROPERTY, sha), (TREE_PROPERTY, tree))
        if value is not None
    )
    body = []
    for node, outcome in cases.items():
        file, _, rest = node.partition("::")
        *classes, name = rest.split("::")
        classname = ".".join([file.removesuffix(".py").replace("/", "."), *classes])
        child = {
            "passed": "",
            "failed": "<failure message='boom'/>",
            "error": "<error message='boom'/>",
            "skipped": "<skipped message='why'/>",
        }[outcome]
        body.append(
            f"<testcase classname={quoteattr(classname)} name={quoteattr(name)}>{child}</testcase>"
        )
    path.write_text(
        f"<?xml version='1.0'?><testsuites><testsuite name='pytest'><properties>{props}"
        f"</properties>{''.join(body)}</testsuite></testsuites>"
    )
    return path


@pytest.fixture(scope="module")
def release_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SigningKey]:
    key = generate_signing_key()
    path = tmp_path_factory.mktemp("keys") / "release.key"
    write_private_key(path, key, "release-signer")
    return path, key


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's files (tracked and untracked-not-ignored) as one commit of a new
    repository: the candidate is built from what the tests here see."""
    tmp_path = tmp_path_factory.mktemp("checkout")
    repo = tmp_path / "project"
    files = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, files.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = repo / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    git(tmp_path, "init", "--quiet", "-b", "main", str(repo))
    commit_all(repo, "the checkout as it is")
    return repo


@pytest.fixture
def project(checkout: Path, tmp_path: Path) -> Path:
    """A clone of :func:`checkout` of the test's own, to change and commit in."""
    git(tmp_path, "clone", "--quiet", str(checkout), "project")
    return tmp_path / "project"


@pytest.fixture(scope="module")
def whole_suite(checkout: Path) -> dict[str, str]:
    """Every test :func:`checkout` collects (asked of pytest here, not of the build's own
    count), each passed: the report of a whole green run."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts="],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
    )
    nodes = [line for line in done.stdout.splitlines() if line.startswith("tests/")]
    assert len(nodes) > 1000, done.stdout[-500:]
    return dict.fromkeys(nodes, "passed")


@dataclass(frozen=True)
class Builder:
    """``candidate build`` run in-process with the module's release key: what a test
    needs of it, so each test names only the repository and the folder."""

    key: Path
    signing: SigningKey
    capsys: pytest.CaptureFixture[str]

    def run(
        self, repo: Path, out: Path, *extra: str, key: Path | None = None
    ) -> tuple[int, str, str]:
        """Exit status, stdout and stderr of one build."""
        self.capsys.readouterr()
        argv = ("--repo", str(repo), "--key", str(key or self.key), "--out", str(out))
        code = main(["candidate", "build", *argv, *extra])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def built(self, repo: Path, out: Path, junit: Path) -> Candidate:
        """The candidate ``--junit`` gives without artifacts, after asserting it was built."""
        code, stdout, err = self.run(repo, out, "--junit", str(junit), "--no-dist")
        assert code == 0, (stdout, err)
        return built(out)


@pytest.fixture
def cli(release_key: tuple[Path, SigningKey], capsys: pytest.CaptureFixture[str]) -> Builder:
    return Builder(key=release_key[0], signing=release_key[1], capsys=capsys)


def built(out: Path) -> Candidate:
    return decode_candidate((out / "candidate.json").read_bytes())


def rows(candidate: Candidate) -> dict[str, str]:
    return {row.id: row.state for row in candidate.claims}


# --- a dirty tree -------------------------------------------------------------------


def test_a_dirty_tree_exits_1_naming_the_modified_and_untracked_files(
    project: Path,
    cli: Builder,
    tmp_path: Path,
) -> None:
    (project / "README.md").write_text("changed after the commit\n")
    (project / "smf_assurance" / "ops" / "stray.py").write_text("SHIPPED = True\n")
    git(project, "mv", "Makefile", "Makefile.renamed")
    (project / ".venv").mkdir()
    (project / ".venv" / "ignored.txt").write_text("ignored by .gitignore: never ships\n")
    out = tmp_path / "out"
    junit = write_junit(tmp_path / "j.xml", {}, "0" * 40, "0" * 40)
    code, stdout, err = cli.run(project, out, "--junit", str(junit))
    assert code == 1
    assert stdout == ""
    assert len(err.splitlines()) == 1, err
    for name in ("README.md", "smf_assurance/ops/stray.py", "Makefile.renamed"):
        assert name in err
    assert ".venv" not in err
    assert not out.exists()


def test_a_staged_change_alone_is_refused(
    project: Path,
    cli: Builder,
    tmp_path: Path,
) -> None:
    (project / "NOTES.md").write_text("staged, never committed\n")
    git(project, "add", "NOTES.md")
    code, _, err = cli.run(project, tmp_path / "out", "--junit", str(tmp_path / "x"))
    assert code == 1
    assert "NOTES.md" in err


# --- a clean commit -------------------------------------------------------------------


def test_a_clean_commit_writes_a_matrix_every_row_naming_its_sha_signed_by_the_release_key(
    project: Path,
    whole_suite: dict[str, str],
    cli: Builder,
    tmp_path: Path,
) -> None:
    commit = head_commit(project)
    junit = write_junit(tmp_path / "j.xml", dict(whole_suite), commit.sha, commit.tree)
    out = tmp_path / "out"
    code, stdout, _ = cli.run(project, out, "--junit", str(junit), "--no-dist")
    assert code == 0, stdout
    candidate = built(out)
    everything = len(whole_suite)
    assert (candidate.suite.collected, candidate.suite.ran) == (everything, everything)
    assert (candidate.suite.passed, candidate.suite.failed, candidate.suite.errors) == (
        everything,
        0,
        0,
    )
    assert (
        f"{everything} collected at this commit, {everything} in the report"
        in (out / "candidate.md").read_text()
    )
    # the count was taken with the clone's own code: every test module and the package
    # they import, none from this checkout's editable install
    assert candidate.suite.modules_from_clone > len({n.split("::")[0] for n in whole_suite})
    assert (
        f"imported {candidate.suite.modules_from_clone} modules of ours, each from the clone"
        in (out / "candidate.md").read_text()
    )
    document = json.loads((out / "candidate.json").read_text())
    assert (document["schema"], document["sha"], document["tree"]) == (
        "smf.candidate/1",
        commit.sha,
        commit.tree,
    )
    declared = load_claims(project / CLAIMS_FILE)
    assert [row["id"] for row in document["claims"]] == [c.id for c in declared]
    assert {"id", "family", "tests", "results", "state"} <= set(document["claims"][0])
    for row in candidate.claims:
        assert row.sha == commit.sha
        assert row.review == NOT_REVIEWED
        expected = bool(row.tests) and row.family != "packaging"
        assert (row.state == "green") is expected, row
    # candidate status and review sign read the same file (the contract between them).
    as_reviewed = load_candidate(out / "candidate.json")
    assert (as_reviewed.sha, as_reviewed.tree) == (commit.sha, commit.tree)
    assert [(c.id, c.family, c.tests) for c in as_reviewed.claims] == [
        (r.id, r.family, r.tests) for r in candidate.claims
    ]
    markdown = (out / "candidate.md").read_text()
    table = [line for line in markdown.splitlines() if line.startswith(f"| {commit.sha} |")]
    assert len(table) == len(declared)
    assert commit.sha in markdown.splitlines()[0]
    # The envelope opens with the release key, and says what the JSON file says.
    key = cli.signing
    signed = (out / "candidate.dsse.json").read_bytes()
    assert open_candidate(signed, {key.key_id: key.verify_key}) == candidate
    other = generate_signing_key().verify_key
    with pytest.raises(UnknownSignerError):
        open_candidate(signed, {other.key_id: other})
    envelope = json.loads(signed)
    envelope["signatures"][0]["keyid"] = other.key_id
    with pytest.raises(BadSignatureError):
        open_candidate(json.dumps(envelope).encode(), {other.key_id: other})
    # The table by default: one line per claim, and the SHA.
    assert (
        str(len(declared) - sum(r.state == "green" for r in candidate.claims)) + " open" in stdout
    )
    assert commit.sha in stdout


def test_conformance_rows_name_the_runtime_pins_of_the_commit(
    project: Path,
    whole_suite: dict[str, str],
    cli: Builder,
    tmp_path: Path,
) -> None:
    commit = head_commit(project)
    junit = write_junit(tmp_path / "j.xml", dict(whole_suite), commit.sha, commit.tree)
    candidate = cli.built(project, tmp_path / "out", junit)
    assert candidate.runtimes == {"hermes-agent": HERMES_VERSION, "openclaw": OPENCLAW_PIN}
    by_family = {row.family: row for row in candidate.claims if row.tests}
    assert by_family["runtime-block-hermes"].runtimes == {"hermes-agent": HERMES_VERSION}
    assert by_family["runtime-hold-openclaw"].runtimes == {"openclaw": OPENCLAW_PIN}
    assert by_family["canonical-identities"].runtimes == {}


def _one_test_claims(repo: Path) -> list[tuple[str, str]]:
    """Claims proven by exactly one test each, with that test, which proves nothing else
    (packaging claims left out: they are open without artifacts anyway)."""
    marked = claimed_tests(repo)
    proving: dict[str, int] = {}
    for tests in marked.values():
        for test in tests:
            proving[test] = proving.get(test, 0) + 1
    return [
        (claim, tests[0])
        for claim, tests in marked.items()
        if len(tests) == 1 and proving[tests[0]] == 1 and not claim.startswith("packaging.")
    ]


def _delete_test(repo: Path, node_id: str) -> None:
    """Remove one test function (its decorators too) from its file."""
    file, _, rest = node_id.partition("::")
    name = rest.split("::")[-1]
    path = repo / file
    text = path.read_text().splitlines(keepends=True)
    node = next(
        n
        for n in ast.walk(ast.parse("".join(text)))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    )
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    assert node.end_lineno is not None
    path.write_text("".join(text[: first - 1] + text[node.end_lineno :]))


def test_deleting_a_claims_only_test_opens_its_row(
    project: Path,
    whole_suite: dict[str, str],
    cli: Builder,
    tmp_path: Path,
) -> None:
    claim, test = _one_test_claims(project)[0]
    before = head_commit(project)
    junit = write_junit(tmp_path / "a.xml", dict(whole_suite), before.sha, before.tree)
    assert rows(cli.built(project, tmp_path / "a", junit))[claim] == "green"
    _delete_test(project, test)
    after = commit_all(project, f"delete {test}")
    # The report still says the deleted test passed: a report cannot prove a claim
    # no test at this commit carries.
    junit = write_junit(
        tmp_path / "b.xml", {**dict(whole_suite), test: "passed"}, after.sha, after.tree
    )
    candidate = cli.built(project, tmp_path / "b", junit)
    row = next(r for r in candidate.claims if r.id == claim)
    assert (row.state, row.tests, row.sha) == ("open", (), after.sha)
    assert row.open_because == ("no test carries its marker",)


def _cases_of(test: str, cases: Mapping[str, str]) -> list[str]:
    """The collected node ids of ``test``, each parametrized case of it included."""
    return [node for node in cases if node == test or node.startswith(test + "[")]


def test_a_skipped_test_opens_its_row_and_only_its_row(
    project: Path,
    whole_suite: dict[str, str],
    cli: Builder,
    tmp_path: Path,
) -> None:
    """The whole suite in the report, one claim's only test skipped: that row opens,
    naming its test and outcome, and every other row is as the green run leaves it."""
    claim, test = _one_test_claims(project)[0]
    commit = head_commit(project)
    cases = dict(whole_suite)
    for node in _cases_of(test, cases):
        cases[node] = "skipped"
    junit = write_junit(tmp_path / "j.xml", cases, commit.sha, commit.tree)
    code, stdout, _ = cli.run(project, tmp_path / "out", "--junit", str(junit), "--no-dist")
    assert code == 0
    candidate = built(tmp_path / "out")
    by_id = {row.id: row for row in candidate.claims}
    assert (by_id[claim].state, by_id[claim].open_because) == ("open", (f"{test} skipped",))
    assert f"{test} skipped" in stdout
    assert candidate.suite.skipped == len(_cases_of(test, cases))
    for row in by_id.values():
        if row.id != claim:
            assert (row.state == "green") is (bool(row.tests) and row.family != "packaging")


@pytest.mark.claim("protected-evidence.candidate-holds-the-whole-suite")
def test_a_report_of_only_the_claimed_tests_is_refused_and_nothing_is_signed(
    project: Path,
    whole_suite: dict[str, str],
    cli: Builder,
    tmp_path: Path,
) -> None:
    """Every claimed test passing, nothing else run: a part of the suite is no candidate."""
    commit = head_commit(project)
    marked = {t for tests in claimed_tests(project).values() for t in tests}
    cases = {n: "passed" for n in whole_suite if n.split("[")[0] in marked}
    assert 0 < len(cases) < len(whole_suite)
    junit = write_junit(tmp_path / "j.xml", cases, commit.sha, commit.tree)
    out = tmp_path / "out"
    code, stdout, err = cli.run(project, out, "--junit", str(junit), "--no-dist")
    assert (code, stdout) == (1, "")
    assert len(err.splitlines()) == 1, err
    assert f"the JUnit report ran {len(cases)} of the {len(whole_suite)} tests" in err
    assert not out.exists()


FAKE_SUITE = ("tests/test_a.py::test_one", "tests/test_a.py::test_wheel")


@pytest.mark.claim("protected-evidence.candidate-holds-the-whole-suite")
@pytest.mark.parametrize(
    ("outcomes", "says"),
    [
        (("passed",), "ran 1 of the 2 tests {sha} collects (missing tests/test_a.py::test_wheel)"),
        (("passed", "failed"), "has 1 failed or errored test(s) at {sha}"),
        (("error", "passed"), "has 1 failed or errored test(s) at {sha}"),
        (("passed", "passed"), None),
    ],
    ids=["one-missing", "failed", "error", "whole-and-green"],
)
def test_a_partial_or_red_report_is_refused_and_the_whole_green_one_built(
    outcomes: tuple[str, ...], says: str | None, cli: Builder, tmp_path: Path
) -> None:
    """One line and nothing written for a report missing a collected test or holding a
    failure or an error; the same report whole and green is built (the control)."""
    repo = tmp_path / "fake"
    commit = fake_project(repo)
    cases = dict(zip(FAKE_SUITE, outcomes, strict=False))
    junit = write_junit(tmp_path / "j.xml", cases, commit.sha, commit.tree)
    out = tmp_path / "out"
    code, stdout, err = cli.run(repo, out, "--junit", str(junit), "--no-dist")
    if says is None:
        assert code == 0, err
        assert (built(out).suite.collected, built(out).suite.passed) == (2, 2)
        return
    assert (code, stdout) == (1, "")
    assert len(err.splitlines()) == 1, err
    assert says.format(sha=commit.sha) in err
    assert not out.exists()


def test_one_failing_parametrized_case_fails_the_test(tmp_path: Path) -> None:
    commit = Commit(sha="a" * 40, tree="b" * 40)
    path = write_junit(
        tmp_path / "j.xml",
        {"tests/test_x.py::test_p[a]": "passed", "tests/test_x.py::test_p[b]": "failed"},
        commit.sha,
        commit.tree,
    )
    from smf_tools.candidate.junit import outcome_of  # noqa: PLC0415

    results = read_results(path, commit)
    assert outcome_of("tests/test_x.py::test_p", results) == "failed"
    assert outcome_of("tests/test_x.py::test_pq", results) == "missing"


@pytest.mark.parametrize(
    ("sha", "tree", "says"),
    [
        ("1" * 40, None, "is for smf.candidate.sha"),
        (None, "2" * 40, "names no smf.candidate.sha"),
        (None, None, "names no smf.candidate.sha"),
        ("head", "2" * 40, "is for smf.candidate.tree"),
    ],
    ids=["another-sha", "no-sha", "nothing", "another-tree"],
)
def test_a_junit_for_another_commit_or_none_is_refused(
    sha: str | None,
    tree: str | None,
    says: str,
    project: Path,
    whole_suite: dict[str, str],
    cli: Builder,
    tmp_path: Path,
) -> None:
    commit = head_commit(project)
    junit = write_junit(
        tmp_path / "j.xml",
        dict(whole_suite),
        commit.sha if sha == "head" else sha,
        commit.tree if tree is None and sha is not None else tree,
    )
    out = tmp_path / "out"
    code, stdout, err = cli.run(project, out, "--junit", str(junit), "--no-dist")
    assert code == 1
    assert stdout == ""
    assert says in err
    assert len(err.splitlines()) == 1
    assert not out.exists()


LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE t [<!ENTITY l0 "lol">'
    + "".join(f'<!ENTITY l{i + 1} "{f"&l{i};" * 10}">' for i in range(9))
    + "]><testsuites><testsuite>&l9;</testsuite></testsuites>"
)
"""A billion laughs: ten to the ninth expansions of three bytes from 1 KB of XML."""


def test_a_junit_that_is_not_a_report_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = Commit(sha="a" * 40, tree="b" * 40)
    for text, says in (
        ("<testsuites/>", "no testsuite"),
        ("not xml", "not XML"),
        ("<x/>", "no testsuite"),
        (LAUGHS, "not XML: limit on input amplification"),
    ):
        (tmp_path / "j.xml").write_text(text)
        with pytest.raises(JUnitError, match=says):
            read_results(tmp_path / "j.xml", commit)
    with pytest.raises(JUnitError, match="cannot read"):
        read_results(tmp_path / "absent.xml", commit)
    monkeypatch.setattr("smf_tools.candidate.junit.MAX_JUNIT_BYTES", 16)
    (tmp_path / "j.xml").write_text("<testsuites>" + " " * 16 + "</testsuites>")
    with pytest.raises(JUnitError, match="larger than 16 bytes"):
        read_results(tmp_path / "j.xml", commit)


def test_the_suites_own_junit_names_the_clean_commit_it_ran_and_nothing_when_dirty(
    project: Path, tmp_path: Path
) -> None:
    """The conftest hook, run for real: pytest with --junitxml in a clean clone names its
    SHA and tree, and the same run in a dirty tree names nothing (so it is refused)."""
    commit = head_commit(project)

    def run(report: Path) -> None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--no-cov",
                f"--junitxml={report}",
                "tests/tools/test_claims.py::test_a_missing_claims_file_is_refused",
            ],
            cwd=project,
            capture_output=True,
            check=True,
            timeout=300,
            # Run inside candidate build's own make test, the outer report stays the outer's.
            env={
                k: v
                for k, v in os.environ.items()
                if k not in ("PYTEST_ADDOPTS", "SMF_CANDIDATE_JUNIT")
            },
        )

    run(tmp_path / "clean.xml")
    results = read_results(tmp_path / "clean.xml", commit)
    assert results == {
        ("tests.tools.test_claims", "test_a_missing_claims_file_is_refused"): ["passed"]
    }
    (project / "README.md").write_text("dirty\n")
    run(tmp_path / "dirty.xml")
    with pytest.raises(JUnitError, match=r"names no smf\.candidate\.sha"):
        read_results(tmp_path / "dirty.xml", commit)


def test_out_must_be_new_or_empty_and_the_key_a_key(
    project: Path,
    cli: Builder,
    tmp_path: Path,
) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine\n")
    code, _, err = cli.run(project, tmp_path / "full", "--junit", "x")
    assert (code, (tmp_path / "full" / "keep.txt").read_text()) == (1, "mine\n")
    assert "not an empty folder" in err
    (tmp_path / "garbage.key").write_text("{}")
    code, _, err = cli.run(project, tmp_path / "o", "--junit", "x", key=tmp_path / "garbage.key")
    assert code == 2
    assert "garbage.key" in err


def test_a_marker_naming_an_undeclared_claim_is_refused(
    project: Path,
    cli: Builder,
    tmp_path: Path,
) -> None:
    (project / "tests" / "test_typo.py").write_text(
        "import pytest\n\n\n@pytest.mark.claim('bus-access.no-such-claim')\n"
        "def test_t() -> None:\n    pass\n"
    )
    commit = commit_all(project, "a typo")
    junit = write_junit(tmp_path / "j.xml", {}, commit.sha, commit.tree)
    code, _, err = cli.run(project, tmp_path / "out", "--junit", str(junit))
    assert code == 1
    assert "bus-access.no-such-claim" in err


# --- make test and make dist in the clone: a project of its own -------------------


def test_make_test_and_make_dist_run_in_a_clean_clone(cli: Builder, tmp_path: Path) -> None:
    repo = tmp_path / "fake"
    commit = fake_project(repo)
    # What the working tree has but the commit does not must not reach the build.
    (repo / "dist").mkdir()
    (repo / "dist" / "planted.whl").write_text("not built from the commit")
    out = tmp_path / "out"
    code, stdout, _ = cli.run(repo, out, "--json")
    assert code == 0
    printed = json.loads(stdout)
    candidate = built(out)
    assert (candidate.suite.source, candidate.suite.exit_status) == ("clone", 0)
    assert (candidate.suite.collected, candidate.suite.ran, candidate.suite.passed) == (2, 2, 2)
    assert candidate.dist == "built"
    wheel = (f"wheel of {commit.sha}").encode()
    assert [(a.name, a.sha256, a.size) for a in candidate.artifacts] == [
        ("fake-1.0-py3-none-any.whl", "sha256:" + hashlib.sha256(wheel).hexdigest(), len(wheel))
    ]
    assert (out / "artifacts" / "fake-1.0-py3-none-any.whl").read_bytes() == wheel
    assert rows(candidate) == {"bus-access.fake": "green", "packaging.fake-wheel": "green"}
    assert printed["artifacts"] == {a.name: a.sha256 for a in candidate.artifacts}
    assert (printed["sha"], printed["green"], printed["open"]) == (commit.sha, 2, 0)
    assert (
        candidate.suite.junit_sha256
        == "sha256:" + hashlib.sha256((out / "junit.xml").read_bytes()).hexdigest()
    )


@pytest.mark.claim("protected-evidence.candidate-holds-the-whole-suite")
def test_a_failing_suite_in_the_clone_is_refused_keeping_only_its_log(
    cli: Builder, tmp_path: Path
) -> None:
    fake_project(tmp_path / "fake", outcome="<failure message='no'/>", status=2)
    code, stdout, err = cli.run(tmp_path / "fake", tmp_path / "out")
    assert (code, stdout) == (1, "")
    assert "make test exited 2" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["make-test.log"]


@pytest.mark.claim("protected-evidence.candidate-holds-the-whole-suite")
def test_a_green_report_from_a_suite_that_collects_more_is_refused(
    cli: Builder, tmp_path: Path
) -> None:
    """``make test`` exits 0 and its report passes all it names, but the commit has a
    test the report never ran: the count comes from the clone, not from the report."""
    repo = tmp_path / "fake"
    fake_project(repo)
    (repo / "tests" / "test_b.py").write_text("def test_unreported() -> None:\n    pass\n")
    commit = commit_all(repo, "a test the report leaves out")
    code, stdout, err = cli.run(repo, tmp_path / "out")
    assert (code, stdout) == (1, "")
    assert f"ran 2 of the 3 tests {commit.sha} collects (missing tests/test_b.py::" in err
    assert not (tmp_path / "out" / "candidate.json").exists()


def test_without_a_dist_target_the_packaging_rows_stay_open(cli: Builder, tmp_path: Path) -> None:
    fake_project(tmp_path / "fake", dist=False)
    assert cli.run(tmp_path / "fake", tmp_path / "out")[0] == 0
    candidate = built(tmp_path / "out")
    assert (candidate.dist, candidate.artifacts) == ("no-target", ())
    row = next(r for r in candidate.claims if r.family == "packaging")
    assert row.state == "open"
    assert "no artifacts built" in row.open_because[0]
    assert not (tmp_path / "out" / "artifacts").exists()


def test_a_suite_that_writes_no_report_is_refused(cli: Builder, tmp_path: Path) -> None:
    repo = tmp_path / "fake"
    fake_project(repo)
    (repo / "Makefile").write_text(".PHONY: test\ntest:\n\t@exit 3\n")
    commit_all(repo, "a suite that reports nothing")
    code, stdout, err = cli.run(repo, tmp_path / "out")
    assert (code, stdout) == (1, "")
    assert "make test exited 2 and wrote no JUnit report" in err
    # The log of the make that ran is kept for whoever must find out why; nothing else.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["make-test.log"]


def test_a_failing_dist_is_refused(cli: Builder, tmp_path: Path) -> None:
    repo = tmp_path / "fake"
    fake_project(repo)
    (repo / "Makefile").write_text(
        (repo / "Makefile").read_text().split("dist:\n")[0] + "dist:\n\t@exit 4\n"
    )
    commit_all(repo, "a dist that fails")
    code, _, err = cli.run(repo, tmp_path / "out")
    assert code == 1
    assert "make dist exited 2" in err
    assert not (tmp_path / "out" / "candidate.json").exists()
    assert not (tmp_path / "out" / "junit.xml").exists()


def test_a_folder_that_is_no_sha1_git_repository_is_refused(cli: Builder, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    code, _, err = cli.run(tmp_path / "plain", tmp_path / "o1")
    assert code == 1
    assert "not a git repository" in err
    assert len(err.splitlines()) == 1
    # A SHA-256 repository names its commits with 64 hex digits: not what the matrix,
    # its reviews and the JUnit properties are keyed by, so it is refused, not half-read.
    repo = tmp_path / "sha256"
    git(tmp_path, "init", "--quiet", "--object-format=sha256", "-b", "main", str(repo))
    (repo / "README").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "one")
    code, _, err = cli.run(repo, tmp_path / "o2")
    assert code == 1
    assert "not SHA-1 hex" in err
    assert not (tmp_path / "o1").exists()
    assert not (tmp_path / "o2").exists()


def test_a_commit_without_its_claims_file_is_refused(cli: Builder, tmp_path: Path) -> None:
    repo = tmp_path / "fake"
    fake_project(repo)
    (repo / CLAIMS_FILE).unlink()
    commit = commit_all(repo, "no claims")
    code, stdout, err = cli.run(repo, tmp_path / "out")
    assert (code, stdout) == (1, "")
    assert f"claims at {commit.sha}: cannot read" in err
    assert not (tmp_path / "out").exists()


def test_the_identity_a_run_records_is_heads_only_when_the_tree_is_clean(
    tmp_path: Path,
) -> None:
    """What the conftest hook writes (``identity_properties``), asked directly."""
    repo = tmp_path / "fake"
    commit = fake_project(repo)
    assert identity_properties(repo) == (
        (SHA_PROPERTY, commit.sha),
        (TREE_PROPERTY, commit.tree),
    )
    (repo / "untracked.txt").write_text("x\n")
    assert identity_properties(repo) == ()
    assert identity_properties(tmp_path) == ()  # no repository at all


def test_a_report_of_the_suite_run_in_several_processes_names_its_commit(
    project: Path, tmp_path: Path
) -> None:
    """``make test`` runs the suite in several processes (pytest-xdist), whose workers write
    no report: the controller's report of a clean clone still names its SHA and tree
    (``read_results`` refuses one that does not), and one of a changed tree names none."""
    report = tmp_path / "two.xml"
    command = [
        sys.executable, "-m", "pytest", "-q", "-n", "2", "--no-cov",
        "-p", "no:cacheprovider", "tests/unit/test_one_clock.py",
    ]  # fmt: skip
    ran = subprocess.run(
        [*command, f"--junitxml={report}"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert read_results(report, head_commit(project))
    (project / "untracked.txt").write_text("x\n")
    changed = tmp_path / "changed.xml"
    again = subprocess.run(
        [*command, f"--junitxml={changed}"],
        cwd=project,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert again.returncode == 0
    assert SHA_PROPERTY not in changed.read_text()


def test_a_release_keys_signature_for_another_purpose_is_no_candidate() -> None:
    """The payload type is inside the signature: the same bytes signed by the same
    release key as, say, a release manifest do not open as a candidate."""
    key = generate_signing_key()
    candidate = Candidate(
        schema="smf.candidate/1",
        sha="a" * 40,
        tree="b" * 40,
        suite=SuiteRun(
            source="file",
            junit_sha256="sha256:" + "c" * 64,
            exit_status=None,
            collected=1,
            modules_from_clone=0,
            ran=1,
            passed=1,
            failed=0,
            errors=0,
            skipped=0,
        ),
        dist="skipped",
        artifacts=(),
        runtimes={},
        claims=(),
    )
    trusted = {key.key_id: key.verify_key}
    assert open_candidate(sign_candidate(candidate, key), trusted) == candidate
    other_purpose = encode_envelope(
        sign(PAYLOAD_RELEASE_MANIFEST, encode_candidate(candidate).strip(), [key])
    )
    with pytest.raises(PayloadTypeMismatchError):
        open_candidate(other_purpose, trusted)


@pytest.mark.claim("protected-evidence.candidate-holds-the-whole-suite")
@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_a_tracked_file_git_is_told_not_to_compare_makes_the_tree_not_clean(
    flag: str, cli: Builder, tmp_path: Path
) -> None:
    """``git status`` says clean while the file differs from the commit; the build reads
    the index flags and refuses, naming the count and the file, and writes nothing."""
    repo = tmp_path / "fake"
    fake_project(repo)
    assert identity_properties(repo) != ()  # the control: clean, the identity is recorded
    git(repo, "update-index", flag, "report.sh")
    (repo / "report.sh").write_text("#!/bin/sh\nexit 0\n")
    assert git(repo, "status", "--porcelain") == ""  # git itself is fooled
    out = tmp_path / "out"
    code, stdout, err = cli.run(repo, out)
    assert (code, stdout) == (1, "")
    assert len(err.splitlines()) == 1, err
    assert "1 tracked file(s) marked assume-unchanged or skip-worktree: report.sh" in err
    assert not out.exists()
    assert identity_properties(repo) == ()  # a test run there names no commit either


@pytest.mark.claim("protected-evidence.candidate-holds-the-whole-suite")
def test_a_count_taken_with_code_from_outside_the_clone_is_refused(
    cli: Builder, tmp_path: Path
) -> None:
    """A conftest that puts another folder first on the import path makes the collection
    count another checkout's code: the build names the module it found there, refuses,
    and writes nothing."""
    elsewhere = tmp_path / "elsewhere" / "smf_tools"
    elsewhere.mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("")
    repo = tmp_path / "fake"
    fake_project(repo)
    (repo / "tests" / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(elsewhere.parent)!r})\nimport smf_tools\n"
    )
    commit = commit_all(repo, "a conftest that imports from elsewhere")
    junit = write_junit(
        tmp_path / "j.xml", dict.fromkeys(FAKE_SUITE, "passed"), commit.sha, commit.tree
    )
    out = tmp_path / "out"
    code, stdout, err = cli.run(repo, out, "--junit", str(junit), "--no-dist")
    assert (code, stdout) == (1, "")
    assert f"imported {elsewhere / '__init__.py'}, not from the clone" in err
    assert not out.exists()
    # the control: the project's own package of that name, imported without the detour,
    # is counted and builds
    (repo / "smf_tools").mkdir()
    (repo / "smf_tools" / "__init__.py").write_text("")
    (repo / "tests" / "conftest.py").write_text("import smf_tools\n")
    commit = commit_all(repo, "no detour")
    junit = write_junit(
        tmp_path / "j.xml", dict.fromkeys(FAKE_SUITE, "passed"), commit.sha, commit.tree
    )
    assert cli.built(repo, out, junit).suite.modules_from_clone == 1


def test_a_commit_whose_suite_cannot_be_collected_is_refused(cli: Builder, tmp_path: Path) -> None:
    """No count of the whole suite, no report can be held to it: a collection error
    refuses the build before any report is read as enough."""
    repo = tmp_path / "fake"
    fake_project(repo)
    (repo / "tests" / "test_broken.py").write_text("raise RuntimeError('cannot import')\n")
    commit = commit_all(repo, "a test file that cannot be imported")
    junit = write_junit(
        tmp_path / "j.xml", dict.fromkeys(FAKE_SUITE, "passed"), commit.sha, commit.tree
    )
    code, stdout, err = cli.run(repo, tmp_path / "out", "--junit", str(junit), "--no-dist")
    assert (code, stdout) == (1, "")
    assert "pytest --collect-only exited 2" in err
    assert "no count of the whole suite" in err
    assert not (tmp_path / "out").exists()


def test_the_case_of_a_collected_test_is_the_one_pytests_own_report_writes(
    tmp_path: Path,
) -> None:
    """The whole-suite check matches collected node ids to report cases: asked of pytest
    itself, for a class, a nested folder and parameters holding ``::``, ``[`` and ``/``."""
    from smf_tools.candidate.junit import case_of  # noqa: PLC0415

    (tmp_path / "tests" / "deep").mkdir(parents=True)
    (tmp_path / "tests" / "deep" / "test_p.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.parametrize('v', ['a::b', 'x[y]', 'p/q'])\n"
        "def test_p(v: str) -> None:\n    pass\n\n\n"
        "class TestC:\n    def test_m(self) -> None:\n        pass\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    base = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q"]
    listed = subprocess.run(
        [*base, "--collect-only"], cwd=tmp_path, capture_output=True, text=True, env=env, check=True
    ).stdout
    nodes = [line for line in listed.splitlines() if "::" in line and line.startswith("tests/")]
    assert len(nodes) == 4, listed
    subprocess.run(
        [*base, f"--junitxml={tmp_path / 'r.xml'}"],
        cwd=tmp_path,
        capture_output=True,
        env=env,
        check=True,
    )
    report = ET.parse(tmp_path / "r.xml").getroot()
    written = {(c.get("classname", ""), c.get("name", "")) for c in report.iter("testcase")}
    assert {case_of(node) for node in nodes} == written
