"""Claims: what a persona asserts, how it is read, and which claims a report may carry.

Issue 9, "Claim validator". The rules this module enforces, in order:

- A persona's answer is read by :func:`parse_output` into drafts that keep
  every field the persona sent, known or not (``extensions``). A model may
  attach provenance we did not ask for (a quote, a confidence, its own
  release id); dropping it before validation would hide exactly the thing a
  reviewer needs to see. An answer that is not the expected shape raises
  :class:`ShapeError` and the persona is reported as failed as a whole;
  nothing is repaired or invented.
- A ``normative`` claim must cite at least one rule, and every rule a claim
  cites must be ``selected`` in this release and projection
  (:func:`validate_claim`). Each stopped attack has its own reason code:
  ``cites_unknown_rule`` (an invented rule id), ``cites_excluded_rule`` and
  ``cites_unresolved_rule`` (a real rule that does not apply, or whose
  application the facts cannot settle), ``cites_other_release`` and
  ``cites_other_projection`` (a real rule id borrowed from another release:
  mix-and-match), ``quote_not_in_cited_rule`` (a quotation the cited rules do
  not contain).
- Uncited prose is never presented as rule-backed: an accepted ``analysis``
  claim is labelled ``model_analysis`` whether or not it refers to rules;
  only an accepted ``normative`` claim is ``rule_backed``.

Citation forms (all equivalent when they agree with the loaded release):
``"urn:smf:rule:x"`` (this release), ``"<release_id>/urn:smf:rule:x"``
(qualified), or an object ``{"rule_id": ..., "release_id": ...,
"projection_id": ...}`` whose qualifiers are optional. A claim, or the whole
answer, may carry ``release_id``/``projection_id`` too; they apply to every
citation that does not name its own. Validation proves the citation is to a
selected rule; it does not prove that the sentence follows from that rule
(docs/SWARM.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from smf_assurance.core.projection import AnalysisRule, AuthorityType
from smf_assurance.swarm.selector import RuleSelection

MAX_CLAIMS: Final = 32
MAX_CITATIONS: Final = 16
MAX_TEXT_CHARS: Final = 4000
MAX_EXTENSIONS: Final = 32
MAX_EXTENSION_JSON: Final = 8192

ClaimKind = Literal["normative", "analysis"]
ClaimLabel = Literal["rule_backed", "model_analysis"]
RejectReason = Literal[
    "normative_claim_without_citation",
    "cites_unknown_rule",
    "cites_excluded_rule",
    "cites_unresolved_rule",
    "cites_other_release",
    "cites_other_projection",
    "malformed_provenance",
    "quote_not_in_cited_rule",
]
PROVENANCE_KEYS: Final = ("release_id", "projection_id")
_CLAIM_KEYS: Final = frozenset({"text", "kind", "citations"})
_CITATION_KEYS: Final = frozenset({"rule_id", "release_id", "projection_id"})


class ShapeError(ValueError):
    """A persona's answer is not ``{"claims": [{text, kind, citations}, ...]}``."""


# --- drafts: a persona's answer, read but not yet judged -------------------------


@dataclass(frozen=True, slots=True)
class Citation:
    """One citation as written, split into the rule id and its qualifiers."""

    rule_id: str
    release_id: str | None
    projection_id: str | None
    as_written: str
    """The citation exactly as the persona wrote it (objects as sorted JSON)."""


@dataclass(frozen=True, slots=True)
class ClaimDraft:
    text: str
    kind: ClaimKind
    citations: tuple[Citation, ...]
    extensions: Mapping[str, Any]
    """Every other key of the claim object, unchanged."""


@dataclass(frozen=True, slots=True)
class PersonaOutput:
    claims: tuple[ClaimDraft, ...]
    extensions: Mapping[str, Any]
    """Every key of the answer other than ``claims``, unchanged."""


def json_text(value: Any) -> str:
    """Compact JSON with sorted keys: how extension values are shown in reports.

    Kept as text rather than as JSON values because a model may send floats,
    which have no canonical form (ARCHITECTURE.md, "Canonical bytes"), and a
    report must still be canonical JSON.
    """
    return msgspec.json.encode(value, order="sorted").decode("utf-8")


def _extensions(obj: Mapping[str, Any], known: frozenset[str], where: str) -> dict[str, Any]:
    extra = {k: v for k, v in obj.items() if k not in known}
    if len(extra) > MAX_EXTENSIONS:
        raise ShapeError(f"{where} has more than {MAX_EXTENSIONS} extra fields")
    for key, value in extra.items():
        if len(json_text(value)) > MAX_EXTENSION_JSON:
            raise ShapeError(f"{where}.{key} is larger than {MAX_EXTENSION_JSON} bytes of JSON")
    return extra


