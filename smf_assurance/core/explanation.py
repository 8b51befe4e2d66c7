"""Decisions explained in words (issue 25).

Given what a decision carries, or what the evidence ledger keeps of it, and
the two projections of the release that decided it, say which policies
applied and from which layer, the rule each rests on in the release's own
words (title, statement, citation), which requirement came from which layer,
and for a safety-floor denial which trigger made the operation consequential.

Nothing raw goes in or comes out: identities, closed words, reason codes and
the release's own text (ARCHITECTURE.md, "Evidence").

Two sources, one function (:func:`explain`):

- A ``Decision`` (``eval``) names its applied policies; with the envelope at
  hand the caller also passes the consequential triggers
  (``smf_assurance.core.evaluator.consequential_triggers``).
- A ledger entry (``explain DECISION_ID``) keeps the disposition and the
  reason codes, not the applied policies, the requirements or the effects.
  Every applied policy's reason code is among the decision's
  (``smf_assurance.core.evaluator._outcome``), so the applied policies are among
  the release's policies carrying those codes whose effect the disposition
  admits and whose scope the decision's tenant fits. A code that only one such
  policy carries names it for certain; otherwise every candidate is listed
  and marked uncertain. What the ledger could not say is listed in ``gaps``,
  never guessed.

A projection other than the one the decision names is refused
(:class:`ExplanationError`): a decision is never explained under another release.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Literal

import msgspec

from smf_assurance.core.decision import (
    APPROVAL_REQUIREMENT_INCOMPLETE,
    NO_APPLICABLE_POLICY,
    NON_CONSEQUENTIAL_DEFAULT,
    AppliedPolicy,
    Decision,
    Disposition,
)
from smf_assurance.core.policy import LAYER_RANK, merge_requirements
from smf_assurance.core.projection import (
    AnalysisProjection,
    AnalysisRule,
    EnforcementProjection,
    PolicyRecord,
    projection_id,
)

EXPLANATION_SCHEMA: Final = "smf.explanation/1"

Basis = Literal["decision", "ledger"]
RequirementName = Literal[
    "approval_count", "required_roles", "ttl_seconds", "exact_action_binding", "one_shot"
]

GAP_APPLIED_FROM_REASONS: Final = "applied_policies_matched_by_reason_code"
"""The ledger keeps no applied policies; they were matched by reason code."""
GAP_SEVERAL_POLICIES: Final = "reason_code_carried_by_several_policies"
"""A reason code is carried by more than one policy that could have applied."""
GAP_REQUIREMENTS: Final = "merged_requirements_not_recorded"
"""The ledger keeps no requirements; the origins are the matched policies' own asks."""
GAP_TRIGGER: Final = "consequential_trigger_not_recorded"
"""The ledger keeps no effects, so which trigger made the operation consequential is unknown."""
GAP_TENANT: Final = "tenant_scope_not_checked"
"""Tenant-scoped candidates could not be checked against the decision's tenant."""
GAP_MATTER_ACTOR: Final = "matter_or_actor_scope_not_checked"
"""The ledger keeps no matter or actor, so such scopes could not be checked."""

_ADMITTED_EFFECTS: Final[dict[str, frozenset[str]]] = {
    "allow": frozenset({"allow"}),
    "conditional": frozenset({"allow", "conditional"}),
    "deny": frozenset({"allow", "conditional", "deny"}),
}
"""Effects a policy that applied can have under each disposition (deny dominates)."""


class ExplanationError(ValueError):
    """The projections given are not the release the decision was made under."""


class DecisionRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What is known of one decision: from a ``Decision`` or from a ledger entry.

    ``applied``, ``consequential`` and ``triggers`` are None when the source
    does not keep them (a ledger entry keeps none of the three).
    """

    decision_id: str
    projection_id: str
    disposition: Disposition
    reason_codes: tuple[str, ...]
    applied: tuple[AppliedPolicy, ...] | None = None
    consequential: bool | None = None
    triggers: tuple[str, ...] | None = None


class RuleText(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A rule as the release's analysis projection words it."""

    rule_id: str
    title: str
    statement: str
    citation: str
    authority_type: str
    locator: str
    source_hash: str


