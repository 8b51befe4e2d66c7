"""Swarm claim validator and report: only selected rules of this release may back a claim.

Each rejection has its own reason
code; a report is refused against another release or projection; the
faithfulness field stays ``not reviewed`` until a signed review binds it.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smf_assurance.governance.compiler import compile_corpus
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.swarm.claims import (
    AcceptedClaim,
    RejectedClaim,
    ShapeError,
    ValidationContext,
    parse_output,
    validate_claim,
)
from smf_assurance.swarm.personas import PersonaInfo, PersonaResult
from smf_assurance.swarm.report import (
    NOT_REVIEWED,
    ProjectionMismatchError,
    ReleaseMismatchError,
    Report,
    ReportError,
    ReportTamperedError,
    ReviewError,
    apply_review,
    build_report,
    check_release,
    decode_report,
    render_markdown,
    report_bytes,
    sign_review,
    verified_faithfulness,
)
from smf_assurance.swarm.selector import (
    AnalysisRelease,
    analysis_release,
    select_rules,
    validate_facts,
)

CORPUS = Path(__file__).parents[1] / "data" / "swarm" / "corpus"
AT_MS = int(dt.datetime(2026, 6, 1, tzinfo=dt.UTC).timestamp() * 1000)
FACTS = validate_facts(
    {
        "capability": "external.transmit",
        "effects.egress": True,
        "destination.channel": "email",
        "destination.locality": "external",
        "data.classification": "confidential",
        "workflow.legal_hold": False,
    }
)
RULE = "urn:smf:rule:test:"
SELECTED = RULE + "transmit-approval"
FIRM = RULE + "firm-policy"
UNRESOLVED = RULE + "taint"
EXCLUDED = RULE + "hold"
NOT_IN_FORCE = RULE + "repealed"
INVENTED = RULE + "client-consent-waiver"

RELEASE = analysis_release(compile_corpus(CORPUS).analysis)
SELECTION = select_rules(RELEASE, FACTS, AT_MS)
CTX = ValidationContext(
    release_id=RELEASE.release_id,
    projection_id=RELEASE.projection_id,
    rules=RELEASE.rules,
    outcomes=SELECTION.status_of(),
)


def judge(claim: dict[str, Any], **answer: Any) -> AcceptedClaim | RejectedClaim:
    output = parse_output({"claims": [claim], **answer})
    return validate_claim(output.claims[0], "p/0", "p", output.extensions, CTX)


def reasons(result: AcceptedClaim | RejectedClaim) -> list[str]:
    assert isinstance(result, RejectedClaim), result
    return [p.reason for p in result.problems]


def normative(*citations: Any, **extra: Any) -> dict[str, Any]:
    return {
        "text": "The rule requires it.",
        "kind": "normative",
        "citations": list(citations),
    } | extra


# --- the rejections the issue names ------------------------------------------------


@pytest.mark.claim("swarm-traceability.only-selected-rules")
def test_invented_rule_id_is_rejected() -> None:
    assert reasons(judge(normative(INVENTED))) == ["cites_unknown_rule"]
    assert reasons(judge(normative("not a rule id at all"))) == ["cites_unknown_rule"]


def test_excluded_rule_citation_is_rejected_for_false_predicate_and_out_of_force() -> None:
    result = judge(normative(EXCLUDED))
    assert reasons(result) == ["cites_excluded_rule"]
    assert isinstance(result, RejectedClaim)
    assert "predicate_not_satisfied" in result.problems[0].detail
    late = judge(normative(NOT_IN_FORCE))
    assert reasons(late) == ["cites_excluded_rule"]
    assert isinstance(late, RejectedClaim)
    assert late.problems[0].detail == "no_longer_in_force"


def test_unresolved_rule_citation_is_rejected_naming_the_missing_facts() -> None:
    result = judge(normative(UNRESOLVED))
    assert reasons(result) == ["cites_unresolved_rule"]
    assert isinstance(result, RejectedClaim)
    assert "data.injection_taint" in result.problems[0].detail


@pytest.mark.parametrize(
    "claim",
    [
        normative(f"other-release-2020.1/{SELECTED}"),
        normative({"rule_id": SELECTED, "release_id": "other-release-2020.1"}),
        normative(SELECTED, release_id="other-release-2020.1"),
        normative(f"/{SELECTED}"),
    ],
    ids=["qualified-string", "object", "claim-level", "empty-release"],
)
def test_rule_from_another_release_is_rejected(claim: dict[str, Any]) -> None:
    assert reasons(judge(claim)) == ["cites_other_release"]


def test_answer_level_release_applies_to_every_claim() -> None:
    assert reasons(judge(normative(SELECTED), release_id="other-release-2020.1")) == [
        "cites_other_release"
    ]
    # A claim's own provenance wins over the answer's.
    accepted = judge(
        normative(SELECTED, release_id=RELEASE.release_id), release_id="other-release-2020.1"
    )
    assert isinstance(accepted, AcceptedClaim)


@pytest.mark.parametrize(
    "claim",
    [
        normative({"rule_id": SELECTED, "projection_id": "sha256:" + "1" * 64}),
        normative(SELECTED, projection_id="sha256:" + "1" * 64),
        normative(
            {
                "rule_id": SELECTED,
                "release_id": RELEASE.release_id,
                "projection_id": "sha256:" + "1" * 64,
            }
        ),
    ],
    ids=["object", "claim-level", "right-release-wrong-projection"],
)
def test_rule_from_another_projection_is_rejected(claim: dict[str, Any]) -> None:
    assert reasons(judge(claim)) == ["cites_other_projection"]


def test_normative_claim_without_citation_is_rejected() -> None:
    assert reasons(judge(normative())) == ["normative_claim_without_citation"]


def test_one_bad_citation_rejects_the_whole_claim_listing_every_problem() -> None:
    result = judge(normative(SELECTED, INVENTED, EXCLUDED))
    assert reasons(result) == ["cites_unknown_rule", "cites_excluded_rule"]
    assert isinstance(result, RejectedClaim)
    assert result.citations == (SELECTED, INVENTED, EXCLUDED)


def test_malformed_provenance_is_rejected() -> None:
    assert reasons(judge(normative(SELECTED, release_id=5))) == ["malformed_provenance"]


# --- what is accepted, and how it is labelled -----------------------------------------


@pytest.mark.parametrize(
    "citation",
    [
        SELECTED,
        f"{RELEASE.release_id}/{SELECTED}",
        {"rule_id": SELECTED},
        {"rule_id": SELECTED, "release_id": RELEASE.release_id},
        {
            "rule_id": SELECTED,
            "release_id": RELEASE.release_id,
            "projection_id": RELEASE.projection_id,
        },
    ],
    ids=["bare", "qualified", "object", "object-release", "object-full"],
)
def test_every_citation_form_of_a_selected_rule_is_rule_backed(citation: Any) -> None:
    result = judge(normative(citation))
    assert isinstance(result, AcceptedClaim)
    assert result.label == "rule_backed"
    (rule,) = result.rules
    source = RELEASE.rules[SELECTED]
    assert (rule.rule_id, rule.source_hash, rule.citation, rule.locator) == (
        SELECTED,
        source.source_hash,
        source.citation,
        source.locator,
    )
    assert (rule.authority_type, rule.synthetic) == ("synthetic", True)


def test_real_authority_is_not_marked_synthetic_and_citations_are_deduplicated() -> None:
    result = judge(normative(FIRM, f"{RELEASE.release_id}/{FIRM}", SELECTED))
    assert isinstance(result, AcceptedClaim)
    firm, other = result.rules
    assert (firm.rule_id, firm.authority_type, firm.synthetic) == (FIRM, "firm_policy", False)
    assert firm.as_written == (FIRM, f"{RELEASE.release_id}/{FIRM}")
    assert other.rule_id == SELECTED


def test_uncited_prose_is_model_analysis_never_rule_backed() -> None:
    result = judge({"text": "My reading of the facts.", "kind": "analysis"})
    assert isinstance(result, AcceptedClaim)
    assert (result.label, result.rules) == ("model_analysis", ())
    cited = judge({"text": "Compare the rule.", "kind": "analysis", "citations": [SELECTED]})
    assert isinstance(cited, AcceptedClaim)
    assert cited.label == "model_analysis"
    # An analysis claim may not lean on a rule that does not apply either.
    assert reasons(judge({"text": "x", "kind": "analysis", "citations": [EXCLUDED]})) == [
        "cites_excluded_rule"
    ]


def test_quote_extension_must_be_verbatim_text_of_a_cited_rule() -> None:
    statement = RELEASE.rules[SELECTED].statement
    assert isinstance(judge(normative(SELECTED, quote=statement[:40])), AcceptedClaim)
    assert reasons(judge(normative(SELECTED, quote="Consent waives approval."))) == [
        "quote_not_in_cited_rule"
    ]
    assert reasons(judge(normative(SELECTED, quote=7))) == ["quote_not_in_cited_rule"]
    analysis = {"text": "x", "kind": "analysis", "quote": statement}
    assert reasons(judge(analysis)) == ["quote_not_in_cited_rule"]


def test_extension_fields_survive_validation_into_both_outcomes() -> None:
    extra = {"confidence": 0.93, "source_quote": {"page": 4}, "quote": "licensed attorney"}
    accepted = judge(normative(SELECTED, **extra))
    assert isinstance(accepted, AcceptedClaim)
    assert accepted.extensions == {
        "confidence": "0.93",
        "quote": '"licensed attorney"',
        "source_quote": '{"page":4}',
    }
    rejected = judge(normative(INVENTED, **extra))
    assert isinstance(rejected, RejectedClaim)
    assert rejected.extensions == accepted.extensions
    with_object = judge(normative({"rule_id": SELECTED, "pinpoint": "para 2", "weight": 1.5}))
    assert isinstance(with_object, AcceptedClaim)
    assert with_object.rules[0].as_written == (
        f'{{"pinpoint":"para 2","rule_id":"{SELECTED}","weight":1.5}}',
    )


# --- shape: a malformed answer fails the persona, it is not repaired ---------------------


@pytest.mark.parametrize(
    ("answer", "where"),
    [
        ([], "JSON object"),
        ({"answer": "yes"}, "$.claims must be a list"),
        ({"claims": "none"}, "$.claims must be a list"),
        ({"claims": [{"text": "x", "kind": "n"}] * 33}, "more than 32"),
        ({"claims": ["text"]}, "$.claims[0] must be an object"),
        ({"claims": [{"kind": "analysis"}]}, "$.claims[0].text"),
        ({"claims": [{"text": " ", "kind": "analysis"}]}, "$.claims[0].text"),
        ({"claims": [{"text": "x" * 4001, "kind": "analysis"}]}, "longer than"),
        ({"claims": [{"text": "x", "kind": "opinion"}]}, "$.claims[0].kind"),
        ({"claims": [{"text": "x", "kind": "analysis", "citations": "r"}]}, "must be a list"),
        (
            {"claims": [{"text": "x", "kind": "normative", "citations": ["r"] * 17}]},
            "more than 16",
        ),
        ({"claims": [{"text": "x", "kind": "normative", "citations": [3]}]}, "citations[0]"),
        ({"claims": [{"text": "x", "kind": "normative", "citations": [{}]}]}, "rule_id"),
        (
            {
                "claims": [
                    {
                        "text": "x",
                        "kind": "normative",
                        "citations": [{"rule_id": "r", "release_id": 1}],
                    }
                ]
            },
            "release_id must be a string",
        ),
        ({"claims": [], **{f"k{i}": i for i in range(33)}}, "more than 32 extra fields"),
        ({"claims": [], "blob": "x" * 9000}, "larger than 8192"),
    ],
)
def test_wrong_shape_is_a_shape_error_naming_the_path(answer: Any, where: str) -> None:
    with pytest.raises(ShapeError) as info:
        parse_output(answer)
    assert where in str(info.value)


# --- property: whatever a persona writes, an accepted claim is backed by selected rules -----

CITATION_POOL = [
    SELECTED,
    FIRM,
    UNRESOLVED,
    EXCLUDED,
    NOT_IN_FORCE,
    INVENTED,
    f"{RELEASE.release_id}/{SELECTED}",
    f"elsewhere-1.0/{SELECTED}",
    {"rule_id": FIRM, "projection_id": "sha256:" + "2" * 64},
    {"rule_id": FIRM, "projection_id": RELEASE.projection_id},
]


@pytest.mark.claim("swarm-traceability.only-selected-rules")
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "text": st.text(min_size=1, max_size=40).filter(str.strip),
                "kind": st.sampled_from(["normative", "analysis"]),
                "citations": st.lists(st.sampled_from(CITATION_POOL), max_size=4),
            }
        ),
        max_size=6,
    )
)
def test_accepted_claims_cite_only_selected_rules_of_this_release(
    claims: list[dict[str, Any]],
) -> None:
    output = parse_output({"claims": claims})
    selected = {r.rule_id for r in SELECTION.selected}
    for index, claim in enumerate(output.claims):
        result = validate_claim(claim, f"p/{index}", "p", output.extensions, CTX)
        if isinstance(result, AcceptedClaim):
            assert {r.rule_id for r in result.rules} <= selected
            assert (result.label == "rule_backed") == (claim.kind == "normative")
            assert claim.kind == "analysis" or result.rules
            assert not any(c.release_id not in (None, RELEASE.release_id) for c in claim.citations)
        else:
            assert result.problems


# --- the report ---------------------------------------------------------------------------


def answered(name: str, answer: dict[str, Any], **info: Any) -> PersonaResult:
    return PersonaResult(PersonaInfo(name, name.title(), "offline", **info), parse_output(answer))


RESULTS = (
    answered(
        "associate",
        {
            "claims": [
                normative(SELECTED),
                {"text": "Ask whether the data is tainted.", "kind": "analysis"},
                normative(INVENTED),
            ],
            "model_trace": "abc",
        },
    ),
    PersonaResult(
        PersonaInfo("model", "Model", "model", "m-1"), None, "persona_invalid_json", "bad"
    ),
)


def make_report(release: AnalysisRelease = RELEASE) -> Report:
    selection = select_rules(release, FACTS, AT_MS)
    return build_report("May we send it?", FACTS, release, selection, RESULTS)


def test_report_carries_selection_claims_and_persona_outcomes() -> None:
    report = make_report()
    assert (report.release_id, report.projection_id) == (RELEASE.release_id, RELEASE.projection_id)
    assert [r.rule_id for r in report.selection.selected] == [FIRM, SELECTED]
    assert [c.claim_id for c in report.accepted] == ["associate/0", "associate/1"]
    assert [c.claim_id for c in report.rejected] == ["associate/2"]
    associate, model = report.personas
    assert (associate.status, associate.accepted, associate.rejected) == ("answered", 2, 1)
    assert associate.extensions == {"model_trace": '"abc"'}
    # A failed persona is reported as failed; nothing stands in for its answer.
    assert (model.status, model.failure, model.accepted, model.rejected) == (
        "failed",
        "persona_invalid_json",
        0,
        0,
    )
    claimed = {c.persona for c in report.accepted} | {c.persona for c in report.rejected}
    assert claimed == {"associate"}
    assert report.semantic_faithfulness.status == NOT_REVIEWED
    assert "does not prove that each sentence follows" in report.limits


@pytest.mark.claim("swarm-traceability.deterministic-report")
def test_report_bytes_are_deterministic_and_round_trip() -> None:
    first = report_bytes(make_report())
    assert first == report_bytes(make_report())
    assert decode_report(first) == make_report()


def _release_with(
    tmp_path: Path, release_id: str | None = None, statement: str | None = None
) -> AnalysisRelease:
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    if release_id is not None:
        (corpus / "release.json").write_text(
            json.dumps({"release_id": release_id, "release_sequence": 2})
        )
    if statement is not None:
        rules = json.loads((corpus / "rules.json").read_text())
        rules[0]["title"] = statement
        (corpus / "rules.json").write_text(json.dumps(rules))
    return analysis_release(compile_corpus(corpus).analysis)


def test_report_from_another_release_is_refused(tmp_path: Path) -> None:
    other = _release_with(tmp_path, release_id="swarm-test-2026.2")
    check_release(make_report(), RELEASE)
    with pytest.raises(ReleaseMismatchError):
        check_release(make_report(), other)


def test_report_from_another_projection_of_the_same_release_is_refused(tmp_path: Path) -> None:
    other = _release_with(tmp_path, statement="A retitled rule")
    assert other.release_id == RELEASE.release_id
    with pytest.raises(ProjectionMismatchError):
        check_release(make_report(), other)


@pytest.mark.parametrize(
    "edit",
    [
        lambda v: v["accepted"][1].update(text="Rule-backed: always allowed."),
        lambda v: v["selection"]["excluded"].clear(),
        lambda v: v.update(release_id="swarm-test-2026.9"),
        lambda v: v["semantic_faithfulness"].update(status="faithful"),
    ],
    ids=["claim-text", "selection", "release", "status-without-record"],
)
def test_tampered_report_is_refused(edit: Any) -> None:
    value = json.loads(report_bytes(make_report()))
    edit(value)
    with pytest.raises(ReportTamperedError):
        decode_report(json.dumps(value).encode())


def test_not_a_report_is_refused() -> None:
    with pytest.raises(ReportError):
        decode_report(b'{"schema": "smf.swarm-report/0"}')


# --- the signed faithfulness review ------------------------------------------------------


def test_review_sets_faithfulness_only_through_a_verified_record() -> None:
    key = generate_signing_key()
    trusted = {key.key_id: key.verify_key}
    report = make_report()
    envelope = sign_review(report, "reviewer-rita", key, "partially_faithful", "checked 2", 1000)
    reviewed = apply_review(report, envelope, trusted)
    faith = reviewed.semantic_faithfulness
    assert (faith.status, faith.reviewer, faith.key_id) == (
        "partially_faithful",
        "reviewer-rita",
        key.key_id,
    )
    assert reviewed.report_id == report.report_id
    assert verified_faithfulness(reviewed, trusted) == faith
    assert verified_faithfulness(report, trusted).status == NOT_REVIEWED
    again = decode_report(report_bytes(reviewed))
    assert again == reviewed
    with pytest.raises(ReviewError, match="already reviewed"):
        apply_review(reviewed, envelope, trusted)


def test_review_by_an_untrusted_key_or_for_another_report_is_refused(tmp_path: Path) -> None:
    key, stranger = generate_signing_key(), generate_signing_key()
    trusted = {key.key_id: key.verify_key}
    report = make_report()
    forged = sign_review(report, "reviewer-rita", stranger, "faithful", "", 1000)
    with pytest.raises(ReviewError, match="does not verify"):
        apply_review(report, forged, trusted)
    other = build_report("Another question?", FACTS, RELEASE, SELECTION, RESULTS)
    replayed = sign_review(other, "reviewer-rita", key, "faithful", "", 1000)
    with pytest.raises(ReviewError, match="another report"):
        apply_review(report, replayed, trusted)
    other_release = make_report(_release_with(tmp_path, release_id="swarm-test-2026.2"))
    moved = msgspec.structs.replace(other_release, report_id=report.report_id)
    with pytest.raises(ReviewError, match="another release"):
        apply_review(report, sign_review(moved, "r", key, "faithful", "", 1), trusted)
    with pytest.raises(ReviewError, match="longer than"):
        sign_review(report, "r", key, "faithful", "x" * 4001, 1)


def test_shown_review_that_differs_from_the_signed_record_is_refused() -> None:
    key = generate_signing_key()
    trusted = {key.key_id: key.verify_key}
    report = make_report()
    reviewed = apply_review(
        report, sign_review(report, "rita", key, "not_faithful", "no", 5), trusted
    )
    upgraded = msgspec.structs.replace(
        reviewed,
        semantic_faithfulness=msgspec.structs.replace(
            reviewed.semantic_faithfulness, status="faithful"
        ),
    )
    with pytest.raises(ReportTamperedError, match="differs"):
        verified_faithfulness(upgraded, trusted)
    unsigned = msgspec.structs.replace(
        report,
        semantic_faithfulness=msgspec.structs.replace(
            report.semantic_faithfulness, status="faithful"
        ),
    )
    with pytest.raises(ReportTamperedError):
        verified_faithfulness(unsigned, trusted)


# --- Markdown --------------------------------------------------------------------------


def test_markdown_separates_rule_backed_from_model_analysis_and_flags_synthetic() -> None:
    text = render_markdown(make_report())
    assert "**Semantic faithfulness: not reviewed.**" in text
    backed = text.index("## Rule-backed statements")
    analysis = text.index("## Model analysis (not rule-backed)")
    rejected = text.index("## Rejected claims")
    assert backed < text.index("associate/0") < analysis < text.index("associate/1") < rejected
    assert "cites_unknown_rule" in text[rejected:]
    assert "synthetic, not a real authority" in text
    assert "firm\\_policy" in text or "firm_policy" in text
    assert "persona_invalid_json" in text
    assert "does not prove that each sentence follows" in text


def test_markdown_escapes_persona_text_so_it_cannot_forge_structure() -> None:
    forged = (
        "Fine.\n\n## Rule-backed statements (each cites selected rules)\n\n"
        "- **x/0**: [approved](http://evil) <b>rule-backed</b> | a | b |"
    )
    results = (answered("sly", {"claims": [{"text": forged, "kind": "analysis"}]}),)
    report = build_report("Q?", FACTS, RELEASE, SELECTION, results)
    text = render_markdown(report)
    lines = text.splitlines()
    assert sum(line.startswith("## Rule-backed statements") for line in lines) == 1
    line = next(line for line in lines if line.startswith("- **sly/0**"))
    assert "\\[approved\\]" in line
    assert "\\<b\\>" in line
    assert "\\|" in line


def test_markdown_shows_a_signed_review() -> None:
    key = generate_signing_key()
    report = make_report()
    reviewed = apply_review(
        report,
        sign_review(report, "rita", key, "faithful", "read every claim", AT_MS),
        {key.key_id: key.verify_key},
    )
    text = render_markdown(reviewed)
    assert "**Semantic faithfulness: faithful**, reviewed by rita" in text
    assert "2026-06-01T00:00:00Z" in text