def _qualifier(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ShapeError(f"{where}.{key} must be a string")
    return value


def _citation(value: Any, where: str) -> Citation:
    if isinstance(value, str):
        release, slash, rule = value.rpartition("/")
        return Citation(rule, release if slash else None, None, value)
    if isinstance(value, Mapping):
        rule_id = value.get("rule_id")
        if not isinstance(rule_id, str):
            raise ShapeError(f"{where}.rule_id must be a string")
        _extensions(value, _CITATION_KEYS, where)
        return Citation(
            rule_id,
            _qualifier(value, "release_id", where),
            _qualifier(value, "projection_id", where),
            json_text(value),
        )
    raise ShapeError(f"{where} must be a rule id string or an object with rule_id")


def _claim(value: Any, where: str) -> ClaimDraft:
    if not isinstance(value, Mapping):
        raise ShapeError(f"{where} must be an object")
    text, kind, citations = value.get("text"), value.get("kind"), value.get("citations", [])
    if not isinstance(text, str) or not text.strip():
        raise ShapeError(f"{where}.text must be non-empty text")
    if len(text) > MAX_TEXT_CHARS:
        raise ShapeError(f"{where}.text is longer than {MAX_TEXT_CHARS} characters")
    if kind not in ("normative", "analysis"):
        raise ShapeError(f"{where}.kind must be 'normative' or 'analysis'")
    if not isinstance(citations, list):
        raise ShapeError(f"{where}.citations must be a list")
    if len(citations) > MAX_CITATIONS:
        raise ShapeError(f"{where}.citations has more than {MAX_CITATIONS} entries")
    return ClaimDraft(
        text=text,
        kind=kind,
        citations=tuple(_citation(c, f"{where}.citations[{i}]") for i, c in enumerate(citations)),
        extensions=_extensions(value, _CLAIM_KEYS, where),
    )


def parse_output(value: Any) -> PersonaOutput:
    """Read a persona's decoded JSON answer; raise :class:`ShapeError` naming the path."""
    if not isinstance(value, Mapping):
        raise ShapeError("the answer must be a JSON object with 'claims'")
    claims = value.get("claims")
    if not isinstance(claims, list):
        raise ShapeError("$.claims must be a list")
    if len(claims) > MAX_CLAIMS:
        raise ShapeError(f"$.claims has more than {MAX_CLAIMS} entries")
    return PersonaOutput(
        claims=tuple(_claim(c, f"$.claims[{i}]") for i, c in enumerate(claims)),
        extensions=_extensions(value, frozenset({"claims"}), "$"),
    )


# --- judgement: accepted and rejected claims -------------------------------------


class CitedRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A cited, selected rule with its provenance, as the report shows it."""

    rule_id: str
    as_written: tuple[str, ...]
    title: str
    authority_type: AuthorityType
    synthetic: bool
    citation: str
    locator: str
    source_hash: str
    review_kind: str
    reviewer: str


class CitationProblem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Why a claim was rejected; ``citation`` is None when the claim as a whole is at fault."""

    reason: RejectReason
    citation: str | None
    detail: str


class AcceptedClaim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    claim_id: str
    persona: str
    kind: ClaimKind
    label: ClaimLabel
    text: str
    rules: tuple[CitedRule, ...]
    extensions: dict[str, str]


class RejectedClaim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    claim_id: str
    persona: str
    kind: ClaimKind
    text: str
    citations: tuple[str, ...]
    problems: tuple[CitationProblem, ...]
    extensions: dict[str, str]


@dataclass(frozen=True, slots=True)
class ValidationContext:
    """The loaded release as the validator sees it: ids, rules and their outcomes."""

    release_id: str
    projection_id: str
    rules: Mapping[str, AnalysisRule]
    outcomes: Mapping[str, RuleSelection]


def _provenance(
    claim: ClaimDraft, answer: Mapping[str, Any], problems: list[CitationProblem]
) -> tuple[str | None, str | None]:
    """Claim-level release/projection, falling back to the answer's own."""
    found: list[str | None] = []
    for key in PROVENANCE_KEYS:
        value = claim.extensions.get(key, answer.get(key))
        if value is not None and not isinstance(value, str):
            problems.append(
                CitationProblem(
                    reason="malformed_provenance", citation=None, detail=f"{key} is not a string"
                )
            )
            value = None
        found.append(value)
    return found[0], found[1]


def _judge_citation(
    citation: Citation, release: str | None, projection: str | None, ctx: ValidationContext
) -> CitationProblem | None:
    cited_release = release if citation.release_id is None else citation.release_id
    cited_projection = projection if citation.projection_id is None else citation.projection_id
    written = citation.as_written
    # Mix-and-match: a real rule id borrowed from another release or projection.
    if cited_release is not None and cited_release != ctx.release_id:
        return CitationProblem(
            reason="cites_other_release",
            citation=written,
            detail=f"release {cited_release}, loaded release is {ctx.release_id}",
        )
    if cited_projection is not None and cited_projection != ctx.projection_id:
        return CitationProblem(
            reason="cites_other_projection",
            citation=written,
            detail=f"projection {cited_projection}, loaded projection is {ctx.projection_id}",
        )
    outcome = ctx.outcomes.get(citation.rule_id)
    # Invented citation: no such rule in the loaded projection.
    if outcome is None:
        return CitationProblem(
            reason="cites_unknown_rule",
            citation=written,
            detail=f"{citation.rule_id} is not a rule of release {ctx.release_id}",
        )
    if outcome.status == "unresolved":
        return CitationProblem(
            reason="cites_unresolved_rule",
            citation=written,
            detail="applies only if these facts are known: " + ", ".join(outcome.missing_facts),
        )
    if outcome.status == "excluded":
        return CitationProblem(
            reason="cites_excluded_rule", citation=written, detail=", ".join(outcome.reasons)
        )
    return None


def _cited_rules(claim: ClaimDraft, ctx: ValidationContext) -> tuple[CitedRule, ...]:
    written: dict[str, list[str]] = {}
    for citation in claim.citations:
        written.setdefault(citation.rule_id, []).append(citation.as_written)
    cited = []
    for rule_id, forms in written.items():
        rule = ctx.rules[rule_id]
        cited.append(
            CitedRule(
                rule_id=rule_id,
                as_written=tuple(forms),
                title=rule.title,
                authority_type=rule.authority_type,
                synthetic=rule.authority_type == "synthetic",
                citation=rule.citation,
                locator=rule.locator,
                source_hash=rule.source_hash,
                review_kind=rule.review.kind,
                reviewer=rule.review.reviewer,
            )
        )
    return tuple(cited)


def _check_quote(claim: ClaimDraft, ctx: ValidationContext) -> CitationProblem | None:
    """A ``quote`` extension must appear verbatim in a cited rule's statement."""
    if "quote" not in claim.extensions:
        return None
    quote = claim.extensions["quote"]
    statements = [ctx.rules[c.rule_id].statement for c in claim.citations]
    if isinstance(quote, str) and quote and any(quote in s for s in statements):
        return None
    return CitationProblem(
        reason="quote_not_in_cited_rule",
        citation=None,
        detail="the quote is not verbatim text of any cited rule's statement",
    )


def validate_claim(
    claim: ClaimDraft,
    claim_id: str,
    persona: str,
    answer_extensions: Mapping[str, Any],
    ctx: ValidationContext,
) -> AcceptedClaim | RejectedClaim:
    """Accept the claim only if every citation is a selected rule of this release."""
    problems: list[CitationProblem] = []
    release, projection = _provenance(claim, answer_extensions, problems)
    for citation in claim.citations:
        problem = _judge_citation(citation, release, projection, ctx)
        if problem is not None:
            problems.append(problem)
    if claim.kind == "normative" and not claim.citations:
        problems.append(
            CitationProblem(
                reason="normative_claim_without_citation",
                citation=None,
                detail="a normative claim must cite at least one selected rule",
            )
        )
    if not problems and (quote_problem := _check_quote(claim, ctx)) is not None:
        problems.append(quote_problem)
    extensions = {k: json_text(v) for k, v in sorted(claim.extensions.items())}
    if problems:
        return RejectedClaim(
            claim_id=claim_id,
            persona=persona,
            kind=claim.kind,
            text=claim.text,
            citations=tuple(c.as_written for c in claim.citations),
            problems=tuple(problems),
            extensions=extensions,
        )
    return AcceptedClaim(
        claim_id=claim_id,
        persona=persona,
        kind=claim.kind,
        label="rule_backed" if claim.kind == "normative" else "model_analysis",
        text=claim.text,
        rules=_cited_rules(claim, ctx),
        extensions=extensions,
    )
