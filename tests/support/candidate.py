"""The fixtures, builders and constants of tests/tools/test_candidate.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from smf_tools.candidate.claims import CLAIMS_FILE
from smf_tools.candidate.source import Commit, head_commit

__all__ = ["fake_project"]

GIT_ENV = {
    "GIT_AUTHOR_NAME": "candidate test",
    "GIT_AUTHOR_EMAIL": "candidate@example.invalid",
    "GIT_COMMITTER_NAME": "candidate test",
    "GIT_COMMITTER_EMAIL": "candidate@example.invalid",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    ).stdout


def commit_all(repo: Path, message: str) -> Commit:
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", message)
    return head_commit(repo)


FAKE_CLAIMS = """
[[claim]]
id = "bus-access.fake"
family = "bus-access"
sentence = "The fake test passes."
not_proven = "Anything."
covers = ["src/*.py"]

[[claim]]
id = "packaging.fake-wheel"
family = "packaging"
sentence = "The fake wheel is built."
not_proven = "That it installs."
covers = ["Makefile"]
"""


FAKE_TEST = """import pytest


@pytest.mark.claim("bus-access.fake")
def test_one() -> None:
    pass


@pytest.mark.claim("packaging.fake-wheel")
def test_wheel() -> None:
    pass
"""


FAKE_REPORT = """#!/bin/sh
cat > "$SMF_CANDIDATE_JUNIT" <<EOF
<testsuites><testsuite name="fake"><properties>
<property name="smf.candidate.sha" value="$(git rev-parse HEAD)"/>
<property name="smf.candidate.tree" value="$(git rev-parse 'HEAD^{tree}')"/>
</properties>
<testcase classname="tests.test_a" name="test_one">$(cat outcome)</testcase>
<testcase classname="tests.test_a" name="test_wheel"/>
</testsuite></testsuites>
EOF
exit $(cat status)
"""
"""The fake suite's report, bound to HEAD the way the project's conftest hook binds it."""


FAKE_TEST_TARGET = ".PHONY: test\ntest:\n\t@sh report.sh\n"


FAKE_DIST_TARGET = (
    ".PHONY: dist\ndist:\n"
    "\tmkdir -p dist && printf 'wheel of %s' \"$$(git rev-parse HEAD)\" "
    "> dist/fake-1.0-py3-none-any.whl\n"
)


def fake_project(path: Path, *, outcome: str = "", status: int = 0, dist: bool = True) -> Commit:
    """A repository whose ``make test`` writes a JUnit report bound to its HEAD (as the
    project's conftest hook does) and whose ``make dist`` builds one file."""
    (path / "docs").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / CLAIMS_FILE).write_text(FAKE_CLAIMS)
    (path / "tests" / "test_a.py").write_text(FAKE_TEST)
    (path / "Makefile").write_text(FAKE_TEST_TARGET + (FAKE_DIST_TARGET if dist else ""))
    (path / "report.sh").write_text(FAKE_REPORT)
    (path / "outcome").write_text(outcome)
    (path / "status").write_text(f"{status}\n")
    (path / ".gitignore").write_text("dist/\n")
    git(path.parent, "init", "--quiet", "-b", "main", str(path))
    return commit_all(path, "a fake project")
