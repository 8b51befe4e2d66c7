"""A pending announcement as the gate publishes it, for tests that need one without a
held proposal (``smf_assurance.subjects.approvals.PendingAnnouncement``)."""

from __future__ import annotations

from smf_assurance.subjects.approvals import PendingAnnouncement


def pending_announcement(
    tenant: str, approval_id: str, *, created_at_ms: int = 1, expires_at_ms: int = 2
) -> PendingAnnouncement:
    """A court filing held for a licensed attorney of ``tenant``."""
    return PendingAnnouncement(
        schema="smf.approval-pending/2",
        approval_id=approval_id,
        tenant_id=tenant,
        required_roles=("licensed_attorney",),
        required_approvals=1,
        created_at_ms=created_at_ms,
        expires_at_ms=expires_at_ms,
        capability="external.transmit",
        channel="electronic_filing",
        locality="external",
        native_tool="court_efile",
        rule_ids=(),
        reason_codes=(),
    )
