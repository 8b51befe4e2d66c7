"""An Explanation (``smf_assurance.core.explanation``) in words for a person, or as JSON.

Issue 25: ``explain DECISION_ID`` and ``eval --explain`` print the same
explanation; this module is the one way both say it. Every sentence is built
from identities, closed words and the release's own text; the gap sentences
say precisely what the source did not keep, never a guess.
"""

from __future__ import annotations

from typing import Final

from smf_assurance.core.explanation import (
    GAP_APPLIED_FROM_REASONS,
    GAP_MATTER_ACTOR,
    GAP_REQUIREMENTS,
    GAP_SEVERAL_POLICIES,
    GAP_TENANT,
    GAP_TRIGGER,
    Explanation,
    PolicyExplained,
    reason_words,
)
from smf_assurance.ops.cli.output import say, table

GAP_WORDS: Final[dict[str, str]] = {
    GAP_APPLIED_FROM_REASONS: "the ledger keeps no applied policies: they are the release's "
    "policies carrying the decision's reason codes",
    GAP_SEVERAL_POLICIES: "a reason code is carried by several policies that could have "
    "applied; each is listed as one of several",
    GAP_REQUIREMENTS: "the ledger keeps no requirements: the rows are what each matched "
    "policy asks for",
    GAP_TRIGGER: "the ledger keeps no operation effects, so which trigger made the operation "
    "consequential is not known (`eval --explain` on the envelope names it)",
    GAP_TENANT: "the decision's tenant could not be checked against tenant-scoped policies "
    "(no tenant pseudonym key in the state)",
    GAP_MATTER_ACTOR: "the ledger keeps no matter or actor: matter- and actor-scoped policies "
    "are listed unchecked",
}

TRIGGER_WORDS: Final[dict[str, str]] = {
    "egress": "it sends data out (egress)",
    "persistence_external_persistent": "it persists outside the firm",
    "persistence_unknown": "where it persists is unknown",
    "reversibility_limited": "it can be undone only in part",
    "reversibility_none": "it cannot be undone",
    "reversibility_unknown": "whether it can be undone is unknown",
    "capability_unknown": "its capability is unknown",
}

OWN_REASON: Final = "carried by no policy of this release (the gate's own word)"


def _matched(policy: PolicyExplained, basis: str) -> str:
    if basis == "decision":
        return "applied"
    return "by reason code" if policy.certain else "one of several"


def _policy_row(policy: PolicyExplained, basis: str) -> tuple[str, ...]:
    p = policy
    return (p.policy_id, p.layer, p.effect, p.reason_code, _matched(p, basis), p.rule.rule_id)


def floor_sentence(explanation: Explanation) -> str | None:
    floor = explanation.safety_floor
    if floor is None:
        return None
    if not floor.consequential:
        return (
            "no policy applied and the operation is not consequential: "
            f"allowed ({floor.reason_code})"
        )
    if floor.triggers is None:
        why = "which trigger made it consequential is not recorded"
    else:
        why = "; ".join(TRIGGER_WORDS.get(t, t) for t in floor.triggers)
    return (
        f"no policy applied and the operation is consequential ({why}): "
        f"denied ({floor.reason_code})"
    )


def print_explanation(explanation: Explanation) -> None:
    """The explanation as a person reads it: who decided, on which rule, asking what."""
    x = explanation
    table(
        ("field", "value"),
        [
            ("decision", x.decision_id),
            ("disposition", x.disposition),
            ("reason codes", x.reason_codes),
            ("release", f"{x.release_id} (seq {x.release_sequence})"),
            ("projection", x.projection_id),
        ],
    )
    if x.policies:
        say("")
        table(
            ("policy", "layer", "effect", "reason code", "matched", "rule"),
            [_policy_row(p, x.basis) for p in x.policies],
        )
        say("")
        seen: set[str] = set()
        for policy in x.policies:
            rule = policy.rule
            if rule.rule_id in seen:
                continue
            seen.add(rule.rule_id)
            say(f"{rule.rule_id}: {rule.title}")
            say(f"  {rule.statement}")
            say(f"  citation: {rule.citation} ({rule.authority_type}; {rule.locator})")
    if x.requirements:
        say("")
        table(
            ("requirement", "value", "policy", "layer", "kept"),
            [(r.requirement, r.value, r.policy_id, r.layer, r.decisive) for r in x.requirements],
        )
    floor = floor_sentence(x)
    if floor is not None:
        say("")
        say(f"safety floor: {floor}")
    for code in x.other_reasons:
        say(f"reason {code}: {reason_words(code) or OWN_REASON}")
    for gap in x.gaps:
        say(f"not known: {GAP_WORDS.get(gap, gap)}")
