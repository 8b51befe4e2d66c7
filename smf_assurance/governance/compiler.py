"""The corpus compiler: source-backed rules and layered policies -> two projections.

ARCHITECTURE.md, "Governed releases": the compiler rejects dangling rule
references, duplicate identities and inconsistent metadata BEFORE writing
anything, and emits the enforcement and the analysis projection from one
source, byte-reproducible (reordered input gives identical bytes).

Corpus layout: ``release.json`` (release metadata), ``rules.json`` (a list
of rules), ``policies.json`` (a list of policies), and for rules that cite a
real authority a snapshot file under ``sources/`` holding the quoted text.
Optional: ``model_providers.json``, the model providers a request may go to
and the data classifications each may receive (issue 16); without it the
release names none, and the model gateway sends nothing to any provider.
Optional: ``confinement.json``, policies that apply only to a runtime the gate does not
hold as confined (docs/CONFINEMENT.md, "Releases that require confinement"): each a
``deny`` with reason ``runtime_not_confined`` over a rule of ``rules.json``, layered and
scoped as any policy; without it the release requires no confinement.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final

import msgspec

from smf_assurance.core.facts import FACT_REGISTRY_VERSION
from smf_assurance.core.predicates import PredicateError, compile_predicate
from smf_assurance.core.projection import (
    ANALYSIS_SCHEMA,
    ENFORCEMENT_SCHEMA,
    NOT_CONFINED,
    AnalysisProjection,
    AnalysisRule,
    AuthorityType,
    Correction,
    DetectionWindow,
    EnforcementProjection,
    EnforcementRule,
    ModelProvider,
    PolicyRecord,
    Review,
    RuleId,
    projection_bytes,
    projection_id,
)
from smf_assurance.governance.overlays import OverlayError, overlay_policies
from smf_assurance.subjects.canonical import (
    IDENTITY_PATTERN,
    CanonicalJSONError,
    canonical_bytes,
    canonical_value,
    identity_of,
    sha256_identity,
)

COMPILER_VERSION: Final = "smf.compiler/1"
SYNTHETIC_PREFIX: Final = "Synthetic:"
# ``\Z``, not ``$``: in Python ``$`` also matches before a trailing newline.
ReleaseId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,127}\Z")]
Date = Annotated[str, msgspec.Meta(pattern=r"^\d{4}-\d{2}-\d{2}\Z")]


class CompileError(ValueError):
    """The corpus cannot be compiled; nothing was written."""


class ReleaseSource(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    release_id: ReleaseId
    release_sequence: Annotated[int, msgspec.Meta(ge=1)]
    description: str = ""
    detection_window_chars: DetectionWindow | None = None
    """The output gate's window over what a conversation showed before (issue 36);
    absent: the gate's default (``DEFAULT_DETECTION_WINDOW_CHARS``)."""


class RuleSourceRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    rule_id: RuleId
    title: str
    authority_type: AuthorityType
    citation: str
    locator: str
    statement: str
    source_hash: Annotated[str, msgspec.Meta(pattern=IDENTITY_PATTERN)]
    effective_from: Date
    effective_until: Date | None
    review: Review
    when: dict[str, Any]
    corrections: tuple[Correction, ...] = ()
    snapshot: str | None = None


@dataclass(frozen=True, slots=True)
class CompiledRelease:
    """Both projections and their identities, ready to write."""

    enforcement: EnforcementProjection
    analysis: AnalysisProjection
    recipe_id: str

    def files(self) -> dict[str, bytes]:
        index = {
            "release_id": self.enforcement.release_id,
            "release_sequence": self.enforcement.release_sequence,
            "recipe_id": self.recipe_id,
            "enforcement_projection_id": projection_id(self.enforcement),
            "analysis_projection_id": projection_id(self.analysis),
        }
        return {
            "enforcement.json": projection_bytes(self.enforcement),
            "analysis.json": projection_bytes(self.analysis),
            "index.json": canonical_bytes(index),
        }


RECIPE_ID: Final = identity_of(
    {
        "compiler": COMPILER_VERSION,
        "fact_registry": FACT_REGISTRY_VERSION,
        "projections": [ENFORCEMENT_SCHEMA, ANALYSIS_SCHEMA],
    }
)
"""Identifies how projections are derived from a corpus, not what the corpus says."""


