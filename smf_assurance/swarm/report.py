"""The Swarm report: selection, personas, judged claims, and the faithfulness review.

What a report must let a reader check:

- Which release and projection it was built from, and that they are the
  loaded ones (:func:`check_release`: a mismatch is refused with
  :class:`ReleaseMismatchError` or :class:`ProjectionMismatchError`, one error
  per mix-and-match, so a report can never be shown against a release whose
  rules it did not select from).
- The three selection sets with reasons; every accepted claim with the rules
  it cites (citation, locator, source hash, authority type; synthetic rules
  flagged as synthetic); every rejected claim with why; each persona's
  outcome, failures included with their reason.
- ``semantic_faithfulness`` stays ``not reviewed`` until a named reviewer
  signs a :class:`ReviewRecord` (Ed25519 DSSE, ``smf_assurance.subjects.dsse``) bound to
  the report's id, release and projection. Automated validation never
  changes it: rule-id validation stops invented citations; it does not
  prove that each sentence follows from the rule it cites.
- ``report_id`` is the identity of everything but the id and the review, so
  any edit to the body is detected (:func:`decode_report`) and a review
  record binds exactly the body that was reviewed.

JSON (canonical bytes) is for machines; Markdown is for people, with every
piece of persona text escaped so a model cannot forge a heading or a
"rule-backed" section inside its own prose.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

from smf_assurance.subjects.canonical import canonical_bytes, identity_of
from smf_assurance.subjects.dsse import Envelope, SignatureError, open_struct, sign_struct
from smf_assurance.subjects.keys import Principal, SigningKey, VerifyKey
from smf_assurance.subjects.names import PAYLOAD_SWARM_REVIEW
from smf_assurance.swarm.claims import (
    AcceptedClaim,
    RejectedClaim,
    ValidationContext,
    json_text,
    validate_claim,
)
from smf_assurance.swarm.personas import PersonaResult
from smf_assurance.swarm.selector import AnalysisRelease, RuleSelection, Selection

REPORT_SCHEMA: Final = "smf.swarm-report/1"
REVIEW_SCHEMA: Final = "smf.swarm-review/1"
NOT_REVIEWED: Final = "not reviewed"
LIMITS: Final = (
    "Rule-id validation stops invented citations; it does not prove that each sentence "
    "follows from the rule it cites. Engineering review is not legal review."
)
MAX_NOTE_CHARS: Final = 4000

Verdict = Literal["faithful", "not_faithful", "partially_faithful"]
FaithfulnessStatus = Literal["not reviewed", "faithful", "not_faithful", "partially_faithful"]


class ReportError(ValueError):
    """A report cannot be used; the subclass names what is wrong."""


class ReleaseMismatchError(ReportError):
    """The report was built from another release than the loaded one."""


class ProjectionMismatchError(ReportError):
    """The report names the loaded release but another analysis projection."""


class ReportTamperedError(ReportError):
    """The report's body does not match its ``report_id``, or its review is inconsistent."""


class ReviewError(ReportError):
    """A review record does not verify, or does not bind this report."""


class PersonaReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    persona: str
    label: str
    source: Literal["offline", "model"]
    model: str | None
    deliberately_invalid: bool
    status: Literal["answered", "failed"]
    failure: str | None
    failure_detail: str
    accepted: int
    rejected: int
    extensions: dict[str, str]


class ReviewRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a reviewer signs: a verdict on one report body of one release."""

    schema: Literal["smf.swarm-review/1"]
    report_id: str
    release_id: str
    projection_id: str
    reviewer: Principal
    verdict: Verdict
    note: str
    reviewed_at_ms: int


class Faithfulness(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    status: FaithfulnessStatus = NOT_REVIEWED
    reviewer: str | None = None
    key_id: str | None = None
    reviewed_at_ms: int | None = None
    note: str | None = None
    record: Envelope | None = None


class SelectionSets(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    selected: tuple[RuleSelection, ...]
    unresolved: tuple[RuleSelection, ...]
    excluded: tuple[RuleSelection, ...]


class Report(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.swarm-report/1"]
    report_id: str
    release_id: str
    release_sequence: int
    projection_id: str
    question: str
    at_ms: int
    facts: dict[str, Any]
    facts_id: str
    selection: SelectionSets
    personas: tuple[PersonaReport, ...]
    accepted: tuple[AcceptedClaim, ...]
    rejected: tuple[RejectedClaim, ...]
    limits: str
    semantic_faithfulness: Faithfulness


# --- building ---------------------------------------------------------------------


def _body_id(report: Report) -> str:
    """Identity of the report without its id and its review."""
    body = msgspec.to_builtins(report)
    del body["report_id"], body["semantic_faithfulness"]
    return identity_of(body)


def build_report(
    question: str,
    facts: Mapping[str, Any],
    release: AnalysisRelease,
    selection: Selection,
    results: Sequence[PersonaResult],
) -> Report:
    """Validate every persona's claims and assemble the (unreviewed) report."""
    ctx = ValidationContext(
        release_id=release.release_id,
        projection_id=release.projection_id,
        rules=release.rules,
        outcomes=selection.status_of(),
    )
    accepted: list[AcceptedClaim] = []
    rejected: list[RejectedClaim] = []
    personas: list[PersonaReport] = []
    for result in results:
        info = result.info
        n_accepted = n_rejected = 0
        extensions: dict[str, str] = {}
        if result.output is not None:
            extensions = {k: json_text(v) for k, v in sorted(result.output.extensions.items())}
            for index, claim in enumerate(result.output.claims):
                judged = validate_claim(
                    claim, f"{info.name}/{index}", info.name, result.output.extensions, ctx
                )
                if isinstance(judged, AcceptedClaim):
                    accepted.append(judged)
                    n_accepted += 1
                else:
                    rejected.append(judged)
                    n_rejected += 1
        personas.append(
            PersonaReport(
                persona=info.name,
                label=info.label,
                source=info.source,
                model=info.model,
                deliberately_invalid=info.deliberately_invalid,
                status="answered" if result.output is not None else "failed",
                failure=result.failure,
                failure_detail=result.detail,
                accepted=n_accepted,
                rejected=n_rejected,
                extensions=extensions,
            )
        )
    report = Report(
        schema=REPORT_SCHEMA,
        report_id="",
        release_id=release.release_id,
        release_sequence=release.release_sequence,
        projection_id=release.projection_id,
        question=question,
        at_ms=selection.at_ms,
        facts={k: list(v) if isinstance(v, tuple) else v for k, v in facts.items()},
        facts_id=selection.facts_id,
        selection=SelectionSets(selection.selected, selection.unresolved, selection.excluded),
        personas=tuple(personas),
        accepted=tuple(accepted),
        rejected=tuple(rejected),
        limits=LIMITS,
        semantic_faithfulness=Faithfulness(),
    )
    return msgspec.structs.replace(report, report_id=_body_id(report))


def check_release(report: Report, release: AnalysisRelease) -> None:
    """Refuse a report that was not built from the loaded release and projection."""
    if report.release_id != release.release_id:
        raise ReleaseMismatchError(
            f"report is for release {report.release_id}; loaded release is {release.release_id}"
        )
    if report.projection_id != release.projection_id:
        raise ProjectionMismatchError(
            f"report is for projection {report.projection_id}; "
            f"loaded projection is {release.projection_id}"
        )


# --- machine form -------------------------------------------------------------------


def report_bytes(report: Report) -> bytes:
    """Canonical JSON: the same inputs give the same bytes."""
    return canonical_bytes(msgspec.to_builtins(report))


def decode_report(data: bytes) -> Report:
    """Decode a report and check that its body is the one its id names."""
    try:
        report = msgspec.json.decode(data, type=Report)
    except msgspec.DecodeError as exc:
        raise ReportError(f"not a {REPORT_SCHEMA} report: {exc}") from exc
    # Tampering: an edited claim, selection or fact changes the body identity.
    if _body_id(report) != report.report_id:
        raise ReportTamperedError("the report body does not match its report_id")
    faith = report.semantic_faithfulness
    if (faith.status == NOT_REVIEWED) != (faith.record is None):
        raise ReportTamperedError("a review status must come with its signed record")
    return report


