"""One approval's id presented with another approval's digest or binding.

ARCHITECTURE.md, "Exact-action approval": an approval of one thing can never
be spent on another. The desk checks the resolver's entitlement against the
approval the resolution NAMES; the store's conditional writes must then move
that approval and no other. So a resolution naming approval A with the
digest of approval B (say, of a tenant the resolver may not approve for), or
a claim naming A with B's binding, is refused and moves neither.

Both backends, through the approval store contract's own fixtures
(``tests/support/approval_store.py``, ``tests/support/store_backends.py``).
"""

from __future__ import annotations

import pytest

from smf_assurance.pipeline.stores.approvals import ApprovalStore, BindingChanged, DigestMismatch
from smf_assurance.subjects.approvals import binding_digest
from tests.support.approval_store import ATTORNEY, T0, approved, backend, held, state_of
from tests.support.store_backends import opened_on_backend

__all__ = ["backend"]

approvals = opened_on_backend()
"""An approval store on each backend of the contract tests."""


@pytest.mark.parametrize("resolve", ["approve", "deny"])
async def test_a_resolution_naming_one_approval_with_anothers_digest_moves_neither(
    approvals: ApprovalStore, resolve: str
) -> None:
    named = await held(approvals, "named")
    other = await held(approvals, "other", tenant_id="tenant-other")
    with pytest.raises(DigestMismatch):
        await getattr(approvals, resolve)(
            named.approval_id, binding_digest(other), ATTORNEY, T0 + 1
        )
    assert await state_of(approvals, named.approval_id) == "pending"
    assert await state_of(approvals, other.approval_id) == "pending"
    await getattr(approvals, resolve)(named.approval_id, binding_digest(named), ATTORNEY, T0 + 1)
    assert await state_of(approvals, other.approval_id) == "pending"


async def test_a_claim_naming_one_approval_with_anothers_binding_moves_neither(
    approvals: ApprovalStore,
) -> None:
    named = await approved(approvals, "named")
    other = await approved(approvals, "other")
    with pytest.raises(BindingChanged):
        await approvals.claim(named.approval_id, other, T0 + 2)
    assert await state_of(approvals, named.approval_id) == "approved"
    assert await state_of(approvals, other.approval_id) == "approved"
    await approvals.claim(other.approval_id, other, T0 + 2)
    assert await state_of(approvals, named.approval_id) == "approved"
    assert await state_of(approvals, other.approval_id) == "executing"
