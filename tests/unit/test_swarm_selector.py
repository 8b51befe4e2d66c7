"""Swarm rule selector: selected / unresolved / excluded, with reasons."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smf_assurance.core.projection import ProjectionError, projection_bytes
from smf_assurance.governance.compiler import compile_corpus
from smf_assurance.governance.projections import (
    SCENARIO_ENVELOPES,
    SCENARIO_PROJECTION,
    package_path,
)
from smf_assurance.swarm.selector import (
    AnalysisRelease,
    FactError,
    MatterError,
    ProjectionMismatchError,
    analysis_release,
    check_at_ms,
    check_question,
    decode_matter,
    load_analysis_release,
    parse_instant,
    select_rules,
    selection_bytes,
    validate_facts,
)

CORPUS = Path(__file__).parents[1] / "data" / "swarm" / "corpus"
AT_MS = int(dt.datetime(2026, 6, 1, tzinfo=dt.UTC).timestamp() * 1000)
MATTER: dict[str, Any] = {
    "capability": "external.transmit",
    "effects.egress": True,
    "destination.channel": "email",
    "destination.locality": "external",
    "data.classification": "confidential",
    "workflow.legal_hold": False,
}
RULE = "urn:smf:rule:test:"


def _release() -> AnalysisRelease:
    return analysis_release(compile_corpus(CORPUS).analysis)


RELEASE = _release()


@pytest.fixture
def release() -> AnalysisRelease:
    return RELEASE


def _outcomes(
    release: AnalysisRelease, facts: dict[str, Any], at_ms: int = AT_MS
) -> dict[str, Any]:
    selection = select_rules(release, validate_facts(facts), at_ms)
    return selection.status_of()


def test_each_rule_lands_in_the_right_set_with_reasons(release: AnalysisRelease) -> None:
    out = _outcomes(release, MATTER)
    expected = {
        "transmit-approval": ("selected", ("in_force", "predicate_satisfied"), ()),
        "firm-policy": ("selected", ("in_force", "predicate_satisfied"), ()),
        "taint": (
            "unresolved",
            ("in_force", "depends_on_missing_fact"),
            ("data.injection_taint",),
        ),
        "redaction-or-hold": (
            "unresolved",
            ("in_force", "depends_on_missing_fact"),
            ("data.redaction_status",),
        ),
        "repealed": ("excluded", ("no_longer_in_force",), ()),
        "future": ("excluded", ("not_yet_in_force",), ()),
        "hold": ("excluded", ("in_force", "predicate_not_satisfied"), ()),
    }
    assert set(out) == {RULE + k for k in expected}
    for key, (status, reasons, missing) in expected.items():
        rule = out[RULE + key]
        assert (rule.status, rule.reasons, rule.missing_facts) == (status, reasons, missing), key


def test_rule_out_of_force_is_excluded_even_when_its_predicate_is_false_or_unknown(
    release: AnalysisRelease,
) -> None:
    out = _outcomes(release, {"capability": "document.read"})
    assert out[RULE + "repealed"].reasons == ("no_longer_in_force", "predicate_not_satisfied")
    # Unknown predicate, out of force: excluded, because no fact could make it apply.
    assert out[RULE + "future"].status == "excluded"
    assert out[RULE + "future"].missing_facts == ()


def test_kleene_any_a_true_member_settles_the_rule_despite_a_missing_fact(
    release: AnalysisRelease,
) -> None:
    out = _outcomes(release, {"workflow.legal_hold": True})
    assert out[RULE + "redaction-or-hold"].status == "selected"


def test_interval_bounds_are_half_open_in_whole_seconds(release: AnalysisRelease) -> None:
    start_ms = int(dt.datetime(2030, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    assert _outcomes(release, MATTER, start_ms - 1)[RULE + "future"].status == "excluded"
    assert _outcomes(release, MATTER, start_ms)[RULE + "future"].status == "selected"
    end_ms = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    assert _outcomes(release, MATTER, end_ms - 1)[RULE + "repealed"].status == "selected"
    assert _outcomes(release, MATTER, end_ms + 999)[RULE + "repealed"].status == "excluded"


def test_rule_metadata_marks_synthetic_rules(release: AnalysisRelease) -> None:
    out = _outcomes(release, MATTER)
    assert out[RULE + "transmit-approval"].synthetic is True
    firm = out[RULE + "firm-policy"]
    assert (firm.synthetic, firm.authority_type) == (False, "firm_policy")
    assert firm.source_hash == release.rules[RULE + "firm-policy"].source_hash


@pytest.mark.claim("swarm-traceability.deterministic-report")
def test_selection_is_deterministic_bytes(release: AnalysisRelease) -> None:
    reordered = dict(reversed(list(MATTER.items())))
    first = selection_bytes(select_rules(release, validate_facts(MATTER), AT_MS))
    again = selection_bytes(select_rules(_release(), validate_facts(reordered), AT_MS))
    assert first == again
    value = json.loads(first)
    assert [r["rule_id"] for r in value["selected"]] == sorted(
        r["rule_id"] for r in value["selected"]
    )
    assert value["projection_id"] == release.projection_id


# --- properties ---------------------------------------------------------------------

FACT_CHOICES: dict[str, Any] = {
    "capability": st.sampled_from(["external.transmit", "document.delete", "document.read"]),
    "effects.egress": st.booleans(),
    "destination.channel": st.sampled_from(["email", "web", "dms"]),
    "data.classification": st.sampled_from(["public", "confidential", "unknown"]),
    "data.injection_taint": st.sampled_from(["clear", "tainted", "unknown"]),
    "data.redaction_status": st.sampled_from(["none", "complete"]),
    "workflow.legal_hold": st.booleans(),
}


@st.composite
def fact_sets(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A full assignment and a subset of it (the facts the matter happens to state)."""
    full = {path: draw(strategy) for path, strategy in FACT_CHOICES.items()}
    keep = draw(st.sets(st.sampled_from(sorted(full))))
    return full, {k: full[k] for k in keep}


