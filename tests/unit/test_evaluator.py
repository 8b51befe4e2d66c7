"""The evaluator (smf_assurance/core/evaluator.py) and the projections it reads
(smf_assurance/core/projection.py).

Properties: the four governed scenarios give exactly the decisions the scenarios
name; every consequential trigger alone, uncovered, is denied by the safety
floor, and a non-consequential operation is allowed by default; a
conditional that names no approver fails closed; rules bind only inside
``[effective_from, effective_until)``; a decision is a pure function of
(envelope, policy set, time); a projection for another fact registry, or
with a dangling rule, is refused; the decision names the release and
projection it came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest

from smf_assurance.core.decision import (
    APPROVAL_REQUIREMENT_INCOMPLETE,
    NO_APPLICABLE_POLICY,
    NON_CONSEQUENTIAL_DEFAULT,
    Decision,
)
from smf_assurance.core.evaluator import (
    applicable_policies,
    consequential_triggers,
    evaluate,
    is_consequential,
)
from smf_assurance.core.facts import FACT_REGISTRY_VERSION
from smf_assurance.core.policy import NO_REQUIREMENTS
from smf_assurance.core.projection import (
    NOT_CONFINED,
    PolicyRecord,
    PolicySet,
    ProjectionError,
    build_policy_set,
    decode_analysis,
    decode_enforcement,
    projection_bytes,
    projection_id,
)
from smf_assurance.governance.projections import SCENARIO_PROJECTION, load_policy_set, package_path
from smf_assurance.governance.scenarios_catalog import Scenario, load_scenarios
from smf_assurance.subjects.canonical import SAFE_INTEGER_MAX
from smf_assurance.subjects.envelope import operation_hash
from tests.support.builders import (
    ALWAYS,
    AT_MS,
    CONSEQUENTIAL_TRIGGERS,
    enforcement_projection,
    make_envelope,
    make_policy,
    make_release,
    make_rule,
    policy_set_from,
)

CORPUS = (
    Path(__file__).resolve().parents[2] / "smf_assurance" / "governance" / "corpus" / "scenarios"
)
SHIPPED = load_policy_set()
SCENARIOS = {s.name: s for s in load_scenarios()}
CORPUS_RULES = {r["rule_id"]: r for r in json.loads((CORPUS / "rules.json").read_text())}
EMPTY = policy_set_from([], [])


def run(name: str, at_ms: int = AT_MS) -> Decision:
    return evaluate(SCENARIOS[name].envelope, SHIPPED, at_ms=at_ms)


def _assert_sources_match_corpus(decision: Decision) -> None:
    assert decision.rule_ids == tuple(sorted(decision.rule_ids))
    assert [s.rule_id for s in decision.rule_sources] == list(decision.rule_ids)
    for source in decision.rule_sources:
        assert source.source_hash == CORPUS_RULES[source.rule_id]["source_hash"]


# --- the four governed scenarios --------------------------------------------------


def test_four_scenarios_are_shipped() -> None:
    assert sorted(SCENARIOS) == [
        "1-court-filing-approval",
        "2-legal-hold-deletion",
        "3-tainted-egress",
        "4-uncovered-consequential",
    ]


def test_privileged_court_transmission_by_paralegal_needs_attorney_approval() -> None:
    scenario = SCENARIOS["1-court-filing-approval"]
    env = scenario.envelope
    assert env.data.classification == "privileged"
    assert env.professional.actor_roles == ("paralegal",)
    assert env.destination.channel == "electronic_filing"
    decision = run("1-court-filing-approval")
    assert decision.disposition == "conditional"
    assert decision.requirements.required_roles == ("licensed_attorney",)
    assert decision.requirements.approval_count == 1
    assert decision.requirements.exact_action_binding is True
    assert decision.requirements.one_shot is True
    assert decision.requirements.ttl_seconds == 300  # the customer overlay's shorter TTL
    assert decision.reason_codes[0] == "attorney_approval_required_for_transmission"
    assert "customer_transmission_review_window" in decision.reason_codes
    assert {p.policy_id for p in decision.applied_policies} >= {
        "ba.transmission-attorney-approval",
        "customer.acme.transmission-window",
    }
    assert "urn:smf:rule:scenario:attorney-approval-transmission" in decision.rule_ids
    _assert_sources_match_corpus(decision)


def test_deletion_under_legal_hold_is_denied() -> None:
    decision = run("2-legal-hold-deletion")
    assert decision.disposition == "deny"
    assert decision.reason_codes[0] == "legal_hold_blocks_deletion"
    assert decision.requirements == NO_REQUIREMENTS
    assert decision.rule_ids == ("urn:smf:rule:scenario:legal-hold-preservation",)
    _assert_sources_match_corpus(decision)


def test_injection_tainted_external_egress_is_denied() -> None:
    decision = run("3-tainted-egress")
    assert decision.disposition == "deny"
    assert decision.reason_codes[0] == "injection_tainted_egress"
    assert decision.requirements == NO_REQUIREMENTS
    assert "urn:smf:rule:scenario:injection-taint-egress" in decision.rule_ids
    _assert_sources_match_corpus(decision)


def test_uncovered_consequential_operation_is_denied_by_the_floor() -> None:
    decision = run("4-uncovered-consequential")
    assert decision.disposition == "deny"
    assert decision.reason_codes == (NO_APPLICABLE_POLICY,)
    assert NO_APPLICABLE_POLICY == "no_applicable_policy_for_consequential_operation"
    assert decision.consequential is True
    assert decision.rule_ids == ()
    assert decision.applied_policies == ()
    assert decision.requirements == NO_REQUIREMENTS


@pytest.mark.parametrize("scenario", sorted(SCENARIOS), ids=str)
def test_scenarios_match_expected_json(scenario: str) -> None:
    expected = SCENARIOS[scenario].expected
    decision = run(scenario)
    assert decision.disposition == expected.disposition
    assert decision.reason_codes[0] == expected.reason
    assert isinstance(SCENARIOS[scenario], Scenario)


def test_uncovered_scenario_stays_denied_when_only_the_tenant_changes() -> None:
    """The acme customer allowances do not leak to another tenant's legal-hold-free delete."""
    delete = make_envelope(
        {
            "capability": "document.delete",
            "destination.channel": "dms",
            "effects.reversibility": "none",
            "effects.persistence": "local",
        }
    )
    assert evaluate(delete, SHIPPED, at_ms=AT_MS).disposition == "allow"
    other = make_envelope(
        {
            "capability": "document.delete",
            "destination.channel": "dms",
            "effects.reversibility": "none",
            "effects.persistence": "local",
            "professional.tenant_id": "tenant-other",
        }
    )
    decision = evaluate(other, SHIPPED, at_ms=AT_MS)
    assert decision.disposition == "deny"
    assert decision.reason_codes == (NO_APPLICABLE_POLICY,)


