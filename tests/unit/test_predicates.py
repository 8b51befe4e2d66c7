"""The fact registry (smf_assurance/core/facts.py) and the predicate language
(smf_assurance/core/predicates.py).

Properties: the registry names exactly the envelope's leaves with their
types, and ``facts_of`` produces exactly those keys with values of those
types; each of the seven operators is true, false, or false-on-missing
(only ``not_exists`` holds for a missing fact); ``all``/``any``/``not``
combine as boolean logic; every authoring mistake is refused at compile time
with a message naming the rule AND the path; the three-valued reading is
Kleene logic and is sound (a definite answer on partial facts never
contradicts the answer on the complete facts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args, get_type_hints

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smf_assurance.core.facts import (
    FACT_REGISTRY_VERSION,
    MAX_DEPTH,
    MAX_LIST,
    MAX_NODES,
    REGISTRY,
    Fact,
    facts_of,
)
from smf_assurance.core.predicates import (
    COMBINATORS,
    LEAF_OPERATORS,
    Node,
    PredicateError,
    compile_predicate,
    missing_paths,
)
from smf_assurance.subjects.envelope import OperationEnvelope
from tests.support.builders import make_envelope
from tests.support.predicates import _BOOL_FACTS, _SCALAR_FACTS, PREDICATES, leaf

RULE = "urn:smf:rule:test:predicates"
SETTINGS = settings(max_examples=200, deadline=None)


def c(spec: Any) -> Node:
    return compile_predicate(spec, RULE)


# --- fact registry ---------------------------------------------------------------


def _schema_leaves(struct: type[msgspec.Struct], prefix: str = "") -> dict[str, Any]:
    """Every leaf path of the envelope schema with its annotation, found independently."""
    leaves: dict[str, Any] = {}
    for name, annotation in get_type_hints(struct).items():
        if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
            leaves.update(_schema_leaves(annotation, f"{prefix}{name}."))
        else:
            leaves[f"{prefix}{name}"] = annotation
    return leaves


SCHEMA_LEAVES = _schema_leaves(OperationEnvelope)


def test_registry_names_exactly_the_envelope_leaves() -> None:
    assert set(REGISTRY) == set(SCHEMA_LEAVES)
    assert FACT_REGISTRY_VERSION == "smf.facts/1"


@pytest.mark.parametrize("path", sorted(SCHEMA_LEAVES))
def test_registry_type_and_cardinality_match_the_schema(path: str) -> None:
    fact = REGISTRY[path]
    assert fact.path == path
    annotation = SCHEMA_LEAVES[path]
    args = [a for a in get_args(annotation) if a is not type(None)]
    if len(args) == 1 and type(None) in get_args(annotation):
        annotation = args[0]  # Optional[X] -> X
    if annotation is bool:
        assert (fact.type, fact.cardinality, fact.values) == ("bool", "one", None)
    elif getattr(annotation, "__origin__", None) is Literal:
        assert (fact.type, fact.cardinality) == ("enum", "one")
        assert fact.values == frozenset(get_args(annotation))
    elif getattr(annotation, "__origin__", None) is tuple:
        assert (fact.type, fact.cardinality, fact.values) == ("string", "many", None)
    else:
        assert (fact.type, fact.cardinality, fact.values) == ("string", "one", None)


def _check_types(facts: dict[str, Any]) -> None:
    for path, value in facts.items():
        fact = REGISTRY[path]
        if fact.cardinality == "many":
            assert isinstance(value, tuple)
            assert all(isinstance(v, str) for v in value)
        elif fact.type == "bool":
            assert isinstance(value, bool)
        else:
            assert isinstance(value, str)
            if fact.values is not None:
                assert value in fact.values


def test_facts_of_keys_are_the_registry_without_unset_evidence() -> None:
    facts = facts_of(make_envelope())
    assert set(facts) == set(REGISTRY) - {"data.redaction_evidence"}
    _check_types(facts)


def test_facts_of_keys_are_the_registry_with_evidence() -> None:
    envelope = make_envelope(
        {"data.redaction_status": "complete", "data.redaction_evidence": "redactor run 4"}
    )
    facts = facts_of(envelope)
    assert set(facts) == set(REGISTRY)
    assert facts["data.redaction_evidence"] == "redactor run 4"
    _check_types(facts)


def test_facts_of_reads_every_value_from_its_own_field() -> None:
    """Each path maps to the field of the same name (no copy-paste cross-wiring)."""
    envelope = make_envelope(
        {"data.redaction_status": "complete", "data.redaction_evidence": "proof"}
    )
    for path, value in facts_of(envelope).items():
        holder: Any = envelope
        for part in path.split("."):
            holder = getattr(holder, part)
        assert value == holder, path


ENUM_VALUES = {p: sorted(f.values) for p, f in REGISTRY.items() if f.values is not None}


@st.composite
def envelope_overrides(draw: st.DrawFn) -> dict[str, Any]:
    overrides: dict[str, Any] = {
        path: draw(st.sampled_from(values))
        for path, values in ENUM_VALUES.items()
        if path != "data.redaction_status"
    }
    overrides["effects.egress"] = draw(st.booleans())
    overrides["workflow.legal_hold"] = draw(st.booleans())
    overrides["professional.actor_roles"] = draw(
        st.lists(st.sampled_from(["paralegal", "associate", "licensed_attorney"]), max_size=3)
    )
    overrides["professional.tenant_id"] = draw(st.sampled_from(["tenant-acme", "tenant-b"]))
    if draw(st.booleans()):
        overrides["data.redaction_status"] = "complete"
        overrides["data.redaction_evidence"] = "proof"
    else:
        overrides["data.redaction_status"] = draw(st.sampled_from(["none", "pending", "unknown"]))
    return overrides


@SETTINGS
@given(envelope_overrides())
def test_facts_of_matches_the_registry_for_random_envelopes(overrides: dict[str, Any]) -> None:
    facts = facts_of(make_envelope(overrides))
    optional = {"data.redaction_evidence"}
    assert set(REGISTRY) - optional <= set(facts) <= set(REGISTRY)
    assert ("data.redaction_evidence" in facts) == (
        overrides["data.redaction_status"] == "complete"
    )
    _check_types(facts)


# --- the seven operators ---------------------------------------------------------

FULL = facts_of(
    make_envelope(
        {
            "capability": "external.transmit",
            "effects.egress": True,
            "professional.actor_roles": ["paralegal", "associate"],
        }
    )
)
EMPTY: dict[str, Any] = {}

OPERATOR_CASES = [
    # op, fact, value, expected on FULL, expected when the fact is missing
    ("eq", "capability", "external.transmit", True, False),
    ("eq", "capability", "document.read", False, False),
    ("eq", "effects.egress", True, True, False),
    ("eq", "effects.egress", False, False, False),
    ("eq", "professional.tenant_id", "tenant-acme", True, False),
    ("neq", "capability", "document.read", True, False),
    ("neq", "capability", "external.transmit", False, False),
    ("neq", "effects.egress", False, True, False),
    ("in", "capability", ["document.read", "external.transmit"], True, False),
    ("in", "capability", ["document.read", "unknown"], False, False),
    ("in", "effects.egress", [True], True, False),
    ("not_in", "capability", ["document.read", "unknown"], True, False),
    ("not_in", "capability", ["external.transmit"], False, False),
    ("not_in", "effects.egress", [False], True, False),
    ("contains", "professional.actor_roles", "paralegal", True, False),
    ("contains", "professional.actor_roles", "licensed_attorney", False, False),
    ("exists", "capability", None, True, False),
    ("not_exists", "capability", None, False, True),
]


@pytest.mark.parametrize(("op", "fact", "value", "on_full", "on_missing"), OPERATOR_CASES)
def test_operator(op: str, fact: str, value: Any, on_full: bool, on_missing: bool) -> None:
    node = c(leaf(op, fact, value))
    assert node.test(FULL) is on_full
    assert node.test(EMPTY) is on_missing
    assert node.test3(FULL) is on_full
    if op in ("exists", "not_exists"):
        assert node.test3(EMPTY) is on_missing  # presence is always known
    else:
        assert node.test3(EMPTY) is None
    assert node.paths() == frozenset({fact})


def test_every_operator_has_a_case() -> None:
    assert {case[0] for case in OPERATOR_CASES} == set(LEAF_OPERATORS)
    assert set(COMBINATORS) == {"all", "any", "not"}
    assert len(LEAF_OPERATORS) == 7


def test_missing_fact_is_false_for_every_operator_except_not_exists() -> None:
    facts = dict(FULL)
    facts.pop("capability")
    for op, fact, value, *_ in OPERATOR_CASES:
        if fact != "capability":
            continue
        assert c(leaf(op, fact, value)).test(facts) is (op == "not_exists"), op


def test_optional_fact_exists_only_when_set() -> None:
    present = facts_of(
        make_envelope({"data.redaction_status": "complete", "data.redaction_evidence": "p"})
    )
    absent = facts_of(make_envelope())
    exists = c(leaf("exists", "data.redaction_evidence"))
    not_exists = c(leaf("not_exists", "data.redaction_evidence"))
    eq = c(leaf("eq", "data.redaction_evidence", "p"))
    neq = c(leaf("neq", "data.redaction_evidence", "q"))
    assert (exists.test(present), exists.test(absent)) == (True, False)
    assert (not_exists.test(present), not_exists.test(absent)) == (False, True)
    assert (eq.test(present), eq.test(absent)) == (True, False)
    assert (neq.test(present), neq.test(absent)) == (True, False)


def test_contains_on_an_empty_list_is_false() -> None:
    facts = facts_of(make_envelope({"professional.actor_roles": []}))
    assert c(leaf("contains", "professional.actor_roles", "paralegal")).test(facts) is False


def test_bool_facts_do_not_match_integers_at_runtime() -> None:
    """A registry of bools compared by ``==`` must not treat ``1`` as ``True``."""
    node = c(leaf("eq", "effects.egress", True))
    assert node.test({"effects.egress": True}) is True
    assert node.test({"effects.egress": False}) is False


# --- combinators -------------------------------------------------------------------

T = leaf("exists", "capability")
F = leaf("not_exists", "capability")
U = leaf("eq", "workflow.legal_hold", True)  # three-valued: unknown when missing
FACTS_WITHOUT_HOLD = {k: v for k, v in FULL.items() if k != "workflow.legal_hold"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"all": [T]}, True),
        ({"all": [T, T]}, True),
        ({"all": [T, F]}, False),
        ({"all": [F, T]}, False),
        ({"any": [F]}, False),
        ({"any": [F, T]}, True),
        ({"any": [F, F]}, False),
        ({"not": T}, False),
        ({"not": F}, True),
        ({"not": {"not": T}}, True),
        ({"all": [{"any": [F, T]}, {"not": F}]}, True),
        ({"any": [{"all": [T, F]}, {"not": T}]}, False),
    ],
)
def test_combinators_two_valued(spec: Any, expected: bool) -> None:
    assert c(spec).test(FULL) is expected
    assert c(spec).test3(FULL) is expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # Kleene: False dominates all, True dominates any, unknown otherwise.
        ({"all": [U, F]}, False),
        ({"all": [F, U]}, False),
        ({"all": [U, T]}, None),
        ({"all": [T, U]}, None),
        ({"all": [U, U]}, None),
        ({"any": [U, T]}, True),
        ({"any": [T, U]}, True),
        ({"any": [U, F]}, None),
        ({"any": [F, U]}, None),
        ({"any": [U, U]}, None),
        ({"not": U}, None),
        ({"not": {"all": [U, F]}}, True),
        ({"not": {"any": [U, T]}}, False),
        ({"all": [T, {"any": [U, {"not": F}]}]}, True),
    ],
)
def test_three_valued_kleene(spec: Any, expected: bool | None) -> None:
    assert c(spec).test3(FACTS_WITHOUT_HOLD) is expected


def test_two_valued_reading_of_the_same_unknowns() -> None:
    """The gate's reading: the missing leaf is false, so ``not`` of it is true."""
    assert c(U).test(FACTS_WITHOUT_HOLD) is False
    assert c({"not": U}).test(FACTS_WITHOUT_HOLD) is True
    assert c({"any": [U, F]}).test(FACTS_WITHOUT_HOLD) is False


