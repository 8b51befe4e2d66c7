"""What changes between two releases' projections (issue 25, the static diff).

A pure function of two pairs of projections (enforcement + analysis): rules,
policies and model providers added, removed or changed, and for each policy
every requirement that changed (approval count, roles, TTL, exact-action
binding, one shot), with its layer, effect, reason code, rule and scope.
Nothing is reported that did not change: the release id, sequence and recipe
differ between any two releases and are named once, not listed as changes.

A rule is compared on its enforcement fields (predicate, interval, source
hash) and its analysis fields (title, statement, citation, locator,
authority, review, corrections), so a reworded statement shows even when the
predicate is the same. An added or removed policy lists the requirements it
asks for, since each is a requirement that appears or disappears.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec

from smf_assurance.core.projection import (
    AnalysisProjection,
    AnalysisRule,
    EnforcementProjection,
    EnforcementRule,
    ModelProvider,
    PolicyRecord,
)

RELEASE_DIFF_SCHEMA: Final = "smf.release-diff/1"

Change = Literal["added", "removed", "changed"]

_ENFORCEMENT_RULE_FIELDS: Final = ("when", "effective_from", "effective_until", "source_hash")
_ANALYSIS_RULE_FIELDS: Final = (
    "title",
    "statement",
    "citation",
    "locator",
    "authority_type",
    "review",
    "corrections",
)
_POLICY_FIELDS: Final = ("layer", "effect", "reason_code", "rule_id", "scope")
REQUIREMENT_FIELDS: Final = (
    "approval_count",
    "required_roles",
    "ttl_seconds",
    "exact_action_binding",
    "one_shot",
)


class FieldChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One field, before and after; ``None`` where the side has no value."""

    field: str
    old: Any
    new: Any


class RuleChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    rule_id: str
    change: Change
    title: str
    fields: tuple[FieldChange, ...]


class PolicyChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    policy_id: str
    change: Change
    layer: str
    """The new layer (the old one for a removed policy)."""
    fields: tuple[FieldChange, ...]
    requirements: tuple[FieldChange, ...]


class ProviderChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    provider: str
    change: Change
    fields: tuple[FieldChange, ...]


class ReleaseName(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    release_id: str
    release_sequence: int


class ReleaseDiff(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.release-diff/1"]
    old: ReleaseName
    new: ReleaseName
    rules: tuple[RuleChange, ...]
    policies: tuple[PolicyChange, ...]
    model_providers: tuple[ProviderChange, ...]

    @property
    def unchanged(self) -> bool:
        return not (self.rules or self.policies or self.model_providers)


def _value(value: Any) -> Any:
    """The value as JSON reads it (lists, not tuples), so both sides compare alike."""
    return msgspec.json.decode(msgspec.json.encode(value))


def _fields(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, names: tuple[str, ...]
) -> tuple[FieldChange, ...]:
    """Every named field whose value differs; an absent side, or an unset
    requirement, is ``None`` (so an added policy lists only what it sets)."""
    changes = []
    for name in names:
        before = None if old is None else old.get(name)
        after = None if new is None else new.get(name)
        if before in ((), []):
            before = None
        if after in ((), []):
            after = None
        if before != after:
            changes.append(FieldChange(name, before, after))
    return tuple(changes)


def _kind(old: object | None, new: object | None) -> Change:
    if old is None:
        return "added"
    return "removed" if new is None else "changed"


def _rule_view(
    enforcement: EnforcementRule | None, analysis: AnalysisRule | None
) -> dict[str, Any] | None:
    if enforcement is None and analysis is None:
        return None
    view: dict[str, Any] = {}
    if enforcement is not None:
        view.update({name: _value(getattr(enforcement, name)) for name in _ENFORCEMENT_RULE_FIELDS})
    if analysis is not None:
        view.update({name: _value(getattr(analysis, name)) for name in _ANALYSIS_RULE_FIELDS})
    return view


def _rules(
    old_e: EnforcementProjection,
    old_a: AnalysisProjection,
    new_e: EnforcementProjection,
    new_a: AnalysisProjection,
) -> tuple[RuleChange, ...]:
    old_enf = {r.rule_id: r for r in old_e.rules}
    new_enf = {r.rule_id: r for r in new_e.rules}
    old_an = {r.rule_id: r for r in old_a.rules}
    new_an = {r.rule_id: r for r in new_a.rules}
    changes = []
    for rule_id in sorted(set(old_enf) | set(new_enf) | set(old_an) | set(new_an)):
        before = _rule_view(old_enf.get(rule_id), old_an.get(rule_id))
        after = _rule_view(new_enf.get(rule_id), new_an.get(rule_id))
        names = _ENFORCEMENT_RULE_FIELDS + _ANALYSIS_RULE_FIELDS
        fields = _fields(before, after, names) if before and after else ()
        if before is not None and after is not None and not fields:
            continue
        title = str((after or before or {}).get("title") or "")
        changes.append(RuleChange(rule_id, _kind(before, after), title, fields))
    return tuple(changes)


def _policies(old: EnforcementProjection, new: EnforcementProjection) -> tuple[PolicyChange, ...]:
    before = {p.policy_id: p for p in (*old.policies, *old.confinement)}
    after = {p.policy_id: p for p in (*new.policies, *new.confinement)}
    changes = []
    for policy_id in sorted(set(before) | set(after)):
        was: PolicyRecord | None = before.get(policy_id)
        now: PolicyRecord | None = after.get(policy_id)
        was_view = None if was is None else _value(was)
        now_view = None if now is None else _value(now)
        fields = _fields(was_view, now_view, _POLICY_FIELDS) if was and now else ()
        requirements = _fields(
            None if was_view is None else was_view["requirements"],
            None if now_view is None else now_view["requirements"],
            REQUIREMENT_FIELDS,
        )
        if was is not None and now is not None and not (fields or requirements):
            continue
        layer = next(p.layer for p in (now, was) if p is not None)
        changes.append(PolicyChange(policy_id, _kind(was, now), layer, fields, requirements))
    return tuple(changes)


def _providers(
    old: EnforcementProjection, new: EnforcementProjection
) -> tuple[ProviderChange, ...]:
    before: dict[str, ModelProvider] = {p.provider: p for p in old.model_providers}
    after: dict[str, ModelProvider] = {p.provider: p for p in new.model_providers}
    changes = []
    for name in sorted(set(before) | set(after)):
        was, now = before.get(name), after.get(name)
        fields = _fields(
            None if was is None else {"classifications": sorted(was.classifications)},
            None if now is None else {"classifications": sorted(now.classifications)},
            ("classifications",),
        )
        if was is not None and now is not None and not fields:
            continue
        changes.append(ProviderChange(name, _kind(was, now), fields))
    return tuple(changes)


def diff_releases(
    old_enforcement: EnforcementProjection,
    old_analysis: AnalysisProjection,
    new_enforcement: EnforcementProjection,
    new_analysis: AnalysisProjection,
) -> ReleaseDiff:
    """Everything that changed from the old release's projections to the new one's."""
    return ReleaseDiff(
        schema=RELEASE_DIFF_SCHEMA,
        old=ReleaseName(old_enforcement.release_id, old_enforcement.release_sequence),
        new=ReleaseName(new_enforcement.release_id, new_enforcement.release_sequence),
        rules=_rules(old_enforcement, old_analysis, new_enforcement, new_analysis),
        policies=_policies(old_enforcement, new_enforcement),
        model_providers=_providers(old_enforcement, new_enforcement),
    )
