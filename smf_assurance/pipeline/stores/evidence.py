"""The one place evidence entries, verdicts and signature refusals are built.

The gate and the approval desk both write to the ledger and both answer
runtimes; they used to build entries and verdicts each their own way, which
two copies kept in step by hand (issue 19). Here:

- ``EvidenceWriter`` turns a decision, an approval binding or a direct-allow
  order (``smf_assurance.pipeline.stores.orders``) into the
  ledger's ``EvidenceEntry`` (ARCHITECTURE.md, "Evidence": identities,
  release/projection ids, disposition, reason codes, status, pseudonymous
  tenant identity and time; never raw values). The tenant appears only as a
  keyed identifier under ``TENANT_DOMAIN``; the release only as an identity.
- ``verdict`` / ``outcome_verdict`` build the ``Verdict`` a runtime reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

import msgspec
import structlog

from smf_assurance.core.decision import Decision
from smf_assurance.core.policy import Layer
from smf_assurance.core.shadow import Difference, policy_ref, rule_ref
from smf_assurance.pipeline.stores.ledger import Beside, EvidenceError, Ledger, Receipt
from smf_assurance.pipeline.stores.ledger_schema import (
    MAX_DIFFERING,
    Disposition,
    EntryKind,
    EvidenceEntry,
    Status,
)
from smf_assurance.pipeline.stores.orders import OrderRecord
from smf_assurance.pipeline.stores.tool_calls import Stop
from smf_assurance.subjects.approvals import ApprovalBinding
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.envelope import Capability
from smf_assurance.subjects.keyed import PseudonymKey
from smf_assurance.subjects.messages import Outcome, Verdict

log = structlog.get_logger(__name__)

TENANT_DOMAIN: Final = "smf.tenant"
"""Keyed-identifier domain of tenant pseudonyms in evidence (``smf_assurance.subjects.keyed``)."""
MAX_REASONS: Final = 32
NO_PROJECTION: Final = identity_of({"projection": None})
"""The projection id of a refusal no policy decided (``EvidenceWriter.for_refusal``)."""
LEDGER_DISPOSITION: Final[dict[str, Disposition]] = {
    "allow": "allow",
    "deny": "deny",
    "conditional": "hold",
}
"""The decision core says ``conditional``; the ledger's closed vocabulary says ``hold``."""


def release_ref(release_id: str) -> str:
    """The release as an identity for evidence (the ledger holds identities only)."""
    return identity_of({"release_id": release_id})


def unique(reasons: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(reasons))


def with_reason(entry: EvidenceEntry, reason: str) -> EvidenceEntry:
    """``entry`` with ``reason`` added to its reason codes, kept within the bound (the
    added code wins over the last of the others)."""
    if reason in entry.reason_codes:
        return entry
    codes = (*entry.reason_codes[: MAX_REASONS - 1], reason)
    return msgspec.structs.replace(entry, reason_codes=codes)


