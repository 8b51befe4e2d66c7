"""The approval step rules both approval stores share (smf_assurance/pipeline/stores/approvals.py),
as pure functions, without a store: which refusal wins when several apply.

The contract suite (tests/bus/test_approval_store.py) checks each refusal through
both backends; this pins the order the contract names ("state, expiry,
binding fields, digest") when everything is wrong at once, and the rules of
one claim, one order.
"""

from __future__ import annotations

import pytest

from smf_assurance.pipeline.stores.approvals import (
    ApprovalError,
    ApprovalExpired,
    BindingChanged,
    DigestMismatch,
    IllegalTransition,
    NotPending,
    order_refusal,
    order_taken,
    step_refusal,
    transition_refusal,
)
from smf_assurance.subjects.approvals import ApprovalState

ID = "sha256:" + "a" * 64
NOW = 1_000


def claim_refusal(
    state: ApprovalState, *, expired: bool, changed: tuple[str, ...], digest: str
) -> ApprovalError | None:
    return step_refusal(
        ID,
        "approved",
        "executing",
        NOW,
        state=state,
        expires_at_ms=NOW if expired else NOW + 1,
        stored_digest="d",
        digest=digest,
        changed=changed,
    )


@pytest.mark.parametrize(
    ("state", "expired", "changed", "digest", "refusal"),
    [
        ("pending", True, ("matter_id",), "x", IllegalTransition),
        ("executing", True, ("matter_id",), "x", NotPending),
        ("denied", True, ("matter_id",), "x", NotPending),
        ("approved", True, ("matter_id",), "x", ApprovalExpired),
        ("approved", False, ("matter_id",), "x", BindingChanged),
        ("approved", False, (), "x", DigestMismatch),
    ],
)
def test_claim_refusals_come_in_the_contracts_order(
    state: ApprovalState,
    expired: bool,
    changed: tuple[str, ...],
    digest: str,
    refusal: type[Exception],
) -> None:
    found = claim_refusal(state, expired=expired, changed=changed, digest=digest)
    assert type(found) is refusal
    assert found is not None
    assert found.approval_id == ID


def test_a_claim_that_fits_is_not_refused_and_expiry_is_at_the_millisecond() -> None:
    assert claim_refusal("approved", expired=False, changed=(), digest="d") is None
    assert isinstance(
        claim_refusal("approved", expired=True, changed=(), digest="d"), ApprovalExpired
    )


def test_binding_changed_names_fields_only() -> None:
    found = claim_refusal("approved", expired=False, changed=("matter_id", "actor_id"), digest="d")
    assert str(found) == f"approval {ID}: binding changed in matter_id, actor_id"


@pytest.mark.parametrize("state", ["approved", "denied", "expired", "consumed"])
def test_an_answer_to_anything_but_a_pending_approval_is_not_pending(state: ApprovalState) -> None:
    found = step_refusal(
        ID, "pending", "approved", NOW, state=state, expires_at_ms=0, stored_digest="d", digest="x"
    )
    assert isinstance(found, NotPending)


def test_finishing_is_the_transition_table() -> None:
    assert transition_refusal(ID, "executing", "consumed") is None
    for state in ("pending", "approved", "consumed", "execution_unknown"):
        assert isinstance(transition_refusal(ID, state, "failed"), IllegalTransition)


def test_one_claim_one_order() -> None:
    assert order_refusal(ID, "executing", None, "order-1") is None
    assert order_refusal(ID, "executing", "order-1", "order-1") is None  # redelivered
    second = order_refusal(ID, "executing", "order-1", "order-2")
    assert isinstance(second, IllegalTransition)
    assert str(second) == str(order_taken(ID))
    unclaimed = order_refusal(ID, "approved", None, "order-1")
    assert isinstance(unclaimed, IllegalTransition)
    assert "an order needs a claim" in str(unclaimed)
