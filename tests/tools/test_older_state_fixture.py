"""``python -m smf_tools.fixtures.older_state``: the older state fixture can be made again.

The generator is run for the fixture's own commit into a temporary folder (a
temporary worktree of this repository, removed after; the older code's demo and steps
on a real nats-server) and what it writes is compared with the committed fixture: the
same kinds and numbers of ledger entries, claims and approval states, read from the
older version's own files; the same layout; private modes; well under 1 MB. Keys,
ids and times differ from run to run, so they are not compared. Not proven: that
another commit's code runs under today's interpreter and dependencies (the steps
import only names 6e1624e has).
"""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Final

import pytest

from smf_tools.fixtures.older_state import ROOT, generate, main
from tests.support.older_state import FIXTURE, OLDER_COMMIT, manifest, recorded

MAX_ARCHIVE_BYTES: Final = 1_000_000
_ID: Final = re.compile(r"[0-9a-f]{16,64}")
"""Order ids and release digests in file names: they differ in every run."""


def _layout(files: list[str]) -> list[str]:
    return sorted(_ID.sub("ID", name) for name in files)


def test_the_fixture_is_made_again_from_the_commit_it_names(tmp_path: Path) -> None:
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{OLDER_COMMIT}^{{commit}}"], cwd=ROOT, check=False
    )
    if known.returncode != 0:
        pytest.skip(f"this clone lacks {OLDER_COMMIT} (shallow?): nothing to generate from")
    worktrees_before = subprocess.run(
        ["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout

    folder = generate(OLDER_COMMIT[:7], tmp_path)

    assert folder == tmp_path / OLDER_COMMIT
    again = json.loads((folder / "recorded.json").read_text())
    committed = recorded()
    assert again["commit"] == OLDER_COMMIT
    files = again["older_files"]
    assert files["ledger_entries"] == committed.older_files.ledger_entries
    assert files["ledger_kinds"] == committed.older_files.ledger_kinds
    assert files["ledger_schema_version"] == committed.older_files.ledger_schema_version
    assert sorted(files["approval_states"].values()) == ["consumed", "denied", "pending"]
    assert sorted(files["claims"].values()) == sorted(committed.older_files.claims.values())
    assert sorted(again["approvals"].values()) == ["denied", "pending"]

    made = (folder / "MANIFEST.toml").read_text()
    assert f'commit = "{OLDER_COMMIT}"' in made
    assert "demo key" in made
    new_files = re.findall(r'^  "(.+)",$', made, re.MULTILINE)
    assert _layout(new_files) == _layout(manifest()["files"])

    archive = folder / "state.tar.gz"
    assert archive.stat().st_size < MAX_ARCHIVE_BYTES
    assert (FIXTURE / "state.tar.gz").stat().st_size < MAX_ARCHIVE_BYTES
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    assert {m.mode for m in members if m.isdir()} == {0o700}
    assert {m.mode for m in members if m.isfile()} == {0o600}
    assert "state/nats/nats-server.log" not in {m.name for m in members}
    worktrees_after = subprocess.run(
        ["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert worktrees_after == worktrees_before, "the temporary worktree is removed"


def test_a_commit_that_does_not_exist_is_one_line_and_no_fixture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["no-such-commit", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m smf_tools.fixtures.older_state: git rev-parse")
    assert list(tmp_path.iterdir()) == []
