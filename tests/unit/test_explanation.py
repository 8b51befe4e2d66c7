"""Decisions explained in words: ``smf_assurance.core.explanation``.

From a Decision (what ``eval`` has) the explanation names exactly the applied
policies, their layers and rules in the release's words, where each
requirement came from, and for a safety-floor denial the trigger that fired.
From a ledger entry (disposition and reason codes only) it matches policies
by reason code, marks a code several policies carry as uncertain, narrows by
disposition and tenant, and lists every gap instead of guessing. It never
explains under another release. Real compiler, real evaluator, no mocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from smf_assurance.core.decision import (
    APPROVAL_REQUIREMENT_INCOMPLETE,
    NO_APPLICABLE_POLICY,
)
from smf_assurance.core.evaluator import consequential_triggers, evaluate, is_consequential
from smf_assurance.core.explanation import (
    GAP_APPLIED_FROM_REASONS,
    GAP_MATTER_ACTOR,
    GAP_REQUIREMENTS,
    GAP_SEVERAL_POLICIES,
    GAP_TENANT,
    GAP_TRIGGER,
    DecisionRecord,
    ExplanationError,
    explain,
    record_of,
)
from smf_assurance.core.projection import build_policy_set
from smf_assurance.governance.compiler import CompiledRelease, compile_corpus
from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.governance.scenarios_catalog import load_scenarios
from tests.support.builders import (
    AT_MS,
    CONSEQUENTIAL_TRIGGERS,
    make_envelope,
    make_policy,
    make_release,
    make_rule,
    write_corpus,
)

SHIPPED = compile_corpus(package_path(SCENARIO_CORPUS))
SHIPPED_SET = build_policy_set(SHIPPED.enforcement)

EXPECTED_POLICIES = {
    "1-court-filing-approval": [
        ("ba.transmission-attorney-approval", "binding_authority"),
        ("floor.confidential-external-egress", "smf_safety_floor"),
        ("customer.acme.transmission-window", "customer"),
    ],
    "2-legal-hold-deletion": [("floor.legal-hold", "smf_safety_floor")],
    "3-tainted-egress": [
        ("ba.transmission-attorney-approval", "binding_authority"),
        ("floor.confidential-external-egress", "smf_safety_floor"),
        ("floor.injection-taint-egress", "smf_safety_floor"),
        ("customer.acme.transmission-window", "customer"),
    ],
    "4-uncovered-consequential": [],
}
"""What each shipped scenario's decision rests on
(smf_assurance/governance/corpus/scenarios/policies.json)."""


def ledger_record(decision: Any) -> DecisionRecord:
    """What the ledger keeps of a decision: no applied policies, no effects."""
    return DecisionRecord(
        decision_id=decision.decision_id,
        projection_id=decision.projection_id,
        disposition=decision.disposition,
        reason_codes=decision.reason_codes,
    )


def compiled(tmp_path: Path, policies: list[dict[str, Any]], **rules: Any) -> CompiledRelease:
    rule_records = [make_rule(name, when) for name, when in rules.items()] or [make_rule("r")]
    return compile_corpus(write_corpus(tmp_path / "corpus", rule_records, policies))


@pytest.mark.parametrize("scenario", load_scenarios(), ids=lambda s: s.name)
def test_each_shipped_scenario_names_its_policies_layers_and_rules(scenario: Any) -> None:
    decision = evaluate(scenario.envelope, SHIPPED_SET, at_ms=AT_MS)
    triggers = consequential_triggers(scenario.envelope)
    x = explain(record_of(decision, triggers), SHIPPED.enforcement, SHIPPED.analysis)
    assert [(p.policy_id, p.layer) for p in x.policies] == EXPECTED_POLICIES[scenario.name]
    assert all(p.certain for p in x.policies)
    rules = {r.rule_id: r for r in SHIPPED.analysis.rules}
    for policy in x.policies:
        words = rules[policy.rule.rule_id]
        assert (policy.rule.title, policy.rule.statement, policy.rule.citation) == (
            words.title,
            words.statement,
            words.citation,
        )
    assert x.basis == "decision"
    assert x.gaps == ()
    assert (x.release_id, x.projection_id) == (decision.release_id, decision.projection_id)
    # From what the ledger keeps, the same policies (every code here names one policy).
    kept = explain(ledger_record(decision), SHIPPED.enforcement, SHIPPED.analysis)
    assert sorted(p.policy_id for p in kept.policies) == sorted(
        p for p, _ in EXPECTED_POLICIES[scenario.name]
    )


def test_the_floor_denial_names_the_trigger_that_made_it_consequential() -> None:
    (floor,) = [s for s in load_scenarios() if s.name == "4-uncovered-consequential"]
    decision = evaluate(floor.envelope, SHIPPED_SET, at_ms=AT_MS)
    x = explain(
        record_of(decision, consequential_triggers(floor.envelope)),
        SHIPPED.enforcement,
        SHIPPED.analysis,
    )
    assert x.safety_floor is not None
    assert (x.safety_floor.reason_code, x.safety_floor.consequential) == (
        NO_APPLICABLE_POLICY,
        True,
    )
    assert x.safety_floor.triggers == ("reversibility_none",)
    assert x.policies == ()
    assert x.requirements == ()
    assert x.other_reasons == ()
    # The ledger keeps no effects: the trigger is a gap, not a guess.
    kept = explain(ledger_record(decision), SHIPPED.enforcement, SHIPPED.analysis)
    assert kept.safety_floor is not None
    assert kept.safety_floor.triggers is None
    assert kept.gaps == (GAP_TRIGGER,)


@pytest.mark.parametrize("name", sorted(CONSEQUENTIAL_TRIGGERS))
def test_each_trigger_alone_is_named_and_agrees_with_is_consequential(name: str) -> None:
    envelope = make_envelope(CONSEQUENTIAL_TRIGGERS[name])
    triggers = consequential_triggers(envelope)
    assert len(triggers) == 1
    assert is_consequential(envelope)
    decision = evaluate(envelope, build_policy_set(SHIPPED.enforcement), at_ms=AT_MS)
    x = explain(record_of(decision, triggers), SHIPPED.enforcement, SHIPPED.analysis)
    if x.safety_floor is not None:
        assert x.safety_floor.triggers == triggers


def test_a_non_consequential_operation_has_no_trigger_and_is_allowed_by_default(
    tmp_path: Path,
) -> None:
    envelope = make_envelope()
    assert consequential_triggers(envelope) == ()
    assert not is_consequential(envelope)
    release = compiled(tmp_path, [])
    decision = evaluate(envelope, build_policy_set(release.enforcement), at_ms=AT_MS)
    x = explain(record_of(decision, ()), release.enforcement, release.analysis)
    assert x.safety_floor is not None
    assert (x.safety_floor.consequential, x.safety_floor.triggers) == (False, ())
    assert explain(ledger_record(decision), release.enforcement, release.analysis).policies == ()


def test_each_requirement_names_the_layer_it_came_from(tmp_path: Path) -> None:
    """Max count, union of roles, min TTL, any true flag: the row that set the
    merged value is ``decisive``; a looser ask is listed but not kept."""
    release = compiled(
        tmp_path,
        [
            make_policy(
                "ba.send",
                "r",
                effect="conditional",
                requirements={
                    "approval_count": 1,
                    "required_roles": ["partner"],
                    "ttl_seconds": 600,
                },
            ),
            make_policy(
                "customer.send",
                "r",
                layer="customer",
                effect="conditional",
                requirements={"approval_count": 2, "ttl_seconds": 120, "one_shot": True},
            ),
        ],
    )
    decision = evaluate(make_envelope(), build_policy_set(release.enforcement), at_ms=AT_MS)
    assert decision.disposition == "conditional"
    x = explain(record_of(decision), release.enforcement, release.analysis)
    rows = {(r.requirement, r.value, r.layer): r.decisive for r in x.requirements}
    assert rows == {
        ("approval_count", 1, "binding_authority"): False,
        ("approval_count", 2, "customer"): True,
        ("required_roles", "partner", "binding_authority"): True,
        ("ttl_seconds", 600, "binding_authority"): False,
        ("ttl_seconds", 120, "customer"): True,
        ("one_shot", True, "customer"): True,
    }
    assert (decision.requirements.approval_count, decision.requirements.ttl_seconds) == (2, 120)
    kept = explain(ledger_record(decision), release.enforcement, release.analysis)
    assert GAP_REQUIREMENTS in kept.gaps
    assert GAP_APPLIED_FROM_REASONS in kept.gaps


def test_a_reason_code_several_policies_carry_is_marked_uncertain(tmp_path: Path) -> None:
    """Two tenants' overlays share a reason code: without the tenant the ledger
    cannot tell them apart; with it the other tenant's policy is ruled out."""
    release = compiled(
        tmp_path,
        [
            make_policy("customer.acme.block", "r", layer="customer", reason_code="blocked"),
            make_policy(
                "customer.beta.block",
                "r",
                layer="customer",
                reason_code="blocked",
                scope={"tenant_id": "tenant-beta"},
            ),
        ],
    )
    decision = evaluate(make_envelope(), build_policy_set(release.enforcement), at_ms=AT_MS)
    assert [p.policy_id for p in decision.applied_policies] == ["customer.acme.block"]
    record = ledger_record(decision)
    blind = explain(record, release.enforcement, release.analysis)
    assert [(p.policy_id, p.certain) for p in blind.policies] == [
        ("customer.acme.block", False),
        ("customer.beta.block", False),
    ]
    assert GAP_SEVERAL_POLICIES in blind.gaps
    assert GAP_TENANT in blind.gaps
    sighted = explain(
        record, release.enforcement, release.analysis, in_tenant=lambda t: t == "tenant-acme"
    )
    assert [(p.policy_id, p.certain) for p in sighted.policies] == [("customer.acme.block", True)]
    assert GAP_SEVERAL_POLICIES not in sighted.gaps
    assert GAP_TENANT not in sighted.gaps


