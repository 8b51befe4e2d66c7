"""The rule selector: which rules of the analysis projection a matter may cite.

ARCHITECTURE.md, "The four governed scenarios" (4): a Swarm report may cite
only rules selected from the governed release. The selector decides that
set, and nothing else does; the personas and the claim validator only read
it. Invariants:

- Same fact registry and predicate language as the gate
  (``smf_assurance.core.facts``, ``smf_assurance.core.predicates``): matter facts
  are
  checked against the registry before use, so a misspelt path or a wrong
  type is an error naming the path, never a silently missing fact.
- Three outcomes per rule, each with reason codes (issue 9):
  ``selected`` (in force and its predicate holds), ``unresolved`` (in force,
  but the predicate's value depends on a fact the matter does not state:
  Kleene ``None`` from ``Node.test3``) and ``excluded`` (the predicate is
  false, or the rule is not in force at the evaluation time). A rule that is
  not in force is excluded whatever the facts say: no missing fact could
  make it apply.
- The question does not take part. Selection depends on facts and time only,
  so no wording of a question can widen the set of citable rules.
- Deterministic: the same projection, facts and time give the same bytes
  (:func:`selection_bytes`, canonical JSON), with rules in rule-id order.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from smf_assurance.core.facts import FACT_REGISTRY_VERSION, MAX_LIST, REGISTRY, Fact
from smf_assurance.core.predicates import (
    Node,
    PredicateError,
    compile_predicate,
    missing_paths,
)
from smf_assurance.core.projection import (
    AnalysisProjection,
    AnalysisRule,
    AuthorityType,
    ProjectionError,
    decode_analysis,
    projection_id,
)
from smf_assurance.subjects.canonical import SAFE_INTEGER_MAX, canonical_bytes, identity_of

MATTER_SCHEMA: Final = "smf.swarm-matter/1"
MAX_FACT_CHARS: Final = 1024
MAX_QUESTION_CHARS: Final = 4000

Status = Literal["selected", "unresolved", "excluded"]
SelectionReason = Literal[
    "in_force",
    "predicate_satisfied",
    "depends_on_missing_fact",
    "predicate_not_satisfied",
    "not_yet_in_force",
    "no_longer_in_force",
]


class FactError(ValueError):
    """Matter facts do not fit the fact registry; the message names the path."""


class MatterError(ValueError):
    """A matter document (question, time, facts) is malformed."""


class ProjectionMismatchError(ProjectionError):
    """The analysis projection is not the one its index names (mix-and-match)."""


# --- the loaded analysis release -------------------------------------------


@dataclass(frozen=True, slots=True)
class AnalysisRelease:
    """A decoded analysis projection with its identity and compiled predicates.

    The one trusted state Swarm works from: selection, validation and the
    report all read release and projection ids from here, so a report can
    only be checked against the release that was actually loaded.
    """

    projection: AnalysisProjection
    projection_id: str
    rules: Mapping[str, AnalysisRule]
    predicates: Mapping[str, Node]

    @property
    def release_id(self) -> str:
        return self.projection.release_id

    @property
    def release_sequence(self) -> int:
        return self.projection.release_sequence


def analysis_release(projection: AnalysisProjection) -> AnalysisRelease:
    """Compile every rule's predicate; refuse another fact registry version.

    Same refusal as the gate's ``build_policy_set``: a predicate is never read
    with facts it was not written for.
    """
    if projection.fact_registry_version != FACT_REGISTRY_VERSION:
        raise ProjectionError(
            f"analysis projection uses fact registry {projection.fact_registry_version}; "
            f"Swarm has {FACT_REGISTRY_VERSION}"
        )
    rules = {rule.rule_id: rule for rule in sorted(projection.rules, key=lambda r: r.rule_id)}
    if len(rules) != len(projection.rules):
        raise ProjectionError("analysis projection lists a rule id twice")
    try:
        predicates = {rid: compile_predicate(rule.when, rid) for rid, rule in rules.items()}
    except PredicateError as exc:
        raise ProjectionError(f"analysis projection has a malformed predicate: {exc}") from exc
    return AnalysisRelease(projection, projection_id(projection), rules, predicates)


def load_analysis_release(
    data: bytes, expected_projection_id: str | None = None
) -> AnalysisRelease:
    """Decode ``analysis.json`` bytes; when the index names an id, it must match.

    The check stops a mix-and-match of an analysis projection from one
    release with the index (and so the release id) of another.
    """
    release = analysis_release(decode_analysis(data))
    if expected_projection_id is not None and release.projection_id != expected_projection_id:
        raise ProjectionMismatchError(
            f"analysis projection is {release.projection_id}, "
            f"but its index names {expected_projection_id}"
        )
    return release


# --- matter facts ------------------------------------------------------------


def _string(value: Any, path: str, limit: int = MAX_FACT_CHARS) -> str:
    if not isinstance(value, str):
        raise FactError(f"{path} is a string fact; got {type(value).__name__}")
    if not 1 <= len(value) <= limit:
        raise FactError(f"{path} must be 1 to {limit} characters")
    return unicodedata.normalize("NFC", value)


def _fact_value(fact: Fact, value: Any) -> Any:
    path = fact.path
    if fact.type == "bool":
        if not isinstance(value, bool):
            raise FactError(f"{path} is a bool fact; got {type(value).__name__}")
        return value
    if fact.cardinality == "many":
        if not isinstance(value, list | tuple):
            raise FactError(f"{path} is a list fact; got {type(value).__name__}")
        if len(value) > MAX_LIST:
            raise FactError(f"{path} has more than {MAX_LIST} values")
        return tuple(_string(item, f"{path}[{i}]") for i, item in enumerate(value))
    text = _string(value, path)
    if fact.values is not None and text not in fact.values:
        allowed = ", ".join(sorted(fact.values))
        raise FactError(f"{text!r} is not in the vocabulary of {path} ({allowed})")
    return text


def validate_facts(raw: Any, registry: Mapping[str, Fact] = REGISTRY) -> dict[str, Any]:
    """Check matter facts against the fact registry; return them NFC-normalized.

    Facts are flat registry paths (``"data.classification": "confidential"``).
    An unknown path or a value of the wrong type is a :class:`FactError`:
    treating it as merely missing would turn a typo into an ``unresolved``
    rule, or worse into a predicate read the wrong way. Strings are
    NFC-normalized as everywhere else (ARCHITECTURE.md, "Canonical bytes").
    """
    if not isinstance(raw, Mapping):
        raise FactError(f"facts must be an object of fact paths; got {type(raw).__name__}")
    facts: dict[str, Any] = {}
    for path in sorted(raw, key=str):
        if not isinstance(path, str):
            raise FactError(f"fact path {path!r} is not a string")
        fact = registry.get(path)
        if fact is None:
            raise FactError(
                f"unknown fact path {path!r}; facts are flat registry paths "
                "such as 'data.classification'"
            )
        facts[path] = _fact_value(fact, raw[path])
    return facts


def check_question(question: Any) -> str:
    if not isinstance(question, str) or not question.strip():
        raise MatterError("the question must be non-empty text")
    if len(question) > MAX_QUESTION_CHARS:
        raise MatterError(f"the question is longer than {MAX_QUESTION_CHARS} characters")
    return unicodedata.normalize("NFC", question)


def check_at_ms(at_ms: Any) -> int:
    if isinstance(at_ms, bool) or not isinstance(at_ms, int):
        raise MatterError("the evaluation time must be integer unix milliseconds")
    if not 0 <= at_ms <= SAFE_INTEGER_MAX:
        raise MatterError("the evaluation time is outside the representable range")
    return at_ms


class _MatterDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.swarm-matter/1"]
    facts: dict[str, Any]
    question: str | None = None
    at: str | None = None


@dataclass(frozen=True, slots=True)
class Matter:
    """A matter file: validated facts, and optionally a question and a time."""

    facts: dict[str, Any]
    question: str | None
    at_ms: int | None


def parse_instant(text: str) -> int:
    """RFC 3339 with a zone (``2026-11-29T10:00:00Z``) to unix milliseconds."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise MatterError(f"{text!r} is not an RFC 3339 timestamp") from exc
    if moment.tzinfo is None:
        raise MatterError(f"{text!r} has no time zone (e.g. Z)")
    return check_at_ms(int(moment.timestamp() * 1000))