# --- the safety floor's default -----------------------------------------------------


@pytest.mark.parametrize("trigger", sorted(CONSEQUENTIAL_TRIGGERS))
def test_each_consequential_trigger_alone_is_denied_without_policy(trigger: str) -> None:
    envelope = make_envelope(CONSEQUENTIAL_TRIGGERS[trigger])
    assert is_consequential(envelope)
    decision = evaluate(envelope, EMPTY, at_ms=AT_MS)
    assert decision.disposition == "deny"
    assert decision.reason_codes == (NO_APPLICABLE_POLICY,)
    assert decision.consequential is True
    assert decision.requirements == NO_REQUIREMENTS


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"effects.persistence": "local"},
        {"effects.persistence": "none", "effects.reversibility": "full"},
        {"capability": "process.execute", "effects.persistence": "local"},
        {"destination.locality": "external"},
        {"data.classification": "unknown", "data.injection_taint": "unknown"},
    ],
)
def test_non_consequential_without_policy_is_allowed(overrides: dict[str, Any]) -> None:
    envelope = make_envelope(overrides)
    assert not is_consequential(envelope)
    decision = evaluate(envelope, EMPTY, at_ms=AT_MS)
    assert decision.disposition == "allow"
    assert decision.reason_codes == (NON_CONSEQUENTIAL_DEFAULT,)
    assert decision.consequential is False


