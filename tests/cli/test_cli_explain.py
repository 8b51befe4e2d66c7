"""``smf-assurance explain DECISION_ID`` over a real demo's evidence.

The demo runs the scripted scenarios through a real gate on a real
nats-server; each decision id of the resulting SQLite ledger is explained
from the ledger and the state's release. Each names the policies and layers
the scenario rests on, with the rule's words from the release; the floor
denial says it was consequential and that the ledger does not keep which
trigger; and each refusal (unknown id, a ledger of another state, the
deciding release missing or not authenticating, a broken chain, a decision
no policy made) is one line, exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.core.decision import NO_APPLICABLE_POLICY
from smf_assurance.core.explanation import (
    GAP_APPLIED_FROM_REASONS,
    GAP_TENANT,
    GAP_TRIGGER,
)
from smf_assurance.governance.releases import make_trust_root, write_trust_root
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.pipeline.stores.ledger import Ledger
from smf_assurance.subjects.keys import SigningKey, public_record
from tests.support.cli_explain import run

EXPECTED: dict[str, list[tuple[str, str]]] = {
    "attorney_approval_required_for_transmission": [
        ("ba.transmission-attorney-approval", "binding_authority"),
        ("floor.confidential-external-egress", "smf_safety_floor"),
        ("customer.acme.transmission-window", "customer"),
    ],
    "legal_hold_blocks_deletion": [("floor.legal-hold", "smf_safety_floor")],
    "injection_tainted_egress": [
        ("ba.transmission-attorney-approval", "binding_authority"),
        ("floor.confidential-external-egress", "smf_safety_floor"),
        ("floor.injection-taint-egress", "smf_safety_floor"),
        ("customer.acme.transmission-window", "customer"),
    ],
    NO_APPLICABLE_POLICY: [],
    "retention_schedule_deletion": [("customer.acme.retention-deletion", "customer")],
}
"""Per demo scenario (by its expected reason), the policies its decision rests on."""


def decisions(db: Path) -> list[tuple[str, list[str]]]:
    """(decision id, reason codes) of every decision entry, from the SQLite file."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT decision_id, reason_codes FROM evidence_entries WHERE kind = 'decision'"
        ).fetchall()
    return [(row[0], json.loads(row[1])) for row in rows]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A state a demo ran in, and each gate scenario's decision id (by the ledger
    entry its verdict names as evidence)."""
    root = tmp_path_factory.mktemp("explain") / "state"
    capture = io.StringIO()
    with contextlib.redirect_stdout(capture):
        assert main(["demo", "--json", "--state-dir", str(root)]) == 0
    report = json.loads(capture.getvalue())
    with sqlite3.connect(root / "ledger.db") as conn:
        by_hash = dict(conn.execute("SELECT entry_hash, decision_id FROM evidence_entries"))
    ids = {
        row["scenario"]: by_hash[row["evidence"]]
        for row in report["scenarios"]
        if row["outcome"] != "report"
    }
    return root, ids


@pytest.fixture(scope="module")
def demo_state(demo_run: tuple[Path, dict[str, str]]) -> Path:
    return demo_run[0]


@pytest.fixture
def demo_copy(tmp_path: Path, demo_state: Path) -> Path:
    """A copy of the demo's state, to damage as a test needs."""
    copy = tmp_path / "state"
    shutil.copytree(demo_state, copy, ignore=shutil.ignore_patterns("nats"))
    return copy


def explain_json(state: Path, decision_id: str, capsys: pytest.CaptureFixture[str]) -> Any:
    code, out, err = run(["explain", decision_id, "--state-dir", str(state), "--json"], capsys)
    assert (code, err) == (0, ""), err
    return json.loads(out)