@dataclass(frozen=True)
class EvidenceWriter:
    """Builds and appends evidence entries for one gate (its ledger, key and clock)."""

    ledger: Ledger
    tenant_key: PseudonymKey
    clock: Callable[[], int]

    def tenant_ref(self, tenant_id: str) -> str:
        return self.tenant_key.identifier(TENANT_DOMAIN, tenant_id)

    def for_decision(
        self,
        decision: Decision,
        tenant_ref: str,
        kind: EntryKind = "decision",
        *,
        status: Status | None = None,
        reasons: tuple[str, ...] = (),
    ) -> EvidenceEntry:
        return EvidenceEntry(
            kind=kind,
            operation_hash=decision.operation_hash,
            decision_id=decision.decision_id,
            release_id=release_ref(decision.release_id),
            projection_id=decision.projection_id,
            tenant_ref=tenant_ref,
            at=self.clock(),
            disposition=LEDGER_DISPOSITION[decision.disposition] if kind == "decision" else None,
            status=status,
            reason_codes=unique(reasons)[:MAX_REASONS],
        )

    def for_binding(
        self,
        binding: ApprovalBinding,
        status: Status | None,
        reasons: tuple[str, ...] = (),
        kind: EntryKind = "transition",
    ) -> EvidenceEntry:
        return EvidenceEntry(
            kind=kind,
            operation_hash=binding.operation_hash,
            decision_id=binding.decision_id,
            release_id=release_ref(binding.release_id),
            projection_id=binding.projection_id,
            tenant_ref=self.tenant_ref(binding.tenant_id),
            at=self.clock(),
            approval_id=binding.approval_id,
            status=status,
            reason_codes=unique(reasons)[:MAX_REASONS],
        )

    def for_order(
        self, order: OrderRecord, status: Status, reasons: tuple[str, ...] = ()
    ) -> EvidenceEntry:
        """A direct-allow order's transition: the decision's identities and the
        tenant pseudonym the order book holds (no approval id: there is none)."""
        return EvidenceEntry(
            kind="transition",
            operation_hash=order.operation_hash,
            decision_id=order.decision_id,
            release_id=release_ref(order.release_id),
            projection_id=order.projection_id,
            tenant_ref=order.tenant_ref,
            at=self.clock(),
            status=status,
            reason_codes=unique(reasons)[:MAX_REASONS],
        )

    def for_refusal(
        self,
        subject: dict[str, str],
        tenant_ref: str,
        release_id: str | None,
        reasons: tuple[str, ...],
    ) -> EvidenceEntry:
        """A denial made before any policy ran (the model gateway's admission, issue 16):
        the refused request as an identity of ``subject`` (ids only, never a prompt),
        decided under no projection."""
        operation = identity_of({"refused": subject})
        return EvidenceEntry(
            kind="decision",
            operation_hash=operation,
            decision_id=identity_of({"refusal": operation, "reasons": list(unique(reasons))}),
            release_id=release_ref(release_id or ""),
            projection_id=NO_PROJECTION,
            tenant_ref=tenant_ref,
            at=self.clock(),
            disposition="deny",
            reason_codes=unique(reasons)[:MAX_REASONS],
        )

    async def refuse(
        self,
        subject: dict[str, str],
        tenant_id: str,
        release_id: str | None,
        reasons: tuple[str, ...],
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Write a refusal (:meth:`for_refusal`) and return its reasons and receipt.
        A ledger outage adds ``evidence_store_unavailable`` and never turns the
        refusal into anything else: the caller refuses either way."""
        entry = self.for_refusal(subject, self.tenant_ref(tenant_id), release_id, reasons)
        return await self.record_refusal(entry)

    async def record_refusal(self, entry: EvidenceEntry) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Write a refusal built with :meth:`for_refusal` (whose ids a caller needed
        first, as a runtime stop does) and return its reasons and receipt, as
        :meth:`refuse` does."""
        try:
            return entry.reason_codes, ((await self.append(entry)).entry_hash,)
        except EvidenceError:
            log.error("evidence_unavailable_for_refusal")
            return (*entry.reason_codes, "evidence_store_unavailable"), ()

    def for_shadow(
        self,
        enforced: Decision,
        shadow: Decision,
        difference: Difference,
        tenant_ref: str,
        capability: Capability,
    ) -> EvidenceEntry:
        """A disagreement of a shadow release with the enforced decision (issue 25): the
        enforced decision's ids, release, disposition and reason codes, the shadow's
        release, projection, disposition and reason codes, the operation's capability
        and the differing policies and rules as identities (``policy_ref``,
        ``rule_ref``: a customer's policy id may name the customer) with their layers.
        Both sides' codes are the Decisions' own, so the two compare like for like."""
        return EvidenceEntry(
            kind="shadow",
            operation_hash=enforced.operation_hash,
            decision_id=enforced.decision_id,
            release_id=release_ref(enforced.release_id),
            projection_id=enforced.projection_id,
            tenant_ref=tenant_ref,
            at=self.clock(),
            disposition=LEDGER_DISPOSITION[enforced.disposition],
            reason_codes=unique(enforced.reason_codes)[:MAX_REASONS],
            shadow_release_id=release_ref(shadow.release_id),
            shadow_projection_id=shadow.projection_id,
            shadow_disposition=LEDGER_DISPOSITION[shadow.disposition],
            shadow_reason_codes=unique(shadow.reason_codes)[:MAX_REASONS],
            capability=capability,
            differing_policy_refs=tuple(policy_ref(p) for p in difference.policy_ids)[
                :MAX_DIFFERING
            ],
            differing_rule_refs=tuple(rule_ref(r) for r in difference.rule_ids)[:MAX_DIFFERING],
            differing_layers=cast("tuple[Layer, ...]", difference.layers[:MAX_DIFFERING]),
        )

    def for_stop(
        self, stop: Stop, release_id: str | None, reasons: tuple[str, ...]
    ) -> EvidenceEntry:
        """What became of a runtime stop (issue 16, item 3: an operator's clear is
        evidence): a transition of the stop's own refusal (its operation and decision
        ids, its tenant pseudonym), under the release in force; ids only."""
        return EvidenceEntry(
            kind="transition",
            operation_hash=stop.operation_hash,
            decision_id=stop.decision_id,
            release_id=release_ref(release_id or ""),
            projection_id=NO_PROJECTION,
            tenant_ref=stop.tenant_ref,
            at=self.clock(),
            reason_codes=unique(reasons)[:MAX_REASONS],
        )

    async def append(self, entry: EvidenceEntry) -> Receipt:
        """Write one entry; raises ``EvidenceError`` (callers fail closed)."""
        return await self.ledger.append(entry)

    async def append_beside(self, entry: EvidenceEntry, beside: Beside) -> tuple[Receipt, Any]:
        """Write one entry and ``beside`` in one transaction (issue 20); raises
        ``EvidenceError`` when the entry did not commit (then neither did ``beside``)."""
        return await self.ledger.append_beside(entry, beside)


def verdict(
    proposal_id: str,
    outcome: Outcome,
    reasons: tuple[str, ...],
    decision: Decision | None = None,
    evidence: tuple[str, ...] = (),
) -> Verdict:
    """The Verdict a runtime reads for its proposal (signed by the caller)."""
    return Verdict(
        schema="smf.verdict/1",
        proposal_id=proposal_id,
        outcome=outcome,
        reason_codes=unique(reasons),
        decision_id=decision.decision_id if decision else None,
        operation_hash=decision.operation_hash if decision else None,
        release_id=decision.release_id if decision else None,
        evidence=evidence,
    )


def outcome_verdict(
    binding: ApprovalBinding, outcome: Outcome, reasons: tuple[str, ...]
) -> Verdict:
    """The final Verdict for a held proposal, published to its outcome subject."""
    return Verdict(
        schema="smf.verdict/1",
        proposal_id="",
        outcome=outcome,
        reason_codes=unique(reasons),
        decision_id=binding.decision_id,
        operation_hash=binding.operation_hash,
        release_id=binding.release_id,
        approval_id=binding.approval_id,
    )
