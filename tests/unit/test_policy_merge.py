"""Layered policy and the monotonic merge (smf_assurance/core/policy.py, through the
evaluator).

ARCHITECTURE.md, "Layered policy": a weaker layer can add restrictions but
never remove one — for dispositions (deny dominates) AND for requirements
(max approvals, union of roles, min TTL, OR of exact-action binding and
one-shot). Customer policy binds to its tenant.

Proven here: the regression for the known defect (a binding-authority
``exact_action_binding``/``one_shot`` survives every weaker overlay that says
False); deny dominates at every layer pair; scope binding; and hypothesis
properties over random policy stacks — the pure join is monotone and
order-free, and through the evaluator adding a policy never relaxes the
decision and the order of policies does not matter.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smf_assurance.core.decision import (
    APPROVAL_REQUIREMENT_INCOMPLETE,
    NO_APPLICABLE_POLICY,
    Decision,
)
from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.policy import (
    LAYER_RANK,
    LAYERS,
    MAX_TTL_SECONDS,
    NO_REQUIREMENTS,
    SEVERITY,
    Effect,
    Layer,
    Requirements,
    RequirementSpec,
    merge_disposition,
    merge_requirements,
    requirements_at_least,
)
from smf_assurance.core.projection import (
    ProjectionError,
    decode_enforcement,
    projection_bytes,
)
from smf_assurance.subjects.envelope import OperationEnvelope
from tests.support.builders import (
    ALWAYS,
    AT_MS,
    NEVER,
    enforcement_projection,
    make_envelope,
    make_policy,
    make_rule,
    policy_set_from,
)

SETTINGS = settings(max_examples=200, deadline=None)
RULES = [make_rule("match", ALWAYS), make_rule("nomatch", NEVER)]
PLAIN = make_envelope()  # not consequential
EGRESS = make_envelope({"effects.egress": True})  # consequential
OTHER_TENANT = "tenant-other"

STRICT = {
    "approval_count": 1,
    "required_roles": ["licensed_attorney"],
    "ttl_seconds": 600,
    "exact_action_binding": True,
    "one_shot": True,
}
WEAK_OVERLAY = {"ttl_seconds": 300, "exact_action_binding": False, "one_shot": False}


def decide(policies: Sequence[dict[str, Any]], envelope: OperationEnvelope = PLAIN) -> Decision:
    return evaluate(envelope, policy_set_from(RULES, policies), at_ms=AT_MS)


def assert_requirements_at_least(tighter: Requirements, looser: Requirements) -> None:
    """``requirements_at_least`` AND each field checked on its own."""
    assert requirements_at_least(tighter, looser)
    assert tighter.approval_count >= looser.approval_count
    assert set(tighter.required_roles) >= set(looser.required_roles)
    assert tighter.ttl_seconds <= looser.ttl_seconds
    assert tighter.exact_action_binding or not looser.exact_action_binding
    assert tighter.one_shot or not looser.one_shot


# --- what one policy may ask for --------------------------------------------------


def _projection_asking(requirements: dict[str, Any]) -> bytes:
    """Enforcement projection bytes whose one conditional policy asks for
    ``requirements``, as a signed release would carry them."""
    policy = make_policy("p", "match", effect="conditional", requirements=STRICT)
    projection = json.loads(projection_bytes(enforcement_projection(RULES, [policy])))
    projection["policies"][0]["requirements"] = requirements
    return json.dumps(projection).encode()


@pytest.mark.parametrize(
    "asked",
    [
        {"ttl_seconds": 0},
        {"ttl_seconds": MAX_TTL_SECONDS + 1},
        {"approval_count": -1},
        {"approval_count": 17},
        {"approval_count": 1, "approvals_waived": True},
    ],
    ids=["ttl-0", "ttl-above-600", "negative-count", "count-above-16", "unknown-field"],
)
def test_a_requirement_outside_the_language_never_enters_a_policy_set(
    asked: dict[str, Any],
) -> None:
    """ARCHITECTURE.md: TTL at most 600 s, and an approval that lives 0 s can never be
    given; a requirement the language does not define (a typo, a newer field) is
    refused rather than ignored, so no policy is read as asking less than it says."""
    with pytest.raises(ProjectionError):
        decode_enforcement(_projection_asking(asked))


@pytest.mark.parametrize(
    "asked",
    [{"ttl_seconds": 1}, {"ttl_seconds": MAX_TTL_SECONDS}, {"approval_count": 16}, {}],
    ids=["ttl-1", "ttl-600", "count-16", "nothing"],
)
def test_a_requirement_at_the_bounds_is_kept_as_written(asked: dict[str, Any]) -> None:
    decoded = decode_enforcement(_projection_asking(asked))
    assert decoded.policies[0].requirements == RequirementSpec(**asked)


# --- the pure join ------------------------------------------------------------------


def test_merge_requirements_joins_every_field() -> None:
    merged = merge_requirements(
        [
            RequirementSpec(approval_count=1, required_roles=("b",), ttl_seconds=500),
            RequirementSpec(approval_count=2, required_roles=("a", "b"), exact_action_binding=True),
            RequirementSpec(ttl_seconds=120, one_shot=True, exact_action_binding=False),
            RequirementSpec(approval_count=0, one_shot=False),
        ]
    )
    assert merged == Requirements(
        approval_count=2,
        required_roles=("a", "b"),
        ttl_seconds=120,
        exact_action_binding=True,
        one_shot=True,
    )


def test_merge_of_nothing_asks_for_nothing() -> None:
    assert merge_requirements([]) == NO_REQUIREMENTS
    assert merge_requirements([RequirementSpec()]) == NO_REQUIREMENTS
    assert NO_REQUIREMENTS.ttl_seconds == MAX_TTL_SECONDS == 600


def test_merge_disposition() -> None:
    assert merge_disposition([]) is None
    assert merge_disposition(["allow"]) == "allow"
    assert merge_disposition(["allow", "conditional", "allow"]) == "conditional"
    every: list[Effect] = ["allow", "conditional", "deny"]
    for order in itertools.permutations(every):
        assert merge_disposition(order) == "deny"
    assert SEVERITY["allow"] < SEVERITY["conditional"] < SEVERITY["deny"]


@pytest.mark.parametrize(
    ("field", "looser", "tighter"),
    [
        ("approval_count", 1, 2),
        ("required_roles", ("a",), ("a", "b")),
        ("ttl_seconds", 600, 300),
        ("exact_action_binding", False, True),
        ("one_shot", False, True),
    ],
)
def test_requirements_at_least_checks_each_field(field: str, looser: Any, tighter: Any) -> None:
    base = {
        "approval_count": 1,
        "required_roles": ("a",),
        "ttl_seconds": 600,
        "exact_action_binding": False,
        "one_shot": False,
    }
    low = Requirements(**{**base, field: looser})
    high = Requirements(**{**base, field: tighter})
    assert requirements_at_least(high, low)
    assert not requirements_at_least(low, high)
    assert requirements_at_least(low, low)


def test_disjoint_roles_are_not_at_least() -> None:
    a = Requirements(1, ("a",), 600, False, False)
    b = Requirements(1, ("b",), 600, False, False)
    assert not requirements_at_least(a, b)
    assert not requirements_at_least(b, a)


# --- regression: binding authority flags survive every weaker overlay -----------------

OVERLAY_LAYERS: tuple[Layer, ...] = ("customer", "matter", "user")


@pytest.mark.claim("monotonic-policy.stronger-layer-stands")
@pytest.mark.parametrize(
    "overlays",
    [c for n in range(1, 4) for c in itertools.combinations(OVERLAY_LAYERS, n)],
    ids="+".join,
)
@pytest.mark.parametrize("overlay_effect", ["conditional", "allow"])
def test_binding_authority_flags_survive_weaker_overlays(
    overlays: tuple[Layer, ...], overlay_effect: Effect
) -> None:
    """The known defect: an overlay saying False must not erase exact-action/one-shot."""
    policies = [
        make_policy(
            "ba.strict",
            "match",
            layer="binding_authority",
            effect="conditional",
            requirements=STRICT,
        ),
    ] + [
        make_policy(
            f"{layer}.overlay",
            "match",
            layer=layer,
            effect=overlay_effect,
            requirements=WEAK_OVERLAY,
        )
        for layer in overlays
    ]
    for envelope in (PLAIN, EGRESS):
        decision = decide(policies, envelope)
        assert decision.disposition == "conditional"
        req = decision.requirements
        assert req.exact_action_binding is True
        assert req.one_shot is True
        assert req.approval_count == 1
        assert req.required_roles == ("licensed_attorney",)
        assert req.ttl_seconds == 300  # the overlay may tighten the TTL
        assert {p.layer for p in decision.applied_policies} == {"binding_authority", *overlays}


def test_binding_authority_flags_survive_in_the_pure_merge() -> None:
    strict = RequirementSpec(
        approval_count=1,
        required_roles=("licensed_attorney",),
        exact_action_binding=True,
        one_shot=True,
    )
    weak = RequirementSpec(exact_action_binding=False, one_shot=False, approval_count=0)
    for specs in itertools.permutations([strict, weak, weak, weak]):
        merged = merge_requirements(specs)
        assert merged.exact_action_binding is True
        assert merged.one_shot is True
        assert merged.approval_count == 1


# --- deny dominates at every layer ------------------------------------------------


@pytest.mark.parametrize("deny_layer", LAYERS)
@pytest.mark.parametrize("other_layer", LAYERS)
@pytest.mark.parametrize("other_effect", ["allow", "conditional"])
def test_deny_dominates_at_every_layer(
    deny_layer: Layer, other_layer: Layer, other_effect: Effect
) -> None:
    policies = [
        make_policy("p.deny", "match", layer=deny_layer, effect="deny", reason_code="hard_denial"),
        make_policy(
            "p.other",
            "match",
            layer=other_layer,
            effect=other_effect,
            reason_code="softer",
            requirements=STRICT if other_effect == "conditional" else None,
        ),
    ]
    for envelope in (PLAIN, EGRESS):
        decision = decide(policies, envelope)
        assert decision.disposition == "deny"
        assert decision.reason_codes[0] == "hard_denial"
        assert decision.requirements == NO_REQUIREMENTS


# --- scope: customer policy binds to its own tenant --------------------------------


@pytest.mark.parametrize(
    ("layer", "scope", "applies"),
    [
        ("customer", {"tenant_id": "tenant-acme"}, True),
        ("customer", {"tenant_id": OTHER_TENANT}, False),
        ("customer", {"tenant_id": "tenant-acme "}, False),
        ("customer", {"tenant_id": "Tenant-Acme"}, False),
        ("matter", {"tenant_id": "tenant-acme", "matter_id": "matter-2026-0042"}, True),
        ("matter", {"tenant_id": OTHER_TENANT, "matter_id": "matter-2026-0042"}, False),
        ("matter", {"tenant_id": "tenant-acme", "matter_id": "matter-other"}, False),
        ("user", {"tenant_id": "tenant-acme", "actor_id": "associate-ann"}, True),
        ("user", {"tenant_id": "tenant-acme", "actor_id": "paralegal-pat"}, False),
        ("user", {"tenant_id": OTHER_TENANT, "actor_id": "associate-ann"}, False),
    ],
)
def test_scoped_policy_applies_only_within_its_scope(
    layer: Layer, scope: dict[str, str], applies: bool
) -> None:
    policies = [make_policy("scoped.deny", "match", layer=layer, effect="deny", scope=scope)]
    decision = decide(policies)
    assert (decision.disposition == "deny") is applies
    assert bool(decision.applied_policies) is applies


def test_customer_policy_of_another_tenant_leaves_the_floor_in_charge() -> None:
    """Tenant B's allow cannot cover tenant A's consequential operation."""
    policies = [
        make_policy(
            "customer.b.allow",
            "match",
            layer="customer",
            effect="allow",
            scope={"tenant_id": OTHER_TENANT},
        )
    ]
    decision = decide(policies, EGRESS)
    assert decision.disposition == "deny"
    assert decision.reason_codes == (NO_APPLICABLE_POLICY,)
    other = make_envelope({"effects.egress": True, "professional.tenant_id": OTHER_TENANT})
    assert decide(policies, other).disposition == "allow"


# --- regression found by the property tests below ---------------------------------------


@pytest.mark.claim("monotonic-policy.stronger-layer-stands")
@pytest.mark.parametrize(
    ("weaker_layer", "weaker_effect"), [("user", "conditional"), ("customer", "allow")]
)
def test_weaker_layer_cannot_complete_a_stronger_incomplete_conditional(
    weaker_layer: Layer, weaker_effect: Effect
) -> None:
    """A binding-authority conditional that names no approver fails closed (deny).

    A weaker-layer policy (even an ``allow``) must not be able to turn that
    denial into an approval that a role of the weaker layer's choosing can
    grant: that would be a weaker layer removing a stronger layer's restriction.
    Found by ``test_adding_a_weaker_layer_never_relaxes_the_decision``.
    """
    ba = make_policy(
        "ba.cond",
        "match",
        layer="binding_authority",
        effect="conditional",
        requirements={"exact_action_binding": True},
    )
    weaker = make_policy(
        "weaker",
        "match",
        layer=weaker_layer,
        effect=weaker_effect,
        requirements={"approval_count": 1, "required_roles": ["paralegal"]},
    )
    before = decide([ba], EGRESS)
    assert before.disposition == "deny"
    assert before.reason_codes[0] == APPROVAL_REQUIREMENT_INCOMPLETE
    after = decide([ba, weaker], EGRESS)
    assert SEVERITY[after.disposition] >= SEVERITY[before.disposition], (
        f"{weaker_layer} {weaker_effect} policy relaxed {before.disposition} to "
        f"{after.disposition} (approvable by {after.requirements.required_roles})"
    )


# --- properties over random policy stacks ------------------------------------------------

ROLES = ["licensed_attorney", "partner", "paralegal"]


@st.composite
def requirement_specs(draw: st.DrawFn) -> dict[str, Any]:
    """Any spec; a third of the time exactly the shape that names an approver
    (count >= 1 and a role), a third of the time one that names none."""
    shape = draw(st.sampled_from(["approver", "no_approver", "random"]))
    spec: dict[str, Any] = {}
    if shape == "approver":
        spec["approval_count"] = draw(st.integers(1, 3))
        spec["required_roles"] = draw(
            st.lists(st.sampled_from(ROLES), min_size=1, max_size=2, unique=True)
        )
    elif shape == "random":
        if (count := draw(st.one_of(st.none(), st.integers(0, 3)))) is not None:
            spec["approval_count"] = count
        if roles := draw(st.lists(st.sampled_from(ROLES), max_size=2, unique=True)):
            spec["required_roles"] = roles
    if (ttl := draw(st.sampled_from([None, 60, 300, 600]))) is not None:
        spec["ttl_seconds"] = ttl
    for flag in ("exact_action_binding", "one_shot"):
        if (value := draw(st.sampled_from([None, True, False]))) is not None:
            spec[flag] = value
    return spec


LIKELY = st.sampled_from([True, True, False])
"""Matching and in-scope policies are the interesting ones: draw them more often."""


@st.composite
def policy_specs(draw: st.DrawFn, layers: Sequence[str] = LAYERS) -> dict[str, Any]:
    """One policy as a dict of choices; the id is assigned when the stack is built."""
    layer = draw(st.sampled_from(layers))
    effect = draw(st.sampled_from(["allow", "conditional", "deny"]))
    return {
        "layer": layer,
        "effect": effect,
        "matches": draw(LIKELY),
        "in_scope": draw(LIKELY) if layer in OVERLAY_LAYERS else True,
        "requirements": None if effect == "deny" else draw(requirement_specs()),
        "reason": draw(st.sampled_from(["r_a", "r_b", "r_c"])),
    }


def build(specs: Sequence[dict[str, Any]], prefix: str = "p") -> list[dict[str, Any]]:
    policies = []
    for i, spec in enumerate(specs):
        scope = None
        if not spec["in_scope"]:
            scope = {
                "customer": {"tenant_id": OTHER_TENANT},
                "matter": {"tenant_id": OTHER_TENANT, "matter_id": "m"},
                "user": {"tenant_id": OTHER_TENANT, "actor_id": "a"},
            }[spec["layer"]]
        policies.append(
            make_policy(
                f"{prefix}{i:02d}",
                "match" if spec["matches"] else "nomatch",
                layer=spec["layer"],
                effect=spec["effect"],
                reason_code=spec["reason"],
                scope=scope,
                requirements=spec["requirements"],
            )
        )
    return policies


ENVELOPES = st.sampled_from([PLAIN, EGRESS])


def _outcome(decision: Decision) -> tuple[Any, ...]:
    return (
        decision.disposition,
        decision.requirements,
        decision.reason_codes,
        decision.rule_ids,
        decision.rule_sources,
        decision.applied_policies,
        decision.consequential,
        decision.operation_hash,
    )


@SETTINGS
@given(
    st.lists(
        st.builds(
            RequirementSpec,
            approval_count=st.one_of(st.none(), st.integers(0, 16)),
            required_roles=st.lists(st.sampled_from(ROLES), max_size=3).map(tuple),
            ttl_seconds=st.one_of(st.none(), st.integers(1, 600)),
            exact_action_binding=st.sampled_from([None, True, False]),
            one_shot=st.sampled_from([None, True, False]),
        ),
        max_size=6,
    ),
    st.data(),
)
def test_pure_join_is_monotone_and_order_free(
    specs: list[RequirementSpec], data: st.DataObject
) -> None:
    extra = data.draw(
        st.builds(
            RequirementSpec,
            approval_count=st.one_of(st.none(), st.integers(0, 16)),
            required_roles=st.lists(st.sampled_from(ROLES), max_size=3).map(tuple),
            ttl_seconds=st.one_of(st.none(), st.integers(1, 600)),
            exact_action_binding=st.sampled_from([None, True, False]),
            one_shot=st.sampled_from([None, True, False]),
        )
    )
    before = merge_requirements(specs)
    after = merge_requirements([*specs, extra])
    assert_requirements_at_least(after, before)
    shuffled = data.draw(st.permutations([*specs, extra]))
    assert merge_requirements(shuffled) == after
    effects: list[Effect] = data.draw(
        st.lists(st.sampled_from(["allow", "conditional", "deny"]), max_size=5)
    )
    added: Effect = data.draw(st.sampled_from(["allow", "conditional", "deny"]))
    old, new = merge_disposition(effects), merge_disposition([*effects, added])
    assert new is not None
    assert old is None or SEVERITY[new] >= SEVERITY[old]
    assert merge_disposition(data.draw(st.permutations([*effects, added]))) == new


@st.composite
def deciding_stacks(draw: st.DrawFn, layers: Sequence[str] = LAYERS) -> list[dict[str, Any]]:
    """A random stack with at least one policy that applies (matches, in scope),
    at a random place: the decision before an addition is a layer's, never the
    safety floor's default denial of a proposal no policy applies to."""
    stack = draw(st.lists(policy_specs(layers), max_size=5))
    applies = {**draw(policy_specs(layers)), "matches": True, "in_scope": True}
    stack.insert(draw(st.integers(0, len(stack))), applies)
    return stack


