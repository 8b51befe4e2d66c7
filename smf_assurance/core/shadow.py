"""Shadow evaluation (issue 25): what a shadow release would have decided, where it
differs from what was enforced, and the tally of those differences. Pure.

A shadow release is a verified candidate that runs beside the active one and
decides nothing. For each decision the gate made, :func:`shadow_decision`
evaluates the same normalized envelope, with the same operation id, operation
hash and evaluation time, under the shadow's policy set: the one thing that
differs is the release. :func:`difference` says whether the two disagree, which
is the question the ledger's ``shadow`` entries answer, and which policies,
rules and layers account for it.

Rules kept here:

- A disagreement is a different disposition or a different set of reason codes
  (the reason codes a Decision carries are its applied policies' codes and the
  gate's own words; their order follows the policy order, which is not a
  decision). Two decisions that differ only in a merged requirement (a TTL, a
  role) are not a disagreement: ``release diff``'s static part lists those.
- The policies that account for it are the applied policies present under one
  release and not the other, compared whole (id, layer, rule, effect, reason):
  a policy kept under its id with another effect is one of them.
- Evidence names a policy or rule only by its identity (:func:`policy_ref`,
  :func:`rule_ref`), as it names a release (``smf_assurance.pipeline.stores.evidence.release_ref``):
  a customer's policy id may name the customer. :func:`names_by_ref` turns the
  identities back into ids with a release's projection in hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from smf_assurance.core.decision import Decision
from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.policy import LAYER_RANK
from smf_assurance.core.projection import EnforcementProjection, PolicySet
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.envelope import OperationEnvelope

MAX_EXAMPLES: Final = 3
"""Decision ids kept as examples per tallied value."""


def policy_ref(policy_id: str) -> str:
    """A policy as an identity for evidence: ``identity_of({"policy_id": id})``."""
    return identity_of({"policy_id": policy_id})


def rule_ref(rule_id: str) -> str:
    """A rule as an identity for evidence: ``identity_of({"rule_id": id})``."""
    return identity_of({"rule_id": rule_id})


def names_by_ref(projections: Iterable[EnforcementProjection]) -> dict[str, str]:
    """Every policy and rule id of ``projections``, by its evidence identity."""
    names: dict[str, str] = {}
    for projection in projections:
        for policy in projection.policies:
            names[policy_ref(policy.policy_id)] = policy.policy_id
        for rule in projection.rules:
            names[rule_ref(rule.rule_id)] = rule.rule_id
    return names


def shadow_decision(
    envelope: OperationEnvelope, enforced: Decision, shadow: PolicySet, *, confined: bool = False
) -> Decision:
    """What ``shadow`` would have decided for the envelope ``enforced`` was made for:
    the same operation id, operation hash, evaluation time and runtime confinement, so
    the release is the one thing that differs (issue 25, "the same normalized envelope")."""
    return evaluate(
        envelope,
        shadow,
        at_ms=enforced.evaluated_at_ms,
        operation_id=enforced.operation_id,
        op_hash=enforced.operation_hash,
        confined=confined,
    )


@dataclass(frozen=True, slots=True)
class Difference:
    """Where a shadow decision departs from the enforced one (module docstring)."""

    policy_ids: tuple[str, ...]
    """Applied under one release and not (so) under the other; sorted."""
    rule_ids: tuple[str, ...]
    """The rules those policies rest on; sorted."""
    layers: tuple[str, ...]
    """Their layers, strongest first."""


def difference(enforced: Decision, shadow: Decision) -> Difference | None:
    """None when the two agree (same disposition, same set of reason codes)."""
    if enforced.disposition == shadow.disposition and set(enforced.reason_codes) == set(
        shadow.reason_codes
    ):
        return None
    differing = set(enforced.applied_policies) ^ set(shadow.applied_policies)
    return Difference(
        policy_ids=tuple(sorted({p.policy_id for p in differing})),
        rule_ids=tuple(sorted({p.rule_id for p in differing})),
        layers=tuple(sorted({p.layer for p in differing}, key=lambda layer: LAYER_RANK[layer])),
    )


# --- recorded traffic: the tally ``release diff`` prints -----------------------------------


@dataclass(frozen=True, slots=True)
class ShadowRecord:
    """One recorded disagreement, as a ``shadow`` ledger entry holds it (identities and
    closed words), with its policy and rule identities turned into ids where a
    release was at hand (:func:`names_by_ref`; an identity no release names stays
    as it is)."""

    decision_id: str
    at_ms: int
    tenant_ref: str
    capability: str
    from_disposition: str
    to_disposition: str
    policies: tuple[str, ...]
    rules: tuple[str, ...]
    layers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Tallied:
    """How many recorded decisions would change for one value of one dimension."""

    value: str
    count: int
    examples: tuple[str, ...]
    """Up to :data:`MAX_EXAMPLES` decision ids, in the order they were recorded."""


@dataclass(frozen=True, slots=True)
class Move:
    """Decisions that would go from one disposition to another (allow -> hold, ...)."""

    from_disposition: str
    to_disposition: str
    count: int
    examples: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Traffic:
    """The tally of recorded disagreements by each dimension issue 25 names. A decision
    counts once per value it carries (one that differs in two policies counts under
    each), so a dimension's counts may add up to more than :attr:`total`."""

    total: int
    moves: tuple[Move, ...]
    by_capability: tuple[Tallied, ...]
    by_rule: tuple[Tallied, ...]
    by_policy: tuple[Tallied, ...]
    by_layer: tuple[Tallied, ...]
    by_tenant: tuple[Tallied, ...]


