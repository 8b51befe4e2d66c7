"""The approval store interface: one state machine, any backend.

ARCHITECTURE.md, "Exact-action approval". This
module holds what every backend shares, so that the SQLite store
(:mod:`smf_assurance.pipeline.stores.approvals_sqlite`) and the cluster store (JetStream
KV compare-and-set) are held to the same rules and pass the same
contract tests (``tests/bus/test_approval_store.py``):

- The states and the one table of allowed transitions, :data:`TRANSITIONS`:
  ``pending -> approved -> executing -> consumed | failed | execution_unknown``,
  plus ``denied``, ``expired`` and ``invalidated``. Every state write goes
  through :func:`check_transition`; an illegal transition raises
  :class:`IllegalTransition`, never a silent no-op. Terminal states have no
  way out, so ``execution_unknown`` is never retried automatically.
- Which refusal a step gets, and in which order the checks are made
  (:func:`step_refusal` for approve, deny and claim, :func:`transition_refusal`
  for finish, :func:`order_refusal` for the one order of a claim): pure
  functions over what the backend read, so each backend only reads and
  writes, and the two cannot drift apart.
- One claim: ``approved -> executing`` happens at most once per approval,
  after the complete binding and the expiry have been re-checked atomically.
  That is what makes an approval one-shot; ``Nats-Msg-Id`` de-duplication is
  not enough (ARCHITECTURE.md, "One proposal through the bus").
- The held content (what the approver sees and the gate sends) lives only
  while the approval is open and is purged in the same write that reaches a
  terminal state. It is never logged and never enters the evidence ledger;
  :class:`ApprovalRecord` redacts it from its ``repr``.
- One named error per refusal, each with its own ``reason_code``, so the gate
  turns a refusal into a denial reason without parsing messages (STYLE.md,
  python-tuf). Messages carry approval ids and states only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar, Final, Literal, Protocol, get_args

import msgspec

from smf_assurance.subjects.approvals import (
    MAX_TTL_MS,
    TERMINAL_STATES,
    ApprovalBinding,
    ApprovalState,
    approval_id_for,
    binding_digest,
)

__all__ = [
    "ALL_STATES",
    "FINISH_OUTCOMES",
    "OPEN_STATES",
    "TRANSITIONS",
    "ApprovalError",
    "ApprovalExists",
    "ApprovalExpired",
    "ApprovalNotFound",
    "ApprovalRecord",
    "ApprovalStore",
    "ApprovalStoreUnavailable",
    "BindingChanged",
    "BindingInvalid",
    "DigestMismatch",
    "FinishOutcome",
    "IllegalTransition",
    "NotPending",
    "TtlExceeded",
    "admit_binding",
    "check_transition",
    "order_refusal",
    "order_taken",
    "step_refusal",
    "transition_refusal",
]

FinishOutcome = Literal["consumed", "failed", "execution_unknown"]
"""How a claimed execution ends: the connector confirmed it, reported a
failure, or nobody knows (ambiguous report, no report, restart)."""

ALL_STATES: Final[tuple[ApprovalState, ...]] = get_args(ApprovalState)
FINISH_OUTCOMES: Final[frozenset[FinishOutcome]] = frozenset(get_args(FinishOutcome))
OPEN_STATES: Final[frozenset[ApprovalState]] = frozenset({"pending", "approved"})
"""Awaiting an approver or a claim: what ``list_open`` shows, and what expiry and
start-up recovery close."""

TRANSITIONS: Final[Mapping[ApprovalState, frozenset[ApprovalState]]] = MappingProxyType(
    {
        "pending": frozenset({"approved", "denied", "expired", "invalidated"}),
        "approved": frozenset({"executing", "expired", "invalidated"}),
        "executing": frozenset({"consumed", "failed", "execution_unknown"}),
        "consumed": frozenset(),
        "execution_unknown": frozenset(),
        "denied": frozenset(),
        "expired": frozenset(),
        "invalidated": frozenset(),
        "failed": frozenset(),
    }
)
"""The only moves a backend may make: transitions are explicit.

