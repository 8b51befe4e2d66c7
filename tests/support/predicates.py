"""The fixtures, builders and constants of tests/unit/test_predicates.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

__all__ = ["PREDICATES", "leaf"]


def leaf(op: str, fact: object, value: Any = None) -> dict[str, Any]:
    if op in ("exists", "not_exists"):
        return {op: {"fact": fact}}
    if op in ("in", "not_in"):
        return {op: {"fact": fact, "values": value}}
    return {op: {"fact": fact, "value": value}}


_SCALAR_FACTS = {
    "capability": ["external.transmit", "document.read", "document.delete", "unknown"],
    "data.classification": ["public", "confidential", "privileged", "unknown"],
    "destination.locality": ["internal", "external", "unknown"],
    "professional.tenant_id": ["tenant-acme", "tenant-b"],
}


_BOOL_FACTS = ["effects.egress", "workflow.legal_hold"]


@st.composite
def leaves(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["scalar", "bool", "list"]))
    if kind == "list":
        return leaf("contains", "professional.actor_roles", draw(st.sampled_from(["a", "b", "c"])))
    if kind == "bool":
        fact = draw(st.sampled_from(_BOOL_FACTS))
        op = draw(st.sampled_from(["eq", "neq", "in", "not_in"]))
        if op in ("in", "not_in"):
            return leaf(op, fact, draw(st.lists(st.booleans(), min_size=1, max_size=2)))
        return leaf(op, fact, draw(st.booleans()))
    fact = draw(st.sampled_from(sorted(_SCALAR_FACTS)))
    op = draw(st.sampled_from(["eq", "neq", "in", "not_in"]))
    values = _SCALAR_FACTS[fact]
    if op in ("in", "not_in"):
        return leaf(op, fact, draw(st.lists(st.sampled_from(values), min_size=1, max_size=3)))
    return leaf(op, fact, draw(st.sampled_from(values)))


PREDICATES = st.recursive(
    leaves(),
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda xs: {"all": xs}),
        st.lists(children, min_size=1, max_size=3).map(lambda xs: {"any": xs}),
        children.map(lambda x: {"not": x}),
    ),
    max_leaves=8,
)
