"""Indexed policy selection (smf_assurance/core/policy_index.py).

Properties: every policy whose check holds is among the index's candidates
(the index is sound); so over generated corpora (random predicates, layers,
scopes, effective intervals) and envelopes, every decision is byte-identical
to the one the linear scan gives; the index does prune (a tenant's envelope
is not checked against other tenants' policies, a contradictory policy is
never a candidate); ``any`` keeps a constraint only when every branch names
the fact. Does not prove: speed (``python -m smf_tools bench --evaluator-growth``
measures it).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smf_assurance.core.evaluator import applicable_policies, evaluate
from smf_assurance.core.facts import facts_of
from smf_assurance.core.policy_index import (
    MAX_COLUMNS,
    LinearScan,
    PolicyIndex,
    build_index,
)
from smf_assurance.core.predicates import compile_predicate, necessary
from smf_assurance.core.projection import PolicySet, scanned_policy_set
from tests.support.builders import AT_MS, make_envelope, make_policy, make_rule, policy_set_from
from tests.support.predicates import PREDICATES, leaf

TENANTS = ("tenant-acme", "tenant-b", "tenant-c")
MATTERS = ("matter-2026-0042", "matter-other")
ACTORS = ("associate-ann", "partner-pat")
LAYERS = ("binding_authority", "smf_safety_floor", "customer", "matter", "user")
DAY = 86_400
AT_SECONDS = AT_MS // 1000


@st.composite
def scopes(draw: st.DrawFn, layer: str) -> dict[str, str]:
    if layer in ("binding_authority", "smf_safety_floor"):
        return {}
    scope = {"tenant_id": draw(st.sampled_from(TENANTS))}
    if layer == "matter":
        scope["matter_id"] = draw(st.sampled_from(MATTERS))
    if layer == "user":
        scope["actor_id"] = draw(st.sampled_from(ACTORS))
    return scope


@st.composite
def corpora(draw: st.DrawFn) -> PolicySet:
    rules = []
    for n in range(draw(st.integers(1, 6))):
        start = AT_SECONDS + draw(st.sampled_from((-DAY, 0, 1)))
        until = draw(st.sampled_from((None, start + 1, AT_SECONDS + DAY)))
        when = draw(PREDICATES)
        rules.append(make_rule(f"r{n}", when, effective_from=start, effective_until=until))
    policies = []
    for n in range(draw(st.integers(0, 24))):
        layer = draw(st.sampled_from(LAYERS))
        effect = draw(st.sampled_from(("allow", "conditional", "deny")))
        requirements = (
            {"approval_count": 1, "required_roles": ["partner"]}
            if effect == "conditional" and draw(st.booleans())
            else None
        )
        policies.append(
            make_policy(
                f"p{n:02d}",
                f"r{draw(st.integers(0, len(rules) - 1))}",
                layer=layer,  # type: ignore[arg-type]
                effect=effect,  # type: ignore[arg-type]
                scope=draw(scopes(layer)),
                requirements=requirements,
            )
        )
    return policy_set_from(rules, policies)


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    return make_envelope(
        {
            "capability": draw(
                st.sampled_from(("external.transmit", "document.read", "document.delete"))
            ),
            "data.classification": draw(
                st.sampled_from(("public", "confidential", "privileged", "unknown"))
            ),
            "destination.locality": draw(st.sampled_from(("internal", "external", "unknown"))),
            "effects.egress": draw(st.booleans()),
            "workflow.legal_hold": draw(st.booleans()),
            "professional.tenant_id": draw(st.sampled_from(TENANTS)),
            "professional.matter_id": draw(st.sampled_from(MATTERS)),
            "professional.actor_id": draw(st.sampled_from(ACTORS)),
            "professional.actor_roles": draw(
                st.lists(st.sampled_from(("a", "b", "c")), max_size=3)
            ),
        }
    )


AT = st.sampled_from((AT_MS, AT_MS + DAY * 1000, AT_MS - DAY * 1000))


@settings(max_examples=300, deadline=None)
@given(corpora(), st.lists(envelopes(), min_size=1, max_size=4), AT)
def test_decisions_are_byte_identical_to_the_linear_scan(
    policy_set: PolicySet, batch: list[Any], at_ms: int
) -> None:
    reference = scanned_policy_set(policy_set)
    assert reference.index == LinearScan(len(policy_set.policies))
    for envelope in batch:
        indexed = evaluate(envelope, policy_set, at_ms=at_ms)
        scanned = evaluate(envelope, reference, at_ms=at_ms)
        assert msgspec.json.encode(indexed) == msgspec.json.encode(scanned)
        assert applicable_policies(envelope, policy_set, at_ms) == applicable_policies(
            envelope, reference, at_ms
        )


@settings(max_examples=300, deadline=None)
@given(corpora(), envelopes())
def test_every_policy_that_applies_is_a_candidate(policy_set: PolicySet, envelope: Any) -> None:
    facts = facts_of(envelope)
    candidates = set(policy_set.index.candidates(facts))
    for position, policy in enumerate(policy_set.policies):
        if policy.check(facts, AT_SECONDS):
            assert position in candidates, policy.record.policy_id


def test_a_tenants_envelope_is_not_checked_against_other_tenants_policies() -> None:
    rules = [make_rule("r0")]
    policies = [
        make_policy(f"c{n:02d}", "r0", layer="customer", scope={"tenant_id": f"tenant-{n}"})
        for n in range(50)
    ] + [make_policy("floor", "r0", layer="smf_safety_floor")]
    policy_set = policy_set_from(rules, policies)
    facts = facts_of(make_envelope({"professional.tenant_id": "tenant-7"}))
    checked = [policy_set.policies[i].record.policy_id for i in policy_set.index.candidates(facts)]
    assert checked == ["floor", "c07"]
    other = facts_of(make_envelope({"professional.tenant_id": "tenant-none"}))
    assert [
        policy_set.policies[i].record.policy_id for i in policy_set.index.candidates(other)
    ] == ["floor"]


def test_a_contradictory_policy_is_never_a_candidate() -> None:
    contradiction = {
        "all": [leaf("eq", "capability", "document.read"), leaf("eq", "capability", "unknown")]
    }
    policy_set = policy_set_from([make_rule("r0", contradiction)], [make_policy("p", "r0")])
    index = policy_set.index
    assert isinstance(index, PolicyIndex)
    assert index.columns[0].by_value == {}
    assert index.columns[0].other == 0
    for capability in ("document.read", "unknown"):
        envelope = make_envelope({"capability": capability})
        assert evaluate(envelope, policy_set, at_ms=AT_MS).applied_policies == ()


def test_any_constrains_only_a_fact_every_branch_names() -> None:
    both = compile_predicate(
        {"any": [leaf("eq", "capability", "unknown"), leaf("in", "capability", ["document.read"])]},
        "urn:smf:rule:r",
    )
    assert necessary(both) == {"capability": frozenset({"unknown", "document.read"})}
    one = compile_predicate(
        {"any": [leaf("eq", "capability", "unknown"), leaf("eq", "effects.egress", True)]},
        "urn:smf:rule:r",
    )
    assert necessary(one) == {}
    negated = compile_predicate({"not": leaf("eq", "capability", "unknown")}, "urn:smf:rule:r")
    assert necessary(negated) == {}
    assert necessary(compile_predicate(leaf("neq", "capability", "unknown"), "r")) == {}


def test_an_unhashable_value_matches_only_unconstrained_policies() -> None:
    index = build_index([{"capability": frozenset({"x"})}, {}])
    assert list(index.candidates({"capability": ["x"]})) == [1]
    assert list(index.candidates({"capability": "x"})) == [0, 1]
    assert list(index.candidates({})) == [1]


def test_an_empty_release_has_no_candidates() -> None:
    index = build_index([])
    assert list(index.candidates({"capability": "x"})) == []


def test_many_candidates_come_out_in_order() -> None:
    allowed = [{} if n % 5 else {"capability": frozenset({"x"})} for n in range(200)]
    index = build_index(allowed)
    assert index.candidates({"capability": "x"}) == list(range(200))
    assert index.candidates({"capability": "y"}) == [n for n in range(200) if n % 5]
    assert LinearScan(200).candidates({}) == list(range(200))
    assert LinearScan(0).candidates({}) == []


def test_the_index_keeps_the_most_selective_facts() -> None:
    """At most MAX_COLUMNS facts, those that leave the fewest policies unconstrained,
    most selective first (ties by path), so most decisions are pruned by the first."""
    paths = ["capability", "destination.channel", "effects.egress", "professional.tenant_id"]
    paths += ["workflow.legal_hold", "data.classification"]
    allowed = [
        {path: frozenset({"v"}) for path in paths[: n % (len(paths) + 1)]} for n in range(70)
    ]
    index = build_index(allowed)
    assert [c.path for c in index.columns] == paths[:MAX_COLUMNS]
    others = [c.other.bit_count() for c in index.columns]
    assert others == sorted(others)
    assert MAX_COLUMNS == 4


def test_a_scope_narrows_what_the_predicate_allows_and_never_widens_it() -> None:
    """Scope and predicate constraints on one fact intersect: a policy of tenant-a whose
    rule names tenants a and b is not checked for tenant-b, nor for any third value."""
    rules = [make_rule("r0", leaf("in", "professional.tenant_id", ["tenant-a", "tenant-b"]))]
    scoped = make_policy("scoped", "r0", layer="customer", scope={"tenant_id": "tenant-a"})
    policy_set = policy_set_from(rules, [make_policy("free", "r0"), scoped])
    ids = {n: p.record.policy_id for n, p in enumerate(policy_set.policies)}

    def checked(tenant: str) -> list[str]:
        facts = facts_of(make_envelope({"professional.tenant_id": tenant}))
        return [ids[n] for n in policy_set.index.candidates(facts)]

    assert checked("tenant-a") == ["free", "scoped"]
    assert checked("tenant-b") == ["free"]
    assert checked("tenant-c") == []
    # A scope the rule excludes: the policy can never apply, so it is never checked.
    rules = [make_rule("r0", leaf("eq", "professional.tenant_id", "tenant-b"))]
    never = policy_set_from(rules, [scoped])
    for tenant in ("tenant-a", "tenant-b"):
        facts = facts_of(make_envelope({"professional.tenant_id": tenant}))
        assert never.index.candidates(facts) == []


def test_candidates_are_exactly_the_policies_allowing_the_value() -> None:
    index = build_index([{"capability": frozenset({"x"})}, {"capability": frozenset({"y"})}, {}])
    assert index.candidates({"capability": "x"}) == [0, 2]
    assert index.candidates({"capability": "y"}) == [1, 2]
    assert index.candidates({"capability": "z"}) == [2]


@pytest.mark.parametrize("count", [1, 33, 64, 65, 1000])
def test_an_unconstrained_release_leaves_every_policy(count: int) -> None:
    assert build_index([{}] * count).candidates({}) == list(range(count))