``executing`` can only end, never go back to ``approved``: a claim is spent
whether or not the order went out. A restart moves ``executing`` to
``execution_unknown`` (recovery), never to a state that could be claimed again.
"""

if set(TRANSITIONS) != set(ALL_STATES) or {
    s for s, targets in TRANSITIONS.items() if not targets
} != set(TERMINAL_STATES):
    # The table and the bus contract's vocabulary must agree; a state added to
    # one and not the other would otherwise be silently unreachable or open.
    raise RuntimeError("TRANSITIONS disagrees with smf_assurance.subjects.approvals states")


class ApprovalError(Exception):
    """A refused approval operation; ``reason_code`` is the denial reason to record.

    Carries the approval id (never content) so a caller can log the refusal.
    """

    reason_code: ClassVar[str] = "approval_error"

    def __init__(self, message: str, *, approval_id: str | None = None) -> None:
        super().__init__(message)
        self.approval_id = approval_id


class ApprovalNotFound(ApprovalError):
    """No approval with this id: a resolution or claim for something never held."""

    reason_code: ClassVar[str] = "approval_not_found"


class ApprovalExists(ApprovalError):
    """The approval id (or its decision) is already held: one approval per decision."""

    reason_code: ClassVar[str] = "approval_exists"


class NotPending(ApprovalError):
    """The approval is no longer open for this step: it was already resolved,
    claimed, expired, invalidated or finished. Stops duplicate resolutions,
    deny-then-allow, and every claimant after the one winner."""

    reason_code: ClassVar[str] = "approval_not_pending"


class ApprovalExpired(ApprovalError):
    """The approval's expiry has passed (``now_ms >= expires_at_ms``); the store
    moved it to ``expired`` before refusing. Stops late resolutions and claims."""

    reason_code: ClassVar[str] = "approval_expired"


class DigestMismatch(ApprovalError):
    """The binding digest presented is not the stored one: the approver saw (and
    signed) something other than what is held. Stops approval of one action being
    spent on another."""

    reason_code: ClassVar[str] = "binding_digest_mismatch"


class BindingChanged(ApprovalError):
    """A field of the binding presented at claim time differs from the stored
    binding (ARCHITECTURE.md: "the claim re-checks the whole binding"). Stops a
    changed argument, content, destination, release, projection, policy, tenant,
    matter or actor from riding on an old approval."""

    reason_code: ClassVar[str] = "binding_changed"


class IllegalTransition(ApprovalError):
    """The requested move is not in :data:`TRANSITIONS` (e.g. finishing an approval
    that was never claimed, claiming one not yet approved, a second order for one
    claim). Raised instead of doing nothing."""

    reason_code: ClassVar[str] = "illegal_transition"


class ApprovalStoreUnavailable(ApprovalError):
    """The store cannot answer (closed, locked past its timeout, I/O error, a
    stored row that does not decode). The gate denies: a store outage is a denial,
    never an allow."""

    reason_code: ClassVar[str] = "approval_store_unavailable"


class TtlExceeded(ApprovalError):
    """The binding would live longer than 600 s (defence in depth behind
    :class:`~smf_assurance.subjects.approvals.ApprovalBinding`'s own check)."""

    reason_code: ClassVar[str] = "approval_ttl_exceeded"


class BindingInvalid(ApprovalError):
    """The binding does not survive a round trip through its stored form (a field
    outside its schema), or its id is not ``approval_id_for(decision_id)``."""

    reason_code: ClassVar[str] = "approval_binding_invalid"


def transition_refusal(
    approval_id: str, source: ApprovalState, target: ApprovalState
) -> IllegalTransition | None:
    """:class:`IllegalTransition` unless ``source -> target`` is in :data:`TRANSITIONS`."""
    if target in TRANSITIONS[source]:
        return None
    return IllegalTransition(
        f"approval {approval_id}: {source} -> {target} is not allowed", approval_id=approval_id
    )


def check_transition(approval_id: str, source: ApprovalState, target: ApprovalState) -> None:
    """Raise :class:`IllegalTransition` unless ``source -> target`` is in the table."""
    refusal = transition_refusal(approval_id, source, target)
    if refusal is not None:
        raise refusal


def step_refusal(
    approval_id: str,
    source: ApprovalState,
    target: ApprovalState,
    now_ms: int,
    *,
    state: ApprovalState,
    expires_at_ms: int,
    stored_digest: str,
    digest: str,
    changed: Sequence[str] = (),
) -> ApprovalError | None:
    """Why an approver's answer (``pending -> approved | denied``) or the claim
    (``approved -> executing``) may not be made on an approval now in ``state``;
    None when it may.

    The checks and their order are the contract's (:meth:`ApprovalStore.approve`,
    :meth:`ApprovalStore.claim`), the same for every backend:

    1. ``state`` is not ``source``: :class:`IllegalTransition` while still
       ``pending`` (a claim before any approval: the step does not apply yet),
       otherwise :class:`NotPending` (already resolved, claimed or closed: a
       duplicate resolution, deny then allow, every claimant after the winner).
    2. ``now_ms >= expires_at_ms``: :class:`ApprovalExpired`. The caller moves
       the approval to ``expired`` in the same atomic step before refusing.
    3. ``changed`` names binding fields that differ from the stored binding
       (the claim only: "the claim re-checks the whole binding"):
       :class:`BindingChanged`, with field names only, since the values may be
       identities of client data.
    4. ``digest`` is not ``stored_digest``: :class:`DigestMismatch`.
    """
    if state != source:
        if state == "pending":
            return IllegalTransition(
                f"approval {approval_id}: {state} -> {target} is not allowed",
                approval_id=approval_id,
            )
        return NotPending(f"approval {approval_id} is {state}", approval_id=approval_id)
    if now_ms >= expires_at_ms:
        return ApprovalExpired(f"approval {approval_id} has expired", approval_id=approval_id)
    if changed:
        return BindingChanged(
            f"approval {approval_id}: binding changed in {', '.join(changed)}",
            approval_id=approval_id,
        )
    if stored_digest != digest:
        return DigestMismatch(
            f"approval {approval_id}: binding digest does not match", approval_id=approval_id
        )
    return None


def order_refusal(
    approval_id: str, state: ApprovalState, recorded: str | None, order_id: str
) -> IllegalTransition | None:
    """Why ``order_id`` may not be recorded for an approval in ``state`` that has
    ``recorded`` already; None when it may (or is already: the same order again
    is a redelivered step). An order needs a claim, and one claim has one order
    (:meth:`ApprovalStore.record_order`)."""
    if state != "executing":
        return IllegalTransition(
            f"approval {approval_id} is {state}: an order needs a claim", approval_id=approval_id
        )
    if recorded not in (None, order_id):
        return order_taken(approval_id)
    return None


def order_taken(approval_id: str) -> IllegalTransition:
    """The refusal of a second order for one claim, or of an order that already
    names another approval: one claim, one order."""
    return IllegalTransition(
        f"approval {approval_id}: one claim, one order", approval_id=approval_id
    )


def admit_binding(binding: ApprovalBinding, now_ms: int) -> str:
    """Check a binding before any backend stores it; return its digest.

    Defence in depth behind :class:`~smf_assurance.subjects.approvals.ApprovalBinding`'s own
    validation, which a caller can bypass (``msgspec.structs.force_setattr``,
    a hand-built ``__new__``):

    - TTL cap (ARCHITECTURE.md: "TTL at most 600 s"): ``expires_at_ms`` must be
      after ``created_at_ms`` by at most 600 s, and at most 600 s after
      ``now_ms`` too, so a forged future ``created_at_ms`` cannot stretch it.
    - The stored form must decode back into a valid binding (every pattern and
      bound of the schema), so nothing is held that a later read would refuse.
    - One approval per decision: the id must be ``approval_id_for(decision_id)``.
    - A binding already past its expiry is not held at all.
    """
    approval_id = binding.approval_id
    ttl = binding.expires_at_ms - binding.created_at_ms
    if not 0 < ttl <= MAX_TTL_MS or binding.expires_at_ms - now_ms > MAX_TTL_MS:
        raise TtlExceeded(
            f"approval {approval_id}: TTL above {MAX_TTL_MS} ms", approval_id=approval_id
        )
    try:
        msgspec.convert(msgspec.to_builtins(binding), ApprovalBinding)
    except msgspec.ValidationError as exc:
        raise BindingInvalid(
            f"approval {approval_id}: binding does not match its schema", approval_id=approval_id
        ) from exc
    if approval_id != approval_id_for(binding.decision_id):
        raise BindingInvalid(
            f"approval {approval_id}: id is not derived from its decision id",
            approval_id=approval_id,
        )
    if now_ms >= binding.expires_at_ms:
        raise ApprovalExpired(
            f"approval {approval_id}: already expired when held", approval_id=approval_id
        )
    return binding_digest(binding)


class ApprovalRecord(msgspec.Struct, frozen=True):
    """One approval as stored: its binding, digest, state and (while open) content.

    ``held_payload`` is ``None`` in every terminal state. ``repr`` shows only its
    size, so a record that ends up in a log or a traceback does not carry the
    content with it.
    """

    binding: ApprovalBinding
    digest: str
    state: ApprovalState
    resolver_id: str | None
    order_id: str | None
    held_payload: bytes | None
    updated_at_ms: int
    outcome_codes: tuple[str, ...] = ()
    """A denial's reason codes (the requester sees why), from the closed list."""
    receipt: str | None = None
    """The connector's receipt of a ``consumed`` execution, when it gave one."""

    @property
    def approval_id(self) -> str:
        return self.binding.approval_id

    def __repr__(self) -> str:
        held = "None" if self.held_payload is None else f"<{len(self.held_payload)} bytes>"
        return (
            f"ApprovalRecord(approval_id={self.binding.approval_id!r}, state={self.state!r}, "
            f"digest={self.digest!r}, resolver_id={self.resolver_id!r}, "
            f"order_id={self.order_id!r}, held_payload={held}, "
            f"updated_at_ms={self.updated_at_ms}, outcome_codes={self.outcome_codes!r}, "
            f"receipt={'None' if self.receipt is None else '<receipt>'})"
        )


class ApprovalStore(Protocol):
    """The approval state machine behind a storage backend.

    Every method is one atomic step against the store; a refused step raises an
    :class:`ApprovalError` subclass and changes nothing, except that a step that
    finds the approval past its expiry first moves it to ``expired``.
    """

    async def create(
        self, binding: ApprovalBinding, held_payload: bytes, now_ms: int
    ) -> ApprovalRecord:
        """Hold a new approval in ``pending`` with the content the approver will see.

        Refuses (storing nothing): TtlExceeded, BindingInvalid, ApprovalExpired
        (:func:`admit_binding`); ApprovalExists for a held id or decision.
        """
        ...

    async def get(self, approval_id: str) -> ApprovalRecord | None: ...

    async def list_open(self, tenant_id: str | None = None) -> list[ApprovalRecord]:
        """Pending and approved approvals (optionally of one tenant), oldest first."""
        ...

    async def approve(
        self, approval_id: str, digest: str, resolver_id: str, now_ms: int
    ) -> ApprovalRecord:
        """``pending -> approved``. Checks, in order: ApprovalNotFound; NotPending
        (any state but pending); ApprovalExpired (``now_ms >= expires_at_ms``; the
        approval moves to ``expired``); DigestMismatch (not the stored digest)."""
        ...

    async def deny(
        self,
        approval_id: str,
        digest: str,
        resolver_id: str,
        now_ms: int,
        reasons: tuple[str, ...] = (),
    ) -> ApprovalRecord:
        """``pending -> denied`` (terminal; content purged), with approve's checks;
        ``reasons`` (the denial's reason codes) are kept with it for the requester."""
        ...

    async def claim(
        self, approval_id: str, expected: ApprovalBinding, now_ms: int
    ) -> ApprovalRecord:
        """``approved -> executing`` once: the complete binding and the expiry are
        re-checked in the same atomic step (ARCHITECTURE.md: "exactly one claimant
        wins"). Returns the record with ``held_payload`` (the gate builds the order
        from it).

        Refusals, in order: ApprovalNotFound; IllegalTransition (still pending:
        not approved yet); NotPending (executing or terminal: every claimant after
        the winner); ApprovalExpired (moves it to ``expired``); BindingChanged (a
        field of ``expected`` differs from the stored binding); DigestMismatch
        (``binding_digest(expected)`` is not the stored digest).
        """
        ...

    async def record_order(self, approval_id: str, order_id: str, now_ms: int) -> None:
        """Remember the one order published for a claimed (``executing``) approval.

        The same order again is accepted; IllegalTransition when not executing,
        when another order is already recorded, or when the order belongs to
        another approval.
        """
        ...

    async def finish(
        self,
        approval_id: str,
        outcome: FinishOutcome,
        now_ms: int,
        receipt: str | None = None,
    ) -> ApprovalRecord:
        """``executing -> outcome`` (terminal; content purged); IllegalTransition
        from any other state, including a second report for a finished approval.
        ``receipt`` is the connector's, kept only with ``consumed``."""
        ...

    async def expire_due(self, now_ms: int) -> list[str]:
        """Move open approvals with ``expires_at_ms <= now_ms`` to ``expired``."""
        ...

    async def recover(self, now_ms: int) -> tuple[list[str], list[str]]:
        """Start-up: ``approved`` -> ``invalidated``, ``executing`` -> ``execution_unknown``;
        ``pending`` is left as it is (durable: only its TTL or an approver ends it).

        Returns ``(invalidated_ids, unknown_ids)`` for the caller to write to the
        evidence record: both are written to it.
        """
        ...

    async def invalidate(self, approval_id: str, now_ms: int) -> list[str]:
        """pending | approved -> invalidated; returns the ids moved (empty if none)."""
        ...

    async def invalidate_unclaimed(self, before_ms: int, now_ms: int) -> list[str]:
        """``approved`` approvals last changed before ``before_ms`` -> ``invalidated``;
        returns the ids moved, sorted.

        The claim follows an accepted allow-once in the same request, so an approval
        still ``approved`` long after (the caller's grace) was left by a gate that
        died between the two (on a cluster, a replica other than the one sweeping).
        Claiming it now would run an action no one is waiting for; it is closed,
        like start-up recovery closes it on one machine. ``pending`` and
        ``executing`` are never touched.
        """
        ...

    async def list_executing(self, before_ms: int) -> list[ApprovalRecord]:
        """Executing approvals last changed before ``before_ms``."""
        ...

    async def find_by_order(self, order_id: str) -> str | None:
        """The approval an order was published for (to route a connector report)."""
        ...

    async def close(self) -> None: ...
