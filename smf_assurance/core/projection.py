"""The two projections a governed release carries, and the policy set built from one.

ARCHITECTURE.md, "Governed releases": one source corpus, two projections —
a compact enforcement projection for the gate and a richer analysis
projection for Swarm — with the same rule identities and source hashes.
The Structs here are the projections' schemas; the compiler (ops/) writes
them and the gate and Swarm read them, so there is one definition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

import msgspec

from smf_assurance.core.facts import FACT_REGISTRY_VERSION
from smf_assurance.core.policy import (
    LAYER_RANK,
    Effect,
    Layer,
    ReasonCode,
    RequirementSpec,
)
from smf_assurance.core.policy_index import (
    LinearScan,
    PolicyIndex,
    build_index,
    with_scope,
)
from smf_assurance.core.predicates import Node, compile_predicate, necessary
from smf_assurance.subjects.canonical import (
    SAFE_INTEGER_MAX,
    Identity,
    canonical_bytes,
    sha256_identity,
)
from smf_assurance.subjects.envelope import Classification
from smf_assurance.subjects.messages import MAX_OUTPUT_WINDOW_CHARS

ENFORCEMENT_SCHEMA: Final = "smf.enforcement-projection/1"
NOT_CONFINED: Final = "runtime_not_confined"
"""The reason code of every confinement policy's denial."""
DEFAULT_DETECTION_WINDOW_CHARS: Final = 4096
"""A release that sets no ``detection_window_chars``: the output gate reads this much of
what a conversation showed before with each turn (issue 36). Every marker the
detectors know is a few dozen characters; 4096 spans many turns of interim text and
tool calls, and costs a few microseconds of scanning per turn."""
DetectionWindow = Annotated[int, msgspec.Meta(ge=0, le=MAX_OUTPUT_WINDOW_CHARS)]
ANALYSIS_SCHEMA: Final = "smf.analysis-projection/1"

# ``\Z``, not ``$``: in Python ``$`` also matches before a trailing newline.
RuleId = Annotated[str, msgspec.Meta(pattern=r"^urn:smf:rule:[a-z0-9][a-z0-9:._-]{0,127}\Z")]
PolicyId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,127}\Z")]
AuthorityType = Literal[
    "statute",
    "regulation",
    "court_rule",
    "professional_conduct_rule",
    "case_law",
    "firm_policy",
    "synthetic",
]
ReviewKind = Literal["engineering_review", "legal_review"]


class Scope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Who a weaker-layer policy binds to (customer policy binds to its tenant)."""

    tenant_id: str | None = None
    matter_id: str | None = None
    actor_id: str | None = None


class PolicyRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    policy_id: PolicyId
    layer: Layer
    rule_id: RuleId
    effect: Effect
    reason_code: ReasonCode
    scope: Scope = Scope()
    requirements: RequirementSpec = RequirementSpec()


class EnforcementRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    rule_id: RuleId
    source_hash: Identity
    effective_from: int
    effective_until: int | None
    when: dict[str, Any]


class Review(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reviewer: str
    kind: ReviewKind
    reviewed_at: str
    note: str = ""


class Correction(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    at: str
    summary: str


class AnalysisRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    rule_id: RuleId
    title: str
    authority_type: AuthorityType
    citation: str
    locator: str
    statement: str
    source_hash: Identity
    effective_from: int
    effective_until: int | None
    review: Review
    corrections: tuple[Correction, ...]
    when: dict[str, Any]


class ModelProvider(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A model provider as a destination (issue 16, "Model egress is governed"): the
    data classifications a request to it may carry. A provider the release does not
    name receives nothing; ``unknown`` is a classification it must be approved for."""

    provider: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")]
    classifications: tuple[Classification, ...]


class EnforcementProjection(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True
):
    """``omit_defaults``: a projection with no model providers, and no detection window
    of its own, has the same bytes, and so the same id, as before either existed."""

    schema: Literal["smf.enforcement-projection/1"]
    release_id: str
    release_sequence: int
    fact_registry_version: str
    recipe_id: Identity
    rules: tuple[EnforcementRule, ...]
    policies: tuple[PolicyRecord, ...]
    model_providers: tuple[ModelProvider, ...] = ()
    confinement: tuple[PolicyRecord, ...] = ()
    """Policies that apply only to a runtime the gate does not hold as confined
    (docs/CONFINEMENT.md, "Releases that require confinement"): each a ``deny``
    with reason ``runtime_not_confined``, over a rule naming the operations whose
    effects a proposal cannot show (a terminal command, code, a patch, a process, a
    scheduled job). ``omit_defaults``: a release without them keeps its bytes."""
    detection_window_chars: DetectionWindow | None = None
    """How much of what a conversation showed before the output gate reads with each
    turn (issue 36, "Detect across turns"); ``None``: :data:`DEFAULT_DETECTION_WINDOW_CHARS`.
    0 reads each turn alone."""


class AnalysisProjection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.analysis-projection/1"]
    release_id: str
    release_sequence: int
    fact_registry_version: str
    recipe_id: Identity
    rules: tuple[AnalysisRule, ...]


class ProjectionError(ValueError):
    """A projection cannot be used: malformed, wrong registry, or dangling references."""


def projection_bytes(projection: msgspec.Struct) -> bytes:
    """Canonical bytes of a projection: what is hashed, signed and written."""
    return canonical_bytes(msgspec.to_builtins(projection))


def projection_id(projection: msgspec.Struct) -> str:
    return sha256_identity(projection_bytes(projection))


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    """A policy joined with its rule's predicate, interval and source hash."""

    record: PolicyRecord
    layer_rank: int
    predicate: Node
    source_hash: str
    effective_from: int
    effective_until: int | None

    check: Callable[[Mapping[str, Any], int], bool] = field(compare=False, repr=False)
    """In force at the time, in scope, and the rule's predicate holds."""
    unconfined_only: bool = False
    """One of the release's :attr:`EnforcementProjection.confinement` policies."""