def test_paths_and_missing_paths() -> None:
    node = c({"all": [U, {"not": leaf("eq", "capability", "unknown")}, {"any": [T]}]})
    assert node.paths() == frozenset({"workflow.legal_hold", "capability"})
    assert missing_paths(node, FACTS_WITHOUT_HOLD) == ["workflow.legal_hold"]
    assert missing_paths(node, {}) == ["capability", "workflow.legal_hold"]
    assert missing_paths(node, FULL) == []


# --- compile-time errors: rule id AND path -------------------------------------------


def _nest(levels: int) -> dict[str, Any]:
    spec: dict[str, Any] = leaf("eq", "capability", "unknown")
    for _ in range(levels - 1):
        spec = {"not": spec}
    return spec


COMPILE_ERRORS = [
    pytest.param(leaf("eq", "capabilities", "x"), "$.eq", "unknown fact path", id="unknown-fact"),
    pytest.param(
        {"all": [T, leaf("exists", "data.nope")]},
        "$.all[1].exists",
        "unknown fact",
        id="unknown-nested",
    ),
    pytest.param(leaf("eq", 7, "x"), "$.eq", "unknown fact path", id="fact-not-a-string"),
    pytest.param(leaf("eq", ["capability"], "x"), "$.eq", "unknown fact path", id="fact-a-list"),
    pytest.param(
        leaf("eq", "professional.actor_roles", "paralegal"), "$.eq", "is a list", id="eq-on-list"
    ),
    pytest.param(
        leaf("neq", "professional.governing_laws", "US-NY"), "$.neq", "is a list", id="neq-on-list"
    ),
    pytest.param(
        leaf("in", "professional.actor_roles", ["a"]), "$.in", "is a list", id="in-on-list"
    ),
    pytest.param(
        leaf("not_in", "professional.actor_roles", ["a"]), "$.not_in", "is a list", id="not-in-list"
    ),
    pytest.param(
        leaf("contains", "capability", "unknown"), "$.contains", "is a scalar", id="contains-scalar"
    ),
    pytest.param(
        leaf("contains", "effects.egress", True), "$.contains", "is a scalar", id="contains-bool"
    ),
    pytest.param(
        leaf("eq", "effects.egress", "true"), "$.eq", "bool fact; got str", id="string-for-bool"
    ),
    pytest.param(leaf("eq", "effects.egress", 1), "$.eq", "bool fact; got int", id="int-for-bool"),
    pytest.param(leaf("eq", "effects.egress", 0), "$.eq", "bool fact; got int", id="zero-for-bool"),
    pytest.param(
        leaf("in", "workflow.legal_hold", [True, 1]),
        "$.in",
        "bool fact; got int",
        id="int-in-bools",
    ),
    pytest.param(
        leaf("eq", "professional.tenant_id", True),
        "$.eq",
        "string fact; got bool",
        id="bool-for-str",
    ),
    pytest.param(
        leaf("eq", "capability", True), "$.eq", "string fact; got bool", id="bool-for-enum"
    ),
    pytest.param(leaf("eq", "professional.tenant_id", 1), "$.eq", "got int", id="int-for-string"),
    pytest.param(
        leaf("contains", "professional.actor_roles", True),
        "$.contains",
        "got bool",
        id="bool-in-list",
    ),
    pytest.param(leaf("eq", "capability", 1.0), "$.eq", "got float", id="float"),
    pytest.param(leaf("eq", "capability", None), "$.eq", "got NoneType", id="null"),
    pytest.param(
        leaf("eq", "capability", "external.Transmit"),
        "$.eq",
        "not in the vocabulary",
        id="enum-case",
    ),
    pytest.param(
        leaf("in", "data.classification", ["public", "secret"]),
        "$.in",
        "not in the vocabulary",
        id="enum-in",
    ),
    pytest.param(leaf("in", "capability", []), "$.in", "non-empty list", id="empty-in"),
    pytest.param(leaf("not_in", "capability", []), "$.not_in", "non-empty list", id="empty-not-in"),
    pytest.param(leaf("in", "capability", "unknown"), "$.in", "non-empty list", id="in-not-list"),
    pytest.param({"all": []}, "$.all", "non-empty list", id="empty-all"),
    pytest.param({"any": []}, "$.any", "non-empty list", id="empty-any"),
    pytest.param({"any": T}, "$.any", "non-empty list", id="any-not-list"),
    pytest.param(_nest(MAX_DEPTH + 1), "$" + ".not" * MAX_DEPTH, "deeper", id="too-deep"),
    pytest.param(
        {"any": [T] * (MAX_LIST + 1)}, "$.any", f"more than {MAX_LIST} members", id="all-too-long"
    ),
    pytest.param(
        leaf("in", "professional.tenant_id", [f"t{i}" for i in range(MAX_LIST + 1)]),
        "$.in",
        f"more than {MAX_LIST} values",
        id="in-list-too-long",
    ),
    pytest.param(
        {"any": [{"any": [T] * 30}] * 3}, "$.any[2].any[", "more than 64 nodes", id="too-many-nodes"
    ),
    pytest.param({**T, **F}, "at $", "exactly one operator", id="multi-key-node"),
    pytest.param({}, "at $", "exactly one operator", id="empty-node"),
    pytest.param([T], "at $", "exactly one operator", id="list-node"),
    pytest.param("capability", "at $", "exactly one operator", id="string-node"),
    pytest.param({"not": [T]}, "$.not", "exactly one operator", id="not-list"),
    pytest.param({"xor": [T, F]}, "at $", "unknown operator 'xor'", id="unknown-operator"),
    pytest.param(
        {"all": [T, {"regex": {"fact": "capability"}}]}, "$.all[1]", "unknown operator", id="unk-op"
    ),
    pytest.param({"eq": "capability"}, "$.eq", "takes an object", id="leaf-not-object"),
    pytest.param({"eq": {"fact": "capability"}}, "$.eq", "exactly the keys", id="eq-no-value"),
    pytest.param(
        {"in": {"fact": "capability", "value": "unknown"}},
        "$.in",
        "exactly the keys",
        id="in-value",
    ),
    pytest.param(
        {"exists": {"fact": "capability", "value": "x"}},
        "$.exists",
        "exactly the keys",
        id="exists-v",
    ),
    pytest.param(
        {"eq": {"fact": "capability", "value": "unknown", "extra": 1}},
        "$.eq",
        "exactly the keys",
        id="leaf-extra-key",
    ),
]