def _date_seconds(date: str, where: str) -> int:
    try:
        day = dt.date.fromisoformat(date)
    except ValueError as exc:
        raise CompileError(f"{where}: {date!r} is not a calendar date") from exc
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def _load(path: Path, type_: Any) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CompileError(f"{path.name}: cannot read ({exc.strerror})") from exc
    try:
        # Every string NFC-normalized first (ARCHITECTURE.md, "Canonical bytes"),
        # so the projection held in memory is the one its canonical bytes describe.
        return msgspec.convert(canonical_value(msgspec.json.decode(raw)), type_)
    except (msgspec.DecodeError, CanonicalJSONError) as exc:
        raise CompileError(f"{path.name}: {exc}") from exc


def _check_source(rule: RuleSourceRecord, corpus: Path) -> None:
    """Honesty rule for sources (issue 6): a real authority keeps its quoted text
    as a hashed snapshot; a synthetic rule says it is synthetic wherever shown."""
    where = f"rule {rule.rule_id}"
    synthetic = rule.authority_type == "synthetic"
    if synthetic != rule.citation.startswith(SYNTHETIC_PREFIX):
        raise CompileError(
            f"{where}: citation must start with {SYNTHETIC_PREFIX!r} exactly when "
            "authority_type is synthetic"
        )
    if synthetic:
        if rule.snapshot is not None:
            raise CompileError(f"{where}: a synthetic rule has no source snapshot")
        expected = sha256_identity(unicodedata.normalize("NFC", rule.statement).encode())
        if rule.source_hash != expected:
            raise CompileError(f"{where}: source_hash does not match the statement")
        return
    if rule.snapshot is None:
        raise CompileError(f"{where}: a rule citing a real authority needs a source snapshot")
    snapshot = (corpus / rule.snapshot).resolve()
    if corpus.resolve() not in snapshot.parents:
        raise CompileError(f"{where}: snapshot path leaves the corpus")
    try:
        data = snapshot.read_bytes()
    except OSError as exc:
        raise CompileError(f"{where}: cannot read snapshot ({exc.strerror})") from exc
    if sha256_identity(data) != rule.source_hash:
        raise CompileError(f"{where}: source_hash does not match the snapshot file")
    if unicodedata.normalize("NFC", rule.statement) not in data.decode("utf-8", "replace"):
        raise CompileError(f"{where}: the quoted statement is not in the snapshot")


_LAYER_SCOPE: Final[dict[str, frozenset[str]]] = {
    "binding_authority": frozenset(),
    "smf_safety_floor": frozenset(),
    "customer": frozenset({"tenant_id"}),
    "matter": frozenset({"tenant_id", "matter_id"}),
    "user": frozenset({"tenant_id", "actor_id"}),
}


def _check_policy(policy: PolicyRecord, rule_ids: set[str]) -> None:
    where = f"policy {policy.policy_id}"
    if policy.rule_id not in rule_ids:
        raise CompileError(f"{where}: references unknown rule {policy.rule_id}")
    scope = {k for k, v in msgspec.structs.asdict(policy.scope).items() if v is not None}
    if scope != _LAYER_SCOPE[policy.layer]:
        raise CompileError(
            f"{where}: layer {policy.layer} must be scoped by exactly "
            f"{sorted(_LAYER_SCOPE[policy.layer]) or 'nothing'}"
        )
    if policy.effect == "deny" and policy.requirements != type(policy.requirements)():
        raise CompileError(f"{where}: a deny policy carries no requirements")


def _normalized(policy: PolicyRecord) -> PolicyRecord:
    """Required roles are a set (merged by union): sorted and de-duplicated, so
    their spelling order cannot change the projection's bytes."""
    requirements = policy.requirements
    roles = tuple(sorted(set(requirements.required_roles)))
    if roles == requirements.required_roles:
        return policy
    return msgspec.structs.replace(
        policy, requirements=msgspec.structs.replace(requirements, required_roles=roles)
    )


MODEL_PROVIDERS_FILE: Final = "model_providers.json"
CONFINEMENT_FILE: Final = "confinement.json"


def _duplicates(ids: Sequence[str]) -> list[str]:
    return sorted(i for i, n in Counter(ids).items() if n > 1)