@settings(max_examples=150, deadline=None)
@given(fact_sets(), st.integers(min_value=0, max_value=2_000_000_000_000))
def test_every_rule_is_in_exactly_one_set_and_known_outcomes_survive_more_facts(
    facts: tuple[dict[str, Any], dict[str, Any]], at_ms: int
) -> None:
    """Kleene monotonicity: stating more facts can settle an unresolved rule,
    but never flips a selected or excluded one (no exists/not_exists here)."""
    release = RELEASE
    full, partial = facts
    some = select_rules(release, partial, at_ms)
    ids = [r.rule_id for r in (*some.selected, *some.unresolved, *some.excluded)]
    assert sorted(ids) == sorted(release.rules)
    every = select_rules(release, full, at_ms)
    assert not every.unresolved
    settled = every.status_of()
    for rule in (*some.selected, *some.excluded):
        assert settled[rule.rule_id].status == rule.status
    for rule in some.unresolved:
        assert rule.missing_facts
        assert set(rule.missing_facts) <= set(full) - set(partial)


# --- matter facts are checked against the registry ------------------------------------


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        ({"data.clasification": "confidential"}, "unknown fact path 'data.clasification'"),
        ({"effects": {"egress": True}}, "unknown fact path 'effects'"),
        ({"effects.egress": "true"}, "effects.egress is a bool fact; got str"),
        ({"data.classification": "secret"}, "'secret' is not in the vocabulary"),
        ({"data.classification": 3}, "data.classification is a string fact; got int"),
        ({"professional.actor_roles": "associate"}, "is a list fact; got str"),
        ({"professional.actor_roles": ["a"] * 33}, "more than 32 values"),
        ({"professional.actor_roles": [""]}, "professional.actor_roles[0] must be 1 to"),
        ({"professional.matter_id": ""}, "professional.matter_id must be 1 to"),
        (["capability"], "facts must be an object"),
    ],
)
def test_bad_facts_are_refused_with_the_path(facts: Any, message: str) -> None:
    with pytest.raises(FactError) as info:
        validate_facts(facts)
    assert message in str(info.value)


def test_non_string_fact_path_is_refused() -> None:
    with pytest.raises(FactError, match="is not a string"):
        validate_facts({1: True})


def test_facts_are_nfc_normalized_and_lists_become_tuples() -> None:
    facts = validate_facts(
        {"professional.matter_id": "Cafe\u0301", "professional.governing_laws": ["US-NY"]}
    )
    assert facts == {"professional.governing_laws": ("US-NY",), "professional.matter_id": "Café"}


def test_question_and_time_bounds() -> None:
    assert check_question("Why?") == "Why?"
    for bad in ("", "   ", 3, "x" * 4001):
        with pytest.raises(MatterError):
            check_question(bad)
    for bad_at in (-1, 2**53, True, 1.5):
        with pytest.raises(MatterError):
            check_at_ms(bad_at)
    with pytest.raises(MatterError):
        select_rules(RELEASE, {}, -5)