def test_every_demo_decision_names_its_policies_layers_and_rules(
    demo_run: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    demo_state, ids = demo_run
    assert len(decisions(demo_state / "ledger.db")) == len(SCENARIOS) == len(ids)
    for scenario in SCENARIOS:
        decision_id = ids[scenario.name]
        report = explain_json(demo_state, decision_id, capsys)
        x = report["explanation"]
        expected = EXPECTED[scenario.expected_reason]
        assert [(p["policy_id"], p["layer"]) for p in x["policies"]] == expected, scenario.name
        assert all(p["certain"] for p in x["policies"])
        for policy in x["policies"]:
            assert policy["rule"]["title"]
            assert policy["rule"]["statement"]
            assert policy["rule"]["citation"].startswith("Synthetic")
        assert x["decision_id"] == decision_id
        assert x["release_id"] == "smf-scenarios-2026.11"
        assert report["release"]["source"] == "accepted release"
        assert report["ledger"]["history"][0]["kind"] == "decision"
        if expected:
            assert GAP_APPLIED_FROM_REASONS in x["gaps"]
        assert GAP_TENANT not in x["gaps"]  # the state's pseudonym key narrowed the tenant


def test_the_floor_denial_says_why_and_what_the_ledger_does_not_keep(
    demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (decision_id,) = [
        d for d, codes in decisions(demo_state / "ledger.db") if NO_APPLICABLE_POLICY in codes
    ]
    x = explain_json(demo_state, decision_id, capsys)["explanation"]
    assert x["safety_floor"] == {
        "reason_code": NO_APPLICABLE_POLICY,
        "consequential": True,
        "triggers": None,
    }
    assert x["gaps"] == [GAP_TRIGGER]
    code, out, _ = run(["explain", decision_id, "--state-dir", str(demo_state)], capsys)
    assert code == 0
    assert "safety floor: no policy applied and the operation is consequential" in out
    assert "`eval --explain` on the envelope names it" in out


def test_the_table_gives_the_rules_words_requirements_and_what_happened_next(
    demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (decision_id,) = [
        d
        for d, codes in decisions(demo_state / "ledger.db")
        if "attorney_approval_required_for_transmission" in codes
        and "injection_tainted_egress" not in codes
    ]
    code, out, err = run(["explain", decision_id, "--state-dir", str(demo_state)], capsys)
    assert (code, err) == (0, "")
    assert "Attorney approval before a client or court transmission" in out
    assert "citation: Synthetic" in out
    assert "licensed_attorney" in out
    assert "ttl_seconds" in out
    for status in ("held", "approved", "executing", "consumed"):
        assert status in out
    assert "not known: the ledger keeps no requirements" in out


def test_without_the_pseudonym_key_the_tenant_is_a_stated_gap(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    StateDir(demo_copy).tenant_key.unlink()
    (decision_id,) = [
        d
        for d, codes in decisions(demo_copy / "ledger.db")
        if "retention_schedule_deletion" in codes
    ]
    x = explain_json(demo_copy, decision_id, capsys)["explanation"]
    assert GAP_TENANT in x["gaps"]
    assert not StateDir(demo_copy).tenant_key.exists()  # read, never created


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 1) -> str:
    got, out, err = run(argv, capsys)
    assert got == code, err
    assert out == ""
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("smf-assurance: "), err
    return err


def test_an_unknown_decision_id_is_refused(
    demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unknown = "sha256:" + "0" * 64
    err = refusal(["explain", unknown, "--state-dir", str(demo_state)], capsys)
    assert f"no decision {unknown} in ledger" in err
    err = refusal(["explain", "decision-7", "--state-dir", str(demo_state)], capsys, code=2)
    assert "is not a decision id" in err
    err = refusal(["explain", unknown, "--state-dir", str(demo_state / "nowhere")], capsys)
    assert "no ledger at" in err


def test_a_ledger_of_another_state_is_refused(
    demo_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once its gate signed a checkpoint (every 60 s or 1000 entries, and at
    ``up``'s shutdown), a ledger is tied to its state: another state's registry
    does not vouch for it. Before that the output says nothing ties it."""
    decision_id, _ = decisions(demo_copy / "ledger.db")[0]
    code, out, _ = run(["explain", decision_id, "--state-dir", str(demo_copy)], capsys)
    assert code == 0
    assert "note: no checkpoint in the ledger yet" in out
    states = StateDir(demo_copy)

    async def checkpoint() -> None:
        ledger = await Ledger.open(states.ledger, signer=states.key("gate"))
        try:
            assert await ledger.checkpoint(1_795_953_600_000) is not None
        finally:
            await ledger.close()

    asyncio.run(checkpoint())
    report = explain_json(demo_copy, decision_id, capsys)
    assert report["ledger"]["checkpoints"] == 1
    other = StateDir(tmp_path / "other")
    provision_demo(other)
    argv = ["explain", decision_id, "--state-dir", str(other.root)]
    err = refusal([*argv, "--db", str(states.ledger)], capsys)
    assert "is not this state's: its checkpoints are not signed by a gate key" in err
    err = refusal(argv, capsys)
    assert f"no ledger at {other.ledger}" in err


def test_a_missing_release_is_refused_not_replaced(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    decision_id, _ = decisions(demo_copy / "ledger.db")[0]
    (demo_copy / "release-state.db").unlink()
    for path in (demo_copy / "releases").iterdir():
        path.unlink()
    (demo_copy / "releases" / "release.0000000000000009-garbage.json").write_bytes(b"garbage")
    err = refusal(["explain", decision_id, "--state-dir", str(demo_copy)], capsys)
    assert "1 releases" in err
    assert "is not in" in err
    assert "not explained under another release" in err


def test_a_release_that_does_not_authenticate_is_not_used(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state's trust root names another key: the accepted release and the
    inbox no longer authenticate, so none of them explains the decision."""
    stranger = SigningKey.from_seed(b"\x42" * 32)
    trust_root = StateDir(demo_copy).trust_root
    trust_root.unlink()
    write_trust_root(trust_root, make_trust_root([public_record(stranger, "stranger")], 1))
    decision_id, _ = decisions(demo_copy / "ledger.db")[0]
    err = refusal(["explain", decision_id, "--state-dir", str(demo_copy)], capsys)
    assert "not explained under another release" in err
    trust_root.write_bytes(b"not a trust root")
    err = refusal(["explain", decision_id, "--state-dir", str(demo_copy)], capsys)
    assert str(trust_root) in err
    trust_root.unlink()
    err = refusal(["explain", decision_id, "--state-dir", str(demo_copy)], capsys)
    assert "no release trust root" in err


def test_a_ledger_whose_chain_is_broken_is_refused(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = demo_copy / "ledger.db"
    decision_id, _ = decisions(db)[0]
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER evidence_entries_no_update")
        conn.execute("UPDATE evidence_entries SET at = at + 1 WHERE seq = 2")
    err = refusal(["explain", decision_id, "--state-dir", str(demo_copy)], capsys)
    assert "does not verify (entry_hash_mismatch at seq 2)" in err


def test_a_decision_no_policy_made_is_refused_in_one_line(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model-gateway admission refusal is recorded under no projection."""
    states = StateDir(demo_copy)

    async def write_refusal() -> str:
        ledger = await Ledger.open(states.ledger, signer=states.key("gate"))
        try:
            writer = EvidenceWriter(ledger, states.pseudonym_key(), lambda: 1_795_953_600_000)
            entry = writer.for_refusal(
                {"runtime_id": "rt"}, writer.tenant_ref("tenant-acme"), None, ("unattested",)
            )
            await writer.append(entry)
            await ledger.checkpoint(1_795_953_600_001)
            return entry.decision_id
        finally:
            await ledger.close()

    decision_id = asyncio.run(write_refusal())
    err = refusal(["explain", decision_id, "--state-dir", str(demo_copy)], capsys)
    assert "was refused before any policy ran (unattested)" in err