def compile_corpus(corpus: Path) -> CompiledRelease:
    """Validate the whole corpus and build both projections, in memory."""
    release: ReleaseSource = _load(corpus / "release.json", ReleaseSource)
    rules: tuple[RuleSourceRecord, ...] = _load(corpus / "rules.json", tuple[RuleSourceRecord, ...])
    policies: tuple[PolicyRecord, ...] = _load(corpus / "policies.json", tuple[PolicyRecord, ...])
    try:  # signed customer overlays, verified before any of their policies is used
        policies = (*policies, *overlay_policies(corpus, policies))
    except OverlayError as exc:
        raise CompileError(str(exc)) from exc
    confinement: tuple[PolicyRecord, ...] = ()
    if (corpus / CONFINEMENT_FILE).exists():
        confinement = _load(corpus / CONFINEMENT_FILE, tuple[PolicyRecord, ...])

    for kind, ids in (
        ("rule", [r.rule_id for r in rules]),
        ("policy", [p.policy_id for p in (*policies, *confinement)]),
    ):
        if dup := _duplicates(ids):
            raise CompileError(f"duplicate {kind} identity: {', '.join(dup)}")

    analysis_rules = []
    enforcement_rules = []
    for rule in sorted(rules, key=lambda r: r.rule_id):
        where = f"rule {rule.rule_id}"
        try:
            compile_predicate(rule.when, rule.rule_id)
        except PredicateError as exc:
            raise CompileError(str(exc)) from exc
        start = _date_seconds(rule.effective_from, where)
        until = None if rule.effective_until is None else _date_seconds(rule.effective_until, where)
        if until is not None and until <= start:
            raise CompileError(f"{where}: effective_until is not after effective_from")
        _check_source(rule, corpus)
        enforcement_rules.append(
            EnforcementRule(
                rule_id=rule.rule_id,
                source_hash=rule.source_hash,
                effective_from=start,
                effective_until=until,
                when=rule.when,
            )
        )
        analysis_rules.append(
            AnalysisRule(
                rule_id=rule.rule_id,
                title=rule.title,
                authority_type=rule.authority_type,
                citation=rule.citation,
                locator=rule.locator,
                statement=rule.statement,
                source_hash=rule.source_hash,
                effective_from=start,
                effective_until=until,
                review=rule.review,
                corrections=tuple(sorted(rule.corrections, key=lambda c: (c.at, c.summary))),
                when=rule.when,
            )
        )
    rule_ids = {r.rule_id for r in rules}
    for policy in (*policies, *confinement):
        _check_policy(policy, rule_ids)
    for policy in confinement:
        if policy.effect != "deny" or policy.reason_code != NOT_CONFINED:
            raise CompileError(
                f"confinement policy {policy.policy_id}: must deny with {NOT_CONFINED}"
            )
    providers: tuple[ModelProvider, ...] = ()
    if (corpus / MODEL_PROVIDERS_FILE).exists():
        providers = _load(corpus / MODEL_PROVIDERS_FILE, tuple[ModelProvider, ...])
    if dup := _duplicates([p.provider for p in providers]):
        raise CompileError(f"duplicate model provider: {', '.join(dup)}")

    enforcement = EnforcementProjection(
        schema=ENFORCEMENT_SCHEMA,
        release_id=release.release_id,
        release_sequence=release.release_sequence,
        fact_registry_version=FACT_REGISTRY_VERSION,
        recipe_id=RECIPE_ID,
        rules=tuple(enforcement_rules),
        policies=tuple(sorted(map(_normalized, policies), key=lambda p: p.policy_id)),
        model_providers=tuple(
            ModelProvider(p.provider, tuple(sorted(set(p.classifications))))
            for p in sorted(providers, key=lambda p: p.provider)
        ),
        confinement=tuple(sorted(confinement, key=lambda p: p.policy_id)),
        detection_window_chars=release.detection_window_chars,
    )
    analysis = AnalysisProjection(
        schema=ANALYSIS_SCHEMA,
        release_id=release.release_id,
        release_sequence=release.release_sequence,
        fact_registry_version=FACT_REGISTRY_VERSION,
        recipe_id=RECIPE_ID,
        rules=tuple(analysis_rules),
    )
    return CompiledRelease(enforcement=enforcement, analysis=analysis, recipe_id=RECIPE_ID)


def write_release(compiled: CompiledRelease, out: Path) -> dict[str, Path]:
    """Write both projections and the index; the directory must be empty or new."""
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise CompileError(f"output directory {out} is not empty")
    written = {}
    for name, data in compiled.files().items():
        path = out / name
        path.write_bytes(data)
        written[name] = path
    return written
