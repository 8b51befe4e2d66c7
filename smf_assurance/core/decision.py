"""The Decision: the frozen record of one evaluation.

Everything a later stage, an approver or an auditor needs to know about why
an operation was allowed, held or denied, and nothing it could be tempted to
re-derive: identities, the release and projection used, the merged
requirements, the rules and their source hashes, the policies applied and
the reason codes, at the time the injected clock gave.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from smf_assurance.core.policy import Requirements

Disposition = Literal["allow", "conditional", "deny"]

NO_APPLICABLE_POLICY: Final = "no_applicable_policy_for_consequential_operation"
NON_CONSEQUENTIAL_DEFAULT: Final = "no_applicable_policy_non_consequential"
APPROVAL_REQUIREMENT_INCOMPLETE: Final = "approval_requirement_incomplete"


class RuleSource(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    rule_id: str
    source_hash: str


class AppliedPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    policy_id: str
    layer: str
    rule_id: str
    effect: str
    reason_code: str


class Decision(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.decision/1"]
    decision_id: str
    operation_id: str
    operation_hash: str
    release_id: str
    release_sequence: int
    projection_id: str
    policy_fingerprint: str
    disposition: Disposition
    consequential: bool
    requirements: Requirements
    rule_ids: tuple[str, ...]
    rule_sources: tuple[RuleSource, ...]
    applied_policies: tuple[AppliedPolicy, ...]
    reason_codes: tuple[str, ...]
    evaluated_at_ms: int