def test_policies_that_do_not_match_leave_the_default_in_charge() -> None:
    rules = [make_rule("never", {"eq": {"fact": "capability", "value": "schedule.create"}})]
    ps = policy_set_from(rules, [make_policy("allow.never", "never", effect="allow")])
    egress = make_envelope({"effects.egress": True})
    assert evaluate(egress, ps, at_ms=AT_MS).reason_codes == (NO_APPLICABLE_POLICY,)


# --- conditional must be satisfiable ---------------------------------------------------


@pytest.mark.parametrize(
    "requirements",
    [
        None,
        {"approval_count": 1},
        {"required_roles": ["licensed_attorney"]},
        {"approval_count": 0, "required_roles": ["licensed_attorney"]},
        {"exact_action_binding": True, "one_shot": True, "ttl_seconds": 60},
    ],
)
def test_conditional_without_approver_fails_closed(requirements: dict[str, Any] | None) -> None:
    ps = policy_set_from(
        [make_rule("r")],
        [
            make_policy(
                "c",
                "r",
                effect="conditional",
                reason_code="needs_review",
                requirements=requirements,
            )
        ],
    )
    for envelope in (make_envelope(), make_envelope({"effects.egress": True})):
        decision = evaluate(envelope, ps, at_ms=AT_MS)
        assert decision.disposition == "deny"
        assert decision.reason_codes == (APPROVAL_REQUIREMENT_INCOMPLETE, "needs_review")
        assert decision.requirements == NO_REQUIREMENTS


def test_an_incomplete_conditional_names_why_first() -> None:
    """The denial's first reason is that the approval requirement is incomplete,
    ahead of every reason the policies themselves gave."""
    ps = policy_set_from(
        [make_rule("r")],
        [
            make_policy("c1", "r", effect="conditional", reason_code="needs_review"),
            make_policy("c2", "r", layer="customer", effect="conditional", reason_code="second"),
        ],
    )
    decision = evaluate(make_envelope(), ps, at_ms=AT_MS)
    assert decision.disposition == "deny"
    assert decision.reason_codes == (APPROVAL_REQUIREMENT_INCOMPLETE, "needs_review", "second")


def test_allow_and_conditional_reasons_are_ordered_by_severity_and_deduplicated() -> None:
    ps = policy_set_from(
        [make_rule("r")],
        [
            make_policy(
                "a.allow", "r", layer="binding_authority", effect="allow", reason_code="same"
            ),
            make_policy(
                "b.cond",
                "r",
                layer="user",
                effect="conditional",
                reason_code="cond",
                requirements={"approval_count": 1, "required_roles": ["partner"]},
            ),
            make_policy("c.allow", "r", layer="matter", effect="allow", reason_code="same"),
        ],
    )
    decision = evaluate(make_envelope(), ps, at_ms=AT_MS)
    assert decision.disposition == "conditional"
    assert decision.reason_codes == ("cond", "same")
    assert [p.policy_id for p in decision.applied_policies] == ["a.allow", "c.allow", "b.cond"]


# --- effective interval -------------------------------------------------------------

FROM_S = 1_767_225_600  # 2026-01-01T00:00:00Z
UNTIL_S = 1_798_761_600  # 2027-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("at_ms", "applies"),
    [
        (FROM_S * 1000 - 1, False),
        (FROM_S * 1000, True),
        (FROM_S * 1000 + 999, True),
        (UNTIL_S * 1000 - 1, True),
        (UNTIL_S * 1000, False),
        (UNTIL_S * 1000 + 1, False),
        (0, False),
    ],
)
def test_rule_binds_only_inside_its_effective_interval(at_ms: int, applies: bool) -> None:
    rules = [make_rule("dated", ALWAYS, effective_from=FROM_S, effective_until=UNTIL_S)]
    ps = policy_set_from(rules, [make_policy("deny.dated", "dated", reason_code="dated_rule")])
    envelope = make_envelope({"effects.egress": True})
    decision = evaluate(envelope, ps, at_ms=at_ms)
    assert bool(applicable_policies(envelope, ps, at_ms)) is applies  # the same clock reading
    if applies:
        assert decision.reason_codes == ("dated_rule",)
    else:
        assert decision.reason_codes == (NO_APPLICABLE_POLICY,)
        assert decision.applied_policies == ()