# --- the signed faithfulness review ------------------------------------------------


def sign_review(
    report: Report,
    reviewer: str,
    key: SigningKey,
    verdict: Verdict,
    note: str,
    reviewed_at_ms: int,
) -> Envelope:
    """A named reviewer's signed verdict, bound to this report body and release."""
    if len(note) > MAX_NOTE_CHARS:
        raise ReviewError(f"the note is longer than {MAX_NOTE_CHARS} characters")
    record = ReviewRecord(
        schema=REVIEW_SCHEMA,
        report_id=report.report_id,
        release_id=report.release_id,
        projection_id=report.projection_id,
        reviewer=reviewer,
        verdict=verdict,
        note=note,
        reviewed_at_ms=reviewed_at_ms,
    )
    return sign_struct(PAYLOAD_SWARM_REVIEW, record, [key])


def _open_review(
    report: Report, envelope: Envelope, trusted: Mapping[str, VerifyKey]
) -> tuple[ReviewRecord, str]:
    try:
        record, verified = open_struct(envelope, trusted, ReviewRecord, PAYLOAD_SWARM_REVIEW)
    except SignatureError as exc:
        raise ReviewError(f"review record does not verify: {exc}") from exc
    # Replay of a review onto another report, release or projection.
    if record.report_id != report.report_id:
        raise ReviewError("the review record is for another report")
    if (record.release_id, record.projection_id) != (report.release_id, report.projection_id):
        raise ReviewError("the review record is for another release or projection")
    return record, min(verified.key_ids)


def apply_review(report: Report, envelope: Envelope, trusted: Mapping[str, VerifyKey]) -> Report:
    """Return the report with ``semantic_faithfulness`` taken from a verified record."""
    if report.semantic_faithfulness.status != NOT_REVIEWED:
        raise ReviewError(
            f"the report was already reviewed by {report.semantic_faithfulness.reviewer}"
        )
    record, key_id = _open_review(report, envelope, trusted)
    faith = Faithfulness(
        status=record.verdict,
        reviewer=record.reviewer,
        key_id=key_id,
        reviewed_at_ms=record.reviewed_at_ms,
        note=record.note,
        record=envelope,
    )
    return msgspec.structs.replace(report, semantic_faithfulness=faith)


def verified_faithfulness(report: Report, trusted: Mapping[str, VerifyKey]) -> Faithfulness:
    """The review as shown, after re-verifying its record against ``trusted`` keys.

    A status shown without a record, or one that differs from what the
    reviewer signed, is refused: the shown field is only a copy.
    """
    faith = report.semantic_faithfulness
    if faith.record is None:
        if faith.status != NOT_REVIEWED:
            raise ReportTamperedError("a review status must come with its signed record")
        return faith
    record, key_id = _open_review(report, faith.record, trusted)
    signed = (record.verdict, record.reviewer, key_id, record.reviewed_at_ms, record.note)
    if signed != (faith.status, faith.reviewer, faith.key_id, faith.reviewed_at_ms, faith.note):
        raise ReportTamperedError("the shown review differs from the signed record")
    return faith


# --- human form -----------------------------------------------------------------------

_MD_SPECIAL: Final = re.compile(r"([\\`*_\[\]<>|~])")
"""Inline markup only: text is flattened to one line and never starts a line, so
headings, lists and quotes cannot begin inside it."""


def md(text: str) -> str:
    """Escape persona or user text for Markdown: one line, no markup of its own."""
    flat = " ".join(text.split())
    return _MD_SPECIAL.sub(r"\\\1", flat)


def _authority(authority_type: str, synthetic: bool) -> str:
    return "**synthetic, not a real authority**" if synthetic else authority_type


