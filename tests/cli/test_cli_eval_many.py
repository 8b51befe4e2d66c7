"""``eval --jsonl``, ``--explain`` and ``--against``, over real files.

Several envelopes give one result each, the same Decision a single ``eval``
gives; a malformed line is refused naming its line number; ``--explain``
prints the explanation ``explain`` prints, with the floor's trigger since the
envelope is known; ``--against`` a release (built with the real release
builder, signed by the state's release key, verified with the state's trust
root) that tightens one policy reports exactly the envelopes that change.
The single-envelope ``--json`` stays byte for byte what it was.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.governance.projections import SCENARIO_CORPUS, SCENARIO_ENVELOPES, package_path
from smf_assurance.governance.releases import write_release_dir
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.state import StateDir, provision_demo
from tests.support.builders import envelope_json, make_policy, make_rule, write_corpus
from tests.support.cli_explain import run
from tests.support.release_distribution import current_inbox, next_release

AT = "2026-11-29T10:00:00Z"
SCENARIOS = package_path(SCENARIO_ENVELOPES)
FILES = sorted(SCENARIOS.glob("[0-9]-*.json"))
RETENTION_DELETE = envelope_json(
    {
        "capability": "document.delete",
        "effects.persistence": "local",
        "effects.reversibility": "none",
        "destination.channel": "dms",
        "destination.locality": "internal",
        "workflow.legal_hold": False,
    }
)
"""A deletion the shipped customer overlay allows (``customer.acme.retention-deletion``)."""


def one_line(path: Path) -> bytes:
    return json.dumps(json.loads(path.read_text())).encode()


def jsonl(tmp_path: Path, *lines: bytes) -> Path:
    path = tmp_path / "envelopes.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def single(path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    code, out, _ = run(["eval", "--json", "--at", AT, str(path)], capsys)
    assert code == 0
    return json.loads(out)


def test_each_line_gives_the_decision_a_single_eval_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [one_line(path) for path in FILES]
    source = jsonl(tmp_path, lines[0], b"", b"   ", *lines[1:])
    code, out, err = run(["eval", "--jsonl", "--json", "--at", AT, str(source)], capsys)
    assert (code, err) == (0, "")
    results = json.loads(out)["results"]
    assert [r["line"] for r in results] == [1, 4, 5, 6]  # blank lines skipped, still counted
    assert [r["decision"] for r in results] == [single(path, capsys) for path in FILES]
    assert all(r["explanation"] is None for r in results)
    code, out, _ = run(["eval", "--jsonl", "--at", AT, str(source)], capsys)
    assert code == 0
    rows = out.splitlines()[2:]
    assert [row.split()[:2] for row in rows] == [
        ["1", "conditional"],
        ["4", "deny"],
        ["5", "deny"],
        ["6", "deny"],
    ]


def test_jsonl_reads_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = b"\n".join(one_line(path) for path in FILES[:2])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out, _ = run(["eval", "--jsonl", "--json", "--at", AT, "-"], capsys)
    assert code == 0
    assert len(json.loads(out)["results"]) == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json", "line 2: invalid envelope"),
        (b'{"capability": "document.read"}', "line 2: invalid envelope"),
    ],
)
def test_a_malformed_line_is_refused_naming_its_number(
    content: bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = jsonl(tmp_path, one_line(FILES[0]), content, one_line(FILES[1]))
    code, out, err = run(["eval", "--jsonl", "--at", AT, str(source)], capsys)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith(f"smf-assurance: {message}")


def test_an_empty_jsonl_file_and_a_stray_trust_root_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"\n\n")
    code, _, err = run(["eval", "--jsonl", str(empty)], capsys)
    assert code == 2
    assert "no envelope in it" in err
    code, _, err = run(["eval", "--trust-root", str(empty), str(FILES[0])], capsys)
    assert code == 2
    assert "--trust-root is for --against" in err
    code, _, err = run(["eval", "--against", str(tmp_path), str(FILES[0])], capsys)
    assert code == 2
    assert "--against needs --trust-root" in err


def test_the_single_envelope_json_is_unchanged_and_explain_adds_to_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    floor = SCENARIOS / "4-uncovered-consequential.json"
    plain = single(floor, capsys)
    code, out, _ = run(["eval", "--json", "--explain", "--at", AT, str(floor)], capsys)
    assert code == 0
    report = json.loads(out)
    assert report["decision"] == plain
    x = report["explanation"]
    assert x["decision_id"] == plain["decision_id"]
    assert x["basis"] == "decision"
    assert x["safety_floor"]["triggers"] == ["reversibility_none"]
    assert x["gaps"] == []
    code, out, _ = run(["eval", "--explain", "--at", AT, str(floor)], capsys)
    assert code == 0
    assert "disposition" in out.splitlines()[2]
    assert "consequential (it cannot be undone): denied" in out


def test_explain_lines_of_a_jsonl_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = jsonl(tmp_path, one_line(FILES[1]), one_line(FILES[3]))
    code, out, _ = run(["eval", "--jsonl", "--explain", "--at", AT, str(source)], capsys)
    assert code == 0
    assert "line 1:" in out
    assert "floor.legal-hold" in out
    assert "citation: Synthetic" in out
    code, out, _ = run(["eval", "--jsonl", "--json", "--explain", "--at", AT, str(source)], capsys)
    results = json.loads(out)["results"]
    assert [p["policy_id"] for p in results[0]["explanation"]["policies"]] == ["floor.legal-hold"]
    code, _, err = run(
        ["eval", "--explain", "--projection", str(tmp_path), "--at", AT, str(FILES[0])], capsys
    )
    assert code == 1
    assert "cannot load projection" in err


def tighter_release(state: StateDir, tmp_path: Path) -> tuple[Path, Path]:
    """The state's release as a folder, and the next one, in which the retention
    deletion policy holds for a licensed attorney instead of allowing."""
    prior = current_inbox(state)
    base = tmp_path / "base"
    write_release_dir(prior, base)
    corpus = tmp_path / "corpus-tight"
    shutil.copytree(package_path(SCENARIO_CORPUS), corpus)
    policies = json.loads((corpus / "policies.json").read_text())
    (retention,) = [p for p in policies if p["policy_id"] == "customer.acme.retention-deletion"]
    retention["effect"] = "conditional"
    retention["reason_code"] = "retention_deletion_needs_attorney"
    retention["requirements"] = {"approval_count": 1, "required_roles": ["licensed_attorney"]}
    (corpus / "policies.json").write_text(json.dumps(policies))
    tight = tmp_path / "tight"
    write_release_dir(next_release(state, tmp_path, prior, "tight"), tight)
    return base, tight


def test_against_a_tighter_release_reports_exactly_the_envelopes_that_change(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, tight = tighter_release(state, tmp_path)
    lines = [one_line(path) for path in FILES]
    source = jsonl(tmp_path, *lines[:2], RETENTION_DELETE, *lines[2:], envelope_json())
    argv = ["eval", "--jsonl", "--projection", str(base), "--against", str(tight)]
    argv += ["--trust-root", str(state.trust_root), str(source)]  # now: the lease is judged
    code, out, err = run([*argv, "--json"], capsys)
    assert (code, err) == (0, ""), err
    report = json.loads(out)
    changed = [r for r in report["results"] if r["changed"]]
    assert [r["line"] for r in changed] == [3]
    (row,) = changed
    assert (row["base"]["disposition"], row["against"]["disposition"]) == ("allow", "conditional")
    assert row["against"]["reason_codes"] == ["retention_deletion_needs_attorney"]
    for r in report["results"]:
        if not r["changed"]:
            assert r["base"]["disposition"] == r["against"]["disposition"]
            assert r["base"]["reason_codes"] == r["against"]["reason_codes"]
    assert (report["total"], report["changed"]) == (6, 1)
    assert report["counts"] == [
        {"from": "allow", "to": "allow", "count": 1},
        {"from": "allow", "to": "conditional", "count": 1},
        {"from": "conditional", "to": "conditional", "count": 1},
        {"from": "deny", "to": "deny", "count": 3},
    ]
    assert report["against"]["sequence"] == 2
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert "1 of 6 envelopes decide differently" in out
    code, out, _ = run([*argv, "--explain"], capsys)
    assert code == 0
    assert "line 3, against:" in out
    assert "line 1, against:" not in out
    code, out, _ = run([*argv, "--explain", "--json"], capsys)
    explained = json.loads(out)["results"][2]["explanations"]
    assert [p["policy_id"] for p in explained["against"]["policies"]] == [
        "customer.acme.retention-deletion"
    ]
    assert explained["against"]["requirements"][0]["requirement"] == "approval_count"


def test_against_a_release_the_trust_root_does_not_sign_is_refused(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, tight = tighter_release(state, tmp_path)
    other = StateDir(tmp_path / "other")
    provision_demo(other)
    argv = ["eval", "--against", str(tight), "--trust-root", str(other.trust_root)]
    code, out, err = run([*argv, str(FILES[0])], capsys)
    assert code == 1
    assert out == ""
    assert err.startswith("smf-assurance: release refused (release_bad_signature)")


def test_explain_says_the_gates_own_reasons_and_the_non_consequential_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = write_corpus(
        tmp_path / "corpus",
        [make_rule("delete", {"eq": {"fact": "capability", "value": "document.delete"}})],
        [make_policy("ba.hold", "delete", effect="conditional")],
    )
    assert main(["compile", "--corpus", str(corpus), "--out", str(tmp_path / "p")]) == 0
    source = jsonl(tmp_path, envelope_json(), envelope_json({"capability": "document.delete"}))
    argv = ["eval", "--jsonl", "--explain", "--projection", str(tmp_path / "p"), str(source)]
    code, out, _ = run([*argv, "--at", AT], capsys)
    assert code == 0
    assert "the operation is not consequential: allowed" in out
    assert "reason approval_requirement_incomplete: a conditional policy applied" in out