def test_open_ended_rule_applies_far_in_the_future() -> None:
    ps = policy_set_from([make_rule("open")], [make_policy("deny.open", "open")])
    assert evaluate(make_envelope(), ps, at_ms=SAFE_INTEGER_MAX).disposition == "deny"


@pytest.mark.parametrize("at_ms", [-1, SAFE_INTEGER_MAX + 1])
def test_time_outside_the_representable_range_is_refused(at_ms: int) -> None:
    with pytest.raises(ValueError, match="representable"):
        evaluate(make_envelope(), EMPTY, at_ms=at_ms)


# --- determinism and identities ----------------------------------------------------


def test_same_input_gives_identical_bytes() -> None:
    for name, scenario in SCENARIOS.items():
        fresh = load_policy_set()  # cold outcome cache
        first = msgspec.json.encode(evaluate(scenario.envelope, fresh, at_ms=AT_MS))
        second = msgspec.json.encode(evaluate(scenario.envelope, fresh, at_ms=AT_MS))
        third = msgspec.json.encode(run(name))  # warm, shared policy set
        assert first == second == third


def test_outcome_cache_never_mixes_operations() -> None:
    names = sorted(SCENARIOS)
    expected = {
        n: msgspec.json.encode(evaluate(SCENARIOS[n].envelope, load_policy_set(), at_ms=AT_MS))
        for n in names
    }
    shared = load_policy_set()
    for n in names + names[::-1] + names:
        assert (
            msgspec.json.encode(evaluate(SCENARIOS[n].envelope, shared, at_ms=AT_MS))
            == (expected[n])
        )


def test_full_outcome_cache_still_decides_correctly() -> None:
    ps = load_policy_set()
    ps.outcomes.update({("filler", i): None for i in range(4096)})
    decision = evaluate(SCENARIOS["2-legal-hold-deletion"].envelope, ps, at_ms=AT_MS)
    assert decision.reason_codes[0] == "legal_hold_blocks_deletion"
    assert len(ps.outcomes) == 4096


def test_different_time_gives_a_different_decision_id() -> None:
    a = run("1-court-filing-approval", AT_MS)
    b = run("1-court-filing-approval", AT_MS + 1)
    assert a.decision_id != b.decision_id
    assert (a.evaluated_at_ms, b.evaluated_at_ms) == (AT_MS, AT_MS + 1)
    assert a.operation_hash == b.operation_hash
    assert a.policy_fingerprint == b.policy_fingerprint


def test_different_operation_gives_a_different_operation_hash() -> None:
    base = make_envelope()
    other = make_envelope({"professional.matter_id": "matter-2026-0043"})
    a = evaluate(base, EMPTY, at_ms=AT_MS)
    b = evaluate(other, EMPTY, at_ms=AT_MS)
    assert a.operation_hash == operation_hash(base)
    assert a.operation_hash != b.operation_hash
    assert a.operation_id != b.operation_id
    assert a.decision_id != b.decision_id


def test_operation_id_and_hash_can_be_supplied() -> None:
    envelope = make_envelope()
    default = evaluate(envelope, EMPTY, at_ms=AT_MS)
    assert default.operation_id == "op-" + operation_hash(envelope)[7:39]
    given_id = evaluate(
        envelope, EMPTY, at_ms=AT_MS, operation_id="op-custom", op_hash=operation_hash(envelope)
    )
    assert given_id.operation_id == "op-custom"
    assert given_id.operation_hash == default.operation_hash
    assert given_id.decision_id != default.decision_id


def test_policy_fingerprint_follows_the_applied_policies() -> None:
    a = run("2-legal-hold-deletion")
    b = run("3-tainted-egress")
    c = run("4-uncovered-consequential")
    assert len({a.policy_fingerprint, b.policy_fingerprint, c.policy_fingerprint}) == 3