MIN_COMPARED: Final = 100
"""Of a property's 200 examples, at least this many must be compared, not
exempt, or the property proves less than its name (160 to 200 are, over many runs)."""
MIN_COMPARED_NOT_DENIED: Final = 25
"""...and at least this many with a decision that is not a denial before the
addition, where a relaxation of the disposition could show (50 to 110 are)."""


@pytest.mark.claim("monotonic-policy.never-relaxes")
@SETTINGS
@given(deciding_stacks(), ENVELOPES, st.data())
def test_result_is_independent_of_policy_order(
    stack: list[dict[str, Any]], envelope: OperationEnvelope, data: st.DataObject
) -> None:
    policies = build(stack)
    shuffled = data.draw(st.permutations(policies))
    assert _outcome(decide(policies, envelope)) == _outcome(decide(shuffled, envelope))


def _check_not_relaxed(before: Decision, after: Decision) -> None:
    assert SEVERITY[after.disposition] >= SEVERITY[before.disposition], (
        before.reason_codes,
        after.reason_codes,
    )
    if after.disposition != "deny" and before.disposition != "deny":
        assert_requirements_at_least(after.requirements, before.requirements)


def _assert_enough_compared(compared: Counter[str]) -> None:
    assert compared["compared"] >= MIN_COMPARED, compared
    assert compared["not denied before"] >= MIN_COMPARED_NOT_DENIED, compared


