"""``release diff`` (the static part): what two releases differ in.

A pair of corpora whose differences are known (a reworded and a re-scoped
rule, a rule added and one removed, a policy added with requirements, one
removed, one tightened in effect, TTL, roles and approvals, one moved to
another layer, a model provider widened) is compiled by the real compiler;
the diff lists every one of those and nothing else. Identical releases show
no change. The command reads real signed release folders, authenticates
them with ``--trust-root`` when given, and refuses a folder that does not.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.core.release_diff import FieldChange, diff_releases
from smf_assurance.governance.compiler import CompiledRelease, compile_corpus
from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.governance.releases import write_release_dir, write_trust_root
from tests.support.builders import make_policy, make_release, make_rule, write_corpus
from tests.support.cli_explain import run
from tests.support.release_helpers import OUTSIDER, SIGNERS, build, root_of

HOLD = {"eq": {"fact": "workflow.legal_hold", "value": True}}
SEND = {"eq": {"fact": "capability", "value": "external.transmit"}}


def old_corpus(directory: Path) -> Path:
    return write_corpus(
        directory,
        [make_rule("hold", HOLD), make_rule("send", SEND), make_rule("gone"), make_rule("same")],
        [
            make_policy("floor.hold", "hold", layer="smf_safety_floor"),
            make_policy(
                "ba.send",
                "send",
                effect="conditional",
                requirements={
                    "approval_count": 1,
                    "required_roles": ["licensed_attorney"],
                    "ttl_seconds": 600,
                },
            ),
            make_policy("customer.gone", "gone", layer="customer", effect="allow"),
            make_policy("customer.same", "same", layer="customer", effect="allow"),
            make_policy(
                "matter.moves", "same", layer="matter", effect="allow", reason_code="moves"
            ),
        ],
        make_release("rel-old", 1),
    )


def new_corpus(directory: Path) -> Path:
    return write_corpus(
        directory,
        [
            make_rule("hold", {"all": [HOLD, SEND]}, statement="Reworded hold statement."),
            make_rule("send", SEND),
            make_rule("same"),
            make_rule("fresh"),
        ],
        [
            make_policy("floor.hold", "hold", layer="smf_safety_floor"),
            make_policy(
                "ba.send",
                "send",
                effect="conditional",
                requirements={
                    "approval_count": 2,
                    "required_roles": ["licensed_attorney", "partner"],
                    "ttl_seconds": 300,
                    "one_shot": True,
                },
            ),
            make_policy("customer.same", "same", layer="customer", effect="allow"),
            make_policy(
                "customer.moves", "same", layer="customer", effect="allow", reason_code="moves"
            ),
            make_policy(
                "customer.fresh",
                "fresh",
                layer="customer",
                effect="conditional",
                requirements={"approval_count": 1, "required_roles": ["partner"]},
            ),
        ],
        make_release("rel-new", 2),
    )


def rename_moving_policy(directory: Path) -> None:
    """``matter.moves`` keeps its id across layers: a layer change, not a swap."""
    policies = json.loads((directory / "policies.json").read_text())
    for policy in policies:
        if policy["policy_id"] == "customer.moves":
            policy["policy_id"] = "matter.moves"
    (directory / "policies.json").write_text(json.dumps(policies))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[CompiledRelease, CompiledRelease]:
    new = new_corpus(tmp_path / "new")
    rename_moving_policy(new)
    return compile_corpus(old_corpus(tmp_path / "old")), compile_corpus(new)


def changes(fields: tuple[FieldChange, ...]) -> dict[str, tuple[Any, Any]]:
    return {f.field: (f.old, f.new) for f in fields}


def test_every_known_difference_is_listed_and_nothing_else(
    pair: tuple[CompiledRelease, CompiledRelease],
) -> None:
    old, new = pair
    diff = diff_releases(old.enforcement, old.analysis, new.enforcement, new.analysis)
    assert (diff.old.release_id, diff.new.release_id) == ("rel-old", "rel-new")
    rules = {r.rule_id.removeprefix("urn:smf:rule:"): r for r in diff.rules}
    assert {name: r.change for name, r in rules.items()} == {
        "fresh": "added",
        "gone": "removed",
        "hold": "changed",
    }
    hold = changes(rules["hold"].fields)
    assert set(hold) == {"when", "statement", "source_hash"}
    assert hold["statement"][1] == "Reworded hold statement."
    assert hold["when"] == (HOLD, {"all": [HOLD, SEND]})
    assert rules["fresh"].fields == ()
    assert rules["fresh"].title == "Test rule urn:smf:rule:fresh"
    policies = {p.policy_id: p for p in diff.policies}
    assert {pid: p.change for pid, p in policies.items()} == {
        "ba.send": "changed",
        "customer.fresh": "added",
        "customer.gone": "removed",
        "matter.moves": "changed",
    }
    assert policies["ba.send"].fields == ()
    assert changes(policies["ba.send"].requirements) == {
        "approval_count": (1, 2),
        "required_roles": (["licensed_attorney"], ["licensed_attorney", "partner"]),
        "ttl_seconds": (600, 300),
        "one_shot": (None, True),
    }
    assert changes(policies["matter.moves"].fields) == {
        "layer": ("matter", "customer"),
        "scope": (
            {"tenant_id": "tenant-acme", "matter_id": "matter-2026-0042", "actor_id": None},
            {"tenant_id": "tenant-acme", "matter_id": None, "actor_id": None},
        ),
    }
    assert policies["matter.moves"].layer == "customer"
    assert changes(policies["customer.fresh"].requirements) == {
        "approval_count": (None, 1),
        "required_roles": (None, ["partner"]),
    }
    assert policies["customer.gone"].requirements == ()
    assert diff.model_providers == ()
    assert not diff.unchanged


def test_identical_releases_show_no_change(
    pair: tuple[CompiledRelease, CompiledRelease],
) -> None:
    old, _ = pair
    diff = diff_releases(old.enforcement, old.analysis, old.enforcement, old.analysis)
    assert diff.unchanged
    assert (diff.rules, diff.policies, diff.model_providers) == ((), (), ())


def scenario_copy(directory: Path, *, widen: bool) -> Path:
    shutil.copytree(package_path(SCENARIO_CORPUS), directory)
    if widen:
        path = directory / "model_providers.json"
        providers = json.loads(path.read_text())
        providers[0]["classifications"].append("confidential")
        path.write_text(json.dumps(providers))
        path = directory / "policies.json"
        policies = json.loads(path.read_text())
        (retention,) = [p for p in policies if p["policy_id"] == "customer.acme.retention-deletion"]
        retention["effect"] = "conditional"
        retention["requirements"] = {"approval_count": 1, "required_roles": ["licensed_attorney"]}
        path.write_text(json.dumps(policies))
        release = json.loads((directory / "release.json").read_text())
        release["release_sequence"] = release.get("release_sequence", 1) + 1
        (directory / "release.json").write_text(json.dumps(release))
    return directory


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two signed release folders of the scenario corpus (the second tightens the
    retention deletion and widens a model provider) and their trust root."""
    first = build(scenario_copy(tmp_path / "c1", widen=False))
    second = build(scenario_copy(tmp_path / "c2", widen=True), prior=first)
    write_release_dir(first, tmp_path / "r1")
    write_release_dir(second, tmp_path / "r2")
    write_trust_root(tmp_path / "root.json", root_of(SIGNERS, 2))
    return tmp_path / "r1", tmp_path / "r2", tmp_path / "root.json"


