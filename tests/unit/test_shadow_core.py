"""The pure half of shadow evaluation: ``smf_assurance.core.shadow``.

Proves: a shadow decision is the same envelope, operation id, hash and time under
another policy set (only the release differs); two decisions disagree exactly when
the disposition or the set of reason codes differs, and the differing policies are
the applied ones present under one release only, compared whole (an effect
changed under the same id counts), with their rules and layers; the tally counts
each dimension with examples, in a stable order.

Does not prove: anything at a running gate (tests/bus/test_shadow_release.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from smf_assurance.core.decision import AppliedPolicy
from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.policy import Effect
from smf_assurance.core.projection import build_policy_set
from smf_assurance.core.shadow import (
    Move,
    ShadowRecord,
    Tallied,
    difference,
    names_by_ref,
    policy_ref,
    rule_ref,
    shadow_decision,
    tally,
)
from tests.support.builders import (
    AT_MS,
    enforcement_projection,
    make_envelope,
    make_policy,
    make_release,
    make_rule,
)

HOLD = {"eq": {"fact": "workflow.legal_hold", "value": True}}


def policy_set(effect: Effect, reason: str = "held", release_id: str = "rel-a") -> Any:
    projection = enforcement_projection(
        [make_rule("hold", HOLD)],
        [
            make_policy(
                "floor.hold", "hold", layer="smf_safety_floor", effect=effect, reason_code=reason
            )
        ],
        make_release(release_id),
    )
    return projection, build_policy_set(projection)


def envelope() -> Any:
    return make_envelope({"workflow.legal_hold": True})


def applied(policy_id: str, effect: str = "deny", layer: str = "customer") -> AppliedPolicy:
    return AppliedPolicy(
        policy_id=policy_id,
        layer=layer,
        rule_id=f"urn:smf:rule:{policy_id}",
        effect=effect,
        reason_code=f"{policy_id.replace('.', '_')}_{effect}",
    )


def test_the_shadow_decides_the_same_operation_at_the_same_time() -> None:
    _, enforced_set = policy_set("deny")
    _, shadow_set = policy_set("deny", release_id="rel-b")
    enforced = evaluate(envelope(), enforced_set, at_ms=AT_MS, operation_id="op-1")
    judged = shadow_decision(envelope(), enforced, shadow_set)
    assert (judged.operation_id, judged.operation_hash, judged.evaluated_at_ms) == (
        enforced.operation_id,
        enforced.operation_hash,
        enforced.evaluated_at_ms,
    )
    assert judged.release_id == "rel-b"
    assert difference(enforced, judged) is None  # same policies, another release


def test_a_changed_effect_under_the_same_id_is_a_difference() -> None:
    _, enforced_set = policy_set("deny")
    _, shadow_set = policy_set("conditional", release_id="rel-b")
    enforced = evaluate(envelope(), enforced_set, at_ms=AT_MS)
    judged = shadow_decision(envelope(), enforced, shadow_set)
    found = difference(enforced, judged)
    assert found is not None
    assert found.policy_ids == ("floor.hold",)
    assert found.rule_ids == (enforced.rule_ids[0],)
    assert found.layers == ("smf_safety_floor",)


def test_a_disagreement_is_disposition_or_the_set_of_reasons() -> None:
    _, policies = policy_set("deny")
    base = evaluate(envelope(), policies, at_ms=AT_MS)
    reordered = msgspec.structs.replace(base, reason_codes=tuple(reversed(base.reason_codes)))
    assert difference(base, reordered) is None
    other = msgspec.structs.replace(
        base,
        reason_codes=("another",),
        applied_policies=(applied("customer.x"),),
    )
    found = difference(base, other)
    assert found is not None
    assert found.policy_ids == ("customer.x", "floor.hold")
    assert found.layers == ("smf_safety_floor", "customer")  # strongest first
    requirement_only = msgspec.structs.replace(
        base, requirements=msgspec.structs.replace(base.requirements, ttl_seconds=1)
    )
    assert difference(base, requirement_only) is None


def test_names_come_back_from_a_projection() -> None:
    projection, _ = policy_set("deny")
    names = names_by_ref([projection])
    assert names[policy_ref("floor.hold")] == "floor.hold"
    rule = projection.rules[0].rule_id
    assert names[rule_ref(rule)] == rule


def record(n: int, **changes: Any) -> ShadowRecord:
    fields: dict[str, Any] = {
        "decision_id": f"d{n}",
        "at_ms": n,
        "tenant_ref": "t1",
        "capability": "document.delete",
        "from_disposition": "allow",
        "to_disposition": "hold",
        "policies": ("p.retention",),
        "rules": ("r.retention",),
        "layers": ("customer",),
    }
    fields.update(changes)
    return ShadowRecord(**fields)


def test_the_tally_counts_each_dimension_with_examples() -> None:
    records = [
        record(1),
        record(2),
        record(3),
        record(4),
        record(
            5,
            tenant_ref="t2",
            capability="output.deliver",
            to_disposition="deny",
            policies=("p.output", "p.retention"),
            rules=("r.output",),
            layers=("smf_safety_floor", "customer"),
        ),
    ]
    traffic = tally(records)
    assert traffic.total == 5
    assert traffic.moves == (
        Move("allow", "hold", 4, ("d1", "d2", "d3")),
        Move("allow", "deny", 1, ("d5",)),
    )
    assert traffic.by_policy == (
        Tallied("p.retention", 5, ("d1", "d2", "d3")),
        Tallied("p.output", 1, ("d5",)),
    )
    assert traffic.by_rule == (
        Tallied("r.retention", 4, ("d1", "d2", "d3")),
        Tallied("r.output", 1, ("d5",)),
    )
    assert traffic.by_layer == (
        Tallied("customer", 5, ("d1", "d2", "d3")),
        Tallied("smf_safety_floor", 1, ("d5",)),
    )
    assert traffic.by_tenant == (Tallied("t1", 4, ("d1", "d2", "d3")), Tallied("t2", 1, ("d5",)))
    assert traffic.by_capability[0] == Tallied("document.delete", 4, ("d1", "d2", "d3"))
    assert tally([]).total == 0