def _instant(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat().replace("+00:00", "Z")


def _rule_line(rule: RuleSelection) -> str:
    missing = f"; missing facts: {', '.join(rule.missing_facts)}" if rule.missing_facts else ""
    return (
        f"- `{rule.rule_id}` {md(rule.title)} ({_authority(rule.authority_type, rule.synthetic)}): "
        f"{', '.join(rule.reasons)}{missing}"
    )


def _selection_md(sets: SelectionSets) -> list[str]:
    lines = ["## Rule selection", ""]
    for title, rules in (
        ("Selected (may be cited)", sets.selected),
        ("Unresolved (depends on missing facts; may not be cited)", sets.unresolved),
        ("Excluded (does not apply or not in force; may not be cited)", sets.excluded),
    ):
        lines += [f"### {title}", ""]
        lines += [_rule_line(r) for r in rules] or ["- none"]
        lines.append("")
    return lines


def _accepted_md(claims: Sequence[AcceptedClaim], label: str) -> list[str]:
    lines: list[str] = []
    for claim in claims:
        if claim.label != label:
            continue
        lines.append(f"- **{claim.claim_id}** ({md(claim.persona)}): {md(claim.text)}")
        for rule in claim.rules:
            lines.append(
                f"  - `{rule.rule_id}` {md(rule.title)}; "
                f"{_authority(rule.authority_type, rule.synthetic)}; "
                f"citation: {md(rule.citation)}; locator: `{rule.locator}`; "
                f"source hash `{rule.source_hash}`; {rule.review_kind} by {md(rule.reviewer)}"
            )
        lines += [f"  - extension {md(k)}: {md(v)}" for k, v in claim.extensions.items()]
    return lines or ["- none"]


def _faithfulness_md(faith: Faithfulness) -> str:
    if faith.status == NOT_REVIEWED:
        return "**Semantic faithfulness: not reviewed.**"
    note = f" Note: {md(faith.note)}" if faith.note else ""
    return (
        f"**Semantic faithfulness: {faith.status}**, reviewed by {md(faith.reviewer or '')} "
        f"(key `{faith.key_id}`) at {_instant(faith.reviewed_at_ms or 0)}.{note}"
    )


def render_markdown(report: Report) -> str:
    """The report for people: provenance first, then what may and may not be relied on."""
    lines = [
        "# Swarm legal-analysis report",
        "",
        f"- Report: `{report.report_id}`",
        f"- Release: `{report.release_id}` (sequence {report.release_sequence})",
        f"- Analysis projection: `{report.projection_id}`",
        f"- Evaluated at: {_instant(report.at_ms)}",
        f"- Facts: `{report.facts_id}` ({len(report.facts)} facts)",
        f"- Question: {md(report.question)}",
        "",
        _faithfulness_md(report.semantic_faithfulness),
        "",
        f"> {report.limits}",
        "",
        *_selection_md(report.selection),
        "## Rule-backed statements (each cites selected rules)",
        "",
        *_accepted_md(report.accepted, "rule_backed"),
        "",
        "## Model analysis (not rule-backed)",
        "",
        *_accepted_md(report.accepted, "model_analysis"),
        "",
        "## Rejected claims (not part of the analysis)",
        "",
    ]
    for claim in report.rejected:
        lines.append(f"- **{claim.claim_id}** ({md(claim.persona)}): {md(claim.text)}")
        lines += [
            f"  - {p.reason}"
            + (f" {md(p.citation)}" if p.citation is not None else "")
            + f": {md(p.detail)}"
            for p in claim.problems
        ]
    if not report.rejected:
        lines.append("- none")
    lines += ["", "## Personas", "", "| persona | source | status | accepted | rejected | note |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for p in report.personas:
        note = "deliberately invalid citations" if p.deliberately_invalid else ""
        if p.failure is not None:
            note = f"{p.failure}: {md(p.failure_detail)}"
        source = p.source if p.model is None else f"{p.source} ({md(p.model)})"
        lines.append(
            f"| {md(p.label)} | {source} | {p.status} | {p.accepted} | {p.rejected} | {note} |"
        )
    return "\n".join(lines) + "\n"