@pytest.mark.parametrize(("spec", "path", "message"), COMPILE_ERRORS)
def test_compile_error_names_rule_and_path(spec: Any, path: str, message: str) -> None:
    with pytest.raises(PredicateError) as info:
        c(spec)
    text = str(info.value)
    assert RULE in text
    assert path in text
    assert message in text


def _shape(node: Node) -> tuple[int, int]:
    """How many nodes a compiled predicate has, and how deep it nests (a leaf is 1)."""
    below: list[Node] = list(getattr(node, "children", ()))
    child = getattr(node, "child", None)
    if isinstance(child, Node):
        below.append(child)
    shapes = [_shape(b) for b in below]
    return 1 + sum(n for n, _ in shapes), 1 + max((d for _, d in shapes), default=0)


def test_budgets_at_their_limits_compile() -> None:
    """Each budget is inclusive: a predicate exactly at it compiles to the whole tree it
    spells, reading as written; one past it is refused naming the budget."""
    deep = c(_nest(MAX_DEPTH))
    assert _shape(deep) == (MAX_DEPTH, MAX_DEPTH)
    odd = (MAX_DEPTH - 1) % 2 == 1  # an odd number of nots over eq(capability, unknown)
    assert deep.test({"capability": "unknown"}) is not odd
    assert deep.test(FULL) is odd
    with pytest.raises(PredicateError, match=f"deeper than {MAX_DEPTH}"):
        c(_nest(MAX_DEPTH + 1))

    wide = c({"any": [F] * (MAX_LIST - 1) + [T]})
    assert _shape(wide) == (MAX_LIST + 1, 2)
    assert wide.test(FULL) is True  # the last member counts
    assert c({"any": [F] * MAX_LIST}).test(FULL) is False
    with pytest.raises(PredicateError, match=f"more than {MAX_LIST} members"):
        c({"any": [T] * (MAX_LIST + 1)})

    tenants = [f"t{i}" for i in range(MAX_LIST)]
    listed = c(leaf("in", "professional.tenant_id", tenants))
    assert listed.test({"professional.tenant_id": tenants[-1]}) is True
    assert listed.test({"professional.tenant_id": f"t{MAX_LIST}"}) is False
    with pytest.raises(PredicateError, match=f"more than {MAX_LIST} values"):
        c(leaf("in", "professional.tenant_id", [*tenants, f"t{MAX_LIST}"]))

    # exactly MAX_NODES nodes: all + (any + 31 leaves) + (any + 30 leaves) = 64
    full = c({"all": [{"any": [T] * 31}, {"any": [F] * (MAX_NODES - 31 - 4) + [T]}]})
    assert _shape(full) == (MAX_NODES, 3)
    assert full.test(FULL) is True
    assert full.paths() == {"capability"}
    with pytest.raises(PredicateError, match=f"more than {MAX_NODES} nodes"):
        c({"all": [{"any": [T] * 31}, {"any": [T] * (MAX_NODES - 31 - 2)}]})