@dataclass
class _Counts:
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, value: str, decision_id: str) -> None:
        self.counts[value] += 1
        kept = self.examples.setdefault(value, [])
        if len(kept) < MAX_EXAMPLES and decision_id not in kept:
            kept.append(decision_id)

    def rows(self, order: Mapping[str, int] | None = None) -> tuple[Tallied, ...]:
        """Most first; ties by ``order`` (layers, strongest first) or by value."""

        def key(value: str) -> tuple[int, int, str]:
            return (-self.counts[value], (order or {}).get(value, 0), value)

        return tuple(
            Tallied(value, self.counts[value], tuple(self.examples[value]))
            for value in sorted(self.counts, key=key)
        )


def tally(records: Iterable[ShadowRecord]) -> Traffic:
    """Count ``records`` by from -> to disposition, capability, rule, policy, layer and
    tenant pseudonym, keeping example decision ids for each."""
    total = 0
    moves: dict[tuple[str, str], _Counts] = {}
    dimensions = {name: _Counts() for name in ("capability", "rule", "policy", "layer", "tenant")}
    for record in records:
        total += 1
        move = moves.setdefault((record.from_disposition, record.to_disposition), _Counts())
        move.add("", record.decision_id)
        dimensions["capability"].add(record.capability, record.decision_id)
        dimensions["tenant"].add(record.tenant_ref, record.decision_id)
        for rule in record.rules:
            dimensions["rule"].add(rule, record.decision_id)
        for policy in record.policies:
            dimensions["policy"].add(policy, record.decision_id)
        for layer in record.layers:
            dimensions["layer"].add(layer, record.decision_id)
    return Traffic(
        total=total,
        moves=tuple(
            Move(source, target, counts.counts[""], tuple(counts.examples[""]))
            for (source, target), counts in sorted(
                moves.items(), key=lambda item: (-item[1].counts[""], item[0])
            )
        ),
        by_capability=dimensions["capability"].rows(),
        by_rule=dimensions["rule"].rows(),
        by_policy=dimensions["policy"].rows(),
        by_layer=dimensions["layer"].rows(LAYER_RANK),
        by_tenant=dimensions["tenant"].rows(),
    )


__all__ = [
    "MAX_EXAMPLES",
    "Difference",
    "Move",
    "ShadowRecord",
    "Tallied",
    "Traffic",
    "difference",
    "names_by_ref",
    "policy_ref",
    "rule_ref",
    "shadow_decision",
    "tally",
]
