"""The gate's own detectors for outbound text: they can only raise a fact, never lower it.

Issue 5: a completed response is normalized with classification and taint
facts from the adapter AND from the gate's detectors. A detector that finds
privilege markers or prompt-injection phrasing raises the classification or
the taint; it never lowers what the adapter said, so adding a detector can
only make a decision stricter (the same monotonicity as layered policy).
These are marker detectors, not classifiers: they catch the labelled and the
blatant, and prove nothing about text that carries no marker.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from smf_assurance.subjects.envelope import Classification, InjectionTaint
from smf_assurance.subjects.messages import DataFacts

_PRIVILEGE: Final = re.compile(
    r"\b(privileged\s*(?:&|and)\s*confidential|attorney[-\s]client\s+privilege[d]?"
    r"|attorney\s+work\s+product|privileged)\b",
    re.IGNORECASE,
)
_INJECTION: Final = re.compile(
    r"(ignore\s+(?:all\s+)?(?:previous|prior|above)\s+instructions"
    r"|disregard\s+(?:the\s+)?(?:system|previous)\s+prompt"
    r"|you\s+are\s+now\s+(?:in\s+)?developer\s+mode)",
    re.IGNORECASE,
)

_CLASS_RANK: Final = {"public": 0, "internal": 1, "confidential": 2, "unknown": 3, "privileged": 4}
_TAINT_RANK: Final = {"clear": 0, "suspected": 1, "unknown": 2, "tainted": 3}


def raise_facts(
    facts: DataFacts, classification: Classification, injection_taint: InjectionTaint
) -> DataFacts:
    """``facts`` with its classification and taint raised to at least the given ones,
    never lowered (the ranks above; an unknown classification ranks above
    confidential, an unknown taint above suspected: what is not known is assumed
    worse). The one way a fact is raised, so the detectors, the output buffer and
    the gate's call-context link (issue 16) all raise alike."""
    if _CLASS_RANK[classification] > _CLASS_RANK[facts.classification]:
        facts = msgspec.structs.replace(facts, classification=classification)
    if _TAINT_RANK[injection_taint] > _TAINT_RANK[facts.injection_taint]:
        facts = msgspec.structs.replace(facts, injection_taint=injection_taint)
    return facts


def detect(text: str, facts: DataFacts) -> tuple[DataFacts, tuple[str, ...]]:
    """Raise facts from markers in ``text``; return the facts and what was found."""
    found: list[str] = []
    classification: Classification = "public"
    taint: InjectionTaint = "clear"
    if _PRIVILEGE.search(text) and _CLASS_RANK[facts.classification] < _CLASS_RANK["privileged"]:
        classification = "privileged"
        found.append("detected_privilege_marker")
    if _INJECTION.search(text) and _TAINT_RANK[facts.injection_taint] < _TAINT_RANK["suspected"]:
        taint = "suspected"
        found.append("detected_injection_marker")
    if not found:
        return facts, ()
    return raise_facts(facts, classification, taint), tuple(found)
