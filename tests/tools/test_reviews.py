"""Signed reviews bound to a commit, and ``candidate status``, on real git
repositories in tmp, real key files and a real registry file, through the CLI.

What a review rests on is read with git: a review signed at commit A is stale at
B when a file its claim covers, or its test, changed, and still current when
only unrelated files changed. A forged, outsider's or wrong-role record is
refused and never counted; a review whose start and end name different commits
is no verdict.
"""

from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from smf_assurance.subjects import dsse
from smf_assurance.subjects.keys import SigningKey, generate_signing_key, write_private_key
from smf_assurance.subjects.registry import encode_registry, entry_for
from smf_tools import PROG
from smf_tools.candidate.claims import covered
from smf_tools.candidate.reviews import (
    PAYLOAD_CANDIDATE_REVIEW,
    REVIEW_SCHEMA,
    NoVerdictError,
    ReviewRecord,
    sign_review,
)
from smf_tools.cli import main
from tests.support.cli_ops import Result
from tests.support.cli_ops import assert_one_line_failure as one_line_failure

pytestmark = pytest.mark.claim("protected-evidence.reviews-bound-to-a-commit")

CLAIM = "bus-access.one"
OTHER = "bus-access.two"
CLAIMS_TOML = f"""
[[claim]]
id = "{CLAIM}"
family = "bus-access"
sentence = "s"
not_proven = "n"
covers = ["src/impl/*.py"]

[[claim]]
id = "{OTHER}"
family = "bus-access"
sentence = "s2"
not_proven = "n2"
covers = ["src/other.py"]
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Result:
    """One command of the team's ``python -m smf_tools`` (``review``, ``candidate``)."""
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_failure(code: int, err: str, *needles: str) -> None:
    one_line_failure(code, err, *needles, prog=PROG)