def test_the_command_lists_the_changes_of_two_signed_folders(
    folders: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    r1, r2, root = folders
    code, out, err = run(["release", "diff", str(r1), str(r2), "--trust-root", str(root)], capsys)
    assert (code, err) == (0, "")
    assert "authenticated with the trust root" in out.splitlines()[0]
    rows = [line.split() for line in out.splitlines()[3:]]
    assert [row[:4] for row in rows] == [
        ["policy", "customer.acme.retention-deletion", "changed", "effect"],
        ["policy", "customer.acme.retention-deletion", "changed", "approval_count"],
        ["policy", "customer.acme.retention-deletion", "changed", "required_roles"],
        ["model", "provider", "local-model", "changed"],
    ]
    code, out, _ = run(["release", "diff", str(r1), str(r2), "--json"], capsys)
    report = json.loads(out)
    assert report["authenticated"] is False
    assert report["unchanged"] is False
    assert report["rules"] == []
    assert [p["policy_id"] for p in report["policies"]] == ["customer.acme.retention-deletion"]
    assert report["model_providers"][0]["fields"] == [
        {
            "field": "classifications",
            "old": ["internal", "public"],
            "new": ["confidential", "internal", "public"],
        }
    ]
    assert report["new"]["manifest_hash"].startswith("sha256:")


def test_the_same_folder_twice_is_no_change(
    folders: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    r1, _, _ = folders
    code, out, _ = run(["release", "diff", str(r1), str(r1)], capsys)
    assert code == 0
    assert "read as written" in out
    assert "no change:" in out
    code, out, _ = run(["release", "diff", str(r1), str(r1), "--json"], capsys)
    assert json.loads(out)["unchanged"] is True


def test_a_folder_the_trust_root_does_not_sign_is_refused(
    folders: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r1, r2, _ = folders
    write_trust_root(tmp_path / "outsider.json", root_of([OUTSIDER], 1))
    argv = ["release", "diff", str(r1), str(r2), "--trust-root", str(tmp_path / "outsider.json")]
    code, out, err = run(argv, capsys)
    assert code == 1
    assert out == ""
    assert err.startswith(f"smf-assurance: {r1}: release refused (release_bad_signature)")
    code, _, err = run(["release", "diff", str(r1), str(tmp_path / "nowhere")], capsys)
    assert code == 2
    assert len(err.splitlines()) == 1
    argv = ["release", "diff", str(r1), str(r2), "--trust-root", str(r1 / "analysis.json")]
    code, _, err = run(argv, capsys)
    assert code == 2
    assert len(err.splitlines()) == 1


def test_the_table_names_added_and_removed_rules_and_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = new_corpus(tmp_path / "new")
    rename_moving_policy(new)
    write_release_dir(build(old_corpus(tmp_path / "old")), tmp_path / "r-old")
    write_release_dir(build(new), tmp_path / "r-new")
    argv = ["release", "diff", str(tmp_path / "r-old"), str(tmp_path / "r-new")]
    code, out, _ = run(argv, capsys)
    assert code == 0
    rows = {tuple(line.split()[:4]) for line in out.splitlines()[3:]}
    assert ("rule", "urn:smf:rule:fresh", "added", "title") in rows
    assert ("rule", "urn:smf:rule:gone", "removed", "title") in rows
    assert ("policy", "customer.gone", "removed", "layer") in rows
    assert ("policy", "matter.moves", "changed", "scope") in rows
    hold = [line for line in out.splitlines() if "urn:smf:rule:hold" in line and " when " in line]
    assert hold[0].rstrip().endswith("...")  # a long predicate is cut in the table