@pytest.mark.parametrize("combinator", ["all", "any", "not"])
def test_every_combinator_counts_toward_the_depth_budget(combinator: str) -> None:
    """A policy author cannot nest past the budget by choosing the combinator."""

    def nest(levels: int) -> Any:
        spec: Any = T
        for _ in range(levels - 1):
            spec = {combinator: spec if combinator == "not" else [spec]}
        return spec

    c(nest(MAX_DEPTH))
    with pytest.raises(PredicateError, match=f"deeper than {MAX_DEPTH}"):
        c(nest(MAX_DEPTH + 1))


def test_node_budget_is_exact() -> None:
    with pytest.raises(PredicateError, match=f"more than {MAX_NODES} nodes"):
        c({"all": [{"any": [T] * 31}, {"any": [T] * (MAX_NODES - 31 - 2)}]})


def test_custom_registry_is_used() -> None:
    registry = {"x.flag": Fact("x.flag", "bool", "one")}
    node = compile_predicate(leaf("eq", "x.flag", True), RULE, registry)
    assert node.test({"x.flag": True}) is True
    with pytest.raises(PredicateError, match="unknown fact path 'capability'"):
        compile_predicate(leaf("exists", "capability"), RULE, registry)


def test_base_node_is_abstract() -> None:
    with pytest.raises(NotImplementedError):
        Node().test3({})
    with pytest.raises(NotImplementedError):
        Node().paths()


