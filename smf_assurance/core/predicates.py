"""The closed predicate language policies are written in.

Seven operators (``eq | neq | in | not_in | contains | exists | not_exists``)
combined with ``all``/``any``/``not``; nothing else (STYLE.md, "Cedar": small
enough to analyse, always terminates, no side effects). Every mistake a
policy author can make is caught at compile time with a message naming the
rule and the path: an unregistered fact, a list operator on a scalar fact or
the reverse, a bool where an integer or string is expected (no coercion),
a value outside an enum's vocabulary, and budget overruns (depth, nodes,
list size).

Semantics: a missing fact makes every leaf false except ``not_exists``
(issue 2). ``evaluate3`` gives the three-valued reading Swarm needs, where a
missing fact means "not known" rather than "absent".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from smf_assurance.core.facts import MAX_DEPTH, MAX_LIST, MAX_NODES, REGISTRY, Fact

LEAF_OPERATORS: Final = ("eq", "neq", "in", "not_in", "contains", "exists", "not_exists")
COMBINATORS: Final = ("all", "any", "not")

Facts = Mapping[str, Any]
_MISSING: Final = object()


class PredicateError(ValueError):
    """A predicate is not well formed; the message names the rule and the path."""


Test = Callable[[Facts], bool]


class Node:
    """A compiled predicate node.

    ``test`` is a closure built once at compile time (the gate's hot path);
    ``test3`` and ``paths`` walk the tree (Swarm's selector, analysis).
    """

    __slots__ = ()

    test: Test
    """Two-valued: a missing fact is absent (the gate's reading)."""

    def test3(self, facts: Facts) -> bool | None:
        """Three-valued: a missing fact is unknown (``None``), Kleene logic."""
        raise NotImplementedError

    def paths(self) -> frozenset[str]:
        """Every fact path the predicate reads."""
        raise NotImplementedError


def _leaf_test(op: str, path: str, value: Any) -> Test:
    missing = _MISSING
    if op == "eq":
        return lambda f: f.get(path, missing) == value
    if op == "neq":
        return lambda f: f.get(path, missing) not in (missing, value)
    if op == "in":
        return lambda f: f.get(path, missing) in value
    if op == "not_in":
        return lambda f: (v := f.get(path, missing)) is not missing and v not in value
    if op == "contains":
        return lambda f: value in f.get(path, ())
    if op == "exists":
        return lambda f: path in f
    return lambda f: path not in f  # not_exists


@dataclass(frozen=True, slots=True)
class _Leaf(Node):
    op: str
    path: str
    value: Any
    test: Test

    def test3(self, facts: Facts) -> bool | None:
        if self.op in ("exists", "not_exists") or self.path in facts:
            return self.test(facts)
        return None

    def paths(self) -> frozenset[str]:
        return frozenset((self.path,))


def _all_test(children: tuple[Node, ...]) -> Test:
    """Explicit loops, not ``all()`` over a generator: this runs for every candidate
    policy on every decision, and a generator costs more than the leaves it calls."""
    tests = tuple(child.test for child in children)

    def test(facts: Facts) -> bool:
        for child in tests:  # noqa: SIM110 - see the docstring of _all_test
            if not child(facts):
                return False
        return True

    return test


def _any_test(children: tuple[Node, ...]) -> Test:
    tests = tuple(child.test for child in children)

    def test(facts: Facts) -> bool:
        for child in tests:  # noqa: SIM110 - see the docstring of _all_test
            if child(facts):
                return True
        return False

    return test


@dataclass(frozen=True, slots=True)
class _All(Node):
    children: tuple[Node, ...]
    test: Test

    def test3(self, facts: Facts) -> bool | None:
        unknown = False
        for child in self.children:
            result = child.test3(facts)
            if result is False:
                return False
            unknown = unknown or result is None
        return None if unknown else True

    def paths(self) -> frozenset[str]:
        return frozenset().union(*(c.paths() for c in self.children))


@dataclass(frozen=True, slots=True)
class _Any(Node):
    children: tuple[Node, ...]
    test: Test

    def test3(self, facts: Facts) -> bool | None:
        unknown = False
        for child in self.children:
            result = child.test3(facts)
            if result is True:
                return True
            unknown = unknown or result is None
        return None if unknown else False

    def paths(self) -> frozenset[str]:
        return frozenset().union(*(c.paths() for c in self.children))


@dataclass(frozen=True, slots=True)
class _Not(Node):
    child: Node
    test: Test

    def test3(self, facts: Facts) -> bool | None:
        result = self.child.test3(facts)
        return None if result is None else not result

    def paths(self) -> frozenset[str]:
        return self.child.paths()


class _Compiler:
    def __init__(self, rule_id: str, registry: Mapping[str, Fact]) -> None:
        self.rule_id = rule_id
        self.registry = registry
        self.nodes = 0

    def fail(self, where: str, message: str) -> PredicateError:
        return PredicateError(f"rule {self.rule_id}: {message} at {where}")

    def compile(self, spec: Any, where: str, depth: int) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(where, f"predicate has more than {MAX_NODES} nodes")
        if depth > MAX_DEPTH:
            raise self.fail(where, f"predicate is nested deeper than {MAX_DEPTH}")
        if not isinstance(spec, Mapping) or len(spec) != 1:
            raise self.fail(where, "a predicate node must be an object with exactly one operator")
        ((op, arg),) = spec.items()
        here = f"{where}.{op}"
        if op in ("all", "any"):
            if not isinstance(arg, list) or not arg:
                raise self.fail(here, f"'{op}' takes a non-empty list of predicates")
            if len(arg) > MAX_LIST:
                raise self.fail(here, f"'{op}' has more than {MAX_LIST} members")
            children = tuple(
                self.compile(child, f"{here}[{i}]", depth + 1) for i, child in enumerate(arg)
            )
            if op == "all":
                return _All(children, _all_test(children))
            return _Any(children, _any_test(children))
        if op == "not":
            child = self.compile(arg, here, depth + 1)
            inner = child.test
            return _Not(child, lambda f: not inner(f))
        if op in LEAF_OPERATORS:
            return self.leaf(op, arg, here)
        raise self.fail(where, f"unknown operator {op!r}")

    def leaf(self, op: str, arg: Any, where: str) -> Node:
        if not isinstance(arg, Mapping):
            raise self.fail(where, f"'{op}' takes an object with 'fact'")
        expected = {"fact"} if op in ("exists", "not_exists") else {"fact", "value"}
        if op in ("in", "not_in"):
            expected = {"fact", "values"}
        if set(arg) != expected:
            raise self.fail(where, f"'{op}' takes exactly the keys {sorted(expected)}")
        path = arg["fact"]
        fact = self.registry.get(path) if isinstance(path, str) else None
        if fact is None:
            raise self.fail(where, f"unknown fact path {path!r}")
        if op in ("exists", "not_exists"):
            return _Leaf(op, path, None, _leaf_test(op, path, None))
        if op == "contains":
            if fact.cardinality != "many":
                raise self.fail(where, f"'contains' needs a list fact; {path} is a scalar")
            value = self.value(fact, arg["value"], path, where)
            return _Leaf(op, path, value, _leaf_test(op, path, value))
        if fact.cardinality != "one":
            raise self.fail(where, f"'{op}' needs a scalar fact; {path} is a list (use contains)")
        if op in ("eq", "neq"):
            value = self.value(fact, arg["value"], path, where)
            return _Leaf(op, path, value, _leaf_test(op, path, value))
        values = arg["values"]
        if not isinstance(values, list) or not values:
            raise self.fail(where, f"'{op}' takes a non-empty list of values")
        if len(values) > MAX_LIST:
            raise self.fail(where, f"'{op}' list has more than {MAX_LIST} values")
        members = frozenset(self.value(fact, v, path, where) for v in values)
        return _Leaf(op, path, members, _leaf_test(op, path, members))

    def value(self, fact: Fact, value: Any, path: str, where: str) -> Any:
        if fact.type == "bool":
            if not isinstance(value, bool):
                raise self.fail(where, f"{path} is a bool fact; got {type(value).__name__}")
            return value
        if not isinstance(value, str):
            raise self.fail(where, f"{path} is a string fact; got {type(value).__name__}")
        if fact.values is not None and value not in fact.values:
            raise self.fail(where, f"{value!r} is not in the vocabulary of {path}")
        return value


def compile_predicate(spec: Any, rule_id: str, registry: Mapping[str, Fact] = REGISTRY) -> Node:
    """Compile a predicate's JSON form, or raise PredicateError naming rule and path."""
    return _Compiler(rule_id, registry).compile(spec, "$", 1)


def missing_paths(node: Node, facts: Facts) -> Sequence[str]:
    """The facts the predicate reads that are not present, sorted."""
    return sorted(p for p in node.paths() if p not in facts)


Allowed = dict[str, frozenset[Any]]
"""Fact path -> the values a predicate can be true under; a path not named is free."""


def necessary(node: Node) -> Allowed:
    """The scalar fact values ``node`` cannot be true without (issue 20's policy index).

    Only ``eq`` and ``in`` constrain, the two leaves whose truth is membership of
    the fact's value in a set; ``all`` intersects its members' constraints, ``any``
    keeps a fact only when every branch constrains it (the union of their values),
    and ``not``, ``neq``, ``not_in``, ``exists``, ``not_exists`` and ``contains``
    constrain nothing. So a value outside the result makes the predicate false.
    """
    if isinstance(node, _Leaf):
        if node.op == "eq":
            return {node.path: frozenset((node.value,))}
        if node.op == "in":
            return {node.path: node.value}
        return {}
    if isinstance(node, _All):
        merged: Allowed = {}
        for child in node.children:
            for path, values in necessary(child).items():
                merged[path] = merged[path] & values if path in merged else values
        return merged
    if isinstance(node, _Any):
        each = [necessary(child) for child in node.children]
        common = set(each[0]).intersection(*each[1:])
        return {path: frozenset().union(*(b[path] for b in each)) for path in common}
    return {}
