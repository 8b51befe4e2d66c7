"""Layered policy and the monotonic merge of dispositions and requirements.

ARCHITECTURE.md, "Layered policy": layers from strongest to weakest are
binding_authority, smf_safety_floor, customer, matter, user. Resolution is
monotonic for dispositions AND for requirements: a weaker layer can add
restrictions but never remove one. So the merge is a join on a lattice:
disposition by severity (allow < conditional < deny; hard denial
dominates), approval count by max, roles by union, TTL by min, and
``exact_action_binding``/``one_shot`` by OR. Because every operator is a
join, the order in which layers are folded cannot change the result, and
adding any policy can only tighten it (proven by property tests).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Final, Literal

import msgspec

Layer = Literal["binding_authority", "smf_safety_floor", "customer", "matter", "user"]
Effect = Literal["allow", "conditional", "deny"]

LAYERS: Final[tuple[Layer, ...]] = (
    "binding_authority",
    "smf_safety_floor",
    "customer",
    "matter",
    "user",
)
LAYER_RANK: Final[dict[str, int]] = {layer: rank for rank, layer in enumerate(LAYERS)}
SEVERITY: Final[dict[str, int]] = {"allow": 0, "conditional": 1, "deny": 2}
MAX_TTL_SECONDS: Final = 600
"""ARCHITECTURE.md, "Exact-action approval": an approval lives at most 600 s."""

# ``\Z``, not ``$``: in Python ``$`` also matches before a trailing newline.
ReasonCode = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,63}\Z")]
Role = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,63}\Z")]
Ttl = Annotated[int, msgspec.Meta(ge=1, le=MAX_TTL_SECONDS)]
ApprovalCount = Annotated[int, msgspec.Meta(ge=0, le=16)]


class RequirementSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one policy asks for; unset fields ask for nothing."""

    approval_count: ApprovalCount | None = None
    required_roles: tuple[Role, ...] = ()
    ttl_seconds: Ttl | None = None
    exact_action_binding: bool | None = None
    one_shot: bool | None = None


class Requirements(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The merged, normalized requirements a decision carries."""

    approval_count: int
    required_roles: tuple[str, ...]
    ttl_seconds: int
    exact_action_binding: bool
    one_shot: bool


NO_REQUIREMENTS: Final = Requirements(
    approval_count=0,
    required_roles=(),
    ttl_seconds=MAX_TTL_SECONDS,
    exact_action_binding=False,
    one_shot=False,
)


def merge_requirements(specs: Iterable[RequirementSpec]) -> Requirements:
    """Join requirement specs: max count, union of roles, min TTL, OR of flags."""
    count = 0
    roles: set[str] = set()
    ttl = MAX_TTL_SECONDS
    exact = False
    one_shot = False
    for spec in specs:
        if spec.approval_count is not None:
            count = max(count, spec.approval_count)
        roles.update(spec.required_roles)
        if spec.ttl_seconds is not None:
            ttl = min(ttl, spec.ttl_seconds)
        exact = exact or bool(spec.exact_action_binding)
        one_shot = one_shot or bool(spec.one_shot)
    return Requirements(
        approval_count=count,
        required_roles=tuple(sorted(roles)),
        ttl_seconds=ttl,
        exact_action_binding=exact,
        one_shot=one_shot,
    )


def merge_disposition(effects: Iterable[Effect]) -> Effect | None:
    """The most severe effect, or None when there is none."""
    worst: Effect | None = None
    for effect in effects:
        if worst is None or SEVERITY[effect] > SEVERITY[worst]:
            worst = effect
    return worst


def requirements_at_least(tighter: Requirements, looser: Requirements) -> bool:
    """True when ``tighter`` restricts at least as much as ``looser`` on every field."""
    return (
        tighter.approval_count >= looser.approval_count
        and set(tighter.required_roles) >= set(looser.required_roles)
        and tighter.ttl_seconds <= looser.ttl_seconds
        and tighter.exact_action_binding >= looser.exact_action_binding
        and tighter.one_shot >= looser.one_shot
    )