def test_decision_is_frozen() -> None:
    decision = run("2-legal-hold-deletion")
    with pytest.raises(AttributeError):
        decision.disposition = "allow"  # type: ignore[misc]


# --- release and projection identity ------------------------------------------------


def test_decision_names_release_sequence_and_projection() -> None:
    index = json.loads((package_path(SCENARIO_PROJECTION) / "index.json").read_text())
    decision = run("1-court-filing-approval")
    assert decision.schema == "smf.decision/1"
    assert decision.release_id == index["release_id"] == "smf-scenarios-2026.11"
    assert decision.release_sequence == index["release_sequence"] == 1
    assert decision.projection_id == index["enforcement_projection_id"] == SHIPPED.projection_id


def test_custom_release_is_named_in_the_decision() -> None:
    projection = enforcement_projection(
        [make_rule("r")], [make_policy("p", "r")], make_release("rel-7", 7)
    )
    ps = build_policy_set(projection)
    decision = evaluate(make_envelope(), ps, at_ms=AT_MS)
    assert (decision.release_id, decision.release_sequence) == ("rel-7", 7)
    assert decision.projection_id == projection_id(projection)


def test_fact_registry_version_mismatch_is_refused() -> None:
    stale: str = "smf.facts/0"  # plain str: FACT_REGISTRY_VERSION is a Final literal
    projection = msgspec.structs.replace(
        enforcement_projection([make_rule("r")], [make_policy("p", "r")]),
        fact_registry_version=stale,
    )
    with pytest.raises(ProjectionError, match="fact registry"):
        build_policy_set(projection)
    assert stale != FACT_REGISTRY_VERSION


def test_fact_registry_version_mismatch_in_a_projection_file_is_refused(tmp_path: Path) -> None:
    document = json.loads((package_path(SCENARIO_PROJECTION) / "enforcement.json").read_bytes())
    document["fact_registry_version"] = "smf.facts/2"
    (tmp_path / "enforcement.json").write_text(json.dumps(document))
    with pytest.raises(ProjectionError, match=r"smf\.facts/2"):
        load_policy_set(tmp_path)


def test_dangling_rule_in_a_projection_is_refused() -> None:
    projection = enforcement_projection([make_rule("r")], [make_policy("p", "missing")])
    with pytest.raises(ProjectionError, match="unknown rule urn:smf:rule:missing"):
        build_policy_set(projection)


def test_bad_predicate_in_a_projection_is_refused() -> None:
    projection = enforcement_projection(
        [make_rule("r", {"eq": {"fact": "nope", "value": "x"}})], []
    )
    with pytest.raises(ValueError, match="urn:smf:rule:r"):
        build_policy_set(projection)


@pytest.mark.parametrize("data", [b"", b"{}", b"[]", b'{"schema": "smf.enforcement-projection/9"}'])
def test_malformed_projections_are_refused(data: bytes) -> None:
    with pytest.raises(ProjectionError):
        decode_enforcement(data)
    with pytest.raises(ProjectionError):
        decode_analysis(data)


def test_missing_projection_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProjectionError, match="cannot read"):
        load_policy_set(tmp_path / "absent")


def test_shipped_projection_round_trips_through_its_schema() -> None:
    folder = package_path(SCENARIO_PROJECTION)
    raw = (folder / "enforcement.json").read_bytes()
    assert projection_bytes(decode_enforcement(raw)) == raw
    analysis = (folder / "analysis.json").read_bytes()
    assert projection_bytes(decode_analysis(analysis)) == analysis


# --- applicable policies ----------------------------------------------------------------


def test_applicable_policies_are_strongest_first() -> None:
    ps = policy_set_from(
        [make_rule("r")],
        [
            make_policy("u", "r", layer="user", effect="allow"),
            make_policy("f", "r", layer="smf_safety_floor", effect="allow"),
            make_policy("c", "r", layer="customer", effect="allow"),
            make_policy("b", "r", layer="binding_authority", effect="allow"),
            make_policy("m", "r", layer="matter", effect="allow"),
        ],
    )
    found = applicable_policies(make_envelope(), ps, AT_MS)
    assert [p.record.policy_id for p in found] == ["b", "f", "c", "m", "u"]
    assert applicable_policies(make_envelope({"professional.tenant_id": "x"}), ps, AT_MS) == [
        p for p in found if p.record.layer in ("binding_authority", "smf_safety_floor")
    ]
    assert applicable_policies(make_envelope(), ps, 0) == []


