"""The rules of exact-action approval, pure: no store, no bus, no clock.

ARCHITECTURE.md, "Exact-action approval". The approval desk
(``smf_assurance.pipeline.chain.approvals``) does the I/O; every judgement it makes is a
function here, so each can be tested and audited alone (STYLE.md,
python-tuf: one named error per threat, the rule in the docstring).

Invariants:

- ``bind``: the binding is recomputed from what the gate holds (arguments,
  content, destination) and the release in force, never copied from the
  proposal's envelope, so a claim checks the bytes that would be sent.
- ``approver_of``: a resolution counts only when an ``approver`` key signed
  it under the resolver's own name.
- ``check_entitled``: the roster gives the approver the binding's tenant and
  every required role. The same check guards showing the content and
  resolving, so nobody sees what they could not approve.
- ``check_not_requester``: nobody approves their own request.
- ``signed_by_executor``: a report settles an approval only when signed by
  the party the order was given to (``execution_rules.signed_by``, the rule
  every order of the gate is settled by, approved or allowed directly).
- ``settlement`` (``execution_rules``): confirmed -> consumed, failed ->
  failed, ambiguous -> execution_unknown; a reported params mismatch is a
  broken binding.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from smf_assurance.core.decision import Decision
from smf_assurance.core.execution_rules import (
    BINDING_BROKEN,
    PARAMS_MISMATCH,
    REPORT_OUTCOME,
    Executor,
    Finish,
    settlement,
    signed_by,
)
from smf_assurance.core.normalize import Normalized
from smf_assurance.subjects.approvals import ApprovalBinding, approval_id_for
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.envelope import (
    OperationEnvelope,
    content_hash_of,
    destination_identity_of,
)
from smf_assurance.subjects.messages import ExecutionReport, Proposal, order_id_for
from smf_assurance.subjects.registry import Principal

__all__ = [
    "BINDING_BROKEN",
    "PARAMS_MISMATCH",
    "REPORT_OUTCOME",
    "ApprovalRuleError",
    "Finish",
    "HeldAction",
    "approver_of",
    "bind",
    "check_entitled",
    "check_may_resolve",
    "check_not_requester",
    "executor_of",
    "settlement",
    "signed_by_executor",
]


class ApprovalRuleError(Exception):
    """A rule refused; the subclass names the threat, ``reason_code`` the word for it."""

    reason_code: str = "approval_refused"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.reason_code)


class SignerRoleMismatchError(ApprovalRuleError):
    """No ``approver`` key signed: a runtime, connector or gate key cannot approve."""

    reason_code = "signer_role_mismatch"


class ResolverIdentityMismatchError(ApprovalRuleError):
    """An approver's key signed under another approver's name: no borrowed identity."""

    reason_code = "resolver_identity_mismatch"


class NotEntitledForTenantError(ApprovalRuleError):
    """The roster does not give this approver the binding's tenant."""

    reason_code = "resolver_not_entitled_for_tenant"


class LacksRequiredRoleError(ApprovalRuleError):
    """The approver lacks a role the decision requires (e.g. ``licensed_attorney``)."""

    reason_code = "resolver_lacks_required_role"


class SelfApprovalError(ApprovalRuleError):
    """The requesting actor tried to approve their own request."""

    reason_code = "self_approval"


class HeldAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The exact action a decision allows: what the gate keeps while an approval is
    open (purged at every terminal state), and what every order is built from
    (``contracts.order_request``), allowed directly or approved once."""

    proposal_id: str
    connector_id: str | None
    native_tool: str
    arguments: dict[str, Any]
    content: str
    destination_address: str
    envelope: OperationEnvelope
    decision: Decision
    runtime_id: str | None = None
    """The runtime that proposed the action (its proposal's ``runtime_id``, which the
    gate checked against the signer's registry entry). For a runtime-executed
    action its key alone may report the execution; ``None`` (a hold written before
    this field existed) lets no runtime report settle it."""

    @classmethod
    def of(cls, proposal: Proposal, normalized: Normalized, decision: Decision) -> HeldAction:
        """The action ``proposal`` asks for, as the gate normalized and decided it: the
        signed arguments, the normalized content and destination, never the
        proposal's own claims about them."""
        return cls(
            proposal_id=proposal.proposal_id,
            connector_id=normalized.connector_id,
            native_tool=proposal.native_tool,
            arguments=proposal.arguments,
            content=normalized.content,
            destination_address=normalized.destination_address,
            envelope=normalized.envelope,
            decision=decision,
            runtime_id=proposal.runtime_id,
        )


def bind(
    held: HeldAction,
    release_id: str,
    projection_id: str,
    created_at_ms: int,
    expires_at_ms: int,
) -> ApprovalBinding:
    """The binding, recomputed from what the gate holds and the release in force.

    Hashes are recomputed from the held arguments, content and destination,
    not copied from the envelope, so the claim checks the bytes that would
    actually be sent: the claim re-checks the complete binding.
    """
    envelope, decision = held.envelope, held.decision
    professional = envelope.professional
    channel = envelope.destination.channel
    return ApprovalBinding(
        approval_id=approval_id_for(decision.decision_id),
        decision_id=decision.decision_id,
        operation_hash=decision.operation_hash,
        canonical_args_hash=identity_of(held.arguments),
        content_hash=content_hash_of(held.content),
        destination_identity_hash=destination_identity_of(channel, held.destination_address),
        release_id=release_id,
        projection_id=projection_id,
        policy_fingerprint=decision.policy_fingerprint,
        tenant_id=professional.tenant_id,
        organization_id=professional.organization_id,
        matter_id=professional.matter_id,
        actor_id=professional.actor_id,
        required_roles=decision.requirements.required_roles,
        required_approvals=max(1, decision.requirements.approval_count),
        created_at_ms=created_at_ms,
        expires_at_ms=expires_at_ms,
    )


def approver_of(signers: Iterable[Principal], resolver_id: str) -> Principal:
    """The approver who signed as ``resolver_id``; raises the error naming the misuse."""
    approvers = [p for p in signers if p.entry.role == "approver"]
    if not approvers:
        raise SignerRoleMismatchError
    for principal in approvers:
        if principal.name == resolver_id:
            return principal
    raise ResolverIdentityMismatchError


def check_entitled(principal: Principal, binding: ApprovalBinding) -> None:
    """The roster gives ``principal`` this binding's tenant and every required role."""
    if binding.tenant_id not in principal.entry.tenants:
        raise NotEntitledForTenantError
    if not set(binding.required_roles) <= set(principal.entry.licensed_roles):
        raise LacksRequiredRoleError


def check_not_requester(principal: Principal, binding: ApprovalBinding) -> None:
    """Nobody approves their own request."""
    if principal.name == binding.actor_id:
        raise SelfApprovalError


def check_may_resolve(principal: Principal, binding: ApprovalBinding) -> None:
    """Entitled, and not the requester: what a resolution needs of its resolver."""
    check_entitled(principal, binding)
    check_not_requester(principal, binding)


def executor_of(held: HeldAction) -> Executor | None:
    """Who the approval's order was given to: the held connector, or the proposing
    runtime for a runtime-executed action (``None`` for a hold that names neither,
    which no report settles)."""
    if held.connector_id is not None:
        return Executor("connector", held.connector_id)
    if held.runtime_id is not None:
        return Executor("runtime", held.runtime_id)
    return None


def signed_by_executor(
    held: HeldAction,
    binding: ApprovalBinding,
    report: ExecutionReport,
    signers: Iterable[Principal],
) -> bool:
    """Is this report signed by the party the approval's order was given to?

    ARCHITECTURE.md, "Trust and identity on the bus": a signer whose role does
    not fit is refused. The order is ``order_id_for(binding)``, the one order
    its decision opens (dispatched to a connector, or recorded for a
    runtime-executed action); the executor is
    :func:`executor_of`; the rule is :func:`execution_rules.signed_by`.
    """
    executor = executor_of(held)
    order_id = order_id_for(binding)
    return executor is not None and signed_by(executor, order_id, report, signers)