def test_the_disposition_rules_out_policies_it_could_not_have_come_from(tmp_path: Path) -> None:
    """An allowed decision cannot rest on a deny policy carrying the same code."""
    release = compiled(
        tmp_path,
        [
            make_policy("ba.ok", "r", effect="allow", reason_code="shared"),
            make_policy("ba.no", "never", effect="deny", reason_code="shared"),
        ],
        r=None,
        never={"eq": {"fact": "capability", "value": "unknown"}},
    )
    decision = evaluate(make_envelope(), build_policy_set(release.enforcement), at_ms=AT_MS)
    assert decision.disposition == "allow"
    x = explain(ledger_record(decision), release.enforcement, release.analysis)
    assert [(p.policy_id, p.certain) for p in x.policies] == [("ba.ok", True)]


def test_matter_and_actor_scopes_are_a_stated_gap(tmp_path: Path) -> None:
    release = compiled(tmp_path, [make_policy("matter.block", "r", layer="matter")])
    decision = evaluate(make_envelope(), build_policy_set(release.enforcement), at_ms=AT_MS)
    x = explain(ledger_record(decision), release.enforcement, release.analysis)
    assert [p.policy_id for p in x.policies] == ["matter.block"]
    assert GAP_MATTER_ACTOR in x.gaps