def decode_matter(data: bytes) -> Matter:
    """A matter document (``schema`` ``smf.swarm-matter/1``) or a bare facts object."""
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise MatterError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict) or "schema" not in value:
        return Matter(validate_facts(value), None, None)
    try:
        doc = msgspec.convert(value, _MatterDocument)
    except msgspec.ValidationError as exc:
        raise MatterError(f"not a {MATTER_SCHEMA} document: {exc}") from exc
    return Matter(
        facts=validate_facts(doc.facts),
        question=None if doc.question is None else check_question(doc.question),
        at_ms=None if doc.at is None else parse_instant(doc.at),
    )


# --- selection -----------------------------------------------------------------


class RuleSelection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One rule's outcome, with what a reader needs to recognise the rule."""

    rule_id: str
    status: Status
    reasons: tuple[SelectionReason, ...]
    missing_facts: tuple[str, ...]
    title: str
    authority_type: AuthorityType
    synthetic: bool
    source_hash: str


class Selection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Every rule of the projection in exactly one of three sets."""

    release_id: str
    projection_id: str
    at_ms: int
    facts_id: str
    selected: tuple[RuleSelection, ...]
    unresolved: tuple[RuleSelection, ...]
    excluded: tuple[RuleSelection, ...]

    def status_of(self) -> dict[str, RuleSelection]:
        """Rule id -> its outcome, for the claim validator."""
        return {r.rule_id: r for r in (*self.selected, *self.unresolved, *self.excluded)}


def _in_force(rule: AnalysisRule, at_seconds: int) -> SelectionReason:
    """A rule binds inside ``[effective_from, effective_until)``, as in the gate."""
    if at_seconds < rule.effective_from:
        return "not_yet_in_force"
    if rule.effective_until is not None and at_seconds >= rule.effective_until:
        return "no_longer_in_force"
    return "in_force"


def _select_one(
    rule: AnalysisRule, predicate: Node, facts: Mapping[str, Any], at_seconds: int
) -> RuleSelection:
    force = _in_force(rule, at_seconds)
    holds = predicate.test3(facts)
    status: Status
    reasons: list[SelectionReason]
    missing: tuple[str, ...] = ()
    if force != "in_force":
        status, reasons = "excluded", [force]
        if holds is False:
            reasons.append("predicate_not_satisfied")
    elif holds is None:
        status, reasons = "unresolved", [force, "depends_on_missing_fact"]
        missing = tuple(missing_paths(predicate, facts))
    elif holds:
        status, reasons = "selected", [force, "predicate_satisfied"]
    else:
        status, reasons = "excluded", [force, "predicate_not_satisfied"]
    return RuleSelection(
        rule_id=rule.rule_id,
        status=status,
        reasons=tuple(reasons),
        missing_facts=missing,
        title=rule.title,
        authority_type=rule.authority_type,
        synthetic=rule.authority_type == "synthetic",
        source_hash=rule.source_hash,
    )


def select_rules(release: AnalysisRelease, facts: Mapping[str, Any], at_ms: int) -> Selection:
    """Place every rule of ``release`` in selected, unresolved or excluded.

    ``facts`` must already have passed :func:`validate_facts`. Time is the
    caller's (milliseconds, like the gate's ``evaluate``), compared in whole
    seconds against the rule's interval as the gate compares it.
    """
    at_ms = check_at_ms(at_ms)
    at_seconds = at_ms // 1000
    groups: dict[Status, list[RuleSelection]] = {"selected": [], "unresolved": [], "excluded": []}
    for rule_id, rule in release.rules.items():
        outcome = _select_one(rule, release.predicates[rule_id], facts, at_seconds)
        groups[outcome.status].append(outcome)
    return Selection(
        release_id=release.release_id,
        projection_id=release.projection_id,
        at_ms=at_ms,
        facts_id=identity_of(dict(facts)),
        selected=tuple(groups["selected"]),
        unresolved=tuple(groups["unresolved"]),
        excluded=tuple(groups["excluded"]),
    )


def selection_bytes(selection: Selection) -> bytes:
    """Canonical JSON of a selection: equal inputs give equal bytes."""
    return canonical_bytes(msgspec.to_builtins(selection))