def _scope_pairs(scope: Scope) -> tuple[tuple[str, str], ...]:
    pairs = (
        ("professional.tenant_id", scope.tenant_id),
        ("professional.matter_id", scope.matter_id),
        ("professional.actor_id", scope.actor_id),
    )
    return tuple((path, value) for path, value in pairs if value is not None)


def _check(
    scope: Scope, predicate: Node, start: int, until: int | None
) -> Callable[[Mapping[str, Any], int], bool]:
    """One closure per policy: it runs for every policy on every decision.

    Customer, matter and user policies bind only within their scope; a rule
    binds only inside its effective interval ``[start, until)``.
    """
    pairs = _scope_pairs(scope)
    test = predicate.test
    end = until if until is not None else SAFE_INTEGER_MAX

    def check(facts: Mapping[str, Any], at_seconds: int) -> bool:
        if at_seconds < start or at_seconds >= end:
            return False
        for path, value in pairs:
            if facts.get(path) != value:
                return False
        return test(facts)

    return check


@dataclass(frozen=True, slots=True)
class PolicySet:
    """What the evaluator needs from a verified enforcement projection.

    ``outcomes`` memoizes the part of a decision that depends only on which
    policies applied; it is filled by the evaluator and never changes a result.
    """

    release_id: str
    release_sequence: int
    projection_id: str
    policies: tuple[CompiledPolicy, ...]
    index: PolicyIndex | LinearScan
    """Which of ``policies`` may apply to given facts
    (``smf_assurance.core.policy_index``)."""
    outcomes: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    model_providers: Mapping[str, frozenset[str]] = field(default_factory=dict, compare=False)
    """Provider name -> the classifications the release lets a request to it carry."""
    unconfined_only: frozenset[int] = frozenset()
    """The indices in :attr:`policies` of the release's confinement policies."""
    detection_window_chars: int = DEFAULT_DETECTION_WINDOW_CHARS
    """The release's detection window (:attr:`EnforcementProjection.detection_window_chars`)."""


def scanned_policy_set(policy_set: PolicySet) -> PolicySet:
    """The same policies with every one checked on every decision: the linear scan the
    index replaced, kept as the reference it must equal (tests, ``bench --evaluator-growth``)."""
    return dataclasses.replace(policy_set, index=LinearScan(len(policy_set.policies)), outcomes={})


def decode_enforcement(data: bytes) -> EnforcementProjection:
    try:
        return msgspec.json.decode(data, type=EnforcementProjection)
    except msgspec.DecodeError as exc:
        raise ProjectionError(f"enforcement projection is invalid: {exc}") from exc


def decode_analysis(data: bytes) -> AnalysisProjection:
    try:
        return msgspec.json.decode(data, type=AnalysisProjection)
    except msgspec.DecodeError as exc:
        raise ProjectionError(f"analysis projection is invalid: {exc}") from exc


def build_policy_set(projection: EnforcementProjection) -> PolicySet:
    """Compile every rule's predicate and join policies to rules.

    Refuses a projection compiled against another fact registry version, so a
    policy can never be read with facts it was not written for.
    """
    if projection.fact_registry_version != FACT_REGISTRY_VERSION:
        raise ProjectionError(
            f"projection uses fact registry {projection.fact_registry_version}; "
            f"this gate has {FACT_REGISTRY_VERSION}"
        )
    rules = {rule.rule_id: rule for rule in projection.rules}
    predicates = {rid: compile_predicate(rule.when, rid) for rid, rule in rules.items()}
    compiled = []
    if {p.policy_id for p in projection.policies} & {p.policy_id for p in projection.confinement}:
        raise ProjectionError("a confinement policy has the id of another policy")
    marked = [(r, False) for r in projection.policies] + [(r, True) for r in projection.confinement]
    for record, unconfined_only in marked:
        if unconfined_only and (record.effect != "deny" or record.reason_code != NOT_CONFINED):
            raise ProjectionError(
                f"confinement policy {record.policy_id} must deny with {NOT_CONFINED}"
            )
        rule = rules.get(record.rule_id)
        if rule is None:
            raise ProjectionError(
                f"policy {record.policy_id} references unknown rule {record.rule_id}"
            )
        predicate = predicates[record.rule_id]
        compiled.append(
            CompiledPolicy(
                record=record,
                layer_rank=LAYER_RANK[record.layer],
                predicate=predicate,
                source_hash=rule.source_hash,
                effective_from=rule.effective_from,
                effective_until=rule.effective_until,
                check=_check(record.scope, predicate, rule.effective_from, rule.effective_until),
                unconfined_only=unconfined_only,
            )
        )
    compiled.sort(key=lambda p: (p.layer_rank, p.record.policy_id))
    providers = {p.provider: frozenset(p.classifications) for p in projection.model_providers}
    if len(providers) != len(projection.model_providers):
        raise ProjectionError("a model provider is named twice")
    return PolicySet(
        release_id=projection.release_id,
        release_sequence=projection.release_sequence,
        projection_id=projection_id(projection),
        policies=tuple(compiled),
        index=build_index(
            [with_scope(necessary(p.predicate), _scope_pairs(p.record.scope)) for p in compiled]
        ),
        model_providers=providers,
        unconfined_only=frozenset(i for i, p in enumerate(compiled) if p.unconfined_only),
        detection_window_chars=(
            DEFAULT_DETECTION_WINDOW_CHARS
            if projection.detection_window_chars is None
            else projection.detection_window_chars
        ),
    )