# --- matter files ----------------------------------------------------------------------


def test_matter_document_and_bare_facts() -> None:
    doc = {"schema": "smf.swarm-matter/1", "question": "Q?", "at": "2026-06-01T00:00:00Z"}
    matter = decode_matter(json.dumps(doc | {"facts": MATTER}).encode())
    assert (matter.question, matter.at_ms, matter.facts) == ("Q?", AT_MS, validate_facts(MATTER))
    bare = decode_matter(json.dumps(MATTER).encode())
    assert (bare.question, bare.at_ms) == (None, None)
    assert bare.facts == matter.facts


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{", "not valid JSON"),
        (b'{"schema": "smf.swarm-matter/2", "facts": {}}', "not a smf.swarm-matter/1"),
        (b'{"schema": "smf.swarm-matter/1", "facts": {}, "extra": 1}', "not a smf.swarm-matter/1"),
        (b'{"schema": "smf.swarm-matter/1", "facts": {}, "at": "2026-06-01"}', "no time zone"),
        (b'{"schema": "smf.swarm-matter/1", "facts": {}, "at": "yesterday"}', "not an RFC 3339"),
        (b'{"schema": "smf.swarm-matter/1", "facts": {}, "question": ""}', "non-empty"),
    ],
)
def test_bad_matter_documents(data: bytes, message: str) -> None:
    with pytest.raises(MatterError) as info:
        decode_matter(data)
    assert message in str(info.value)


def test_parse_instant_with_offset() -> None:
    assert parse_instant("2026-06-01T02:00:00+02:00") == AT_MS


# --- loading the analysis projection ------------------------------------------------------


def test_projection_for_another_fact_registry_is_refused() -> None:
    projection = msgspec.structs.replace(
        compile_corpus(CORPUS).analysis, fact_registry_version="smf.facts/0"
    )
    with pytest.raises(ProjectionError, match=r"fact registry smf\.facts/0"):
        analysis_release(projection)


def test_projection_listing_a_rule_twice_is_refused() -> None:
    projection = compile_corpus(CORPUS).analysis
    doubled = msgspec.structs.replace(projection, rules=projection.rules + projection.rules[:1])
    with pytest.raises(ProjectionError, match="twice"):
        analysis_release(doubled)


def test_projection_with_a_malformed_predicate_is_refused() -> None:
    projection = compile_corpus(CORPUS).analysis
    bad = msgspec.structs.replace(projection.rules[0], when={"matches": {"fact": "capability"}})
    with pytest.raises(ProjectionError, match="malformed predicate"):
        analysis_release(msgspec.structs.replace(projection, rules=(bad, *projection.rules[1:])))


def test_analysis_projection_must_match_its_index() -> None:
    compiled = compile_corpus(CORPUS)
    data = projection_bytes(compiled.analysis)
    release = load_analysis_release(data, RELEASE.projection_id)
    assert release.projection_id == RELEASE.projection_id
    # Mix-and-match: this release's analysis.json beside another release's index.
    with pytest.raises(ProjectionMismatchError):
        load_analysis_release(data, "sha256:" + "0" * 64)
    with pytest.raises(ProjectionError):
        load_analysis_release(b"{}")


# --- the shipped scenario matter ------------------------------------------------------------


def test_shipped_swarm_matter_has_all_three_outcomes() -> None:
    folder = package_path(SCENARIO_PROJECTION)
    index = json.loads((folder / "index.json").read_bytes())
    release = load_analysis_release(
        (folder / "analysis.json").read_bytes(), index["analysis_projection_id"]
    )
    matter = decode_matter((package_path(SCENARIO_ENVELOPES) / "swarm-matter.json").read_bytes())
    assert matter.question
    assert matter.at_ms is not None
    selection = select_rules(release, matter.facts, matter.at_ms)
    assert selection.selected
    assert selection.unresolved
    assert selection.excluded
    out = selection.status_of()
    scenario = "urn:smf:rule:scenario:"
    assert out[scenario + "attorney-approval-transmission"].status == "selected"
    assert out[scenario + "injection-taint-egress"].missing_facts == ("data.injection_taint",)
    assert out[scenario + "legal-hold-preservation"].status == "excluded"
