"""The evaluator: envelope + policy set + time -> Decision. Pure and deterministic.

Rules it enforces:
- Default deny for consequential work (ARCHITECTURE.md, "The four governed
  scenarios"): an operation with egress, external or unknown persistence,
  limited/none/unknown reversibility, or capability ``unknown`` that no policy
  covers is denied with ``no_applicable_policy_for_consequential_operation``.
- Monotonic layering (ARCHITECTURE.md, "Layered policy"): see
  ``smf_assurance.core.policy``; deny dominates, requirements only tighten.
- A conditional decision must be satisfiable: at least one approval and at
  least one role, otherwise it fails closed as a denial.
- Customer, matter and user policies apply only within their scope.
- Time comes from the caller's clock, so the same inputs give the same bytes.
- Only the policies the index leaves can apply are checked
  (``smf_assurance.core.policy_index``); the applied set is the linear scan's.
- Releases can require confinement (docs/CONFINEMENT.md): a release's confinement
  policies (``EnforcementProjection.confinement``) apply only when the caller does not
  say the runtime is ``confined`` (the default: unknown is not confined), and only to
  an operation the rest of the release would not deny anyway, so a denial names
  ``runtime_not_confined`` exactly when confinement is what denies it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from smf_assurance.core.decision import (
    APPROVAL_REQUIREMENT_INCOMPLETE,
    NO_APPLICABLE_POLICY,
    NON_CONSEQUENTIAL_DEFAULT,
    AppliedPolicy,
    Decision,
    Disposition,
    RuleSource,
)
from smf_assurance.core.facts import FACT_REGISTRY_VERSION, facts_of
from smf_assurance.core.policy import (
    NO_REQUIREMENTS,
    SEVERITY,
    Requirements,
    merge_disposition,
    merge_requirements,
)
from smf_assurance.core.projection import CompiledPolicy, PolicySet
from smf_assurance.subjects.canonical import SAFE_INTEGER_MAX, identity_of, struct_identity
from smf_assurance.subjects.envelope import OperationEnvelope, operation_hash

_CONSEQUENTIAL_PERSISTENCE: Final = frozenset({"external_persistent", "unknown"})
_CONSEQUENTIAL_REVERSIBILITY: Final = frozenset({"limited", "none", "unknown"})
_OUTCOME_CACHE_LIMIT: Final = 4096


def is_consequential(envelope: OperationEnvelope) -> bool:
    """Whether the safety floor must deny this operation when nothing covers it."""
    effects = envelope.effects
    return (
        effects.egress
        or effects.persistence in _CONSEQUENTIAL_PERSISTENCE
        or effects.reversibility in _CONSEQUENTIAL_REVERSIBILITY
        or envelope.capability == "unknown"
    )


def consequential_triggers(envelope: OperationEnvelope) -> tuple[str, ...]:
    """Which of :func:`is_consequential`'s conditions hold, as closed words.

    Issue 25: a safety-floor denial is explained by the trigger that made the
    operation consequential. Kept beside ``is_consequential`` (same sets) so
    the two cannot drift; the hot path keeps the boolean form.
    """
    effects = envelope.effects
    triggers: list[str] = []
    if effects.egress:
        triggers.append("egress")
    if effects.persistence in _CONSEQUENTIAL_PERSISTENCE:
        triggers.append(f"persistence_{effects.persistence}")
    if effects.reversibility in _CONSEQUENTIAL_REVERSIBILITY:
        triggers.append(f"reversibility_{effects.reversibility}")
    if envelope.capability == "unknown":
        triggers.append("capability_unknown")
    return tuple(triggers)


def applicable_policies(
    envelope: OperationEnvelope, policy_set: PolicySet, at_ms: int, *, confined: bool = False
) -> list[CompiledPolicy]:
    """The policies in scope, in force at ``at_ms`` and whose rule matches, strongest first
    (the ones :func:`evaluate` applies)."""
    facts = facts_of(envelope)
    applied, _ = _applied(policy_set, facts, at_ms // 1000, is_consequential(envelope), confined)
    return [policy_set.policies[i] for i in applied]


@dataclass(frozen=True, slots=True)
class _Outcome:
    """Everything in a decision that depends only on which policies applied."""

    disposition: Disposition
    requirements: Requirements
    reason_codes: tuple[str, ...]
    rule_ids: tuple[str, ...]
    rule_sources: tuple[RuleSource, ...]
    applied: tuple[AppliedPolicy, ...]
    fingerprint: str


def _satisfiable(applied: Sequence[CompiledPolicy]) -> bool:
    """Whether the strongest conditional layer itself names an approver.

    Completeness is judged only from policies at least as strong as the
    strongest conditional one, so a weaker layer can never turn a stronger
    layer's incomplete (and so denied) conditional into an approvable one by
    naming a role of its choosing (ARCHITECTURE.md, "Layered policy": a
    weaker layer never relaxes a stronger one).
    """
    top = min(p.layer_rank for p in applied if p.record.effect == "conditional")
    strong = merge_requirements(p.record.requirements for p in applied if p.layer_rank <= top)
    return strong.approval_count >= 1 and bool(strong.required_roles)


def _outcome(
    applied: Sequence[CompiledPolicy], consequential: bool, projection_id: str
) -> _Outcome:
    disposition = merge_disposition(p.record.effect for p in applied)
    requirements = merge_requirements(p.record.requirements for p in applied)
    reasons: list[str] = []
    for policy in sorted(applied, key=lambda p: -SEVERITY[p.record.effect]):
        if policy.record.reason_code not in reasons:
            reasons.append(policy.record.reason_code)
    if disposition is None:
        disposition = "deny" if consequential else "allow"
        reasons = [NO_APPLICABLE_POLICY if consequential else NON_CONSEQUENTIAL_DEFAULT]
    elif disposition == "conditional" and not _satisfiable(applied):
        disposition = "deny"
        reasons.insert(0, APPROVAL_REQUIREMENT_INCOMPLETE)
    if disposition == "deny":
        requirements = NO_REQUIREMENTS

    sources = sorted({(p.record.rule_id, p.source_hash) for p in applied})
    records = tuple(
        AppliedPolicy(
            policy_id=p.record.policy_id,
            layer=p.record.layer,
            rule_id=p.record.rule_id,
            effect=p.record.effect,
            reason_code=p.record.reason_code,
        )
        for p in applied
    )
    fingerprint = identity_of(
        {
            "fact_registry_version": FACT_REGISTRY_VERSION,
            "projection_id": projection_id,
            "applied": [[a.policy_id, a.layer, a.effect] for a in records],
        }
    )
    return _Outcome(
        disposition=disposition,
        requirements=requirements,
        reason_codes=tuple(reasons),
        rule_ids=tuple(rule_id for rule_id, _ in sources),
        rule_sources=tuple(RuleSource(rule_id=r, source_hash=h) for r, h in sources),
        applied=records,
        fingerprint=fingerprint,
    )


def _outcome_of(policy_set: PolicySet, applied: tuple[int, ...], consequential: bool) -> _Outcome:
    key = (applied, consequential)
    outcome: _Outcome | None = policy_set.outcomes.get(key)
    if outcome is None:
        policies = policy_set.policies
        outcome = _outcome([policies[i] for i in applied], consequential, policy_set.projection_id)
        if len(policy_set.outcomes) < _OUTCOME_CACHE_LIMIT:
            policy_set.outcomes[key] = outcome
    return outcome


def _applied(
    policy_set: PolicySet,
    facts: Mapping[str, Any],
    at_seconds: int,
    consequential: bool,
    confined: bool,
) -> tuple[tuple[int, ...], _Outcome]:
    """The indices of the policies that apply, and their outcome. A confinement policy
    applies only for a runtime not confined, and only where the others do not deny."""
    policies = policy_set.policies
    applied = tuple(
        i for i in policy_set.index.candidates(facts) if policies[i].check(facts, at_seconds)
    )
    gated = policy_set.unconfined_only
    if gated:
        others = tuple(i for i in applied if i not in gated)
        if len(others) != len(applied):
            outcome = _outcome_of(policy_set, others, consequential)
            if confined or outcome.disposition == "deny":
                return others, outcome
    return applied, _outcome_of(policy_set, applied, consequential)


def evaluate(
    envelope: OperationEnvelope,
    policy_set: PolicySet,
    *,
    at_ms: int,
    operation_id: str | None = None,
    op_hash: str | None = None,
    confined: bool = False,
) -> Decision:
    """Decide one operation. ``op_hash`` may be passed when the caller computed it;
    ``confined``: the gate holds the proposing runtime as confined (its launcher's
    fresh attestation names the runtime's attested process)."""
    if not 0 <= at_ms <= SAFE_INTEGER_MAX:
        raise ValueError("evaluation time is outside the representable range")
    op_hash = op_hash or operation_hash(envelope)
    operation_id = operation_id or "op-" + op_hash.removeprefix("sha256:")[:32]
    facts = facts_of(envelope)
    consequential = is_consequential(envelope)
    _, outcome = _applied(policy_set, facts, at_ms // 1000, consequential, confined)
    decision_id = struct_identity(
        {
            "operation_id": operation_id,
            "operation_hash": op_hash,
            "release_id": policy_set.release_id,
            "projection_id": policy_set.projection_id,
            "policy_fingerprint": outcome.fingerprint,
            "evaluated_at_ms": at_ms,
        }
    )
    return Decision(
        schema="smf.decision/1",
        decision_id=decision_id,
        operation_id=operation_id,
        operation_hash=op_hash,
        release_id=policy_set.release_id,
        release_sequence=policy_set.release_sequence,
        projection_id=policy_set.projection_id,
        policy_fingerprint=outcome.fingerprint,
        disposition=outcome.disposition,
        consequential=consequential,
        requirements=outcome.requirements,
        rule_ids=outcome.rule_ids,
        rule_sources=outcome.rule_sources,
        applied_policies=outcome.applied,
        reason_codes=outcome.reason_codes,
        evaluated_at_ms=at_ms,
    )
