"""Indexed policy selection: only policies that can apply are checked (issue 20).

A linear scan checks every policy of every tenant on every decision, so the
cost of a decision grew with the size of the release (130 us at 1,000 extra
policies, 11x the 10-policy figure). Here each policy is reduced, at build
time, to the values it *necessarily* requires of scalar facts: its scope
(tenant, matter, actor: ``smf_assurance.core.projection._check``) and every
``eq``/``in`` its predicate cannot hold without (through ``all``, and through
``any`` when every branch constrains the same fact). For each such fact the
index keeps one bit mask per value (the policies that allow it, plus those
that do not constrain the fact) and one for any other value; a decision ANDs
one mask per indexed fact and checks only the policies left, in their
original order.

Why this cannot change a decision: a policy is left out only when a fact
value it provably requires is absent or different, and then its own check
would return false; every candidate is still checked in full. So the applied
policies, and with them every byte of the decision, are those of the linear
scan (a property test compares the two over generated corpora and envelopes).
Constraints are derived only from ``eq``, ``in`` and the scope, the operators
whose truth is a dictionary membership test on the value: ``neq``, ``not_in``,
``not`` and the list operators constrain nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from smf_assurance.core.predicates import Allowed


def with_scope(allowed: Allowed, scope: Sequence[tuple[str, str]]) -> Allowed:
    """Add a policy's scope pairs (each an equality its check requires)."""
    merged = dict(allowed)
    for path, value in scope:
        required = frozenset((value,))
        merged[path] = merged[path] & required if path in merged else required
    return merged


MAX_COLUMNS: Final = 4
"""Facts indexed at most: the most selective ones. Any subset of the columns is sound;
past four a column's lookup costs about what the checks it saves would."""


@dataclass(frozen=True, slots=True)
class _Column:
    """One indexed fact: per value, the policies that may apply; ``other`` for the rest."""

    path: str
    by_value: Mapping[Any, int]
    other: int


@dataclass(frozen=True, slots=True)
class PolicyIndex:
    """Bit masks over policy positions; bit ``i`` stands for ``policies[i]``.

    Reading the positions off the mask costs O(mask size) per candidate, so a
    decision pays O(candidates x policies / 64) word operations there; the columns
    are the most selective facts so that candidates stay few.
    """

    columns: tuple[_Column, ...]
    everything: int

    def candidates(self, facts: Mapping[str, Any]) -> list[int]:
        """Positions of the policies that may apply to ``facts``, ascending."""
        mask = self.everything
        for column in self.columns:
            value = facts.get(column.path)
            try:
                mask &= column.by_value.get(value, column.other)
            except TypeError:  # an unhashable value equals no indexed value
                mask &= column.other
        found = []
        while mask:
            low = mask & -mask
            found.append(low.bit_length() - 1)
            mask ^= low
        return found


@dataclass(frozen=True, slots=True)
class LinearScan:
    """Every one of ``count`` policies is a candidate: the scan the index replaced, kept
    as the reference it must equal (tests, ``bench --evaluator-growth``)."""

    count: int

    def candidates(self, facts: Mapping[str, Any]) -> list[int]:
        return list(range(self.count))


def build_index(allowed: Sequence[Allowed]) -> PolicyIndex:
    """Index policies by the fact values each requires (``allowed[i]`` for policy ``i``).

    A policy whose requirements on one fact are contradictory (an empty set)
    is in no mask: it can never apply.
    """
    everything = (1 << len(allowed)) - 1
    paths = sorted({path for each in allowed for path in each})
    columns = []
    for path in paths:
        unconstrained = 0
        values: dict[Any, int] = {}
        for position, each in enumerate(allowed):
            if path not in each:
                unconstrained |= 1 << position
                continue
            for value in each[path]:
                values[value] = values.get(value, 0) | 1 << position
        by_value = {value: mask | unconstrained for value, mask in values.items()}
        columns.append(_Column(path=path, by_value=by_value, other=unconstrained))
    # The most selective columns first, so most decisions end after one or two ANDs;
    # past MAX_COLUMNS a column saves fewer checks than its lookup costs.
    columns.sort(key=lambda c: (c.other.bit_count(), c.path))
    return PolicyIndex(columns=tuple(columns[:MAX_COLUMNS]), everything=everything)