class PolicyExplained(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    policy_id: str
    layer: str
    effect: str
    reason_code: str
    rule: RuleText
    certain: bool
    """False when the ledger's reason code is carried by several candidate policies."""


class RequirementOrigin(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One policy's ask for one requirement (a role is one row per role)."""

    requirement: RequirementName
    value: int | bool | str
    policy_id: str
    layer: str
    decisive: bool
    """The merge of the listed policies kept this value (max count, min TTL, any
    role, any true flag): ARCHITECTURE.md, "Layered policy"."""


class SafetyFloor(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The default when no policy applied: deny if consequential, else allow."""

    reason_code: str
    consequential: bool
    triggers: tuple[str, ...] | None
    """Which conditions made it consequential; None when the source does not keep them."""


class Explanation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.explanation/1"]
    basis: Basis
    decision_id: str
    release_id: str
    release_sequence: int
    projection_id: str
    disposition: Disposition
    reason_codes: tuple[str, ...]
    policies: tuple[PolicyExplained, ...]
    requirements: tuple[RequirementOrigin, ...]
    safety_floor: SafetyFloor | None
    other_reasons: tuple[str, ...]
    """Reason codes no listed policy carries (the gate's own, e.g.
    ``approval_requirement_incomplete``, ``evidence_store_unavailable``)."""
    gaps: tuple[str, ...]


def record_of(decision: Decision, triggers: tuple[str, ...] | None = None) -> DecisionRecord:
    """Everything a Decision says about itself; ``triggers`` when the envelope is known."""
    return DecisionRecord(
        decision_id=decision.decision_id,
        projection_id=decision.projection_id,
        disposition=decision.disposition,
        reason_codes=decision.reason_codes,
        applied=decision.applied_policies,
        consequential=decision.consequential,
        triggers=triggers,
    )


REASON_WORDS: Final[dict[str, str]] = {
    APPROVAL_REQUIREMENT_INCOMPLETE: "a conditional policy applied but its layer names no "
    "approver, so it fails closed as a denial",
    "attorney_approval_required_for_transmission": "a licensed attorney must approve a "
    "transmission to a client or a court before it leaves the firm",
    "customer_transmission_review_window": "the client's own policy asks that every "
    "transmission be reviewed and approved before it is sent",
    "confidential_egress_requires_attorney_approval": "confidential or privileged "
    "information may leave the firm only with a licensed attorney's approval",
}
"""Reason codes in plain English: the one table the approver's desk (issue 23: reason
codes were shown as snake_case, unexplained) and ``explain`` (issue 25) both read. A
code without an entry is shown as the code itself, never with words guessed for it."""


def reason_words(code: str) -> str | None:
    """The plain-English words for ``code``, or None when :data:`REASON_WORDS` has none."""
    return REASON_WORDS.get(code)


def rule_texts(analysis: AnalysisProjection) -> dict[str, RuleText]:
    """Every rule the analysis projection describes, by id, in the release's own words.

    The one lookup of a rule's title, statement and citation: ``explain`` (issue 25)
    and the approver's desk (issue 23, "each rule that requires approval with its
    title, statement and citation from the verified release") both use it. A rule id
    missing here is one the release does not describe.
    """
    return {rule.rule_id: _rule_text(rule) for rule in analysis.rules}


def _rule_text(rule: AnalysisRule) -> RuleText:
    return RuleText(
        rule_id=rule.rule_id,
        title=rule.title,
        statement=rule.statement,
        citation=rule.citation,
        authority_type=rule.authority_type,
        locator=rule.locator,
        source_hash=rule.source_hash,
    )


def _check_release(
    record: DecisionRecord, enforcement: EnforcementProjection, analysis: AnalysisProjection
) -> None:
    actual = projection_id(enforcement)
    if actual != record.projection_id:
        raise ExplanationError(
            f"decision {record.decision_id} was made under projection {record.projection_id}, "
            f"not {actual}"
        )
    if (analysis.release_id, analysis.release_sequence) != (
        enforcement.release_id,
        enforcement.release_sequence,
    ):
        raise ExplanationError(
            f"analysis projection is of release {analysis.release_id} "
            f"#{analysis.release_sequence}, not {enforcement.release_id} "
            f"#{enforcement.release_sequence}"
        )


def _from_decision(
    applied: Sequence[AppliedPolicy], enforcement: EnforcementProjection
) -> list[tuple[PolicyRecord, bool]]:
    records = {p.policy_id: p for p in (*enforcement.policies, *enforcement.confinement)}
    found = []
    for policy in applied:
        record = records.get(policy.policy_id)
        if record is None:
            raise ExplanationError(f"policy {policy.policy_id} is not in this release")
        found.append((record, True))
    return found


def _matched(
    record: DecisionRecord,
    enforcement: EnforcementProjection,
    in_tenant: Callable[[str], bool] | None,
) -> list[tuple[PolicyRecord, bool]]:
    """The release's policies that may have applied, by reason code (module docstring)."""
    if NO_APPLICABLE_POLICY in record.reason_codes or NON_CONSEQUENTIAL_DEFAULT in (
        record.reason_codes
    ):
        return []
    admitted = _ADMITTED_EFFECTS[record.disposition]
    codes = set(record.reason_codes)
    candidates = [
        p
        for p in (*enforcement.policies, *enforcement.confinement)
        if p.reason_code in codes
        and p.effect in admitted
        and (p.scope.tenant_id is None or in_tenant is None or in_tenant(p.scope.tenant_id))
    ]
    carriers: dict[str, int] = {}
    for policy in candidates:
        carriers[policy.reason_code] = carriers.get(policy.reason_code, 0) + 1
    candidates.sort(key=lambda p: (LAYER_RANK[p.layer], p.policy_id))
    return [(p, carriers[p.reason_code] == 1) for p in candidates]


def _asks(policy: PolicyRecord) -> list[tuple[RequirementName, int | bool | str]]:
    """What one policy asks for, one pair per requirement (one per role)."""
    spec = policy.requirements
    asks: list[tuple[RequirementName, int | bool | str]] = []
    if spec.approval_count is not None:
        asks.append(("approval_count", spec.approval_count))
    asks.extend(("required_roles", role) for role in spec.required_roles)
    if spec.ttl_seconds is not None:
        asks.append(("ttl_seconds", spec.ttl_seconds))
    if spec.exact_action_binding is not None:
        asks.append(("exact_action_binding", spec.exact_action_binding))
    if spec.one_shot is not None:
        asks.append(("one_shot", spec.one_shot))
    return asks


def _origins(policies: Sequence[PolicyRecord]) -> list[RequirementOrigin]:
    merged = merge_requirements(p.requirements for p in policies)
    kept: dict[str, Callable[[int | bool | str], bool]] = {
        "approval_count": lambda v: v == merged.approval_count,
        "required_roles": lambda _v: True,
        "ttl_seconds": lambda v: v == merged.ttl_seconds,
        "exact_action_binding": bool,
        "one_shot": bool,
    }
    return [
        RequirementOrigin(name, value, policy.policy_id, policy.layer, kept[name](value))
        for policy in policies
        for name, value in _asks(policy)
    ]


def _floor(record: DecisionRecord) -> SafetyFloor | None:
    if NO_APPLICABLE_POLICY in record.reason_codes:
        return SafetyFloor(NO_APPLICABLE_POLICY, True, record.triggers)
    if NON_CONSEQUENTIAL_DEFAULT in record.reason_codes:
        return SafetyFloor(NON_CONSEQUENTIAL_DEFAULT, False, ())
    return None


def _gaps(
    basis: Basis,
    record: DecisionRecord,
    matched: Sequence[tuple[PolicyRecord, bool]],
    floor: SafetyFloor | None,
    in_tenant: Callable[[str], bool] | None,
) -> tuple[str, ...]:
    gaps: list[str] = []
    if basis == "ledger" and floor is None:
        gaps.append(GAP_APPLIED_FROM_REASONS)
    if not all(certain for _, certain in matched):
        gaps.append(GAP_SEVERAL_POLICIES)
    if basis == "ledger" and record.disposition == "conditional":
        gaps.append(GAP_REQUIREMENTS)
    if floor is not None and floor.consequential and floor.triggers is None:
        gaps.append(GAP_TRIGGER)
    if basis == "ledger" and in_tenant is None and any(p.scope.tenant_id for p, _ in matched):
        gaps.append(GAP_TENANT)
    if basis == "ledger" and any(p.scope.matter_id or p.scope.actor_id for p, _ in matched):
        gaps.append(GAP_MATTER_ACTOR)
    return tuple(gaps)


def explain(
    record: DecisionRecord,
    enforcement: EnforcementProjection,
    analysis: AnalysisProjection,
    *,
    in_tenant: Callable[[str], bool] | None = None,
) -> Explanation:
    """Explain one decision under the release whose projections are given.

    ``in_tenant(tenant_id)`` answers whether a policy's scope tenant is the
    decision's tenant (the ledger keeps only its pseudonym, so the caller,
    who may hold the pseudonym key, decides); None when that cannot be told.
    Raises :class:`ExplanationError` when the projections are not the
    decision's release.
    """
    _check_release(record, enforcement, analysis)
    basis: Basis = "decision" if record.applied is not None else "ledger"
    if record.applied is not None:
        matched = _from_decision(record.applied, enforcement)
    else:
        matched = _matched(record, enforcement, in_tenant)
    rules = rule_texts(analysis)
    policies = []
    for policy, certain in matched:
        rule = rules.get(policy.rule_id)
        if rule is None:
            raise ExplanationError(f"rule {policy.rule_id} is not in the analysis projection")
        policies.append(
            PolicyExplained(
                policy_id=policy.policy_id,
                layer=policy.layer,
                effect=policy.effect,
                reason_code=policy.reason_code,
                rule=rule,
                certain=certain,
            )
        )
    floor = _floor(record)
    carried = {p.reason_code for p in policies}
    if floor is not None:
        carried.add(floor.reason_code)
    requirements = () if record.disposition == "deny" else tuple(_origins([p for p, _ in matched]))
    return Explanation(
        schema=EXPLANATION_SCHEMA,
        basis=basis,
        decision_id=record.decision_id,
        release_id=enforcement.release_id,
        release_sequence=enforcement.release_sequence,
        projection_id=record.projection_id,
        disposition=record.disposition,
        reason_codes=record.reason_codes,
        policies=tuple(policies),
        requirements=requirements,
        safety_floor=floor,
        other_reasons=tuple(code for code in record.reason_codes if code not in carried),
        gaps=_gaps(basis, record, matched, floor, in_tenant),
    )