@dataclass
class World:
    """A repository with two claims, a reviewer, an approver and an outsider."""

    root: Path
    repo: Path
    reviews: Path
    registry: Path
    keys: dict[str, Path]
    signing: dict[str, SigningKey]

    def git(self, *args: str) -> str:
        done = subprocess.run(
            (
                "git",
                "-C",
                str(self.repo),
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.org",
                *args,
            ),
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    def commit(self, files: dict[str, str], message: str = "change") -> str:
        for name, text in files.items():
            path = self.repo / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def candidate(self, sha: str) -> Path:
        """A candidate file for ``sha``, outside the working tree, as ``candidate build``
        writes it (the fields a review reads, and some it does not)."""
        path = self.root / f"candidate-{sha[:12]}.json"
        claims = [
            {
                "id": CLAIM,
                "family": "bus-access",
                "tests": ["tests/test_one.py::test_one"],
                "results": ["passed"],
                "state": "green",
            },
            {
                "id": OTHER,
                "family": "bus-access",
                "tests": ["tests/test_two.py::test_two"],
                "results": ["passed"],
                "state": "green",
            },
        ]
        document = {
            "schema": "smf.candidate/1",
            "sha": sha,
            "tree": self.git("rev-parse", f"{sha}^{{tree}}"),
            "claims": claims,
            "built_at_ms": 1,
        }
        path.write_text(json.dumps(document))
        return path


@pytest.fixture
def world(tmp_path: Path) -> World:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(("git", "init", "-q", "-b", "main", str(repo)), check=True)
    keys: dict[str, Path] = {}
    signing: dict[str, SigningKey] = {}
    for name in ("rita", "pat", "olga", "ron"):
        signing[name] = generate_signing_key()
        keys[name] = tmp_path / f"{name}.key"
        write_private_key(keys[name], signing[name], name)
    registry = tmp_path / "registry.json"
    registry.write_bytes(
        encode_registry(
            (
                entry_for(signing["rita"], "rita", "operator", licensed_roles=("reviewer",)),
                entry_for(signing["ron"], "ron", "swarm", licensed_roles=("reviewer",)),
                entry_for(
                    signing["pat"],
                    "pat",
                    "approver",
                    tenants=("t1",),
                    licensed_roles=("licensed_attorney",),
                ),
            )
        )
    )
    w = World(tmp_path, repo, tmp_path / "reviews", registry, keys, signing)
    w.commit(
        {
            "docs/claims.toml": CLAIMS_TOML,
            "src/impl/core.py": "A = 1\n",
            "src/other.py": "B = 1\n",
            "tests/test_one.py": "def test_one(): pass\n",
            "tests/test_two.py": "def test_two(): pass\n",
            "README.md": "hello\n",
        },
        "first",
    )
    return w


def start(w: World, candidate: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    return run(["review", "start", "--candidate", str(candidate), "--repo", str(w.repo)], capsys)


def sign(
    w: World,
    candidate: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    who: str = "rita",
    target: tuple[str, str] = ("--claim", CLAIM),
    verdict: str = "pass",
) -> tuple[int, str, str]:
    return run(
        [
            "review",
            "sign",
            "--candidate",
            str(candidate),
            *target,
            "--verdict",
            verdict,
            "--key",
            str(w.keys[who]),
            "--registry",
            str(w.registry),
            "--reviews",
            str(w.reviews),
            "--repo",
            str(w.repo),
            "--json",
        ],
        capsys,
    )


def status(w: World, candidate: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(
        [
            "candidate",
            "status",
            "--candidate",
            str(candidate),
            "--reviews",
            str(w.reviews),
            "--registry",
            str(w.registry),
            "--repo",
            str(w.repo),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def rows_of(result: dict[str, Any], claim: str | None, state: str) -> list[dict[str, Any]]:
    return [r for r in result["rows"] if r["claim"] == claim and r["state"] == state]


def reviewed(w: World, capsys: pytest.CaptureFixture[str], **kwargs: Any) -> tuple[str, Path]:
    """Commit A, reviewed (start, then sign) by rita."""
    sha = w.git("rev-parse", "HEAD")
    candidate = w.candidate(sha)
    assert start(w, candidate, capsys)[0] == 0
    code, out, err = sign(w, candidate, capsys, **kwargs)
    assert code == 0, err
    assert Path(json.loads(out)["file"]).is_file()
    return sha, candidate


def test_a_review_signed_at_a_is_current_at_a_and_completes_only_its_claim(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    sha, candidate = reviewed(world, capsys)
    result = status(world, candidate, capsys)
    [row] = rows_of(result, CLAIM, "current")
    assert (row["reviewer"], row["verdict"], row["reviewed_sha"]) == ("rita", "pass", sha)
    assert rows_of(result, CLAIM, "missing") == []
    assert rows_of(result, OTHER, "missing"), "the claim nobody reviewed is missing"
    assert result["complete"] is False
    assert world.git("status", "--porcelain") == "", "nothing was written into the tree"


def test_the_table_names_each_state(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    _, candidate = reviewed(world, capsys)
    code, out, _ = run(
        [
            "candidate",
            "status",
            "--candidate",
            str(candidate),
            "--reviews",
            str(world.reviews),
            "--registry",
            str(world.registry),
            "--repo",
            str(world.repo),
        ],
        capsys,
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["family", "claim", "review", "verdict"]
    assert any(CLAIM in line and " current " in line and "rita" in line for line in lines)
    assert any(OTHER in line and " missing " in line for line in lines)
    assert lines[-1].endswith("review not complete")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"src/impl/core.py": "A = 2\n"}, "src/impl/core.py"),
        ({"tests/test_one.py": "def test_one(): assert 1\n"}, "tests/test_one.py"),
        (
            {"docs/claims.toml": CLAIMS_TOML.replace('"src/impl/*.py"', '"src/impl/*.py", "x"')},
            "re-declared",
        ),
    ],
    ids=["covered-file", "its-test", "its-declaration"],
)
def test_a_review_of_a_is_stale_at_b_when_what_the_claim_rests_on_changed(
    world: World, capsys: pytest.CaptureFixture[str], change: dict[str, str], why: str
) -> None:
    sha_a, _ = reviewed(world, capsys)
    sha_b = world.commit(change)
    result = status(world, world.candidate(sha_b), capsys)
    [row] = rows_of(result, CLAIM, "stale")
    assert row["reviewed_sha"] == sha_a
    assert why in row["why"]
    assert rows_of(result, CLAIM, "missing"), "a stale review leaves the claim missing one"
    assert rows_of(result, CLAIM, "current") == []


def test_a_review_of_a_stays_current_at_b_when_only_unrelated_files_changed(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    sha_a, _ = reviewed(world, capsys)
    sha_b = world.commit({"README.md": "changed\n", "src/other.py": "B = 2\n"})
    result = status(world, world.candidate(sha_b), capsys)
    [row] = rows_of(result, CLAIM, "current")
    assert row["reviewed_sha"] == sha_a
    assert "nothing it rests on changed" in row["why"]
    assert rows_of(result, CLAIM, "missing") == []


def test_a_family_review_covers_its_claims_until_one_of_them_changes(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    _, candidate_a = reviewed(world, capsys, target=("--family", "bus-access"))
    result = status(world, candidate_a, capsys)
    assert [r["state"] for r in result["rows"]] == ["current"]
    assert result["complete"] is True
    sha_b = world.commit({"src/other.py": "B = 3\n"})
    result = status(world, world.candidate(sha_b), capsys)
    [row] = rows_of(result, None, "stale")
    assert "src/other.py" in row["why"]
    assert {r["claim"] for r in result["rows"] if r["state"] == "missing"} == {CLAIM, OTHER}


def test_a_failed_verdict_is_current_but_not_complete(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    _, candidate = reviewed(world, capsys, target=("--family", "bus-access"), verdict="fail")
    result = status(world, candidate, capsys)
    assert [(r["state"], r["verdict"]) for r in result["rows"]] == [("current", "fail")]
    assert result["complete"] is False


# --- refused records -----------------------------------------------------------------


def _record(w: World, sha: str, reviewer: str = "rita", **changes: Any) -> ReviewRecord:
    fields: dict[str, Any] = {
        "schema": REVIEW_SCHEMA,
        "sha": sha,
        "tree": changes.pop("tree", None) or w.git("rev-parse", f"{sha}^{{tree}}"),
        "scope": "claim",
        "target": CLAIM,
        "verdict": "pass",
        "reviewer": reviewer,
        "start_sha": sha,
        "end_sha": sha,
        "started_at_ms": 1,
        "signed_at_ms": 2,
    }
    fields.update(changes)
    return ReviewRecord(**fields)


def _tampered(envelope: bytes) -> bytes:
    """The verdict of a signed pass turned into... still a pass with another note: any
    change to the signed bytes."""
    document = json.loads(envelope)
    payload = json.loads(base64.b64decode(document["payload"]))
    payload["note"] = "looked at it"
    document["payload"] = base64.b64encode(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    ).decode()
    return json.dumps(document).encode()


def test_forged_outsider_wrong_role_and_misnamed_records_are_refused_and_never_counted(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    sha = world.git("rev-parse", "HEAD")
    k = world.signing
    world.reviews.mkdir()
    unattested = _record(world, sha, start_sha="0" * 40)
    files = {
        "forged.json": _tampered(sign_review(_record(world, sha), k["rita"])),
        "outsider.json": sign_review(_record(world, sha, "olga"), k["olga"]),
        "approver.json": sign_review(_record(world, sha, "pat"), k["pat"]),
        "misnamed.json": sign_review(_record(world, sha, "rita"), k["ron"]),
        "unattested.json": dsse.encode_envelope(
            dsse.sign_struct(PAYLOAD_CANDIDATE_REVIEW, unattested, [k["rita"]])
        ),
        "swarm-type.json": dsse.encode_envelope(
            dsse.sign_struct(
                "application/vnd.smf.swarm-review+json;v=1", _record(world, sha), [k["rita"]]
            )
        ),
        "unknown-commit.json": sign_review(_record(world, "1" * 40, tree="2" * 40), k["rita"]),
        "garbage.json": b"{not json",
    }
    for name, data in files.items():
        (world.reviews / name).write_bytes(data)
    result = status(world, world.candidate(sha), capsys)
    refused = {
        r["file"]: r["why"].split(":", 1)[0] for r in result["rows"] if r["state"] == "refused"
    }
    assert refused == {
        "forged.json": "bad_signature",
        "outsider.json": "unknown_signer",
        "approver.json": "wrong_role",
        "misnamed.json": "reviewer_mismatch",
        "unattested.json": "no_verdict",
        "swarm-type.json": "wrong_payload_type",
        "unknown-commit.json": "unknown_commit",
        "garbage.json": "malformed",
    }
    assert all(r["verdict"] is None and r["reviewer"] is None for r in result["rows"])
    assert rows_of(result, CLAIM, "missing")
    assert result["complete"] is False


def test_a_control_the_same_record_signed_by_the_reviewer_counts(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    sha = world.git("rev-parse", "HEAD")
    world.reviews.mkdir()
    (world.reviews / "good.json").write_bytes(
        sign_review(_record(world, sha), world.signing["rita"])
    )
    result = status(world, world.candidate(sha), capsys)
    assert rows_of(result, CLAIM, "current")[0]["file"] == "good.json"


def test_review_sign_refuses_a_wrong_role_or_unknown_key_and_writes_nothing(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = world.candidate(world.git("rev-parse", "HEAD"))
    assert start(world, candidate, capsys)[0] == 0
    for who, reason in (("pat", "wrong_role"), ("olga", "unknown_signer")):
        code, _, err = sign(world, candidate, capsys, who=who)
        assert_one_line_failure(code, err, reason)
    assert not world.reviews.exists() or list(world.reviews.iterdir()) == []


# --- the start and the end ---------------------------------------------------------------


def test_head_moved_during_the_review_is_no_verdict(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    sha_a = world.git("rev-parse", "HEAD")
    candidate = world.candidate(sha_a)
    assert start(world, candidate, capsys)[0] == 0
    sha_b = world.commit({"README.md": "moved\n"})
    code, out, err = sign(world, candidate, capsys)
    assert_one_line_failure(code, err, "no verdict", f"HEAD is {sha_b[:12]}")
    assert code == 1
    assert out == ""
    assert not world.reviews.exists()


def test_a_dirty_tree_at_the_end_or_no_start_is_no_verdict(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = world.candidate(world.git("rev-parse", "HEAD"))
    code, _, err = sign(world, candidate, capsys)
    assert_one_line_failure(code, err, "no verdict", "was started")
    assert start(world, candidate, capsys)[0] == 0
    (world.repo / "src" / "impl" / "core.py").write_text("A = 99\n")
    code, _, err = sign(world, candidate, capsys)
    assert_one_line_failure(code, err, "no verdict", "not clean", "src/impl/core.py")
    assert not world.reviews.exists()


def test_review_start_refuses_another_head_or_an_untracked_file(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    sha_a = world.git("rev-parse", "HEAD")
    (world.repo / "new.txt").write_text("untracked\n")
    code, _, err = start(world, world.candidate(sha_a), capsys)
    assert_one_line_failure(code, err, "not clean", "new.txt")
    (world.repo / "new.txt").unlink()
    world.commit({"README.md": "b\n"})
    code, _, err = start(world, world.candidate(sha_a), capsys)
    assert_one_line_failure(code, err, "no verdict", f"candidate is {sha_a[:12]}")


def test_a_record_whose_start_and_end_differ_is_never_signed() -> None:
    key = generate_signing_key()
    record = ReviewRecord(
        schema=REVIEW_SCHEMA,
        sha="a" * 40,
        tree="b" * 40,
        scope="claim",
        target=CLAIM,
        verdict="pass",
        reviewer="rita",
        start_sha="c" * 40,
        end_sha="a" * 40,
        started_at_ms=1,
        signed_at_ms=2,
    )
    with pytest.raises(NoVerdictError, match="started at cccccccccccc"):
        sign_review(record, key)
    same = msgspec.structs.replace(record, start_sha="a" * 40)
    assert json.loads(sign_review(same, key))["payloadType"] == PAYLOAD_CANDIDATE_REVIEW


@pytest.mark.parametrize(
    ("path", "globs", "expected"),
    [
        ("src/impl/core.py", ("src/impl/*.py",), True),
        ("src/impl/deep/core.py", ("src/impl/*.py",), False),
        ("src/impl/deep/core.py", ("src/**/*.py",), True),
        ("src/core.py", ("src/**/*.py",), True),
        ("src/impl/core.pyc", ("src/impl/*.py",), False),
        ("src/a.py", ("src/?.py",), True),
        ("docs/bypass.toml", ("docs/bypass.toml",), True),
    ],
)
def test_covers_globs_stay_inside_a_segment_unless_doubled(
    path: str, globs: tuple[str, ...], expected: bool
) -> None:
    assert covered(path, globs) is expected


def test_without_the_claims_declaration_every_change_counts_against_a_review(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fail closed: what a claim rests on cannot be known without its declaration."""
    reviewed(world, capsys)
    world.git("rm", "-q", "docs/claims.toml")
    sha_b = world.commit({"README.md": "unrelated\n"})
    result = status(world, world.candidate(sha_b), capsys)
    [row] = rows_of(result, CLAIM, "stale")
    assert "README.md" in row["why"]
    assert "docs/claims.toml" in row["why"]


def test_records_for_another_claim_or_a_moved_tree_are_refused(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    sha = world.git("rev-parse", "HEAD")
    rita = world.signing["rita"]
    world.reviews.mkdir()
    files = {
        "elsewhere.json": _record(world, sha, target="model-gateway.x"),
        "tree.json": _record(world, sha, tree="3" * 40),
    }
    for name, record in files.items():
        (world.reviews / name).write_bytes(sign_review(record, rita))
    sha_b = world.commit({"README.md": "b\n"})
    (world.reviews / "old-tree.json").write_bytes(
        sign_review(_record(world, sha, tree="4" * 40), rita)
    )
    refused = {
        r["file"]: r["why"].split(":", 1)[0]
        for r in status(world, world.candidate(sha_b), capsys)["rows"]
        if r["state"] == "refused"
    }
    assert refused == {
        "elsewhere.json": "not_in_candidate",
        "tree.json": "tree_mismatch",
        "old-tree.json": "tree_mismatch",
    }
    files_a = status(world, world.candidate(sha), capsys)["rows"]
    assert {r["file"]: r["why"].split(":", 1)[0] for r in files_a if r["file"]}["tree.json"] == (
        "tree_mismatch"
    )


def test_status_refuses_a_candidate_this_repository_does_not_hold(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = world.candidate(world.git("rev-parse", "HEAD"))
    document = json.loads(candidate.read_text())
    candidate.write_text(json.dumps({**document, "sha": "5" * 40}))
    world.reviews.mkdir()
    code, out, err = run(
        [
            "candidate",
            "status",
            "--candidate",
            str(candidate),
            "--reviews",
            str(world.reviews),
            "--registry",
            str(world.registry),
            "--repo",
            str(world.repo),
        ],
        capsys,
    )
    assert_one_line_failure(code, err, "refused", "not in")
    assert out == ""
    code, _, err = run(
        [
            "candidate",
            "status",
            "--candidate",
            str(candidate),
            "--reviews",
            str(world.root / "no"),
            "--registry",
            str(world.registry),
            "--repo",
            str(world.repo),
        ],
        capsys,
    )
    assert code == 2
    assert "cannot read reviews folder" in err


@pytest.mark.parametrize(
    ("target", "verdict", "code", "says"),
    [
        (("--claim", "model-gateway.nope"), "pass", 1, "not in the candidate"),
        (("--family", "model-gateway"), "pass", 1, "no claim of family"),
        (("--claim", CLAIM), "pass-with-notes", 2, "needs --note"),
    ],
)
def test_review_sign_refuses_what_it_cannot_bind(
    world: World,
    capsys: pytest.CaptureFixture[str],
    target: tuple[str, str],
    verdict: str,
    code: int,
    says: str,
) -> None:
    candidate = world.candidate(world.git("rev-parse", "HEAD"))
    assert start(world, candidate, capsys)[0] == 0
    result, _, err = sign(world, candidate, capsys, target=target, verdict=verdict)
    assert result == code
    assert_one_line_failure(result, err, says)
    assert not world.reviews.exists()
