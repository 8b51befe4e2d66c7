"""The corpus compiler (smf_assurance/governance/compiler.py).

Properties: output is byte-identical for reordered input; the shipped
compiled projection is exactly what compiling the shipped corpus gives
(freshness guard); every inconsistency is refused BEFORE anything is
written (the output directory stays empty), with a message naming the
culprit; ``write_release`` refuses a non-empty directory; both projections
carry the same rule identities and source hashes.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smf_assurance.core.facts import FACT_REGISTRY_VERSION
from smf_assurance.core.projection import (
    DEFAULT_DETECTION_WINDOW_CHARS,
    build_policy_set,
    decode_analysis,
    decode_enforcement,
    projection_id,
)
from smf_assurance.governance.compiler import (
    RECIPE_ID,
    SYNTHETIC_PREFIX,
    CompiledRelease,
    CompileError,
    compile_corpus,
    write_release,
)
from smf_assurance.governance.projections import SCENARIO_CORPUS, SCENARIO_PROJECTION, package_path
from smf_assurance.ops.cli.commands.decide import run_compile
from smf_assurance.ops.cli.output import CommandError
from tests.support.builders import (
    make_policy,
    make_release,
    make_rule,
    statement_hash,
    write_corpus,
)

SHIPPED_CORPUS = package_path(SCENARIO_CORPUS)
SHIPPED_COMPILED = package_path(SCENARIO_PROJECTION)
SHIPPED_RULES: list[dict[str, Any]] = json.loads((SHIPPED_CORPUS / "rules.json").read_text())
SHIPPED_POLICIES: list[dict[str, Any]] = json.loads((SHIPPED_CORPUS / "policies.json").read_text())
SHIPPED_RELEASE: dict[str, Any] = json.loads((SHIPPED_CORPUS / "release.json").read_text())

SNAPSHOT = b"The licensee shall not destroy records under hold. Other text follows here."
QUOTE = "The licensee shall not destroy records under hold."


def real_rule(rule_id: str = "real", **fields: Any) -> dict[str, Any]:
    """A rule citing a (pretend) real authority, with a matching snapshot."""
    base = {
        "authority_type": "statute",
        "citation": "Test Stat. s. 1",
        "statement": QUOTE,
        "snapshot": "sources/test-stat-1.txt",
        "source_hash": "sha256:" + hashlib.sha256(SNAPSHOT).hexdigest(),
    }
    return make_rule(rule_id, **{**base, **fields})


def small_corpus() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rules = [make_rule("a"), make_rule("b"), real_rule()]
    policies = [
        make_policy(
            "ba.a",
            "a",
            effect="conditional",
            requirements={"approval_count": 1, "required_roles": ["licensed_attorney"]},
        ),
        make_policy("floor.b", "b", layer="smf_safety_floor", effect="deny"),
        make_policy("customer.real", "real", layer="customer", effect="allow"),
    ]
    return rules, policies


SOURCES = {"sources/test-stat-1.txt": SNAPSHOT}


def compile_dir(
    directory: Path, rules: Any, policies: Any, release: Any = None, sources: Any = None
) -> CompiledRelease:
    write_corpus(
        directory, rules, policies, release, sources=SOURCES if sources is None else sources
    )
    return compile_corpus(directory)


def cli_compile(corpus: Path, out: Path, *, as_json: bool = False) -> int:
    """``smf-assurance compile`` as the command line runs it (compile, then write).

    Calls the subcommand's handler rather than ``smf_assurance.ops.cli.main.main`` so this file
    does not import the whole bus stack; returns the exit status.
    """
    try:
        return run_compile(argparse.Namespace(corpus=corpus, out=out, json=as_json))
    except CommandError as exc:
        sys.stderr.write(f"smf-assurance: {exc}\n")
        return exc.code


# --- freshness and reproducibility -------------------------------------------------


@pytest.mark.claim("projection-integrity.reproducible")
def test_shipped_compiled_projection_is_fresh() -> None:
    """The projection shipped in the package is exactly what the shipped corpus compiles to."""
    compiled = compile_corpus(SHIPPED_CORPUS)
    files = compiled.files()
    assert sorted(p.name for p in SHIPPED_COMPILED.iterdir()) == sorted(files)
    for name, data in files.items():
        assert (SHIPPED_COMPILED / name).read_bytes() == data, f"{name} is stale; recompile"


def test_compiling_twice_is_byte_identical(tmp_path: Path) -> None:
    rules, policies = small_corpus()
    first = compile_dir(tmp_path / "one", rules, policies).files()
    second = compile_dir(tmp_path / "two", rules, policies).files()
    assert first == second


def _shuffled_corpus_is_identical(
    rules: list[Any],
    policies: list[Any],
    release: Any,
    sources: Any,
    reorder: Callable[[list[Any]], list[Any]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = compile_dir(Path(tmp) / "base", rules, policies, release, sources).files()
        again = compile_dir(
            Path(tmp) / "shuffled", reorder(rules), reorder(policies), release, sources
        ).files()
    assert again == base


@pytest.mark.claim("projection-integrity.reproducible")
@settings(max_examples=30, deadline=None)
@given(st.randoms(use_true_random=False))
def test_reordered_shipped_corpus_gives_identical_bytes(rng: Any) -> None:
    def reorder(items: list[Any]) -> list[Any]:
        copied = copy.deepcopy(items)
        rng.shuffle(copied)
        for item in copied:  # key order inside records does not matter either
            keys = list(item)
            rng.shuffle(keys)
            item_copy = {k: item[k] for k in keys}
            item.clear()
            item.update(item_copy)
        return copied

    _shuffled_corpus_is_identical(SHIPPED_RULES, SHIPPED_POLICIES, SHIPPED_RELEASE, {}, reorder)


@settings(max_examples=20, deadline=None)
@given(st.permutations(range(3)), st.permutations(range(3)))
def test_reordered_small_corpus_gives_identical_bytes(
    rule_order: list[int], policy_order: list[int]
) -> None:
    rules, policies = small_corpus()
    rules[0]["corrections"] = [
        {"at": "2026-02-01", "summary": "second"},
        {"at": "2026-01-01", "summary": "first"},
    ]
    shuffled_rules = [copy.deepcopy(rules[i]) for i in rule_order]
    shuffled_policies = [copy.deepcopy(policies[i]) for i in policy_order]
    next(r for r in shuffled_rules if r["rule_id"] == rules[0]["rule_id"])["corrections"].reverse()
    with tempfile.TemporaryDirectory() as tmp:
        base = compile_dir(Path(tmp) / "a", rules, policies).files()
        again = compile_dir(Path(tmp) / "b", shuffled_rules, shuffled_policies).files()
    assert again == base


def test_order_of_required_roles_does_not_change_the_projection(tmp_path: Path) -> None:
    """Roles are a set (merged by union); their spelling order must not change the bytes."""
    rules = [make_rule("a")]

    def policy(roles: list[str]) -> list[dict[str, Any]]:
        return [
            make_policy(
                "ba.a",
                "a",
                effect="conditional",
                requirements={"approval_count": 1, "required_roles": roles},
            )
        ]

    one = compile_dir(tmp_path / "one", rules, policy(["licensed_attorney", "partner"])).files()
    two = compile_dir(tmp_path / "two", rules, policy(["partner", "licensed_attorney"])).files()
    assert one == two


def test_recipe_id_does_not_depend_on_the_corpus(tmp_path: Path) -> None:
    rules, policies = small_corpus()
    small = compile_dir(tmp_path / "small", rules, policies)
    shipped = compile_corpus(SHIPPED_CORPUS)
    assert small.recipe_id == shipped.recipe_id == RECIPE_ID
    assert small.enforcement.recipe_id == small.analysis.recipe_id == RECIPE_ID


# --- both projections from one source ----------------------------------------------


@pytest.mark.parametrize("source", ["shipped", "small"])
def test_projections_carry_the_same_rules_and_source_hashes(source: str, tmp_path: Path) -> None:
    if source == "shipped":
        compiled = compile_corpus(SHIPPED_CORPUS)
    else:
        compiled = compile_dir(tmp_path, *small_corpus())
    enforcement, analysis = compiled.enforcement, compiled.analysis
    pairs = [(r.rule_id, r.source_hash) for r in enforcement.rules]
    assert pairs == [(r.rule_id, r.source_hash) for r in analysis.rules]
    assert [r.rule_id for r in enforcement.rules] == sorted(r.rule_id for r in enforcement.rules)
    assert [(r.effective_from, r.effective_until, r.when) for r in enforcement.rules] == [
        (r.effective_from, r.effective_until, r.when) for r in analysis.rules
    ]
    assert (enforcement.release_id, enforcement.release_sequence) == (
        analysis.release_id,
        analysis.release_sequence,
    )
    assert enforcement.fact_registry_version == analysis.fact_registry_version
    assert enforcement.fact_registry_version == FACT_REGISTRY_VERSION
    index = json.loads(compiled.files()["index.json"])
    assert index["enforcement_projection_id"] == projection_id(enforcement)
    assert index["analysis_projection_id"] == projection_id(analysis)
    assert index["recipe_id"] == RECIPE_ID
    # and both decode with their schemas and load into the gate
    files = compiled.files()
    assert decode_enforcement(files["enforcement.json"]) == enforcement
    assert decode_analysis(files["analysis.json"]) == analysis
    build_policy_set(enforcement)


def test_analysis_projection_keeps_the_source_record(tmp_path: Path) -> None:
    rules, policies = small_corpus()
    rules[0]["corrections"] = [
        {"at": "2026-02-01", "summary": "second"},
        {"at": "2026-01-01", "summary": "first"},
    ]
    rules[0]["effective_until"] = "2027-01-01"
    compiled = compile_dir(tmp_path, rules, policies)
    rule = next(r for r in compiled.analysis.rules if r.rule_id == "urn:smf:rule:a")
    assert rule.citation.startswith(SYNTHETIC_PREFIX)
    assert rule.effective_from == 1_735_689_600  # 2025-01-01T00:00:00Z
    assert rule.effective_until == 1_798_761_600  # 2027-01-01T00:00:00Z
    assert [c.summary for c in rule.corrections] == ["first", "second"]
    assert [p.policy_id for p in compiled.enforcement.policies] == sorted(
        p["policy_id"] for p in policies
    )


def test_compiled_projection_is_the_one_its_bytes_describe(tmp_path: Path) -> None:
    """Corpus strings are NFC-normalized on load: the in-memory projection, its
    identity and the written file must all describe the same policy set.

    A decomposed tenant in a customer scope would otherwise never match an
    (NFC-normalized) envelope in memory, while the written file would.
    """
    rules = [
        make_rule(
            "nfc",
            {"eq": {"fact": "professional.matter_id", "value": "cafe\u0301"}},
            title="Cafe\u0301 rule",
        )
    ]
    policies = [
        make_policy(
            "customer.nfc", "nfc", layer="customer", scope={"tenant_id": "tenant-cafe\u0301"}
        )
    ]
    compiled = compile_dir(tmp_path / "corpus", rules, policies, sources={})
    files = compiled.files()
    assert decode_enforcement(files["enforcement.json"]) == compiled.enforcement
    assert decode_analysis(files["analysis.json"]) == compiled.analysis
    assert compiled.enforcement.policies[0].scope.tenant_id == "tenant-caf\u00e9"


# --- rejected before writing ------------------------------------------------------

Mutator = Callable[
    [list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], dict[str, bytes]], None
]


def _set(collection: str, index: int, **fields: Any) -> Mutator:
    def mutate(rules: Any, policies: Any, release: Any, sources: Any) -> None:
        target = {"rules": rules, "policies": policies}[collection][index]
        target.update(fields)

    return mutate


def _drop(collection: str, index: int, field: str) -> Mutator:
    def mutate(rules: Any, policies: Any, release: Any, sources: Any) -> None:
        {"rules": rules, "policies": policies}[collection][index].pop(field)

    return mutate


def _append(collection: str, item: dict[str, Any]) -> Mutator:
    def mutate(rules: Any, policies: Any, release: Any, sources: Any) -> None:
        {"rules": rules, "policies": policies}[collection].append(item)

    return mutate


def _release(**fields: Any) -> Mutator:
    def mutate(rules: Any, policies: Any, release: Any, sources: Any) -> None:
        release.update(fields)

    return mutate


def _source(path: str, data: bytes) -> Mutator:
    def mutate(rules: Any, policies: Any, release: Any, sources: Any) -> None:
        sources[path] = data

    return mutate


REJECTIONS = [
    pytest.param(
        _set("policies", 0, rule_id="urn:smf:rule:ghost"),
        ["policy ba.a", "unknown rule urn:smf:rule:ghost"],
        id="dangling-rule-id",
    ),
    pytest.param(
        _append("rules", make_rule("a", statement="Another.")),
        ["duplicate rule identity", "urn:smf:rule:a"],
        id="duplicate-rule-id",
    ),
    pytest.param(
        _append("policies", make_policy("floor.b", "a")),
        ["duplicate policy identity", "floor.b"],
        id="duplicate-policy-id",
    ),
    pytest.param(
        _set("rules", 0, effective_until="2025-01-01"),
        ["rule urn:smf:rule:a", "effective_until is not after"],
        id="until-equals-from",
    ),
    pytest.param(
        _set("rules", 0, effective_until="2024-12-31"),
        ["rule urn:smf:rule:a", "effective_until is not after"],
        id="until-before-from",
    ),
    pytest.param(
        _set("rules", 0, effective_from="2025-02-30"),
        ["rule urn:smf:rule:a", "not a calendar date"],
        id="invalid-date",
    ),
    pytest.param(
        _set("rules", 1, effective_until="2025-13-01"),
        ["rule urn:smf:rule:b", "not a calendar date"],
        id="invalid-until-date",
    ),
    pytest.param(
        _set("rules", 0, effective_from="2025-1-1"),
        ["rules.json", "effective_from"],
        id="date-shape",
    ),
    pytest.param(
        _set("rules", 0, effective_from="2025-01-01T00:00:00Z"),
        ["rules.json", "effective_from"],
        id="datetime-not-date",
    ),
    pytest.param(
        _set("rules", 1, when={"all": [{"eq": {"fact": "effects.egress", "value": 1}}]}),
        ["urn:smf:rule:b", "$.all[0].eq", "bool fact"],
        id="bad-predicate",
    ),
    pytest.param(
        _set("rules", 1, when={"eq": {"fact": "no.such", "value": "x"}}),
        ["urn:smf:rule:b", "$.eq", "unknown fact path"],
        id="bad-predicate-fact",
    ),
    pytest.param(
        _set("rules", 0, citation="SMF scenario rule"),
        ["rule urn:smf:rule:a", "Synthetic:"],
        id="synthetic-without-prefix",
    ),
    pytest.param(
        _set("rules", 0, citation="synthetic: lower case"),
        ["rule urn:smf:rule:a", "Synthetic:"],
        id="synthetic-prefix-case",
    ),
    pytest.param(
        _set("rules", 2, citation="Synthetic: Test Stat. s. 1"),
        ["rule urn:smf:rule:real", "Synthetic:"],
        id="real-with-synthetic-prefix",
    ),
    pytest.param(
        _set("rules", 0, snapshot="sources/test-stat-1.txt"),
        ["rule urn:smf:rule:a", "synthetic rule has no source snapshot"],
        id="synthetic-with-snapshot",
    ),
    pytest.param(
        _set("rules", 0, source_hash=statement_hash("Something else.")),
        ["rule urn:smf:rule:a", "source_hash does not match the statement"],
        id="source-hash-mismatch",
    ),
    pytest.param(
        _set("rules", 0, statement="Edited after hashing."),
        ["rule urn:smf:rule:a", "source_hash does not match the statement"],
        id="statement-edited",
    ),
    pytest.param(
        _drop("rules", 2, "snapshot"),
        ["rule urn:smf:rule:real", "needs a source snapshot"],
        id="real-without-snapshot",
    ),
    pytest.param(
        _set("rules", 2, source_hash=statement_hash(QUOTE)),
        ["rule urn:smf:rule:real", "does not match the snapshot"],
        id="snapshot-hash-mismatch",
    ),
    pytest.param(
        _source("sources/test-stat-1.txt", SNAPSHOT + b" tampered"),
        ["rule urn:smf:rule:real", "does not match the snapshot"],
        id="snapshot-tampered",
    ),
    pytest.param(
        _set("rules", 2, statement="The licensee may destroy records."),
        ["rule urn:smf:rule:real", "statement is not in the snapshot"],
        id="statement-not-in-snapshot",
    ),
    pytest.param(
        _set("rules", 2, snapshot="sources/missing.txt"),
        ["rule urn:smf:rule:real", "cannot read snapshot"],
        id="snapshot-missing",
    ),
    pytest.param(
        _set("rules", 2, snapshot="sources"),
        ["rule urn:smf:rule:real", "cannot read snapshot"],
        id="snapshot-is-a-directory",
    ),
    pytest.param(
        _set("rules", 2, snapshot="../outside.txt"),
        ["rule urn:smf:rule:real", "leaves the corpus"],
        id="snapshot-escapes-dotdot",
    ),
    pytest.param(
        _set("rules", 2, snapshot="sources/../../outside.txt"),
        ["rule urn:smf:rule:real", "leaves the corpus"],
        id="snapshot-escapes-nested",
    ),
    pytest.param(
        _set("rules", 2, snapshot="OUTSIDE_ABSOLUTE"),
        ["rule urn:smf:rule:real", "leaves the corpus"],
        id="snapshot-escapes-absolute",
    ),
    pytest.param(
        _set("rules", 2, snapshot="sources/link.txt"),
        ["rule urn:smf:rule:real", "leaves the corpus"],
        id="snapshot-escapes-symlink",
    ),
    pytest.param(
        _set("rules", 2, snapshot="."),
        ["rule urn:smf:rule:real", "leaves the corpus"],
        id="snapshot-is-the-corpus",
    ),
    pytest.param(
        _set("policies", 2, scope={}),
        ["policy customer.real", "layer customer", "tenant_id"],
        id="customer-no-tenant",
    ),
    pytest.param(
        _set("policies", 1, scope={"tenant_id": "tenant-acme"}),
        ["policy floor.b", "layer smf_safety_floor", "nothing"],
        id="floor-with-tenant",
    ),
    pytest.param(
        _set("policies", 0, scope={"tenant_id": "tenant-acme"}),
        ["policy ba.a", "layer binding_authority"],
        id="binding-with-tenant",
    ),
    pytest.param(
        _set("policies", 2, scope={"tenant_id": "t", "matter_id": "m"}),
        ["policy customer.real", "layer customer"],
        id="customer-with-matter",
    ),
    pytest.param(
        _set("policies", 2, layer="matter", scope={"tenant_id": "t"}),
        ["policy customer.real", "layer matter"],
        id="matter-without-matter-id",
    ),
    pytest.param(
        _set("policies", 2, layer="user", scope={"tenant_id": "t", "matter_id": "m"}),
        ["policy customer.real", "layer user"],
        id="user-without-actor",
    ),
    pytest.param(
        _set("policies", 1, requirements={"approval_count": 1}),
        ["policy floor.b", "deny policy carries no requirements"],
        id="deny-with-reqs",
    ),
    pytest.param(
        _set("policies", 1, requirements={"exact_action_binding": False}),
        ["policy floor.b", "deny policy carries no requirements"],
        id="deny-with-false",
    ),
    pytest.param(
        _set("rules", 0, surprise=True), ["rules.json", "surprise"], id="unknown-field-in-rule"
    ),
    pytest.param(
        _set("policies", 0, surprise=True),
        ["policies.json", "surprise"],
        id="unknown-field-in-policy",
    ),
    pytest.param(
        _release(surprise=True), ["release.json", "surprise"], id="unknown-field-in-release"
    ),
    pytest.param(
        _set("policies", 0, requirements={"approval_count": 1, "quorum": 2}),
        ["policies.json", "quorum"],
        id="unknown-requirement-field",
    ),
    pytest.param(
        _set("rules", 0, review={"reviewer": "x", "kind": "vibes", "reviewed_at": "d"}),
        ["rules.json", "kind"],
        id="unknown-review-kind",
    ),
    pytest.param(
        _release(release_sequence=0),
        ["release.json", "release_sequence"],
        id="release-sequence-zero",
    ),
    pytest.param(
        _release(release_id="Bad Release"), ["release.json", "release_id"], id="bad-release-id"
    ),
    pytest.param(
        _release(release_id="rel\n"),
        ["release.json", "release_id"],
        id="release-id-trailing-newline",
    ),
    pytest.param(_set("rules", 0, rule_id="rule-a"), ["rules.json", "rule_id"], id="bad-rule-id"),
    pytest.param(
        _append("rules", make_rule("urn:smf:rule:a\n")),
        ["rules.json", "rule_id"],
        id="rule-id-trailing-newline",
    ),
    pytest.param(
        _set("policies", 0, policy_id="ba.a\n"),
        ["policies.json", "policy_id"],
        id="policy-id-trailing-newline",
    ),
    pytest.param(
        _set(
            "policies",
            0,
            requirements={"approval_count": 1, "required_roles": ["licensed_attorney\n"]},
        ),
        ["policies.json", "required_roles"],
        id="role-trailing-newline",
    ),
    pytest.param(
        _set("policies", 0, requirements={"ttl_seconds": 601}),
        ["policies.json", "ttl_seconds"],
        id="ttl-above-600",
    ),
    pytest.param(
        _set("policies", 0, layer="tenant"), ["policies.json", "layer"], id="unknown-layer"
    ),
    pytest.param(
        _set("policies", 0, effect="permit"), ["policies.json", "effect"], id="unknown-effect"
    ),
    pytest.param(
        _set("rules", 0, source_hash="sha256:" + "A" * 64),
        ["rules.json", "source_hash"],
        id="source-hash-shape",
    ),
    pytest.param(
        _set("rules", 1, when={"eq": {"fact": "capability", "value": 1.5}}),
        ["rules.json", "float"],
        id="float-in-corpus",
    ),
    pytest.param(
        _release(detection_window_chars=16 * 1024 + 1),
        ["release.json", "detection_window_chars"],
        id="detection-window-too-large",
    ),
    pytest.param(
        _release(release_sequence=2**53), ["release.json", "I-JSON"], id="unsafe-integer-in-corpus"
    ),
]


def _prepare(tmp_path: Path, mutate: Mutator) -> tuple[Path, Path]:
    rules, policies = small_corpus()
    release = make_release()
    sources = dict(SOURCES)
    mutate(rules, policies, release, sources)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(SNAPSHOT)  # a valid snapshot, but outside the corpus
    corpus = tmp_path / "corpus"
    for rule in rules:
        if rule.get("snapshot") == "OUTSIDE_ABSOLUTE":
            rule["snapshot"] = str(outside)
    write_corpus(corpus, rules, policies, release, sources=sources)
    os.symlink(outside, corpus / "sources" / "link.txt")
    out = tmp_path / "out"
    out.mkdir()
    return corpus, out


@pytest.mark.claim("projection-integrity.rejected-before-writing")
@pytest.mark.parametrize(("mutate", "expected"), REJECTIONS)
def test_inconsistent_corpus_is_rejected_before_writing(
    mutate: Mutator, expected: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, out = _prepare(tmp_path, mutate)
    with pytest.raises(CompileError) as info:
        compile_corpus(corpus)
    for fragment in expected:
        assert fragment in str(info.value)
    # The command line path (compile, then write) leaves the output untouched.
    code = cli_compile(corpus, out)
    assert code != 0
    assert list(out.iterdir()) == []
    assert "compile failed" in capsys.readouterr().err


@pytest.mark.claim("model-gateway.split-markers-caught")
def test_the_detection_window_is_a_release_setting_with_a_default(tmp_path: Path) -> None:
    """``detection_window_chars`` in ``release.json`` reaches the enforcement projection
    and the policy set the gate decides with; a release without it keeps the bytes it
    had before the setting existed and reads with the default."""
    rules, policies = small_corpus()
    plain = compile_dir(tmp_path / "plain", rules, policies)
    assert b"detection_window_chars" not in plain.files()["enforcement.json"]
    assert build_policy_set(plain.enforcement).detection_window_chars == (
        DEFAULT_DETECTION_WINDOW_CHARS
    )
    rules, policies = small_corpus()
    release = make_release()
    release["detection_window_chars"] = 0
    none = compile_dir(tmp_path / "none", rules, policies, release)
    assert none.enforcement.detection_window_chars == 0
    assert build_policy_set(none.enforcement).detection_window_chars == 0


def test_unmodified_small_corpus_compiles(tmp_path: Path) -> None:
    """The base of every rejection case is itself valid (so each case tests one thing)."""
    corpus, out = _prepare(tmp_path, lambda *_: None)
    assert cli_compile(corpus, out) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "analysis.json",
        "enforcement.json",
        "index.json",
    ]


@pytest.mark.parametrize("missing", ["release.json", "rules.json", "policies.json"])
def test_missing_corpus_file_is_rejected(missing: str, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus", *small_corpus(), sources=SOURCES)
    (corpus / missing).unlink()
    with pytest.raises(CompileError, match=f"{missing}: cannot read"):
        compile_corpus(corpus)


def test_malformed_json_is_rejected(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus", *small_corpus(), sources=SOURCES)
    (corpus / "rules.json").write_text("[{")
    with pytest.raises(CompileError, match=r"rules\.json"):
        compile_corpus(corpus)


def test_real_authority_rule_with_matching_snapshot_compiles(tmp_path: Path) -> None:
    compiled = compile_dir(tmp_path, [real_rule()], [])
    rule = compiled.analysis.rules[0]
    assert rule.authority_type == "statute"
    assert rule.source_hash == "sha256:" + hashlib.sha256(SNAPSHOT).hexdigest()


def test_synthetic_source_hash_is_over_the_nfc_statement(tmp_path: Path) -> None:
    composed, decomposed = "Caf\u00e9 rule.", "Cafe\u0301 rule."
    over_nfc = "sha256:" + hashlib.sha256(composed.encode()).hexdigest()
    over_raw = "sha256:" + hashlib.sha256(decomposed.encode()).hexdigest()
    assert over_nfc != over_raw  # the two forms really hash apart
    rule = make_rule("nfc", statement=decomposed, source_hash=over_nfc)
    compiled = compile_dir(tmp_path / "nfc", [rule], [])
    assert [r.source_hash for r in compiled.analysis.rules] == [over_nfc]
    assert [r.source_hash for r in compiled.enforcement.rules] == [over_nfc]
    # The hash of the statement's bytes as written is not the source hash.
    wrong = make_rule("nfc", statement=decomposed, source_hash=over_raw)
    with pytest.raises(CompileError, match="source_hash does not match the statement"):
        compile_dir(tmp_path / "raw", [wrong], [])


# --- write_release -----------------------------------------------------------------


def test_write_release_writes_exactly_the_files(tmp_path: Path) -> None:
    compiled = compile_corpus(SHIPPED_CORPUS)
    written = write_release(compiled, tmp_path / "new" / "nested")
    files = compiled.files()
    assert sorted(written) == sorted(files)
    for name, path in written.items():
        assert path.read_bytes() == files[name]


def test_write_release_accepts_an_existing_empty_directory(tmp_path: Path) -> None:
    write_release(compile_corpus(SHIPPED_CORPUS), tmp_path)
    assert len(list(tmp_path.iterdir())) == 3


def test_write_release_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("someone else's file")
    with pytest.raises(CompileError, match="not empty"):
        write_release(compile_corpus(SHIPPED_CORPUS), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_write_release_refuses_to_overwrite_a_previous_release(tmp_path: Path) -> None:
    compiled = compile_corpus(SHIPPED_CORPUS)
    write_release(compiled, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(CompileError):
        write_release(compiled, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_cli_compile_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert cli_compile(SHIPPED_CORPUS, out, as_json=True) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["recipe_id"] == RECIPE_ID
    assert sorted(printed["files"]) == ["analysis.json", "enforcement.json", "index.json"]