# --- what made an operation consequential, in words ---------------------------------

TRIGGER_WORDS: Final = {
    "egress": "egress",
    "external_persistent": "persistence_external_persistent",
    "unknown_persistence": "persistence_unknown",
    "limited_reversibility": "reversibility_limited",
    "no_reversibility": "reversibility_none",
    "unknown_reversibility": "reversibility_unknown",
    "unknown_capability": "capability_unknown",
}


@pytest.mark.parametrize("trigger", sorted(CONSEQUENTIAL_TRIGGERS))
def test_a_floor_denial_is_explained_by_exactly_its_trigger(trigger: str) -> None:
    """``consequential_triggers`` explains a safety-floor denial (``smf eval-many``): it
    names the one condition that made the operation consequential, and only it."""
    envelope = make_envelope(CONSEQUENTIAL_TRIGGERS[trigger])
    assert consequential_triggers(envelope) == (TRIGGER_WORDS[trigger],)


def test_an_operation_with_every_trigger_names_them_all_and_one_with_none_names_none() -> None:
    every = make_envelope(
        {
            "effects.egress": True,
            "effects.persistence": "external_persistent",
            "effects.reversibility": "none",
            "capability": "unknown",
        }
    )
    assert consequential_triggers(every) == (
        "egress",
        "persistence_external_persistent",
        "reversibility_none",
        "capability_unknown",
    )
    assert consequential_triggers(make_envelope({})) == ()
    assert not is_consequential(make_envelope({}))


# --- a release's confinement policies -------------------------------------------------


def _confinement_set(*, others_deny: bool = False) -> PolicySet:
    """A release that allows everything, or denies it, and requires confinement."""
    policy = make_policy("p.all", "all", effect="deny" if others_deny else "allow")
    projection = enforcement_projection([make_rule("all", ALWAYS)], [policy])
    confinement = make_policy("p.confined", "all", effect="deny", reason_code=NOT_CONFINED)
    return build_policy_set(
        msgspec.structs.replace(
            projection, confinement=(msgspec.convert(confinement, PolicyRecord),)
        )
    )


def test_a_runtime_not_known_confined_is_denied_where_the_release_requires_it() -> None:
    """Confinement is proven, never assumed: without ``confined=True`` (the gate holds
    no fresh attestation of the runtime's confined process) the confinement policy
    applies, by default too."""
    envelope = make_envelope({})
    for decision in (
        evaluate(envelope, _confinement_set(), at_ms=AT_MS),
        evaluate(envelope, _confinement_set(), at_ms=AT_MS, confined=False),
    ):
        assert decision.disposition == "deny"
        assert decision.reason_codes == (NOT_CONFINED, "allow_p_all")
    applied = applicable_policies(envelope, _confinement_set(), AT_MS)
    assert {p.record.policy_id for p in applied} == {"p.all", "p.confined"}


def test_a_confined_runtime_is_decided_by_the_other_policies_only() -> None:
    envelope = make_envelope({})
    decision = evaluate(envelope, _confinement_set(), at_ms=AT_MS, confined=True)
    assert decision.disposition == "allow"
    assert NOT_CONFINED not in decision.reason_codes
    applied = applicable_policies(envelope, _confinement_set(), AT_MS, confined=True)
    assert [p.record.policy_id for p in applied] == ["p.all"]


def test_a_denial_by_the_other_policies_is_not_explained_as_confinement() -> None:
    """Where the release denies anyway, an unconfined runtime is told the release's own
    reason, not that it should have run confined."""
    decision = evaluate(make_envelope({}), _confinement_set(others_deny=True), at_ms=AT_MS)
    assert decision.disposition == "deny"
    assert decision.reason_codes == ("deny_p_all",)