@pytest.mark.claim("monotonic-policy.never-relaxes")
def test_adding_any_policy_never_relaxes_the_decision() -> None:
    """Disposition never drops in severity; requirements never loosen.

    The stack before the addition always has a policy that applies, so the
    safety floor's default denial (nothing applied: not a restriction, lifted by
    the first policy that applies) is never the starting point. The one exempt
    starting point is the fail-closed denial of an incomplete conditional, which
    a policy naming the approver completes (that is how a TTL-only customer
    overlay composes with a binding-authority approval);
    ``test_adding_a_weaker_layer_never_relaxes_the_decision`` holds the
    completion case to the stricter rule. Enough examples must be compared, not
    exempt, for the property to say anything.
    """
    compared: Counter[str] = Counter()

    @SETTINGS
    @given(deciding_stacks(), policy_specs(), ENVELOPES)
    def adding_never_relaxes(
        stack: list[dict[str, Any]], extra: dict[str, Any], envelope: OperationEnvelope
    ) -> None:
        policies = build(stack)
        before = decide(policies, envelope)
        after = decide([*policies, *build([extra], prefix="x")], envelope)
        assert before.applied_policies
        if before.reason_codes[:1] == (APPROVAL_REQUIREMENT_INCOMPLETE,):
            return
        _check_not_relaxed(before, after)
        compared["compared"] += 1
        if before.disposition != "deny":
            compared["not denied before"] += 1

    adding_never_relaxes()
    _assert_enough_compared(compared)