# --- properties: random predicates over random facts --------------------------------


@st.composite
def full_facts(draw: st.DrawFn) -> dict[str, Any]:
    facts: dict[str, Any] = {p: draw(st.sampled_from(v)) for p, v in _SCALAR_FACTS.items()}
    facts.update({p: draw(st.booleans()) for p in _BOOL_FACTS})
    facts["professional.actor_roles"] = tuple(
        draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3))
    )
    return facts


def _reference(spec: Any, facts: dict[str, Any]) -> bool:
    """The two-valued semantics written out independently."""
    ((op, arg),) = spec.items()
    if op == "all":
        return all(_reference(s, facts) for s in arg)
    if op == "any":
        return any(_reference(s, facts) for s in arg)
    if op == "not":
        return not _reference(arg, facts)
    path = arg["fact"]
    if op == "exists":
        return path in facts
    if op == "not_exists":
        return path not in facts
    if path not in facts:
        return False
    value = facts[path]
    checks: dict[str, Callable[[], bool]] = {
        "eq": lambda: value == arg["value"],
        "neq": lambda: value != arg["value"],
        "in": lambda: value in arg["values"],
        "not_in": lambda: value not in arg["values"],
        "contains": lambda: arg["value"] in value,
    }
    return checks[op]()


@SETTINGS
@given(PREDICATES, full_facts(), st.sets(st.sampled_from([*_SCALAR_FACTS, *_BOOL_FACTS])))
def test_compiled_predicate_matches_reference_semantics(
    spec: Any, facts: dict[str, Any], drop: set[str]
) -> None:
    node = c(spec)
    partial = {k: v for k, v in facts.items() if k not in drop}
    assert node.test(facts) is _reference(spec, facts)
    assert node.test(partial) is _reference(spec, partial)
    assert node.test3(facts) is node.test(facts)


@SETTINGS
@given(PREDICATES, full_facts(), st.sets(st.sampled_from([*_SCALAR_FACTS, *_BOOL_FACTS])))
def test_three_valued_reading_is_sound(spec: Any, facts: dict[str, Any], drop: set[str]) -> None:
    """If test3 decides on partial facts, the complete facts give the same answer."""
    node = c(spec)
    partial = {k: v for k, v in facts.items() if k not in drop}
    verdict = node.test3(partial)
    if verdict is not None:
        assert node.test(facts) is verdict
    if not (node.paths() & drop):
        assert verdict is node.test(facts)