def test_an_incomplete_conditional_is_explained_by_the_gates_own_reason(tmp_path: Path) -> None:
    release = compiled(tmp_path, [make_policy("ba.hold", "r", effect="conditional")])
    decision = evaluate(make_envelope(), build_policy_set(release.enforcement), at_ms=AT_MS)
    assert decision.reason_codes[0] == APPROVAL_REQUIREMENT_INCOMPLETE
    x = explain(record_of(decision), release.enforcement, release.analysis)
    assert x.other_reasons == (APPROVAL_REQUIREMENT_INCOMPLETE,)
    assert [p.policy_id for p in x.policies] == ["ba.hold"]
    assert x.requirements == ()


def test_a_decision_is_never_explained_under_another_release(tmp_path: Path) -> None:
    decision = evaluate(make_envelope(), SHIPPED_SET, at_ms=AT_MS)
    other = compile_corpus(
        write_corpus(tmp_path / "other", [make_rule("r")], [], make_release("other"))
    )
    with pytest.raises(ExplanationError, match="was made under projection"):
        explain(record_of(decision), other.enforcement, other.analysis)
    with pytest.raises(ExplanationError, match="analysis projection is of release other"):
        explain(record_of(decision), SHIPPED.enforcement, other.analysis)


def test_a_policy_or_rule_the_release_lacks_is_refused(tmp_path: Path) -> None:
    envelope = make_envelope()
    release = compiled(tmp_path, [make_policy("ba.block", "r")])
    decision = evaluate(envelope, build_policy_set(release.enforcement), at_ms=AT_MS)
    empty_analysis = type(release.analysis)(
        schema=release.analysis.schema,
        release_id=release.analysis.release_id,
        release_sequence=release.analysis.release_sequence,
        fact_registry_version=release.analysis.fact_registry_version,
        recipe_id=release.analysis.recipe_id,
        rules=(),
    )
    with pytest.raises(ExplanationError, match="not in the analysis projection"):
        explain(record_of(decision), release.enforcement, empty_analysis)
    forged = DecisionRecord(
        decision_id=decision.decision_id,
        projection_id=decision.projection_id,
        disposition="deny",
        reason_codes=decision.reason_codes,
        applied=(
            type(decision.applied_policies[0])(
                policy_id="ba.elsewhere",
                layer="binding_authority",
                rule_id="urn:smf:rule:r",
                effect="deny",
                reason_code="x",
            ),
        ),
    )
    with pytest.raises(ExplanationError, match=r"ba\.elsewhere is not in this release"):
        explain(forged, release.enforcement, release.analysis)
