"""Which rules the approver is shown, and in whose words ("each rule that
requires approval with its title, statement and citation from the verified release").

Pure: the shipped scenario release's enforcement and analysis projections, the real
evaluator's decision for the court filing, and ``rules_requiring_approval``. The view
over the bus, the console and the CLI are proven in ``test_console.py``,
``test_console_browser.py`` and ``test_cli_ops.py``.

What these tests prove: only rules of conditional policies that applied are shown (an
allow policy that applied too is not a rule requiring approval); each is worded from
the deciding release's analysis projection and from no other release's.
What they do not prove: anything over the bus (see the files above).
"""

from __future__ import annotations

import msgspec

from smf_assurance.core.decision import AppliedPolicy, Decision
from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.projection import AnalysisProjection, decode_analysis
from smf_assurance.governance.projections import SCENARIO_PROJECTION, load_policy_set, package_path
from smf_assurance.governance.scenarios_catalog import load_scenarios
from smf_assurance.pipeline.chain.approvals import rules_requiring_approval
from smf_assurance.subjects.approvals import RuleShown

TRANSMISSION = "urn:smf:rule:scenario:attorney-approval-transmission"
CONFIDENTIAL = "urn:smf:rule:scenario:confidential-external-egress"
INTERNAL_READ = "urn:smf:rule:scenario:internal-read"


def court_filing() -> Decision:
    scenario = next(s for s in load_scenarios() if s.name == "1-court-filing-approval")
    return evaluate(scenario.envelope, load_policy_set(), at_ms=1_780_000_000_000)


def shipped_analysis() -> AnalysisProjection:
    folder = package_path(SCENARIO_PROJECTION)
    return decode_analysis((folder / "analysis.json").read_bytes())


def test_each_conditional_rule_is_worded_from_the_deciding_release() -> None:
    decision = court_filing()
    analysis = shipped_analysis()
    words = {r.rule_id: r for r in analysis.rules}
    shown = rules_requiring_approval(decision, analysis)
    assert [r.rule_id for r in shown] == [TRANSMISSION, CONFIDENTIAL]
    for rule in shown:
        source = words[rule.rule_id]
        assert (rule.title, rule.statement, rule.citation) == (
            source.title,
            source.statement,
            source.citation,
        )


def test_a_rule_of_an_allow_policy_that_applied_too_is_not_shown() -> None:
    decision = court_filing()
    allow = AppliedPolicy(
        policy_id="customer.acme.internal-read",
        layer="customer",
        rule_id=INTERNAL_READ,
        effect="allow",
        reason_code="internal_read",
    )
    both = msgspec.structs.replace(
        decision,
        applied_policies=(*decision.applied_policies, allow),
        rule_ids=tuple(sorted((*decision.rule_ids, INTERNAL_READ))),
    )
    shown = rules_requiring_approval(both, shipped_analysis())
    assert INTERNAL_READ not in {r.rule_id for r in shown}
    assert {r.rule_id for r in shown} == {CONFIDENTIAL, TRANSMISSION}


def test_another_releases_words_are_never_used() -> None:
    decision = court_filing()
    analysis = shipped_analysis()
    for other in (
        msgspec.structs.replace(analysis, release_sequence=analysis.release_sequence + 1),
        msgspec.structs.replace(analysis, release_id=analysis.release_id + "-other"),
        None,
    ):
        shown = rules_requiring_approval(decision, other)
        assert shown == (RuleShown(rule_id=TRANSMISSION), RuleShown(rule_id=CONFIDENTIAL))