def test_with_no_policy_applied_the_first_that_applies_decides() -> None:
    """The exemption the property above excludes, shown: the floor's default
    denial of a consequential proposal no policy applies to is no layer's
    restriction, so the first policy that applies decides."""
    nothing = decide([make_policy("p00", "nomatch")], EGRESS)
    assert (nothing.disposition, nothing.reason_codes) == ("deny", (NO_APPLICABLE_POLICY,))
    assert not nothing.applied_policies
    first = decide(
        [make_policy("p00", "nomatch"), make_policy("x00", "match", effect="allow")], EGRESS
    )
    assert first.disposition == "allow"
    assert [p.policy_id for p in first.applied_policies] == ["x00"]


APPROVER_SPEC: dict[str, Any] = {"approval_count": 1, "required_roles": ["paralegal"]}


@pytest.mark.claim("monotonic-policy.never-relaxes")
def test_adding_a_weaker_layer_never_relaxes_the_decision() -> None:
    """Adding a policy at a layer weaker than every policy already in the
    stack never relaxes the disposition or any requirement field.

    For each random stack (one of its policies applies), every applicable weaker
    addition is tried: each weaker layer, each effect, with a requirement spec
    that names an approver, one that names nothing, and a random one. Nothing is
    exempt, an incomplete conditional included.
    """
    compared: Counter[str] = Counter()

    @SETTINGS
    @given(deciding_stacks(layers=LAYERS[:-1]), ENVELOPES, requirement_specs())
    def weaker_never_relaxes(
        stack: list[dict[str, Any]], envelope: OperationEnvelope, random_spec: dict[str, Any]
    ) -> None:
        policies = build(stack)
        before = decide(policies, envelope)
        assert before.applied_policies
        weakest = max(LAYER_RANK[spec["layer"]] for spec in stack)
        for layer in LAYERS[weakest + 1 :]:
            for effect in ("allow", "conditional", "deny"):
                for requirements in (APPROVER_SPEC, {}, random_spec):
                    extra = {
                        "layer": layer,
                        "effect": effect,
                        "matches": True,
                        "in_scope": True,
                        "requirements": None if effect == "deny" else requirements,
                        "reason": "r_extra",
                    }
                    after = decide([*policies, *build([extra], prefix="x")], envelope)
                    _check_not_relaxed(before, after)
        if weakest + 1 < len(LAYERS):
            compared["compared"] += 1
            if before.disposition != "deny":
                compared["not denied before"] += 1

    weaker_never_relaxes()
    _assert_enough_compared(compared)
